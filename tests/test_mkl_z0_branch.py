"""MKL's float32 Z0 root with its scaled path behind a branch per vector (optkernels.kernels._mkl_z0) gives
the bits of the run-time switch (a branch per element) in vectors that mix both paths, and of the
branch-free select version; with AVX-512 the loop tests its lanes with one kortest per vector."""
import platform
import re
from pathlib import Path

import numba
import numpy as np
import pytest

from optkernels.kernels import torch_rules as T

X86 = platform.machine().lower() in ("x86_64", "amd64")
CPU_FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
AVX512 = X86 and "avx512f" in CPU_FLAGS


@numba.njit(error_model="numpy")
def _branching(x, out):
    for i in range(x.size):
        out[i] = T._mkl_avx512_sqrt32(x[i])


@numba.njit(error_model="numpy")
def _selected(x, out):
    for i in range(x.size):
        out[i] = T._mkl_avx512_sqrt32_selected(x[i])


def _mixed_inputs():
    """Random bit patterns (every class, both paths in most vectors), then normal values with one tiny or
    subnormal value (the scaled path) at each lane position of a 16-lane vector in turn."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = rng.uniform(1e-3, 4.0, (256, 16)).astype(np.float32)
    tiny = np.exp2(rng.uniform(-149, -78, 256)).astype(np.float32)
    normal[np.arange(256), np.arange(256) % 16] = tiny
    return np.concatenate([bits, normal.reshape(-1), tiny[:7]])


def test_the_branching_z0_root_equals_the_switch_and_the_select():
    x = _mixed_inputs()
    out, selected, switched = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    _branching(x, out)
    _selected(x, selected)
    T._torch_sqrt.launch("cpu", x.size, switched, x, int(T.MKL_AVX512_SQRT))
    np.testing.assert_array_equal(out.view(np.uint32), switched.view(np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), selected.view(np.uint32))
    scaled = (x > 0) & (x < 2.0**-78)
    assert scaled.sum() > 1000 and (~scaled & (x > 0) & np.isfinite(x)).sum() > 100000


@pytest.mark.skipif(not AVX512, reason="checks AVX-512 instructions")
def test_the_branching_z0_loop_tests_each_vector_once():
    x = _mixed_inputs()
    _branching(x, np.empty_like(x))
    asm = _branching.inspect_asm(_branching.signatures[0])
    # the loop calls a vector variant (a chunk entry inlines it), whose code tests the lanes once
    loop = re.sub(r"(?ms)^optkernels\.\w+_v\d+:.*?^\.Lfunc_end\d+:", "", asm)
    assert re.search(r"vrsqrt14ps\s+%[yz]mm|\$optkernels\.avx512_z0_sqrt_ss_v(8|16)\b", loop)
    variant = re.search(r"(?ms)^optkernels\.avx512_z0_sqrt_ss_v16:.*?^\.Lfunc_end\d+:", asm).group(0)
    assert "vrsqrt14ps\t%zmm" in variant and len(re.findall(r"kortest", variant)) == 1
