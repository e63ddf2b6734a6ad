"""A row-sparse gradient: :class:`RowSparse` (MindSpore's RowTensor, TensorFlow's IndexedSlices)."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import FLOAT_DTYPES, plain_array
from ._indices import (
    array_device,
    array_shape_dtype,
    check_indices_and_values,
    host_indices,
    out_of_range_error,
)
from ._plan import first_out_of_range
from .merge import merge_duplicates

_SCIPY_FORMATS = ("csr", "coo")


_KEEP_IN_RANGE = (
    "A RowSparse holds only rows of its dense shape: keep the others out, for example with "
    "keep = (indices >= 0) & (indices < dense_shape[0]); RowSparse(indices[keep], values[keep], "
    "dense_shape)"
)


class RowSparse:
    r"""A tensor of shape ``dense_shape`` that is zero except in the rows listed in ``indices``::

        dense[indices[k]] += values[k]      for k = 0, 1, ..., len(indices) - 1

    Repeated indices are allowed (their rows add up, see :meth:`merged`). The arrays are kept as given (no
    copy): NumPy arrays, or CUDA arrays (Numba device arrays, anything with ``__cuda_array_interface__``) on
    one device.

    Args:
        indices: 1-D int32 or int64 array of row numbers, each in ``[0, dense_shape[0])``.
        values: float32 or float64 array of shape ``(len(indices),) + dense_shape[1:]``.
        dense_shape: the shape of the dense tensor (a sequence of non-negative ints, at least one).

    Attributes:
        indices, values: the arrays given.
        dense_shape: ``tuple`` of ints.
        dtype: the values' dtype.

    Raises:
        TypeError: an argument of the wrong type (indices not int32/int64, values not float32/float64, a
            non-integer dense_shape entry, arrays on different devices).
        ValueError: indices not 1-D, a values shape that does not match, an empty or negative dense_shape.
        IndexError: an index outside ``[0, dense_shape[0])`` (its value and position are given). For CUDA
            arrays the indices are copied to the host for this check.
    """

    __slots__ = ("indices", "values", "dense_shape")

    def __init__(self, indices: Any, values: Any, dense_shape: Sequence[int]):
        dense_shape = _as_shape(dense_shape)
        n, shape = check_indices_and_values(indices, values)[1:3]
        expected = (n,) + dense_shape[1:]
        if tuple(shape) != expected:
            raise ValueError(
                f"values must have shape (len(indices),) + dense_shape[1:] = {expected}, got {tuple(shape)}"
            )
        host = host_indices(indices)
        bad = first_out_of_range(host, dense_shape[0])
        if bad >= 0:
            raise out_of_range_error("indices", host, bad, dense_shape[0], _KEEP_IN_RANGE)
        self.indices = plain_array("indices", indices)  # an np.matrix is kept as a plain view
        self.values = plain_array("values", values)
        self.dense_shape = dense_shape

    @property
    def dtype(self) -> np.dtype:
        """The values' dtype (float32 or float64)."""
        return array_shape_dtype(self.values)[1]

    @property
    def device(self) -> str:
        """'cpu' for NumPy arrays, 'cuda' for CUDA arrays."""
        return array_device("values", self.values)

    def __repr__(self) -> str:
        n = array_shape_dtype(self.indices)[0][0]
        return (
            f"RowSparse(dense_shape={self.dense_shape}, {n} indices, dtype={self.dtype}, "
            f"device={self.device!r})"
        )

    @classmethod
    def from_scipy(cls, matrix: Any) -> RowSparse:
        """The rows of a 2-D ``scipy.sparse`` matrix or array (any format) that hold a stored entry.

        Every row with at least one stored entry (an explicitly stored zero counts) becomes one row of
        ``values`` (dense, with zeros where nothing is stored); ``indices`` lists those rows, ascending, as
        int64. Duplicate entries of one (row, column) are summed, as scipy does. The matrix is not modified.

        Args:
            matrix: a 2-D scipy.sparse matrix or array of dtype float32 or float64.

        Returns:
            A NumPy :class:`RowSparse` with ``dense_shape == matrix.shape``.

        Raises:
            TypeError: not a scipy.sparse object, or a dtype other than float32/float64.
            ValueError: not 2-D.
        """
        import scipy.sparse

        if not scipy.sparse.issparse(matrix):
            raise TypeError(f"matrix must be a scipy.sparse matrix or array, got {type(matrix).__name__}")
        if matrix.ndim != 2:
            raise ValueError(f"matrix must be 2-D, got {matrix.ndim}-D")
        dtype = np.dtype(matrix.dtype)
        if dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"matrix must have dtype float32 or float64, got {dtype} (convert it with .astype)"
            )
        coo = scipy.sparse.coo_array(matrix)
        row = np.asarray(coo.row, dtype=np.int64)
        col = np.asarray(coo.col, dtype=np.int64)
        rows = np.unique(row)
        values = np.zeros((rows.shape[0], matrix.shape[1]), dtype)
        np.add.at(values, (np.searchsorted(rows, row), col), coo.data)
        return cls(rows, values, matrix.shape)

    def to_scipy(self, format: str = "csr") -> Any:
        """This 2-D tensor as a ``scipy.sparse`` array (``csr_array`` or ``coo_array``).

        Every element of ``values`` becomes a stored entry (zeros included). In CSR form the entries of
        repeated indices are summed (scipy's rule: duplicates add up); in COO form they are kept as
        duplicates, which scipy also treats as a sum. CUDA arrays are copied to the host first.

        Args:
            format: ``"csr"`` (default) or ``"coo"``.

        Raises:
            ValueError: dense_shape is not 2-D, or an unknown format.
        """
        import scipy.sparse

        if format not in _SCIPY_FORMATS:
            raise ValueError(f"format must be 'csr' or 'coo', got {format!r}")
        if len(self.dense_shape) != 2:
            raise ValueError(f"to_scipy needs a 2-D RowSparse, got dense_shape {self.dense_shape}")
        indices, values = self._host()
        n, n_cols = values.shape
        rows = np.repeat(indices.astype(np.int64), n_cols)
        cols = np.tile(np.arange(n_cols, dtype=np.int64), n)
        coo = scipy.sparse.coo_array((values.reshape(-1), (rows, cols)), shape=self.dense_shape)
        return coo if format == "coo" else coo.tocsr()

    def to_dense(self) -> np.ndarray:
        """The dense NumPy array: zeros, plus each distinct row's values summed as :meth:`merged` sums them
        (in order of appearance, in the values' dtype). CUDA arrays are copied to the host first."""
        indices, values = self._host()
        rows, summed = merge_duplicates(indices, values, self.dense_shape[0])
        dense = np.zeros(self.dense_shape, values.dtype)
        dense[rows] = summed
        return dense

    def merged(self) -> RowSparse:
        """An equivalent RowSparse with unique, ascending indices and each row's values summed, on the same
        device (see :func:`~optkernels.sparse.merge_duplicates` for the order of summation)."""
        rows, summed = merge_duplicates(self.indices, self.values, self.dense_shape[0])
        return RowSparse(rows, summed, self.dense_shape)

    def _host(self) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(self.values, np.ndarray):
            return np.asarray(self.indices), self.values
        shape, dtype = array_shape_dtype(self.values)
        values = _cuda.to_host(self.values) if math.prod(shape) else np.zeros(shape, dtype)
        return host_indices(self.indices), values


def _as_shape(dense_shape: Any) -> tuple[int, ...]:
    try:
        items = tuple(dense_shape)
    except TypeError:
        raise TypeError(f"dense_shape must be a sequence of ints, got {type(dense_shape).__name__}") from None
    shape = []
    for item in items:
        if isinstance(item, (bool, np.bool_)):
            raise TypeError("dense_shape must hold ints, got a bool")
        try:
            shape.append(operator.index(item))
        except TypeError:
            raise TypeError(f"dense_shape must hold ints, got {type(item).__name__}") from None
    if not shape:
        raise ValueError("dense_shape must have at least one dimension (the rows)")
    if any(d < 0 for d in shape):
        raise ValueError(f"dense_shape must be non-negative, got {tuple(shape)}")
    return tuple(shape)
