"""Argument validation shared by every kernel: all of it runs before any array is written.

Errors name the argument and follow MindSpore's kinds: TypeError for a wrong type or dtype (or arrays on
different devices), ValueError for a wrong shape, layout or value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from . import _cuda
from ._address import data_address

#: Storage dtypes of the kernels' arrays. float16 and bfloat16 (``ml_dtypes.bfloat16``) arrays are computed
#: in float32 (scalars too) and rounded once to their storage dtype (see ``_lowp``); they may be mixed with
#: each other and with float32 arrays in one call, never with float64.
HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64)) + HALF_DTYPES
_LOW_FAMILY = (np.dtype(np.float32),) + HALF_DTYPES
_FLOAT32 = np.dtype(np.float32)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel computes in for arrays stored in ``dtype`` (float32 for the half dtypes)."""
    return _FLOAT32 if dtype in HALF_DTYPES else dtype


def plain_array(name: str, x: Any) -> Any:
    """``x`` itself, or, for a NumPy array subclass whose data is plain (``np.matrix``, ``np.memmap``...), a
    plain ``np.ndarray`` view of the same memory: kernels see only plain arrays, whose ``reshape(-1)`` is
    1-D (a matrix's stays 2-D). Anything that is not a NumPy array is returned as it is.

    Raises:
        TypeError: a masked array (``np.ma.MaskedArray``): a kernel cannot honour its mask.
    """
    if type(x) is np.ndarray or not isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array (np.ma.MaskedArray), whose mask a kernel cannot honour; "
            f"pass a plain array ({name}.filled(...) or np.asarray({name}))"
        )
    return x.view(np.ndarray)


def _array_facts(name: str, x: Any) -> tuple[str, tuple, np.dtype, bool, bool, tuple[int, int]]:
    """(device, shape, dtype, c_contiguous, writeable, byte span) of a NumPy or CUDA array."""
    x = plain_array(name, x)
    if isinstance(x, np.ndarray):
        return "cpu", x.shape, x.dtype, x.flags.c_contiguous, x.flags.writeable, _byte_span(x)
    if _cuda.is_device_array(x):
        face = _cuda.interface(x)
        shape = tuple(face["shape"])
        dtype = np.dtype(face["typestr"])
        if dtype.kind == "V" and isinstance(getattr(x, "dtype", None), np.dtype):
            dtype = x.dtype  # bfloat16: the interface's typestr says only '<V2'; the array knows
        strides = face.get("strides")
        contiguous = strides is None or strides == _c_strides(shape, dtype.itemsize)
        ptr, readonly = face["data"]
        nbytes = math.prod(shape) * dtype.itemsize
        return "cuda", shape, dtype, contiguous, not readonly, (ptr, ptr + nbytes)
    raise not_an_array_error(name, x)


def not_an_array_error(name: str, x: Any) -> TypeError:
    """The TypeError for an argument that is neither a NumPy nor a CUDA array; for a CPU torch tensor it
    says how to pass one (``.numpy()`` shares the memory) and where the torch.optim drop-ins are."""
    message = f"{name} must be a NumPy array or a CUDA array, got {type(x).__name__}"
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "numpy"):
        message += (
            f" on the CPU: pass {name}.numpy() (a NumPy view of the same memory, updated in place), "
            "or use the torch.optim drop-ins of optkernels.torch, which take tensors"
        )
    return TypeError(message)


def _byte_span(x: np.ndarray) -> tuple[int, int]:
    """[first byte, past the last byte) of a NumPy array's memory; (0, 0) when empty."""
    if x.size == 0:
        return 0, 0
    lo = hi = data_address(x)  # x.__array_interface__["data"][0], without building the dict
    for extent, stride in zip(x.shape, x.strides):
        reach = (extent - 1) * stride
        lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
    return lo, hi + x.itemsize


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


class Batch:
    """The validated arrays of one kernel call.

    Attributes:
        device: 'cpu' (NumPy arrays) or 'cuda' (CUDA arrays).
        dtype: the dtype of the arithmetic (float32 or float64; float32 when the arrays are float16 or
            bfloat16); scalars are converted to it.
        storage: the first array's dtype (float16, bfloat16, float32 or float64).
        shape: the shape of the first state array.
        size: its number of elements.
        flat: 1-D views of the arrays (state first, then inputs), in the order given; a non-contiguous
            NumPy input is copied to a contiguous one (state arrays are never copied).
    """

    __slots__ = ("device", "dtype", "storage", "shape", "size", "flat")

    def __init__(self, device: str, dtype: np.dtype, shape: tuple, flat: list):
        self.device = device
        self.storage = dtype
        self.dtype = compute_dtype(dtype)
        self.shape = shape
        self.size = math.prod(shape)
        self.flat = flat

    def scalar(self, name: str, value: Any) -> Any:
        """``value`` as a scalar of this batch's dtype (see :func:`to_scalar`)."""
        return to_scalar(name, value, self.dtype)


def check_arrays(
    state: Mapping[str, Any], inputs: Mapping[str, Any] | None = None, *, same_shape: bool = True
) -> Batch:
    """Validate the arrays of a call and return their :class:`Batch`.

    Args:
        state: name -> array updated in place (must be writeable and C-contiguous).
        inputs: name -> array only read (e.g. the gradient).
        same_shape: require every array to have the shape of the first state array.

    Raises:
        TypeError: not an array; arrays on different devices; dtype not float32/float64 or not shared.
        ValueError: shapes differ; a state array is read-only or not C-contiguous; arrays overlap; a CUDA
            input is not contiguous.
    """
    if same_shape:
        arrays = [*state.values(), *inputs.values()] if inputs else [*state.values()]
        batch = plain_batch(arrays, len(state))
        if batch is not None:
            return batch
    return _checked_batch(state, inputs or {}, same_shape)


def plain_batch(arrays: list[Any], n_state: int) -> Batch | None:
    """:func:`check_arrays`' common case in a few attribute reads, or None: the caller then takes
    :func:`check_arrays`, which words the errors. ``arrays``: the state arrays (the first ``n_state``),
    then the inputs, in order.

    Accepted here: NumPy arrays of one float dtype (or of float32, float16 and bfloat16 mixed, as the full
    path allows) and one shape, all C-contiguous, state arrays writeable, every array owning its memory
    (``base is None``) and no array passed twice -- arrays that own their memory cannot overlap.
    """
    first = arrays[0]
    if type(first) is not np.ndarray:
        return None
    dtype, shape = first.dtype, first.shape
    if dtype not in FLOAT_DTYPES or len({id(a) for a in arrays}) != len(arrays):
        return None
    low = dtype in _LOW_FAMILY
    for a in arrays:
        if type(a) is not np.ndarray or a.shape != shape or a.base is not None:
            return None
        if a.dtype != dtype and not (low and a.dtype in _LOW_FAMILY):
            return None
        if not a.flags.c_contiguous:
            return None
    for a in arrays[:n_state]:
        if not a.flags.writeable:
            return None
    if len(shape) == 1:
        return Batch("cpu", dtype, shape, arrays)
    return Batch("cpu", dtype, shape, [a.reshape(-1) for a in arrays])


def _checked_batch(state: Mapping[str, Any], inputs: Mapping[str, Any], same_shape: bool) -> Batch:
    named = [(n, plain_array(n, a), True) for n, a in state.items()] + [
        (n, plain_array(n, a), False) for n, a in inputs.items()
    ]
    facts = [(n, a, is_state, *_array_facts(n, a)) for n, a, is_state in named]
    first_name, _, _, device, shape, dtype, _, _, _ = facts[0]
    for name, _, _, dev, _, _, _, _, _ in facts[1:]:
        if dev != device:
            raise TypeError(
                f"arrays on different devices: {first_name} is a {_where(device)} array but "
                f"{name} is a {_where(dev)} array"
            )
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{first_name} has dtype {dtype}; supported dtypes are float32, float64, float16 and bfloat16"
        )
    for name, _, _is_state, _, shp, dt, _contiguous, _writeable, _ in facts[1:]:
        if dt != dtype and not (dt in _LOW_FAMILY and dtype in _LOW_FAMILY):
            raise TypeError(
                f"{name} has dtype {dt} but {first_name} has dtype {dtype}; "
                f"all arrays of one call must share the dtype"
            )
        if same_shape and shp != shape:
            raise ValueError(f"{name} has shape {shp} but {first_name} has shape {shape}")
    for name, _, is_state, _, _, _, contiguous, writeable, _ in facts:
        if is_state and not writeable:
            raise ValueError(f"{name} is read-only; it is updated in place")
        if not contiguous and (is_state or device == "cuda"):
            raise ValueError(f"{name} must be C-contiguous")
    _check_no_overlap([(f[0], f[2], f[8]) for f in facts])
    flat = [_flatten(a, device) for _, a, *_ in facts]
    return Batch(device, dtype, shape, flat)


def _where(device: str) -> str:
    return "NumPy (CPU)" if device == "cpu" else "CUDA"


def _check_no_overlap(spans: list[tuple[str, bool, tuple[int, int]]]) -> None:
    """A state array may share memory with no other array of the call."""
    for k, (name, is_state, (lo, hi)) in enumerate(spans):
        if lo == hi:
            continue
        for other, other_is_state, (lo2, hi2) in spans[k + 1 :]:
            if (is_state or other_is_state) and lo2 < hi and lo < hi2:
                raise ValueError(f"{name} and {other} share memory; each updated array must be distinct")


def _flatten(x: Any, device: str) -> Any:
    """A 1-D view (or, for a non-contiguous NumPy input, a 1-D contiguous copy) of an array; the result is
    always a plain 1-D array of ``x.size`` elements, whatever subclass ``x`` is."""
    if device == "cpu":
        x = x.view(np.ndarray) if type(x) is not np.ndarray else x
        flat = x.reshape(-1) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
        if flat.ndim != 1 or flat.size != x.size:  # never trust a reshape to be flat
            raise ValueError(f"cannot take a flat view of an array of shape {x.shape}")
        return flat
    arr = _cuda.as_device_array(x)
    if arr.ndim == 1:  # contiguous (checked): already flat, and a device reshape builds a new array object
        return arr
    return arr.reshape(math.prod(arr.shape))


def to_scalar(name: str, value: Any, dtype: np.dtype) -> Any:
    """Convert a scalar input to ``dtype``.

    Accepted: a Python or NumPy real number (not bool), or a 0-d or shape-(1,) real array (NumPy or CUDA).

    Raises:
        TypeError: any other type (a masked array included).
        ValueError: an array with more than one element or more than one dimension; an integer beyond the
            range of a float (``10**400``).
    """
    kind = type(value)
    if kind is float or kind is dtype.type:  # the common cases, first
        return dtype.type(value)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number or a 0-d or shape-(1,) array, got bool")
    if isinstance(value, (int, np.integer)):
        try:
            return dtype.type(value)  # OverflowError for an int beyond float64's range (10**400)
        except OverflowError:
            raise ValueError(
                f"{name} is too large for a float, got an integer of {int(value).bit_length()} bits"
            ) from None
    if isinstance(value, (float, np.floating)):
        return dtype.type(value)
    if isinstance(value, np.generic) and value.dtype in HALF_DTYPES:  # a bfloat16 scalar
        return dtype.type(np.float32(value))
    value = plain_array(name, value)
    if not isinstance(value, np.ndarray) and _cuda.is_device_array(value):
        value = _cuda.to_host(value)
    if isinstance(value, np.ndarray):
        if value.dtype in HALF_DTYPES:
            value = value.astype(np.float32)
        if value.dtype.kind not in "fiu":
            raise TypeError(f"{name} must have a real dtype, got {value.dtype}")
        if value.ndim > 1 or value.size != 1:
            raise ValueError(f"{name} must be a scalar, a 0-d or a shape-(1,) array, got shape {value.shape}")
        return dtype.type(value.reshape(-1)[0])
    raise TypeError(f"{name} must be a number or a 0-d or shape-(1,) array, got {type(value).__name__}")


def check_range(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError unless ``low <= value <= high`` (ends open where asked; NaN always fails)."""
    ok = value == value
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ValueError(f"{name} must be in {left}{lo}, {hi}{right}, got {value}")


def attr_bool(name: str, value: Any) -> bool:
    """A boolean attribute (MindSpore: TypeError unless bool)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def attr_float(name: str, value: Any) -> float:
    """A float attribute (MindSpore: TypeError unless float -- an int is rejected; ValueError if not finite)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (float, np.floating)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def output_like(name: str, out: Any, like: Any, batch: Batch) -> tuple[Any, Any]:
    """The output array of a kernel that returns a new array: ``out`` if given, else a new one.

    Returns ``(array, flat 1-D view)``. A given ``out`` must be on the batch's device, of its dtype and of
    ``like``'s shape, writeable, C-contiguous and distinct from the call's other arrays.
    """
    if out is None:
        if batch.device == "cpu":
            out = np.empty(batch.shape, dtype=batch.storage)
        elif batch.storage.kind == "V":  # bfloat16 on CUDA: allocate its bits
            out = _cuda.module().device_array(batch.shape, dtype=np.uint16).view(batch.storage)
        else:
            out = _cuda.module().device_array(batch.shape, dtype=batch.storage)
        return out, _flatten(out, batch.device)
    if _owns_distinct_memory(out, batch):
        return out, out
    device, shape, dtype, contiguous, writeable, span = _array_facts(name, out)
    given, out = out, plain_array(name, out)
    if device != batch.device:
        raise TypeError(
            f"arrays on different devices: {name} is a {_where(device)} array but the inputs "
            f"are {_where(batch.device)} arrays"
        )
    if dtype != batch.storage:
        raise TypeError(f"{name} has dtype {dtype} but the inputs have dtype {batch.storage}")
    if shape != batch.shape:
        raise ValueError(f"{name} has shape {shape} but must have shape {batch.shape}")
    if not writeable:
        raise ValueError(f"{name} is read-only")
    if not contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    lo, hi = span
    for arr in batch.flat:
        _, _, _, _, _, (lo2, hi2) = _array_facts("", arr)
        if lo < hi and lo2 < hi2 and lo2 < hi and lo < hi2:
            raise ValueError(f"{name} shares memory with an input; it must be a distinct array")
    return given, _flatten(out, batch.device)


def _owns_distinct_memory(out: Any, batch: Batch) -> bool:
    """Whether ``out`` passes :func:`output_like`'s checks in a few attribute reads (the common case): a
    plain, 1-D, writeable, C-contiguous NumPy array of the batch's dtype and shape that owns its memory, as
    every array of the batch does -- arrays that own their memory cannot overlap."""
    if type(out) is not np.ndarray or out.base is not None or batch.device != "cpu":
        return False
    if out.dtype != batch.storage or out.shape != batch.shape or len(out.shape) != 1:
        return False
    if not (out.flags.writeable and out.flags.c_contiguous):
        return False
    return all(a.base is None and a is not out for a in batch.flat)
