"""Row-wise Adagrad: FBGEMM's ``EXACT_ROWWISE_ADAGRAD`` (LOWBIT.md §8), one accumulator per row, for dense
and row-sparse gradients, CPU and CUDA.

Each row is one loop iteration (one CUDA thread), which sums its squares left to right in the arrays'
dtype: the result does not depend on the thread count. Duplicate indices are merged first
(:func:`~optkernels.sparse.merge_duplicates`), so each distinct row is updated once with its summed gradient
(FBGEMM's "exact" variant).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import _array_facts, _flatten, check_arrays, check_range, plain_array, to_scalar
from ..kernels._elementwise import ZERO, elementwise
from ..kernels._upcast import via_float32
from ._call import unpack_grad
from .merge import merge_duplicates
from .row_sparse import RowSparse

MODES = ("none", "l2", "decoupled")
"""``weight_decay_mode`` values: FBGEMM's ``WeightDecayMode`` NONE, L2 and DECOUPLE."""


@elementwise
def _row(j, var, momentum, grad, rows, dense, row_len, d, lr, eps, wd, l2, decay, max_norm, one):
    # Row r = rows[j] (j itself for a dense gradient) with gradient row j.
    gbase = j * row_len
    base = gbase
    if not dense:
        base = rows[j] * row_len
    total = ZERO
    for c in range(row_len):
        g = grad[gbase + c]
        if l2:
            g = g + wd * var[base + c]
        total += g * g
    r = base // row_len
    h = momentum[r] + total / d
    momentum[r] = h
    mult = lr / (math.sqrt(h) + eps)
    corr = one - mult * wd if l2 else decay
    norm = ZERO
    for c in range(row_len):
        w = corr * var[base + c] - mult * grad[gbase + c]
        var[base + c] = w
        norm += w * w
    if max_norm > ZERO:
        norm = math.sqrt(norm)
        if norm > max_norm:
            scale = max_norm / norm
            for c in range(row_len):
                var[base + c] = var[base + c] * scale


def _check_momentum(momentum: Any, device: str, dtype: np.dtype, rows: int) -> Any:
    dev, shape, mdtype, contiguous, writeable, _ = _array_facts("momentum", momentum)
    if dev != device:
        raise TypeError(f"momentum is a {dev} array but var is a {device} array")
    if mdtype != dtype:
        raise TypeError(f"momentum must have var's dtype {dtype}, got {mdtype}")
    if tuple(shape) != (rows,):
        raise ValueError(f"momentum must have shape (var.shape[0],) = ({rows},), got {tuple(shape)}")
    if not writeable or not contiguous:
        raise ValueError("momentum must be writeable and C-contiguous")
    return _flatten(plain_array("momentum", momentum), device)


@via_float32()
def rowwise_adagrad(
    var: Any,
    momentum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float = 0.01,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mode: str = "none",
    max_norm: float = 0.0,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    r"""FBGEMM's exact row-wise Adagrad in place (``EXACT_ROWWISE_ADAGRAD``, LOWBIT.md §8.2).

    For each updated row :math:`i` with gradient row :math:`g` of length :math:`D`:

    .. math::

        \hat g = g + \mathrm{wd}\,w \ (\text{l2}),\ \text{else } g \qquad
        h_i \leftarrow h_i + \tfrac{1}{D}\textstyle\sum_d \hat g_d^2 \qquad
        \mu = \frac{\mathrm{lr}}{\sqrt{h_i} + \epsilon}

        w \leftarrow c\,w - \mu\,g, \quad c = 1 - \mu\,\mathrm{wd}\ (\text{l2}),\
        1 - \mathrm{lr}\,\mathrm{wd}\ (\text{decoupled}),\ 1\ (\text{none})

    then, if ``max_norm > 0`` and :math:`\|w\|_2 > \mathrm{max\_norm}`, :math:`w \leftarrow
    w\cdot\mathrm{max\_norm}/\|w\|_2` (FBGEMM's GPU kernel; its CPU kernel has no max_norm). Sums run left to
    right over the row, in the arrays' dtype. A dense gradient updates every row; a row-sparse one only its
    distinct indices, duplicates summed first (in order of appearance).

    Parameters
    ----------
    var : array
        The table, at least 1-D (rows along axis 0), float32/float64 (float16/bfloat16: computed on float32
        copies, rounded once), NumPy or CUDA; updated in place.
    momentum : array
        One accumulator per row (FBGEMM's ``momentum1``, state ``"sum"``), shape ``(var.shape[0],)``, var's
        dtype; updated in place.
    grad : array or RowSparse
        Dense: var's shape. Row-sparse: rows ``(len(indices),) + var.shape[1:]`` with ``indices``, or a
        :class:`~optkernels.sparse.RowSparse` (``indices=None``).
    indices : array, optional
        1-D int32/int64 row indices of a row-sparse gradient; None for a dense one.
    lr, eps : float
        Learning rate (>= 0) and the epsilon outside the square root (>= 0). FBGEMM's defaults 0.01, 1e-8.
    weight_decay : float
        >= 0.
    weight_decay_mode : str
        ``"none"``, ``"l2"`` or ``"decoupled"``.
    max_norm : float
        >= 0; 0 disables the row-norm clip.
    out_of_range : str
        ``"raise"`` (IndexError before anything is written) or ``"drop"``.

    Returns
    -------
    tuple
        ``(var, momentum)``, the updated arrays themselves.

    Raises
    ------
    TypeError
        Wrong types, dtypes or devices.
    ValueError
        Shapes, layout, a hyper-parameter out of range, an unknown ``weight_decay_mode``.
    IndexError
        An out-of-range index with ``out_of_range="raise"``.
    """
    if weight_decay_mode not in MODES:
        raise ValueError(f"weight_decay_mode must be one of {MODES}, got {weight_decay_mode!r}")
    dense = indices is None and not isinstance(grad, RowSparse)
    values = grad
    if not dense:
        values, indices = unpack_grad(grad, indices, tuple(_array_facts("var", var)[1]))
    batch = check_arrays({"var": var}, {"grad": values}, same_shape=dense)
    if len(batch.shape) == 0:
        raise ValueError("var must be at least 1-D (rows along axis 0), got a 0-d array")
    rows = batch.shape[0]
    row_len = math.prod(batch.shape[1:])
    if not dense and tuple(getattr(values, "shape", ())[1:]) != tuple(batch.shape[1:]):
        raise ValueError(
            f"grad rows must have shape var.shape[1:] = {tuple(batch.shape[1:])}, got "
            f"{tuple(values.shape[1:])}"
        )
    flat_momentum = _check_momentum(momentum, batch.device, batch.storage, rows)
    scalars = {}
    for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay), ("max_norm", max_norm)):
        scalars[name] = to_scalar(name, value, batch.dtype)
        check_range(name, scalars[name], 0.0)
    t = batch.dtype.type
    lr_, wd = scalars["lr"], scalars["weight_decay"]
    decay = t(1) - lr_ * wd if weight_decay_mode == "decoupled" else t(1)
    l2 = weight_decay_mode == "l2"
    flat_var = batch.flat[0]
    if dense:
        n, flat_grad, unique = rows, batch.flat[1], np.zeros(1, np.int64)
        if batch.device == "cuda":
            unique = _cuda.module().to_device(unique)
    else:
        unique, merged = merge_duplicates(indices, values, rows, out_of_range=out_of_range)
        n = unique.shape[0]
        flat_grad = _flatten(merged, batch.device)
    if n and row_len:
        _row.launch(
            batch.device,
            n,
            flat_var,
            flat_momentum,
            flat_grad,
            unique,
            dense,
            row_len,
            t(row_len),
            lr_,
            scalars["eps"],
            wd,
            l2,
            decay,
            scalars["max_norm"],
            t(1),
        )
    return var, momentum
