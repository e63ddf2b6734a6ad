"""The float32 Adam loop of optkernels.torch with MKL's Z0 root: sqrt_special's bits (vfixupimm, the select
without AVX-512, the Python version), and the loop compiled with 512-bit vectors and one vfixupimmps."""
import platform
import re
from pathlib import Path

import numba
import numpy as np
import pytest
from numba.extending import intrinsic

from optkernels.kernels import _intrinsics
from optkernels.kernels import torch_rules as T
from optkernels.kernels._elementwise import _many_entry
from optkernels.kernels._intrinsics import sqrt_special, zen_target
from optkernels.kernels._threading import parallel_launch

X86 = platform.machine().lower() in ("x86_64", "amd64")
CPU_FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
AVX512 = X86 and "avx512f" in CPU_FLAGS

_BITS = np.array(
    [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0xBF800000, 0x80000001, 0x7FC00000, 0xFFC12345,
     0x7F800001, 0xFFA00042, 0x00000001, 0x3F800000, 0x40800000, 0x7F7FFFFF],
    np.uint32,
)
# IEEE sqrt of the first ten (±0, +∞ kept; −∞, −1, the negative subnormal: the default NaN; NaNs quieted with
# their sign and payload); the kernel's root for the last four (positive and finite)
_OUTSIDE = np.array(
    [0x00000000, 0x80000000, 0x7F800000, 0xFFC00000, 0xFFC00000, 0xFFC00000, 0x7FC00000, 0xFFC12345,
     0x7FC00001, 0xFFE00042],
    np.uint32,
)


def _root_and_expected():
    x = _BITS.view(np.float32)
    # a root NaN exactly outside the path (as the kernels' are), a number (not the true root) inside it
    root = np.where((x > 0) & (x < np.inf), np.float32(3.5), np.float32(np.nan)).astype(np.float32)
    expected = np.concatenate([_OUTSIDE, np.full(4, np.float32(3.5)).view(np.uint32)])
    return x, root, expected


@numba.njit(error_model="numpy")
def _vector_loop(root, x, out):
    for i in range(x.size):
        out[i] = sqrt_special(root[i], x[i])


def test_sqrt_special_gives_ieee_sqrt_outside_the_path():
    x, root, expected = _root_and_expected()
    reps = 64  # long enough for the vector body
    out = np.empty(x.size * reps, np.float32)
    _vector_loop(np.tile(root, reps), np.tile(x, reps), out)
    assert np.array_equal(out.view(np.uint32), np.tile(expected, reps))
    with np.errstate(invalid="ignore"):
        python = np.array([sqrt_special(r, v) for r, v in zip(root, x)], np.float32)
    assert np.array_equal(python[~np.isnan(x)].view(np.uint32), expected[~np.isnan(x)])


@intrinsic
def _select_only(typingctx, root, x):
    def codegen(context, builder, signature, args):
        return _intrinsics._sqrt_special_select(builder, *args)

    return root(root, x), codegen


def test_sqrt_special_without_avx512_is_the_same_select():
    @numba.njit(error_model="numpy", cache=False)
    def loop(root, x, out):
        for i in range(x.size):
            out[i] = _select_only(root[i], x[i])

    x, root, expected = _root_and_expected()
    out = np.empty_like(x)
    loop(root, x, out)
    assert np.array_equal(out.view(np.uint32), expected)


def _adam_arrays(seed):
    rng = np.random.default_rng(seed)
    var, m, g = (rng.standard_normal(1013).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(1013)).astype(np.float32) * np.float32(1e-3)
    v[:8] = [0, np.inf, np.nan, 1e-45, 1e-40, 3e-39, 1e30, 0]  # outside the root's path, and scaled
    return [var, m, v, g]


@pytest.mark.skipif(not AVX512, reason="checks AVX-512 instructions")
def test_the_float32_adam_loop_runs_16_lanes_with_the_bits_of_8():
    group = T.adam_group_scalars(np.dtype(np.float32), 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False,
                                 T.MKL_AVX512_SQRT)
    scalars = T.adam_step_scalars(group, 3)
    results = {}
    for wide in (True, False):
        entry = _many_entry(T._torch_adam.py_func, 4, None, False, wide)
        arrays = _adam_arrays(7)
        n = arrays[0].size
        chunks = np.array([[0, 0, n, n]], np.int64)  # tensor, start, stop, size
        addresses = np.array([[a.ctypes.data] for a in arrays], np.int64)
        with parallel_launch():
            entry(False, 1, chunks, addresses, np.empty(0, np.float32), *scalars)
        results[wide] = arrays
        # the loop's code: the packed estimates' own definitions (kept in every module using them) taken out
        asm = re.sub(r"(?ms)^optkernels\.\w+_v\d+:.*?^\.Lfunc_end\d+:", "", entry.inspect_asm(entry.signatures[0]))
        # 16 lanes where asked; else LLVM's own choice: 8 on Intel's server cores (tuned for 256-bit
        # vectors), 16 on AMD's Zen 4 (no such tuning)
        narrow = "ymm" if not zen_target() else "zmm"
        assert f"vrsqrt14ps\t%{'zmm' if wide else narrow}" in asm
        assert re.search(r"vfixupimmps\s.*%[yz]mm", asm)
    for wide, narrow in zip(results[True], results[False]):
        assert np.array_equal(wide.view(np.uint32), narrow.view(np.uint32))
    before = _adam_arrays(7)
    assert np.sum(results[True][0] != before[0]) > 1000  # every finite element moved
