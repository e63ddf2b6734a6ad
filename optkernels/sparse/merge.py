"""Deterministic merge of duplicate row indices: :func:`merge_duplicates`."""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._upcast import via_float32
from ..kernels._workers import run_parts
from ._indices import (
    array_shape_dtype,
    check_indices_and_values,
    drop_out_of_range,
    host_indices,
    out_of_range_error,
)
from ._plan import balanced_tasks, plan_in_range, plan_merge
from ._rows import TASKS_PER_THREAD, generate, launch_config, worker_count

_CUDA_SUMS = """
def {name}(n, starts, order, values, row_len, out):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    while t < n:
        j = t // row_len
        c = t - j * row_len
        g = values[order[starts[j]] * row_len + c]
        for k in range(starts[j] + 1, starts[j + 1]):
            g += values[order[k] * row_len + c]
        out[t] = g
        t += stride
"""


_MAX_ROWS = 2**63 - 1  # row numbers are int64 in the merge


def _segment_sums_task(task, bounds, starts, order, values, out):
    """Rows ``bounds[task] .. bounds[task + 1] - 1`` of the sums: ``out[j] = values[order[starts[j]]] +
    values[order[starts[j] + 1]] + ...`` (left to right), on 2-D ``(rows, row_len)`` views (a row's elements
    indexed from 0 up: the loops vectorise). Run by :func:`~optkernels.kernels._workers.run_parts` over
    :func:`~._plan.balanced_tasks` (runs of about equal numbers of summed rows)."""
    row_len = values.shape[1]
    for j in range(bounds[task], bounds[task + 1]):
        src = order[starts[j]]
        for c in range(row_len):
            out[j, c] = values[src, c]
        for k in range(starts[j] + 1, starts[j + 1]):
            src = order[k]
            for c in range(row_len):
                out[j, c] += values[src, c]


@functools.cache
def _segment_sums_cuda() -> Any:
    """The CUDA kernel of the sums: one thread per output element, the same order as the CPU's."""
    cuda = _cuda.module()
    return _cuda.kernel(generate(_CUDA_SUMS, "_cuda_segment_sums", _segment_sums_task, {"cuda": cuda}))


@via_float32()
def merge_duplicates(
    indices: Any, values: Any, num_rows: int | None = None, *, out_of_range: str = "raise"
) -> tuple[Any, Any]:
    r"""Unique + segment-sum of a row-sparse gradient (MindSpore's bucket reduce, deterministic).

    Rule::

        unique_indices   = the distinct values of indices, ascending
        summed_values[j] = values[k_1] + values[k_2] + ... + values[k_r]
                           over the positions k_1 < k_2 < ... < k_r with indices[k] == unique_indices[j]

    **Order of summation**: each distinct row's duplicates are added in order of appearance, left to right
    (``((v_1 + v_2) + v_3) + ...``), element-wise in the values' dtype (float32 sums stay float32). Each
    output element is summed by one thread in that fixed order, so the result is the same bits every run,
    with any Numba thread count, and on the CPU and CUDA (the sparse kernels sum their gradients the same
    way before updating each distinct row once).

    Algorithm: a stable radix sort of the (small) index array groups each row's positions in order of
    appearance, then a parallel loop sums each distinct row. Time and memory are proportional to
    ``len(indices)`` and the size of ``values``: nothing is allocated per row of the table. For CUDA arrays
    the index array is copied to the host and grouped there; the sums run on the device.

    Args:
        indices: 1-D int32 or int64 array (NumPy, or CUDA on the values' device).
        values: float32/float64 array with ``values.shape[0] == len(indices)`` (rows of any shape).
        num_rows: the number of rows of the dense tensor; an index ``>= num_rows`` is out of range. ``None``:
            no upper bound. Negative indices are always out of range (no wrap-around).
        out_of_range: ``"raise"`` (default): an IndexError naming the first bad index value and its position;
            ``"drop"``: skip out-of-range indices silently (MindSpore's fused ops).

    Returns:
        ``(unique_indices, summed_values)``: a new 1-D array of the indices' dtype, sorted ascending, and a
        new array of the values' dtype of shape ``(len(unique_indices),) + values.shape[1:]``, on the
        inputs' device.

    Raises:
        TypeError: non-array inputs, indices not int32/int64, values not float32/float64, inputs on
            different devices, num_rows not an integer.
        ValueError: indices not 1-D, values with the wrong number of rows, negative num_rows, a bad
            out_of_range.
        IndexError: an out-of-range index with ``out_of_range="raise"``.
    """
    drop, index_device, n, shape, dtype, num_rows = check_merge(indices, values, num_rows, out_of_range)
    host = host_indices(indices)
    if drop:
        plan = plan_merge(host, num_rows)
    else:
        bad, in_range = plan_in_range(host, num_rows)
        if bad >= 0 or in_range is None:
            raise out_of_range_error("indices", host, bad, num_rows)
        plan = in_range
    n_rows = plan.rows.shape[0]
    row_len = math.prod(shape[1:])
    unique = plan.rows.astype(array_shape_dtype(indices)[1])
    out_shape = (n_rows,) + tuple(shape[1:])
    if index_device == "cpu":
        out = np.empty(out_shape, dtype)
        if n_rows and row_len:
            rows_2d = np.ascontiguousarray(values).reshape(n, row_len)
            bounds = balanced_tasks(plan.starts, worker_count() * TASKS_PER_THREAD, 1)
            sums = (bounds, plan.starts, plan.order, rows_2d, out.reshape(n_rows, row_len))
            run_parts(bounds.shape[0] - 1, _segment_sums_task, sums)
        return unique, out
    cuda = _cuda.module()
    out = cuda.device_array(out_shape, dtype)
    if n_rows and row_len:
        flat = _cuda.as_device_array(values).reshape(math.prod(shape))
        count = n_rows * row_len
        blocks, threads = launch_config(count)
        _segment_sums_cuda()[blocks, threads](
            count, cuda.to_device(plan.starts), cuda.to_device(plan.order), flat, row_len, out.reshape(count)
        )
    return cuda.to_device(unique), out


def check_merge(
    indices: Any, values: Any, num_rows: Any, out_of_range: Any
) -> tuple[bool, str, int, tuple[int, ...], np.dtype, int | None]:
    """The checks of :func:`merge_duplicates` (its errors), before anything is read or written: ``(drop,
    device, len(indices), values.shape, values.dtype, num_rows as an int or None)``."""
    drop = drop_out_of_range(out_of_range)
    index_device, n, shape, dtype = check_indices_and_values(indices, values)
    if len(shape) < 1 or shape[0] != n:
        raise ValueError(f"values must have len(indices) = {n} rows, got shape {shape}")
    if index_device == "cuda" and not _contiguous(values):
        raise ValueError("values must be C-contiguous")
    if num_rows is not None:
        if isinstance(num_rows, (bool, np.bool_)):
            raise TypeError("num_rows must be an integer or None, got bool")
        try:
            num_rows = operator.index(num_rows)
        except TypeError:
            raise TypeError(f"num_rows must be an integer or None, got {type(num_rows).__name__}") from None
        if not 0 <= num_rows <= _MAX_ROWS:
            raise ValueError(f"num_rows must be in [0, 2**63 - 1], got {num_rows}")
    return drop, index_device, n, shape, dtype, num_rows


def _contiguous(x: Any) -> bool:
    """True if the CUDA array ``x`` is C-contiguous."""
    face = _cuda.interface(x)
    strides = face.get("strides")
    if strides is None:
        return True
    shape = face["shape"]
    itemsize = np.dtype(face["typestr"]).itemsize
    expected, step = [], itemsize
    for extent in reversed(shape):
        expected.append(step)
        step *= extent
    return tuple(strides) == tuple(reversed(expected))
