"""MKL's float32 roots compiled with a branch per vector give the bits of the run-time switch (a branch
per element) and of the branch-free select version, in vectors that mix their paths; with AVX-512 each
vector tests its lanes once. Z0 (optkernels.kernels._mkl_z0): the scaled path of tiny inputs behind the
branch. H8 (optkernels.kernels._mkl_h8, the AVX path MKL runs on AMD processors): the inputs off its path
fixed up by class, IEEE sqrt only in vectors holding a subnormal; over every float32 of [1, 4) too."""
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
AVX512VL = AVX512 and "avx512vl" in CPU_FLAGS


def _loop(root):
    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = root(x[i])

    return loop


#: (branching loop, branch-free loop, the switch's kernel) per root
ROOTS = {
    "z0": (_loop(T._mkl_avx512_sqrt32), _loop(T._mkl_avx512_sqrt32_selected), T.MKL_AVX512_SQRT),
    "h8": (_loop(T._mkl_avx_sqrt32), _loop(T._mkl_avx_sqrt32_selected), T.MKL_AVX_SQRT),
}


def _mixed_inputs(kind):
    """Random bit patterns (every class, both paths in most vectors), then normal values with one value of
    the rare path (Z0: tiny or subnormal; H8: subnormal) at each lane position of a 16-lane vector in turn;
    for H8 every float32 of [1, 4) and the specials too."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = rng.uniform(1e-3, 4.0, (256, 16)).astype(np.float32)
    if kind == "z0":
        rare = np.exp2(rng.uniform(-149, -78, 256)).astype(np.float32)
    else:
        rare = rng.integers(1, 1 << 23, 256).astype(np.uint32).view(np.float32)
    normal[np.arange(256), np.arange(256) % 16] = rare
    parts = [bits, normal.reshape(-1), rare[:7]]
    if kind == "h8":
        parts.append((np.arange(1 << 24, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32))
        special = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 2.0**-126, 2.0**-149, 3.4e38]
        parts.append(np.array(special, np.float32))
        parts.append(np.array([0x7F800001, 0xFFC12345, 0x7FA00000], np.uint32).view(np.float32))
    return np.concatenate(parts)


@pytest.mark.parametrize("kind", sorted(ROOTS))
def test_the_branching_root_equals_the_switch_and_the_select(kind):
    branching, selected_loop, kernel = ROOTS[kind]
    x = _mixed_inputs(kind)
    out, selected, switched = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    branching(x, out)
    selected_loop(x, selected)
    T._torch_sqrt.launch("cpu", x.size, switched, x, int(kernel))
    np.testing.assert_array_equal(out.view(np.uint32), switched.view(np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), selected.view(np.uint32))
    rare = (x > 0) & (x < (2.0**-78 if kind == "z0" else 2.0**-126))
    assert rare.sum() > 256 and (~rare & (x > 0) & np.isfinite(x)).sum() > 100000
    if kind == "h8":
        assert np.all(out[rare] == np.sqrt(x[rare]))


@pytest.mark.skipif(not AVX512VL, reason="checks AVX-512 instructions")
@pytest.mark.parametrize("kind", sorted(ROOTS))
def test_the_branching_loop_tests_each_vector_once(kind):
    branching = ROOTS[kind][0]
    x = _mixed_inputs(kind)
    branching(x, np.empty_like(x))
    asm = branching.inspect_asm(branching.signatures[0])
    name = "avx512_z0_sqrt_ss" if kind == "z0" else "avx_h8_sqrt_ss"
    variant = re.search(rf"(?ms)^optkernels\.{name}_v16:.*?^\.Lfunc_end\d+:", asm).group(0)
    assert len(re.findall(r"kortest", variant)) == 1 and "vfixupimmps" in variant
    if kind == "z0":
        # the loop calls a vector variant (a chunk entry inlines it), whose code tests the lanes once
        loop = re.sub(r"(?ms)^optkernels\.\w+_v\d+:.*?^\.Lfunc_end\d+:", "", asm)
        assert re.search(r"vrsqrt14ps\s+%[yz]mm|\$optkernels\.avx512_z0_sqrt_ss_v(8|16)\b", loop)
        assert "vrsqrt14ps\t%zmm" in variant
    else:  # MKL's 256-bit estimate on each half; IEEE sqrt behind the branch
        assert len(re.findall(r"vrsqrtps\t%ymm", variant)) == 2 and "vsqrtps\t%zmm" in variant
