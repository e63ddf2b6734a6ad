"""torch Adafactor's factored update of a matrix (or a batch of matrices) as a loop over rows:
``U[r, j] = g[r, j]/√max(R[r]·C[j]/mean(R), ε1²)``, computed by the element function of
:data:`~optkernels.kernels.torch_adafactor._adafactor_factored` (the same bits), with the row's factor and
the matrix's mean read once per row instead of an integer division per element, so the inner loop over a
row's columns vectorises."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ._elementwise import _JIT_OPTIONS
from ._threading import for_this_process, parallel_launch
from .torch_adafactor import _factored_element
from .torch_family import SERIAL_BELOW

__all__ = ["factored_update"]


@numba.njit(inline="always", **_JIT_OPTIONS)
def _row(r, update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one):
    b = r // n_rows
    row, mean = row_var[r], row_means[b]
    base, cols = r * n_cols, b * n_cols
    for j in range(n_cols):
        update[base + j] = _factored_element(
            row, col_var[cols + j], mean, grad[base + j], maximize, eps1_sq, one
        )


@numba.njit(cache=True, **_JIT_OPTIONS)
def _rows_serial(update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one):
    for r in range(row_var.shape[0]):
        _row(r, update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one)


@numba.njit(cache=True, parallel=True, **_JIT_OPTIONS)
def _rows_parallel(update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one):
    for r in numba.prange(row_var.shape[0]):
        _row(r, update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one)


def factored_update(
    update: np.ndarray,
    grad: np.ndarray,
    row_var: np.ndarray,
    col_var: np.ndarray,
    row_means: np.ndarray,
    n_rows: int,
    n_cols: int,
    maximize: bool,
    eps1_sq: Any,
    one: Any,
) -> None:
    r"""``update ← g/√max(R·C/mean(R), ε1²)`` (``g ← −g`` with ``maximize``) over flat C-ordered CPU arrays of
    one dtype: ``update`` and ``grad`` of ``B·n_rows·n_cols`` elements, ``row_var`` of ``B·n_rows``,
    ``col_var`` of ``B·n_cols``, ``row_means`` (the clamped mean of each matrix's ``row_var``) of ``B``;
    ``eps1_sq`` and ``one`` scalars of that dtype. Serial below
    :data:`~optkernels.kernels.torch_family.SERIAL_BELOW` elements, parallel over rows above. Nothing is
    checked (the caller's arrays come from checked tensors)."""
    args = (update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one)
    if update.size < SERIAL_BELOW:
        _rows_serial(*args)
        return
    with parallel_launch():
        for_this_process(_rows_parallel)(*args)
