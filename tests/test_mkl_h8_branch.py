"""MKL's float32 H8 root (the AVX path MKL runs on AMD processors) with its inputs off the kernel's path
fixed up by class and IEEE sqrt only in vectors holding a subnormal (optkernels.kernels._mkl_h8) gives the
bits of the run-time switch (a branch per element) and of the branch-free select version: over every
float32 of two binades, every class of input, and vectors that mix a subnormal into normal lanes; with
AVX-512 the 16-lane loop runs the kernel's two 8-lane estimates and tests its lanes once."""
import platform
import re
from pathlib import Path

import numba
import numpy as np
import pytest

from optkernels.kernels import torch_rules as T

X86 = platform.machine().lower() in ("x86_64", "amd64")
CPU_FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
AVX512 = X86 and "avx512f" in CPU_FLAGS and "avx512vl" in CPU_FLAGS


@numba.njit(error_model="numpy")
def _branching(x, out):
    for i in range(x.size):
        out[i] = T._mkl_avx_sqrt32(x[i])


@numba.njit(error_model="numpy")
def _selected(x, out):
    for i in range(x.size):
        out[i] = T._mkl_avx_sqrt32_selected(x[i])


def _inputs():
    """Every float32 of [1, 4), random bit patterns (every class), then normal values with one subnormal at
    each lane position of a 16-lane vector in turn, and the specials."""
    rng = np.random.default_rng(5)
    binades = (np.arange(1 << 24, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = rng.uniform(1e-3, 4.0, (256, 16)).astype(np.float32)
    subnormal = rng.integers(1, 1 << 23, 256).astype(np.uint32).view(np.float32)
    normal[np.arange(256), np.arange(256) % 16] = subnormal
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 2.0**-126, 2.0**-149, 3.4e38], np.float32)
    nans = np.array([0x7F800001, 0xFFC12345, 0x7FA00000], np.uint32).view(np.float32)
    return np.concatenate([binades, bits, normal.reshape(-1), special, nans])


def test_the_branching_h8_root_equals_the_switch_and_the_select():
    x = _inputs()
    out, selected, switched = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    _branching(x, out)
    _selected(x, selected)
    T._torch_sqrt.launch("cpu", x.size, switched, x, int(T.MKL_AVX_SQRT))
    np.testing.assert_array_equal(out.view(np.uint32), switched.view(np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), selected.view(np.uint32))
    subnormal = (x > 0) & (x < 2.0**-126)
    assert subnormal.sum() > 256 and np.all(out[subnormal] == np.sqrt(x[subnormal]))


@pytest.mark.skipif(not AVX512, reason="checks AVX-512 instructions")
def test_the_branching_h8_loop_tests_each_vector_once():
    x = _inputs()
    _branching(x, np.empty_like(x))
    asm = _branching.inspect_asm(_branching.signatures[0])
    variant = re.search(r"(?ms)^optkernels\.avx_h8_sqrt_ss_v16:.*?^\.Lfunc_end\d+:", asm).group(0)
    assert len(re.findall(r"vrsqrtps\t%ymm", variant)) == 2 and len(re.findall(r"kortest", variant)) == 1
    assert "vfixupimmps" in variant and "vsqrtps\t%zmm" in variant  # (the latter behind the branch)
