"""optkernels' CUDA kernels as NVVM generates them, without a GPU: no contracted multiply-adds (the CPU's
rounding), and a ``None`` argument's place in a kernel's parameters (what ``_cuda._NoneArguments`` passes).

These need libNVVM and NVRTC (the CUDA toolkit, or the ``nvidia-cuda-nvcc`` and ``nvidia-cuda-nvrtc``
wheels) and skip without them.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from optkernels.kernels import _cuda

CC = (9, 0)


def _empty(n):
    pass


def _skip_reason() -> str | None:
    if not _cuda.installed():
        return "numba-cuda is not installed"
    if _cuda.simulator_enabled():
        return "the CUDA simulator replaces numba-cuda's compiler in this process"
    try:
        from numba import cuda
        from numba.core import types

        cuda.compile_ptx(_empty, (types.int64,), cc=CC)
    except Exception as error:  # any failure to generate PTX means: no toolkit here
        return f"no CUDA code generation here (libNVVM/NVRTC: {type(error).__name__})"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture
def ptx(monkeypatch):
    """``ptx(py_func, argument types)``: PTX for compute capability 9.0, the current device stubbed."""
    from numba.core import types
    from numba.cuda import compiler, dispatcher
    from numba.cuda.cudadrv import nvrtc

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=CC))
    monkeypatch.setattr(nvrtc, "get_supported_ccs", lambda: (CC,))
    _cuda.module()  # installs the compile hook

    def compile_(py_func, argtypes):
        return compiler.compile_cuda(py_func, types.void, argtypes, cc=CC).library.get_asm_str(cc=CC)

    return compile_


def test_kernels_round_each_multiply_and_add(ptx):
    """apply_adam's kernel has no fused multiply-add, while a kernel outside optkernels with the same
    ``a * b + c`` shape keeps NVVM's default contraction (the hook touches only optkernels' code)."""
    from numba import cuda
    from numba.core import types

    from optkernels.kernels.adam import _adam

    f, arr = types.float32, types.float32[::1]
    ours = ptx(_adam.cuda.py_func, (types.int64, arr, arr, arr, arr, f, f, f, f, f, types.boolean))
    assert "fma.rn" not in ours
    assert len(re.findall(r"\bmul\.rn\.f32", ours)) >= 4

    def theirs(a, b, c, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] * b[i] + c[i]

    assert "fma.rn.f32" in ptx(theirs, (arr,) * 4)


def test_explicit_fma_stays_fused(ptx):
    """The torch rules' explicit ``fma`` calls are still one fused multiply-add each."""
    from numba.core import types

    from optkernels.kernels import torch_rules

    f, arr = types.float32, types.float32[::1]
    source = ptx(torch_rules._torch_adam.cuda.py_func, _torch_adam_types(f, arr))
    assert "fma.rn.f32" in source


def test_kernels_link_as_ptx():
    """optkernels' kernels are linked from PTX, not LTO-IR: an LTO link re-optimises in libNVVM with -fma=1
    and contracts the multiply-adds that the PTX keeps apart (an H200 gave the fused sums of squares)."""
    from optkernels.kernels.sum_squares import _pair

    if not _cuda._jit_takes_lto(_cuda.module()):
        pytest.skip("this numba-cuda has no lto option (it links PTX)")
    assert _pair.cuda.targetoptions["lto"] is False


def _torch_adam_types(f, arr):
    import inspect

    from numba.core import types

    from optkernels.kernels import torch_rules

    kinds = {"var": arr, "exp_avg": arr, "exp_avg_sq": arr, "grad": arr, "negate": types.boolean,
             "coupled": types.boolean, "decoupled": types.boolean, "mkl": types.boolean,
             "tail_from": types.int64, "chunk": types.int64, "chunk_tail": types.int64}
    params = list(inspect.signature(torch_rules._torch_adam.py_func).parameters)[1:]
    return (types.int64, *(kinds.get(p, f) for p in params))


def test_a_none_argument_is_one_pointer_parameter():
    """A kernel specialised on ``None`` keeps one 8-byte parameter for it, so passing a null pointer
    there (``_cuda._NoneArguments``) fills exactly its place: an array is 7 parameters, so an
    (array, None, array) kernel has 15."""
    from numba import cuda
    from numba.core import types

    def kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] if b is None else a[i] + b[i]

    arr = types.float32[::1]
    source, _ = cuda.compile_ptx(kernel, (arr, types.none, arr), cc=CC)
    entry = source[source.index(".entry") :]
    params = re.findall(r"\.param \.(\w+) ", entry[: entry.index(")")])
    assert params == ["u64"] * 15
    assert _cuda._NONE_ARGUMENTS.prepare_args(types.none, None) == (types.uintp, 0)
    assert _cuda._NONE_ARGUMENTS.prepare_args(arr, None) == (arr, None)
