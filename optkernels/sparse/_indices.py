"""Validation of row indices and of the ``out_of_range`` mode: all of it runs before any array is written."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import FLOAT_DTYPES, not_an_array_error, plain_array

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
OUT_OF_RANGE_MODES = ("raise", "drop")


def drop_out_of_range(out_of_range: Any) -> bool:
    """``True`` for ``out_of_range="drop"``, ``False`` for ``"raise"``; ValueError for anything else."""
    if not isinstance(out_of_range, str) or out_of_range not in OUT_OF_RANGE_MODES:
        raise ValueError(f"out_of_range must be 'raise' or 'drop', got {out_of_range!r}")
    return out_of_range == "drop"


def array_device(name: str, x: Any) -> str:
    """'cpu' for a NumPy array, 'cuda' for a CUDA array; TypeError for anything else (a masked array
    included: its mask cannot be honoured)."""
    if isinstance(plain_array(name, x), np.ndarray):
        return "cpu"
    if _cuda.is_device_array(x):
        return "cuda"
    raise not_an_array_error(name, x)


def array_shape_dtype(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a NumPy or CUDA array (without copying it)."""
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    face = _cuda.interface(x)
    return tuple(face["shape"]), np.dtype(face["typestr"])


def check_indices(name: str, indices: Any) -> tuple[str, int]:
    """Validate a row-index array; return ``(device, length)``.

    Raises:
        TypeError: not a NumPy or CUDA array, or a dtype other than int32/int64 (floats, bools, unsigned).
        ValueError: not 1-D.
    """
    device = array_device(name, indices)
    shape, dtype = array_shape_dtype(indices)
    if dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {dtype}")
    if len(shape) != 1:
        raise ValueError(f"{name} must be 1-D, got shape {shape}")
    return device, shape[0]


def check_indices_and_values(indices: Any, values: Any) -> tuple[str, int, tuple[int, ...], np.dtype]:
    """Validate a row-index array and its float value rows together; return ``(device, len(indices),
    values.shape, values.dtype)``.

    Raises:
        TypeError: an argument is not a NumPy or CUDA array, indices not int32/int64, values not
            float32/float64, or the two arrays on different devices.
        ValueError: indices not 1-D.
    """
    index_device, n = check_indices("indices", indices)
    value_device = array_device("values", values)
    shape, dtype = array_shape_dtype(values)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"values must have dtype float32 or float64, got {dtype}")
    if value_device != index_device:
        raise TypeError(
            f"arrays on different devices: indices is on the {index_device} but values on the {value_device}"
        )
    return index_device, n, shape, dtype


def host_indices(indices: Any) -> np.ndarray:
    """The indices as a C-contiguous NumPy array (a view when possible; a copy from a CUDA array)."""
    if isinstance(indices, np.ndarray):
        return np.ascontiguousarray(indices.view(np.ndarray))
    if math.prod(array_shape_dtype(indices)[0]) == 0:
        return np.zeros(0, array_shape_dtype(indices)[1])
    return np.ascontiguousarray(_cuda.to_host(indices))


#: The advice of :func:`out_of_range_error` where the call accepts ``out_of_range`` (sparse kernels, merge).
DROP_ADVICE = "Pass out_of_range='drop' to skip out-of-range indices as MindSpore's fused ops do"


def out_of_range_error(
    name: str, indices: np.ndarray, position: int, num_rows: int | None, advice: str = DROP_ADVICE
) -> IndexError:
    """The IndexError for the first out-of-range index (its value and its position), with ``advice``: what
    the caller can do instead (only name arguments that the call raising it accepts)."""
    value = int(indices[position])
    valid = "0 <= index" if num_rows is None else f"0 <= index < {num_rows}"
    return IndexError(
        f"{name}[{position}] = {value} is out of range ({valid}); negative indices do not wrap "
        f"around. {advice}"
    )
