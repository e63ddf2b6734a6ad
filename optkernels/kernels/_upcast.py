"""float16/bfloat16 support for kernels with several passes (Lamb, AdaFactor, the sparse ops).

A kernel whose float32 path runs more than one launch (a later pass reads what an earlier one wrote, as
Lamb's norms or the sparse merge) cannot round between passes and keep the contract of :mod:`._lowp`
(bit-identical to the float32 kernel on upcast arrays, each updated array rounded once). :func:`via_float32`
wraps such a kernel: half arrays are widened into float32 copies, the float32 kernel runs on them (all its
validation included, so a failed call writes nothing), and the arrays it returns are rounded once back into
the caller's arrays (stochastically inside :func:`._lowp.stochastic_rounding`). A new array it returns (an
output) comes back in the storage dtype of the first half array. The copies cost memory traffic and an
allocation per call; the single-pass kernels do the same thing chunk by chunk instead (see _elementwise).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _cuda
from ._checks import HALF_DTYPES
from ._elementwise import elementwise


@elementwise
def _copy(i, dst, src):
    dst[i] = src[i]


def _dtype(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return a.dtype
    if _cuda.loaded() and _cuda.is_device_array(a):
        dt = getattr(a, "dtype", None)
        return dt if isinstance(dt, np.dtype) else None
    return None


def _is_half(a: Any) -> bool:
    dt = _dtype(a)
    return dt is not None and dt in HALF_DTYPES and getattr(a, "ndim", 0) >= 1


#: Argument types that never hold a half array (skipped by :func:`_any_half` without a look).
_PLAIN = frozenset((bool, int, float, str, type(None), np.float32, np.float64, np.bool_, np.int32, np.int64))


def _any_half(arguments: Any) -> bool:
    """Whether any of ``arguments`` is a float16/bfloat16 array (or has one as its ``values``, as a row-sparse
    gradient): :func:`_is_half` of each, with the common plain arguments (NumPy arrays of another item size,
    Python and NumPy scalars) decided by their type alone."""
    for a in arguments:
        kind = type(a)
        if kind is np.ndarray:
            if a.itemsize == 2 and _is_half(a):
                return True
        elif kind not in _PLAIN and (_is_half(a) or _is_half(getattr(a, "values", None))):
            return True
    return False


def _widened(a: Any) -> Any:
    """A float32 copy of the half array ``a`` with its flags: read-only stays read-only, and a copy of a
    non-C-contiguous NumPy array is not C-contiguous either (so the kernel's layout checks still apply)."""
    if isinstance(a, np.ndarray):
        if a.flags.c_contiguous or a.ndim == 0:
            out = np.empty(a.shape, np.float32)
        else:
            out = np.empty(a.shape[:-1] + (2 * a.shape[-1],), np.float32)[..., ::2]
        out[...] = a
        if not a.flags.writeable:
            out.flags.writeable = False
        return out
    cuda = _cuda.module()
    flat = _cuda.as_device_array(a)
    out = cuda.device_array(flat.shape, np.float32)
    _copy.launch("cuda", out.size, out.reshape(out.size), flat.reshape(flat.size))
    return out


def _round_into(dst: Any, src: Any) -> None:
    """``dst[...] = src`` rounded once to dst's dtype (round to nearest even, or stochastic in a
    stochastic-rounding context)."""
    if isinstance(dst, np.ndarray):
        _copy.launch("cpu", dst.size, dst.reshape(-1), np.ascontiguousarray(src).reshape(-1))
        return
    flat = _cuda.as_device_array(dst)
    _copy.launch("cuda", flat.size, flat.reshape(flat.size), src.reshape(src.size))


def _narrowed(src: Any, dtype: np.dtype) -> Any:
    """A new array of ``dtype`` holding ``src`` rounded once."""
    if isinstance(src, np.ndarray):
        out = np.empty(src.shape, dtype)
    else:
        out = _cuda.module().device_array(src.shape, np.uint16).view(dtype)
    _round_into(out, src)
    return out


def map_result(result: Any, back: Callable[[Any], Any]) -> Any:
    """``back`` applied to a kernel's result: to each element of a tuple of arrays, or to a single one."""
    if isinstance(result, tuple):
        return tuple(back(r) for r in result)
    return back(result)


def via_float32(keep_float16: tuple = ()) -> Callable:
    """Decorator: run the kernel on float32 copies of its float16/bfloat16 arrays and round the arrays it
    returns once back into the originals (see the module docstring). ``keep_float16``: names of arguments
    left alone when they are float16 and every other array is wide (the kernel handles them itself, as
    AdaFactor's compressed second moment). A :class:`~optkernels.sparse.RowSparse` gradient with half
    values is widened too. Calls without half arrays go straight to the kernel."""

    def decorate(kernel: Callable) -> Callable:
        signature = inspect.signature(kernel)

        @functools.wraps(kernel)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not (_any_half(args) or (kwargs and _any_half(kwargs.values()))):
                return kernel(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return kernel(*args, **kwargs)  # the kernel words the error
            copies: dict[int, tuple[Any, Any]] = {}  # id(copy) -> (copy, original)
            memo: dict[int, Any] = {}  # id(original) -> copy
            storage = []

            def up(a: Any) -> Any:
                if _is_half(a):
                    if id(a) not in memo:
                        memo[id(a)] = _widened(a)
                        copies[id(memo[id(a)])] = (memo[id(a)], a)
                        storage.append(a.dtype)
                    return memo[id(a)]
                values = getattr(a, "values", None)
                if _is_half(values) and type(a).__name__ == "RowSparse":
                    return type(a)(a.indices, up(values), a.dense_shape)
                return a

            originals = {id(a) for a in bound.arguments.values()}
            # a float16 argument of keep_float16 is left to the kernel only in an otherwise wide call
            keep = not any(_is_half(v) for k, v in bound.arguments.items() if k not in keep_float16)
            for name, value in bound.arguments.items():
                if keep and name in keep_float16 and _dtype(value) == np.float16:
                    continue
                kind = signature.parameters[name].kind
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    bound.arguments[name] = tuple(up(a) for a in value)
                elif kind is not inspect.Parameter.VAR_KEYWORD:
                    bound.arguments[name] = up(value)
            result = kernel(*bound.args, **bound.kwargs)

            def back(r: Any) -> Any:
                hit = copies.get(id(r))
                if hit is not None:
                    _round_into(hit[1], hit[0])
                    return hit[1]
                dt = _dtype(r)
                if dt is not None and dt == np.float32 and storage and id(r) not in originals:
                    return _narrowed(r, storage[0])
                return r

            return map_result(result, back)

        wrapper.__wrapped__ = kernel
        return wrapper

    return decorate
