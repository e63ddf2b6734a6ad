"""Validation of a sparse-op call: the arrays, the indices (range included) and the merge plan, all before
anything is written (:func:`check_sparse_call` returns a :class:`SparseCall`).

On the CPU, the row loops check the indices' range and build the merge plan inside their own parallel
region (:mod:`._rows`), before writing anything; other users of :attr:`SparseCall.plan` get it (and the
IndexError) on first access. On CUDA the plan is built during the check."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import FLOAT_DTYPES, check_arrays, to_scalar
from ._indices import (
    INDEX_DTYPES,
    array_shape_dtype,
    check_indices,
    drop_out_of_range,
    host_indices,
    out_of_range_error,
)
from ._plan import MergePlan, plan_in_range, plan_merge
from .row_sparse import RowSparse

_WHERE = {"cpu": "NumPy (CPU)", "cuda": "CUDA"}


class SparseCall:
    """The validated arrays of one sparse-op call (see :func:`check_sparse_call`).

    Attributes:
        device: 'cpu' or 'cuda'.
        dtype: the arrays' floating dtype; scalars are converted to it (:meth:`scalar`).
        shape: the shape of ``var``; ``num_rows = shape[0]``; ``row_len`` elements per row.
        arrays: the state arrays in the order given, then the gradient: validated and C-contiguous (1-D
            views, except on the CPU fast path, which keeps the arrays as given).
        states, grad: 1-D views of the state arrays and of the gradient (CUDA launches take these).
        indices: the row indices, a C-contiguous NumPy int32/int64 array (copied to the host from CUDA).
        drop: whether out-of-range indices are skipped (``out_of_range="drop"``) rather than an error.
    """

    def __init__(
        self, device: str, dtype: np.dtype, shape: tuple, arrays: list, indices: np.ndarray, drop: bool
    ):
        self.device = device
        self.dtype = dtype
        self.shape = shape
        self.num_rows = shape[0]
        self.row_len = math.prod(shape[1:])
        self.arrays = arrays
        self.indices = indices
        self.drop = drop
        self._plan: MergePlan | None = None
        self._device_plan: Any = None

    @property
    def plan(self) -> MergePlan:
        """The host :class:`~optkernels.sparse._plan.MergePlan` of the indices (built once).

        Raises:
            IndexError: an out-of-range index, unless the call drops them.
        """
        if self._plan is None:
            if self.drop:
                self._plan = plan_merge(self.indices, self.num_rows)
            else:
                bad, plan = plan_in_range(self.indices, self.num_rows)
                if bad >= 0:
                    raise self.out_of_range_error(bad)
                assert plan is not None  # in range: plan_in_range built it
                self._plan = plan
        return self._plan

    def out_of_range_error(self, position: int) -> IndexError:
        """The IndexError for the out-of-range index at ``position``."""
        return out_of_range_error("indices", self.indices, position, self.num_rows)

    @property
    def states(self) -> list[Any]:
        return [a.reshape(math.prod(a.shape)) for a in self.arrays[:-1]]

    @property
    def grad(self) -> Any:
        a = self.arrays[-1]
        return a.reshape(math.prod(a.shape))

    def scalar(self, name: str, value: Any) -> Any:
        """``value`` as a scalar of the arrays' dtype (see :func:`optkernels.kernels._checks.to_scalar`)."""
        return to_scalar(name, value, self.dtype)

    def rows_2d(self) -> list[np.ndarray]:
        """The gradient, then the states, as 2-D ``(rows, row_len)`` views (CPU): a row's elements are then
        indexed from 0 up, which lets LLVM vectorise the per-row loops."""
        *states, grad = self.arrays
        row_len = self.row_len
        return [grad.reshape(-1, row_len)] + [a.reshape(-1, row_len) for a in states]

    def device_plan(self) -> tuple[Any, Any, Any]:
        """The plan's arrays copied to the CUDA device (once per call)."""
        if self._device_plan is None:
            cuda = _cuda.module()
            self._device_plan = tuple(cuda.to_device(a) for a in self.plan)
        return self._device_plan


def unpack_grad(grad: Any, indices: Any, var_shape: tuple | None) -> tuple[Any, Any]:
    """``(values, indices)`` of a sparse gradient given either as ``(grad, indices)`` arrays or as a
    :class:`RowSparse` ``grad`` with ``indices=None`` (whose dense_shape must then be ``var``'s shape)."""
    if isinstance(grad, RowSparse):
        if indices is not None:
            raise TypeError("indices must be None when grad is a RowSparse (it carries its own indices)")
        if var_shape is not None and grad.dense_shape != tuple(var_shape):
            raise ValueError(
                f"grad is a RowSparse of dense_shape {grad.dense_shape} but var has shape {tuple(var_shape)}"
            )
        return grad.values, grad.indices
    if indices is None:
        raise TypeError("indices must be an int32 or int64 array (or grad a RowSparse with indices=None)")
    return grad, indices


def check_sparse_call(state: dict[str, Any], grad: Any, indices: Any, out_of_range: Any) -> SparseCall:
    """Validate the arrays of a sparse-op call; nothing is written. CUDA calls get their merge plan here;
    CPU calls when the row loop runs or :attr:`SparseCall.plan` is first read.

    Args:
        state: name -> array updated in place, ``var`` first; all of one shape, at least 1-D.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]`` (or a :class:`RowSparse`).
        indices: 1-D int32/int64 row indices on the arrays' device (None when grad is a RowSparse).
        out_of_range: 'raise' or 'drop'.

    Raises:
        TypeError: an argument of the wrong type, dtypes that differ or are not float32/float64, indices
            not int32/int64, arrays on different devices.
        ValueError: shapes, layout, a 0-d var, 2-D indices, a bad ``out_of_range``.
        IndexError: (CUDA arrays) ``out_of_range='raise'`` and an index outside ``[0, var.shape[0])`` (its
            value and position are given).
    """
    drop = drop_out_of_range(out_of_range)
    call = plain_numpy_call(state, grad, indices, drop)
    if call is not None:
        return call
    (var_name, var), *others = state.items()
    is_array = isinstance(var, np.ndarray) or _cuda.is_device_array(var)
    var_shape = array_shape_dtype(var)[0] if is_array else None
    grad, indices = unpack_grad(grad, indices, var_shape)
    batch = check_arrays(state, {"grad": grad}, same_shape=False)
    shape = batch.shape
    for name, array in others:
        other_shape = array_shape_dtype(array)[0]
        if other_shape != shape:
            raise ValueError(f"{name} has shape {other_shape} but {var_name} has shape {shape}")
    if len(shape) == 0:
        raise ValueError(f"{var_name} must be at least 1-D for a row-sparse update, got a 0-d array")
    index_device, n_indices = check_indices("indices", indices)
    if index_device != batch.device:
        raise TypeError(
            f"arrays on different devices: {var_name} is a {_WHERE[batch.device]} array but "
            f"indices is a {_WHERE[index_device]} array"
        )
    grad_shape = array_shape_dtype(grad)[0]
    expected = (n_indices,) + tuple(shape[1:])
    if grad_shape != expected:
        raise ValueError(
            f"grad must have shape (len(indices),) + {var_name}.shape[1:] = {expected}, got {grad_shape}"
        )
    call = SparseCall(batch.device, batch.dtype, shape, batch.flat, host_indices(indices), drop)
    if call.device != "cpu":
        call.plan  # noqa: B018 -- builds the plan now: an out-of-range index raises before any launch
    return call


def plain_numpy_call(state: dict[str, Any], grad: Any, indices: Any, drop: bool) -> SparseCall | None:
    """The common case checked in a few attribute reads, or None to take the full path (which also words
    the errors): NumPy state arrays of one float dtype and one shape (at least 1-D), C-contiguous and
    writeable; a C-contiguous gradient of that dtype and of shape ``(len(indices),) + shape[1:]``; 1-D
    C-contiguous int32/int64 indices; every float array owning its memory (``base is None``, so no two can
    overlap) and none passed twice."""
    arrays = [*state.values(), grad]
    first = arrays[0]
    if type(first) is not np.ndarray or type(grad) is not np.ndarray or type(indices) is not np.ndarray:
        return None
    dtype, shape = first.dtype, first.shape
    if (
        dtype not in FLOAT_DTYPES
        or not shape
        or indices.dtype not in INDEX_DTYPES
        or indices.ndim != 1
        or not indices.flags.c_contiguous
        or grad.shape != (indices.shape[0],) + shape[1:]
        or len({id(a) for a in arrays}) != len(arrays)
    ):
        return None
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != dtype or a.base is not None or not a.flags.c_contiguous:
            return None
    for a in arrays[:-1]:
        if a.shape != shape or not a.flags.writeable:
            return None
    return SparseCall("cpu", dtype, shape, arrays, indices, drop)
