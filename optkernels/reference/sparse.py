"""Row-sparse optimizer ops (KERNELS.md sections 0.1, 3, 4, 12, 14) and the duplicate merge they share.

A row-sparse gradient is ``(grad, indices)`` with ``indices`` 1-D integers and
``grad.shape == (len(indices),) + var.shape[1:]``. Every op here first merges duplicates like MindSpore's
``Fused*`` CPU ops (:func:`merge_duplicates`): indices outside ``[0, var.shape[0])`` are dropped silently,
the gradient rows of a repeated index are summed, and ONE update is applied per distinct row with the summed
gradient. For the non-fused ``SparseApply*`` ops the docs call duplicates undefined behaviour (MindSpore's
CPU SparseApplyFtrl applies one step per occurrence and does not bounds-check, TensorFlow applies
duplicates sequentially); the reference deliberately uses the ``Fused*`` merge for all of them, as the
spec recommends, which also reproduces the published SparseApplyFtrl example (an out-of-range index
changes nothing). The gradient rows are summed in float64 in order of appearance (the CPU kernels sum in
float32).
"""

from __future__ import annotations

import operator

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_indices, as_scalar, as_scalars, check_same_shape, check_sparse, ieee
from .adagrad import _adagrad_math, _adagrad_v2_math
from .adam import _adam_lr_t
from .ftrl import _ftrl_math
from .proximal_adagrad import _proximal_adagrad_math

__all__ = [
    "merge_duplicates",
    "fused_sparse_adam",
    "fused_sparse_lazy_adam",
    "fused_sparse_ftrl",
    "sparse_apply_ftrl",
    "sparse_apply_ftrl_v2",
    "fused_sparse_proximal_adagrad",
    "sparse_apply_proximal_adagrad",
    "sparse_apply_adagrad",
    "sparse_apply_adagrad_v2",
]


def _merge(idx: np.ndarray, vals: np.ndarray, num_rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Merge on already converted inputs (int64 1-D indices, float64 values)."""
    if num_rows is not None:
        keep = (idx >= 0) & (idx < num_rows)
        idx = idx[keep]
        vals = vals[keep]
    uniq, inverse = np.unique(idx, return_inverse=True)
    summed = np.zeros((uniq.shape[0],) + vals.shape[1:], dtype=np.float64)
    np.add.at(summed, inverse.reshape(-1), vals)  # unbuffered, in order of appearance
    return uniq.astype(np.int64), summed


def merge_duplicates(
    indices: ArrayLike, values: ArrayLike, num_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Unique + segment-sum of a row-sparse gradient (the bucket reduce of MindSpore's ``Fused*`` ops).

    Rule::

        if num_rows is given: drop every k with indices[k] < 0 or indices[k] >= num_rows
        unique_indices = sorted distinct values of indices (ascending)
        summed_values[j] = sum of values[k] over all k with indices[k] == unique_indices[j]

    The sums are taken in float64, in order of appearance.

    Args:
        indices: 1-D integer row indices.
        values: gradient rows, ``values.shape[0] == len(indices)``.
        num_rows: number of rows of the target tensor; when given, out-of-range indices are dropped first.

    Returns:
        ``(unique_indices, summed_values)``: an int64 array sorted ascending and a float64 array of shape
        ``(len(unique_indices),) + values.shape[1:]``.
    """
    idx = as_indices(indices)
    vals = as_array(values, "values")
    if vals.ndim < 1 or vals.shape[0] != idx.shape[0]:
        raise ValueError(f"values must have len(indices) = {idx.shape[0]} rows, got shape {vals.shape}")
    n = None if num_rows is None else operator.index(num_rows)
    return _merge(idx, vals, n)


def _sparse_inputs(
    var: ArrayLike, slots: dict[str, ArrayLike], grad: ArrayLike, indices: ArrayLike
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """Convert and validate ``var``, its slots and the sparse gradient; merge the gradient."""
    var_ = as_array(var, "var")
    slot_arrays = {name: as_array(a, name) for name, a in slots.items()}
    check_same_shape("var", var_, **slot_arrays)
    g = as_array(grad, "grad")
    idx = as_indices(indices)
    check_sparse(var_, g, idx)
    rows, gsum = _merge(idx, g, var_.shape[0])
    return var_, list(slot_arrays.values()), rows, gsum


# --------------------------------------------------------------------------------------------------- Adam


@ieee
def fused_sparse_adam(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    beta1_power: ArrayLike,
    beta2_power: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-lazy sparse Adam, ``mindspore.ops.FusedSparseAdam``: every row of m, v and var changes.

    Update rule (after the merge: distinct rows r with summed gradient g_r)::

        lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        all rows:     m = beta1 * m;  v = beta2 * v
        rows r:       m[r] = m[r] + (1 - beta1) * g_r;  v[r] = v[r] + (1 - beta2) * g_r * g_r
        numerator M:  plain:    M = m                                   (all rows)
                      Nesterov: M[r] = beta1 * m[r] + (1 - beta1) * g_r (rows r)
                                M    = beta1 * m                        (other rows)
        all rows:     var = var - (lr_t * M) / (sqrt(v) + epsilon)

    Rows without gradient still move, since their (decayed) ``m`` is generally non-zero. The two-step
    moment update (decay, then add) is the CPU kernel's order.

    Deliberate differences from MindSpore's CPU kernel:

    * Nesterov: the CPU kernel reads an uninitialised scratch buffer for rows not in ``indices``; this
      reference uses the intended value ``beta1 * m`` (the Nesterov numerator with g = 0), which is what the
      device-side composite path of nn.Adam computes.
    * No ``beta1_power == 1`` check (the CPU kernel raises); the result is then ``inf``/``nan``.
    * MindSpore returns shape-(1,) dummies and updates in place; this reference returns the new arrays.

    Args:
        var: parameter tensor (at least 1-D).
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        beta1_power, beta2_power: ``beta1**t``, ``beta2**t`` (scalars).
        lr: learning rate (scalar).
        beta1, beta2: moment decays (scalars).
        epsilon: added to ``sqrt(v)`` (scalar).
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        use_locking: MindSpore attribute; no effect here.
        use_nesterov: use the Nesterov numerator.

    Returns:
        ``(var, m, v)``: new float64 arrays of ``var``'s shape.
    """
    var_, (m_, v_), rows, gs = _sparse_inputs(var, {"m": m, "v": v}, grad, indices)
    b1p, b2p, lr_, b1, b2, eps = as_scalars(
        beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon
    )

    lr_t = _adam_lr_t(lr_, b1p, b2p)
    m_new = b1 * m_
    v_new = b2 * v_
    m_new[rows] = m_new[rows] + (1.0 - b1) * gs
    v_new[rows] = v_new[rows] + (1.0 - b2) * (gs * gs)
    if use_nesterov:
        numer = b1 * m_new
        numer[rows] = b1 * m_new[rows] + (1.0 - b1) * gs
    else:
        numer = m_new
    var_new = var_ - (lr_t * numer) / (np.sqrt(v_new) + eps)
    return var_new, m_new, v_new


@ieee
def fused_sparse_lazy_adam(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    beta1_power: ArrayLike,
    beta2_power: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lazy sparse Adam, ``mindspore.ops.FusedSparseLazyAdam``: only rows in ``indices`` change.

    Update rule (after the merge: distinct rows r with summed gradient g_r)::

        lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)     # global beta powers, not per row
        rows r only:
            m[r]   = beta1 * m[r] + (1 - beta1) * g_r
            v[r]   = beta2 * v[r] + (1 - beta2) * g_r * g_r
            M      = m[r]   (plain)  or  beta1 * m[r] + (1 - beta1) * g_r   (Nesterov; new m[r])
            var[r] = var[r] - (lr_t * M) / (sqrt(v[r]) + epsilon)
        other rows: var, m, v unchanged.

    Deliberate differences from MindSpore's CPU kernel: no ``beta1_power == 1`` check (the kernel raises),
    and the new arrays are returned instead of shape-(1,) dummies.

    Args:
        var: parameter tensor (at least 1-D).
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        beta1_power, beta2_power: ``beta1**t``, ``beta2**t`` (scalars).
        lr: learning rate (scalar).
        beta1, beta2: moment decays (scalars).
        epsilon: added to ``sqrt(v)`` (scalar).
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        use_locking: MindSpore attribute; no effect here.
        use_nesterov: use the Nesterov numerator.

    Returns:
        ``(var, m, v)``: new float64 arrays of ``var``'s shape.
    """
    var_, (m_, v_), rows, gs = _sparse_inputs(var, {"m": m, "v": v}, grad, indices)
    b1p, b2p, lr_, b1, b2, eps = as_scalars(
        beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon
    )

    lr_t = _adam_lr_t(lr_, b1p, b2p)
    m_r = b1 * m_[rows] + (1.0 - b1) * gs
    v_r = b2 * v_[rows] + (1.0 - b2) * (gs * gs)
    numer = b1 * m_r + (1.0 - b1) * gs if use_nesterov else m_r
    var_[rows] = var_[rows] - (lr_t * numer) / (np.sqrt(v_r) + eps)
    m_[rows] = m_r
    v_[rows] = v_r
    return var_, m_, v_


# --------------------------------------------------------------------------------------------------- FTRL


def _sparse_ftrl(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    lr_power: ArrayLike,
    l2_shrinkage: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    var_, (accum_, linear_), rows, gs = _sparse_inputs(var, {"accum": accum, "linear": linear}, grad, indices)
    shrink = None if l2_shrinkage is None else as_scalar(l2_shrinkage, "l2_shrinkage")
    v_r, a_r, l_r = _ftrl_math(
        var_[rows],
        accum_[rows],
        linear_[rows],
        gs,
        as_scalar(lr, "lr"),
        as_scalar(l1, "l1"),
        as_scalar(l2, "l2"),
        as_scalar(lr_power, "lr_power"),
        shrink,
    )
    var_[rows] = v_r
    accum_[rows] = a_r
    linear_[rows] = l_r
    return var_, accum_, linear_


_FTRL_DOC = """{title}

    Update rule (after the merge; for each distinct row r with summed gradient g, element-wise,
    p = -lr_power)::

        accum_new = accum + g * g
        sigma     = (accum_new**p - accum**p) / lr
        linear    = linear + (g - sigma * var)            # C++ 'linear += g - sigma*var' (old var, old accum)
        var       = (sign(linear) * l1 - linear) / (accum_new**p / lr + 2 * l2)   if |linear| > l1, else 0
        accum     = accum_new

    i.e. :func:`apply_ftrl` applied to the merged rows; other rows are unchanged. ``x**p`` is ``sqrt(x)`` when
    ``lr_power == -0.5`` exactly, else ``pow(x, p)``. The association ``linear + (g - sigma * var)`` is
    that of MindSpore's sparse CPU kernel, one C++ statement
    ``linear[j] += summed_grad - (y - sqrt(accum[j])) / lr * var[j]`` (KERNELS.md section 12 words it as
    two steps, ``linear + g`` then ``- sigma * var``: the same value up to rounding).

    {extra}

    Args:
        var: parameter tensor (at least 1-D).
        accum: accumulator, same shape as ``var``.
        linear: linear term, same shape as ``var``.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        lr: MindSpore attribute, learning rate (> 0).
        l1: MindSpore attribute, L1 strength (>= 0).
        l2: MindSpore attribute, L2 strength (>= 0).
        lr_power: MindSpore attribute, learning-rate power (<= 0).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum, linear)``: new float64 arrays of ``var``'s shape.
    """


@ieee
def fused_sparse_ftrl(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    lr: float,
    l1: float,
    l2: float,
    lr_power: float,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power)


fused_sparse_ftrl.__doc__ = _FTRL_DOC.format(
    title="Sparse FTRL-Proximal, ``mindspore.ops.FusedSparseFtrl`` (merged duplicates, lazy).",
    extra="MindSpore returns shape-(1,) dummies and updates in place; this reference returns the new arrays.",
)


@ieee
def sparse_apply_ftrl(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    lr: float,
    l1: float,
    l2: float,
    lr_power: float,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power)


sparse_apply_ftrl.__doc__ = _FTRL_DOC.format(
    title="Sparse FTRL-Proximal, ``mindspore.ops.SparseApplyFtrl`` (same math as FusedSparseFtrl).",
    extra="Deliberate difference from MindSpore's CPU kernel, which applies one step per occurrence\n"
    "    of an index (racy above 16 indices) and writes out of bounds for an out-of-range index:\n"
    "    duplicates are summed and out-of-range indices dropped, as the spec recommends (the docs\n"
    "    call duplicates undefined and the published example shows an out-of-range index changing\n"
    "    nothing).",
)


@ieee
def sparse_apply_ftrl_v2(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    lr: float,
    l1: float,
    l2: float,
    l2_shrinkage: float,
    lr_power: float,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse FTRL-Proximal with L2 shrinkage, ``mindspore.ops.SparseApplyFtrlV2`` (TF SparseApplyFtrlV2).

    Update rule (after the merge of duplicates, as in :func:`sparse_apply_ftrl`; for each distinct row r
    with summed gradient g, element-wise, p = -lr_power)::

        g_shrink  = g + 2 * l2_shrinkage * var
        accum_new = accum + g * g                         # the plain (summed) gradient
        sigma     = (accum_new**p - accum**p) / lr
        linear    = linear + (g_shrink - sigma * var)
        var       = (sign(linear) * l1 - linear) / (accum_new**p / lr + 2 * l2)   if |linear| > l1, else 0
        accum     = accum_new

    i.e. :func:`apply_ftrl_v2` on the merged rows; other rows are unchanged. Duplicates are summed and
    out-of-range indices dropped, as for :func:`sparse_apply_ftrl` (TensorFlow applies repeats one after
    another).

    Args:
        var: parameter tensor (at least 1-D).
        accum: accumulator, same shape as ``var``.
        linear: linear term, same shape as ``var``.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        lr: MindSpore attribute, learning rate (> 0).
        l1: MindSpore attribute, L1 strength (>= 0).
        l2: MindSpore attribute, L2 strength of the quadratic term (>= 0).
        l2_shrinkage: MindSpore attribute, L2 shrinkage strength (>= 0).
        lr_power: MindSpore attribute, learning-rate power (<= 0).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum, linear)``: new float64 arrays of ``var``'s shape.
    """
    return _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power, l2_shrinkage)


# ------------------------------------------------------------------------------------ proximal Adagrad


def _sparse_proximal_adagrad(
    var: ArrayLike,
    accum: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    var_, (accum_,), rows, gs = _sparse_inputs(var, {"accum": accum}, grad, indices)
    v_r, a_r = _proximal_adagrad_math(
        var_[rows], accum_[rows], as_scalar(lr, "lr"), as_scalar(l1, "l1"), as_scalar(l2, "l2"), gs
    )
    var_[rows] = v_r
    accum_[rows] = a_r
    return var_, accum_


_PROX_DOC = """{title}

    Update rule (after the merge; for each distinct row r with summed gradient g, element-wise)::

        accum = accum + g * g
        alpha = lr / sqrt(accum)
        prox  = var - g * alpha
        if l1 > 0: var = sign(prox) * max(|prox| - alpha * l1, 0) / (1 + alpha * l2)
        else:      var = prox / (1 + alpha * l2)

    i.e. :func:`apply_proximal_adagrad` applied to the merged rows (adaptive ``alpha``, as every kernel and
    TensorFlow, not the raw ``lr`` of the docstring formula); other rows are unchanged.

    {extra}

    Args:
        var: parameter tensor (at least 1-D).
        accum: accumulator, same shape as ``var``.
        lr: learning rate (scalar).
        l1: L1 strength (scalar).
        l2: L2 strength (scalar).
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum)``: new float64 arrays of ``var``'s shape.
    """


@ieee
def fused_sparse_proximal_adagrad(
    var: ArrayLike,
    accum: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    return _sparse_proximal_adagrad(var, accum, lr, l1, l2, grad, indices)


fused_sparse_proximal_adagrad.__doc__ = _PROX_DOC.format(
    title="Sparse proximal Adagrad, ``mindspore.ops.FusedSparseProximalAdagrad`` (merged duplicates, lazy).",
    extra="MindSpore returns shape-(1,) dummies and updates in place; this reference returns the new arrays.",
)


@ieee
def sparse_apply_proximal_adagrad(
    var: ArrayLike,
    accum: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    return _sparse_proximal_adagrad(var, accum, lr, l1, l2, grad, indices)


sparse_apply_proximal_adagrad.__doc__ = _PROX_DOC.format(
    title="Sparse proximal Adagrad, ``mindspore.ops.SparseApplyProximalAdagrad``.",
    extra="Deliberate choice: the docs call duplicated indices undefined; this reference sums them and\n"
    "    drops out-of-range indices, exactly like FusedSparseProximalAdagrad (the spec's\n"
    "    recommendation).",
)


# --------------------------------------------------------------------------------------------- Adagrad


@ieee
def sparse_apply_adagrad(
    var: ArrayLike,
    accum: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    lr: float,
    update_slots: bool = True,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Sparse Adagrad, ``mindspore.ops.SparseApplyAdagrad`` (TF ``SparseApplyAdagrad``).

    Update rule (after the merge; for each distinct row r with summed gradient g, element-wise)::

        if update_slots: accum = accum + g * g
        var = var - lr * g / sqrt(accum)

    i.e. :func:`apply_adagrad` applied to the merged rows (no hidden 1e-6, following the docs/TF); other
    rows are unchanged. Duplicates are summed and out-of-range indices dropped (TensorFlow applies
    duplicates one after another and raises on an out-of-range index); see the module docstring.

    Args:
        var: parameter tensor (at least 1-D).
        accum: accumulator, same shape as ``var``.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices.
        lr: MindSpore attribute, learning rate.
        update_slots: MindSpore attribute (default True): whether to add ``g*g`` to ``accum``.
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum)``: new float64 arrays of ``var``'s shape.
    """
    var_, (accum_,), rows, gs = _sparse_inputs(var, {"accum": accum}, grad, indices)
    v_r, a_r = _adagrad_math(var_[rows], accum_[rows], as_scalar(lr, "lr"), gs, bool(update_slots))
    var_[rows] = v_r
    accum_[rows] = a_r
    return var_, accum_


@ieee
def sparse_apply_adagrad_v2(
    var: ArrayLike,
    accum: ArrayLike,
    grad: ArrayLike,
    indices: ArrayLike,
    *,
    lr: float,
    epsilon: float,
    update_slots: bool = True,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Sparse Adagrad with epsilon, ``mindspore.ops.SparseApplyAdagradV2``.

    Update rule (after the merge; for each distinct row r with summed gradient g, element-wise)::

        if update_slots: accum = accum + g * g
        var = var - lr * g / (sqrt(accum) + epsilon)

    i.e. :func:`apply_adagrad_v2` applied to the merged rows; other rows are unchanged. ``update_slots``
    defaults to True, as MindSpore's ``SparseApplyAdagradV2`` and TensorFlow. Epsilon is outside the root,
    as MindSpore's documentation and TensorFlow say; MindSpore's CPU kernel divides by
    ``sqrt(accum + epsilon)`` instead (observed to 5e-8 on inputs without duplicates): a documented
    difference.

    Args:
        var: parameter tensor (at least 1-D).
        accum: accumulator, same shape as ``var``.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``.
        indices: 1-D integer row indices (duplicates summed, out-of-range dropped).
        lr: MindSpore attribute, learning rate.
        epsilon: MindSpore attribute, added to ``sqrt(accum)``.
        update_slots: MindSpore attribute (default False).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum)``: new float64 arrays of ``var``'s shape.
    """
    var_, (accum_,), rows, gs = _sparse_inputs(var, {"accum": accum}, grad, indices)
    v_r, a_r = _adagrad_v2_math(
        var_[rows], accum_[rows], as_scalar(lr, "lr"), gs, as_scalar(epsilon, "epsilon"), bool(update_slots)
    )
    var_[rows] = v_r
    accum_[rows] = a_r
    return var_, accum_
