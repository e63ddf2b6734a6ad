"""The MKL sqrt kernels of optkernels.kernels.torch_rules in vectorised loops: the kernel compiled as a constant
(a SqrtKernel) and the rsqrt estimates' packed forms give the bits of the run-time switch's loop (an int
kernel), lane for lane, and a loop calling an estimate holds its packed instruction."""
import platform
import re
from pathlib import Path

import numba
import numpy as np
import pytest

from optkernels.kernels import torch_rules as T
from optkernels.kernels._intrinsics import rsqrt14, rsqrt_estimate

X86 = platform.machine().lower() in ("x86_64", "amd64")
CPU_FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []


def _switched(x, kernel):
    """torch_sqrt with a plain int kernel: the run-time switch, whose branches run the scalar estimates."""
    out = np.empty_like(x)
    T._torch_sqrt.launch("cpu", x.size, out, x, int(kernel))
    return out


@pytest.mark.parametrize("kernel", [T.MKL_AVX_SQRT, T.MKL_AVX512_SQRT], ids=["H8", "Z0"])
def test_float32_kernels_equal_the_run_time_switch(kernel):
    """[1, 2), [2, 4), Z0's scaled binade, subnormals, and sampled negatives/NaN payloads, bit for bit."""
    base = np.arange(1 << 23, dtype=np.uint32)
    for first in (0x3F800000, 0x40000000, 0x05000000, 0x00000000, 0xBF800000, 0x7F800000, 0xFF800000):
        x = (base + np.uint32(first)).view(np.float32)
        assert isinstance(T.mkl_flag(np.dtype(np.float32), kernel), T.SqrtKernel)
        ours = T.torch_sqrt_array(x, kernel)
        assert np.array_equal(ours.view(np.uint32), _switched(x, kernel).view(np.uint32)), hex(first)
    assert not np.array_equal(ours[:16], np.sqrt(np.abs(x[:16])))  # (NaN inputs: not compared by value)


def test_float64_avx512_kernel_equals_the_run_time_switch():
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.integers(0, 2**64, 1 << 20, dtype=np.uint64).view(np.float64),
                        np.exp2(rng.uniform(-1074, 1024, 1 << 19)), rng.uniform(1.0, 4.0, 1 << 19),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, 2.0 ** -1022, 1.7e308]])
    ours = T.torch_sqrt_array(x, T.MKL_AVX512_SQRT64)
    assert np.array_equal(ours.view(np.uint64), _switched(x, T.MKL_AVX512_SQRT64).view(np.uint64))
    assert np.sum(ours[(x > 0) & np.isfinite(x)] != np.sqrt(x[(x > 0) & np.isfinite(x)])) > 1000


@pytest.mark.skipif(not X86 or "avx512f" not in CPU_FLAGS, reason="checks AVX-512 instructions")
@pytest.mark.parametrize("dtype,packed", [(np.float32, "vrsqrt14ps"), (np.float64, "vrsqrt14pd")])
def test_a_loop_of_rsqrt14_holds_the_packed_instruction(dtype, packed):
    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = rsqrt14(x[i])

    x = np.linspace(0.5, 4.0, 1000).astype(dtype)
    out = np.empty_like(x)
    loop(x, out)
    assert np.array_equal(out, np.array([rsqrt14(v) for v in x], dtype))  # the scalar instruction's bits
    asm = loop.inspect_asm(loop.signatures[0])
    # the vector variants' own definitions (kept in every module that uses the estimate) taken out: what is left
    # is the loop's code, which calls a variant of 4/8/16 lanes or holds its packed instruction inlined
    loop_code = re.sub(r"(?ms)^optkernels\.\w+_v\d+:.*?^\.Lfunc_end\d+:", "", asm)
    assert re.search(rf"\b{packed}\s+%[yz]mm|\$optkernels\.avx512_rsqrt14_s[sd]_v(4|8|16)\b", loop_code), \
        "the loop is not vectorised"


@pytest.mark.skipif(not X86, reason="checks x86 instructions")
def test_a_loop_of_rsqrtss_gives_the_scalar_bits():
    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = rsqrt_estimate(x[i])

    x = (np.arange(0, 1 << 23, 997, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    out = np.empty_like(x)
    loop(x, out)
    assert np.array_equal(out, np.array([rsqrt_estimate(v) for v in x], np.float32))


def test_a_sqrt_kernel_is_typed_without_a_python_typeof(monkeypatch):
    """Numba's dispatcher reads a SqrtKernel's type from its ``_numba_type_`` (no call of the dispatcher's
    ``typeof_pyval``, which took ~10 us a launch): the same type as ``numba.typeof``'s, the same result."""
    kernel = T.mkl_flag(np.dtype(np.float32), T.MKL_AVX512_SQRT)
    assert kernel._numba_type_ == numba.typeof(kernel) == T.SqrtKernelType(T.MKL_AVX512_SQRT)
    assert kernel._numba_type_ is T.SqrtKernel(T.MKL_AVX512_SQRT)._numba_type_

    @numba.njit(error_model="numpy")
    def root(x, mkl):
        return T.torch_sqrt(x, mkl)

    x = np.float32(2.5)
    first = root(x, kernel)  # compiled here (typeof_pyval called once)
    # (before the patch below, which every dispatcher of the process sees: this launch may compile)
    expected = T.torch_sqrt_array(np.array([x]), T.MKL_AVX512_SQRT)[0]

    def refuse(self, value):
        raise AssertionError(f"typeof_pyval({value!r}) called")

    monkeypatch.setattr(type(root), "typeof_pyval", refuse)
    again = root(x, kernel)
    assert again == first == expected
    assert again == np.float32(1.5811388)
