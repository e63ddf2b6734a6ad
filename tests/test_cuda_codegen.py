"""The CUDA kernels of the sparse ops, and the dense kernels that call shared scalar math, type-check and
lower for the real CUDA target, without a GPU.

The CUDA simulator runs kernels as Python, so it cannot catch code that numba-cuda would reject (a NumPy
allocation in a kernel, a CPU-only function, a float64 promotion). Here each kernel goes through numba-cuda's
front end (typing and lowering to NVVM IR) for compute capability 8.0, with the "current device" stubbed;
generating PTX needs the CUDA toolkit and is left to a machine with a GPU (``tests/cuda``).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from optkernels.kernels import _cuda

CC = (8, 0)


def _skip_reason():
    if not _cuda.installed():
        return "numba-cuda is not installed"
    if _cuda.simulator_enabled():
        return "the CUDA simulator replaces numba-cuda's compiler in this process"
    if _cuda.module().is_available():
        return "a GPU is present: tests/cuda compiles and runs the kernels on it"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture
def compile_for_cuda(monkeypatch):
    """``compile(py_func, argument types)`` through numba-cuda's front end, for compute capability 8.0."""
    from numba.core import types
    from numba.cuda import compiler, dispatcher
    from numba.cuda.cudadrv import nvrtc

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=CC))
    monkeypatch.setattr(nvrtc, "get_supported_ccs", lambda: (CC,))

    def compile_(kernel, argtypes):
        result = compiler.compile_cuda(kernel.py_func, types.void, argtypes, cc=CC)
        return result.library.get_llvm_str()

    return compile_


def test_sparse_and_shared_math_kernels_lower_for_cuda(compile_for_cuda):
    from numba.core import types

    from optkernels.kernels.ada_max import _ada_max
    from optkernels.kernels.adagrad import _adagrad
    from optkernels.kernels.adam import _adam_amsgrad
    from optkernels.kernels.ftrl import _ftrl, _ftrl_sqrt, _ftrl_v2, _ftrl_v2_sqrt
    from optkernels.kernels.proximal_adagrad import _proximal_adagrad
    from optkernels.sparse import adagrad, adam, ftrl, merge, proximal_adagrad

    f, b, n = types.float32, types.boolean, types.int64
    arr, idx = types.float32[::1], types.int64[::1]
    plan = (idx, idx, idx)
    rows = [(adam._lazy_adam, (f,) * 6 + (b,)), (ftrl._ftrl_sqrt_rows, (f,) * 3), (ftrl._ftrl_rows, (f,) * 4),
            (proximal_adagrad._proximal_rows, (f,) * 4), (adagrad._adagrad_rows, (f, f, b)),
            (ftrl._ftrl_v2_sqrt_rows, (f,) * 4), (ftrl._ftrl_v2_rows, (f,) * 5)]
    for update, scalars in rows:
        ir = compile_for_cuda(update.cuda, (n, *plan, arr, n) + (arr,) * len(update.states) + scalars)
        assert "sqrt" in ir or update in (ftrl._ftrl_rows, ftrl._ftrl_v2_rows), update.__name__
    compile_for_cuda(adam._fused_adam_cuda(), (n, *plan, arr, n) + (arr,) * 3 + (f,) * 6 + (b,))
    compile_for_cuda(merge._segment_sums_cuda(), (n, idx, idx, arr, n, arr))
    for element, n_arrays, scalars in ((_ftrl, 4, (f,) * 4), (_ftrl_sqrt, 4, (f,) * 3), (_proximal_adagrad, 3, (f,) * 4),
                                       (_adagrad, 3, (f, f, b)), (_ftrl_v2, 4, (f,) * 5),
                                       (_ftrl_v2_sqrt, 4, (f,) * 4), (_adam_amsgrad, 5, (f,) * 4),
                                       (_ada_max, 4, (f,) * 4)):
        compile_for_cuda(element.cuda, (n,) + (arr,) * n_arrays + scalars)


def test_torch_rules_lower_for_cuda_with_fma(compile_for_cuda):
    """The torch-rounded element functions (explicit ``fma``) lower for CUDA, float32 and float64."""
    from numba.core import types

    from optkernels.kernels import torch_rules as T

    b, n = types.boolean, types.int64
    kernels = [(T._torch_adam, 4, "bbfbfffbfffdffinnn"), (T._torch_adam_amsgrad, 5, "bbfbfffbfffdffinnn"),
               (T._torch_adamax, 4, "bbfffbfffnnn"), (T._torch_adagrad, 3, "bbfffinnn"),
               (T._torch_rms_prop, 3, "bbffffbfffinnn"),
               (T._torch_centered_rms_prop_momentum, 5, "bbffffbfffinnn"),
               (T._torch_sgd, 2, "bbffnnn"), (T._torch_sgd_momentum, 3, "bbfbffbfnnn")]
    for f in (types.float32, types.float64):
        arr = f[::1]
        for element, n_arrays, scalars in kernels:
            # "d": the float64 reciprocal of float32 Adam's bias correction (None for float64)
            wide = types.float64 if f == types.float32 else types.none
            ir = compile_for_cuda(element.cuda, (n,) + (arr,) * n_arrays + tuple(
                {"b": b, "i": types.none, "n": n, "d": wide}.get(s, f) for s in scalars))
            assert "llvm.fma" in ir or "fma_compiled" in ir, element.__name__
        compile_for_cuda(T._torch_sparse_adam.cuda, (n,) + (arr,) * 4 + (types.int64[::1], n) + (f,) * 4
                         + (types.none,))
    # the MKL sqrt kernels (an int mkl scalar) fall back to 1/sqrt estimates on CUDA; float64's also needs
    # frexp, floor and ldexp
    for f in (types.float32, types.float64):
        wide = types.float64 if f == types.float32 else types.none
        compile_for_cuda(T._torch_adam.cuda, (n,) + (f[::1],) * 4 + tuple({"b": b, "i": n, "n": n, "d": wide}.get(s, f)
                                                                          for s in "bbfbfffbfffdffinnn"))
