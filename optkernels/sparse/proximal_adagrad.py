"""Sparse proximal Adagrad: MindSpore's ``ops.FusedSparseProximalAdagrad`` and
``ops.SparseApplyProximalAdagrad``.

The per-element math is :func:`optkernels.kernels.proximal_adagrad.proximal_adagrad_math`, shared with the
dense ``apply_proximal_adagrad`` (``alpha = lr / sqrt(accum)``; MindSpore's sparse CPU kernel writes
``lr * (1 / sqrt(accum))``, which can differ from it in the last bit).
"""

from __future__ import annotations

from typing import Any

from ..kernels._checks import attr_bool
from ..kernels.adam import Scalar
from ..kernels.proximal_adagrad import proximal_adagrad_math, proximal_hyper
from ._call import check_sparse_call
from ._half_rows import half_rows
from ._rows import RowUpdate

_proximal_rows = RowUpdate(proximal_adagrad_math)

_PROX_DOC = r"""{title}

    Duplicate indices are merged first: their gradient rows are summed (in order of appearance, in the
    arrays' dtype; see :func:`~optkernels.sparse.merge_duplicates`), then each distinct row gets one step
    with its summed gradient g, element-wise::

        accum ← accum + g²
        alpha = lr / sqrt(accum)
        prox  = var − g·alpha
        var   ← sign(prox)·max(|prox| − alpha·l1, 0) / (1 + alpha·l2)     if l1 > 0
        var   ← prox / (1 + alpha·l2)                                     otherwise

    i.e. :func:`optkernels.kernels.apply_proximal_adagrad`'s math (the same compiled function; the adaptive
    ``alpha`` in the shrinkage, as every MindSpore kernel and TensorFlow) on the merged rows; other rows are
    not touched; no indices: nothing changes. Non-finite values propagate as in the float64 reference
    (NaN in var, accum or grad, an infinite grad or ``lr = inf`` give NaN, never 0).
    {extra}

    Args:
        var: parameter, updated in place (float32/float64, at least 1-D, C-contiguous, NumPy or CUDA).
        accum: accumulator, same shape and dtype, updated in place.
        lr: learning rate (scalar input), >= 0.
        l1: L1 strength (scalar input), >= 0.
        l2: L2 strength (scalar input), >= 0.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``, same dtype (read only); or a
            :class:`~optkernels.sparse.RowSparse` with ``dense_shape == var.shape`` and ``indices=None``.
        indices: 1-D int32/int64 row indices on var's device; duplicates allowed (summed).
        use_locking: accepted for MindSpore compatibility.
        out_of_range: ``"raise"`` (default): an index outside ``[0, var.shape[0])`` (negative ones too) raises
            IndexError naming its value and position, before anything is written; ``"drop"``: such indices
            are skipped silently, as MindSpore's fused ops do.

    Returns:
        ``(var, accum)``, the updated arrays themselves.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout, 2-D indices or a scalar out of range.
        IndexError: an out-of-range index with ``out_of_range="raise"``.
"""


def _sparse_proximal(var, accum, lr, l1, l2, grad, indices, use_locking, out_of_range):
    attr_bool("use_locking", use_locking)
    call = check_sparse_call({"var": var, "accum": accum}, grad, indices, out_of_range)
    _proximal_rows.launch(call, *proximal_hyper(call, lr, l1, l2))
    return var, accum


@half_rows("var", "accum")
def fused_sparse_proximal_adagrad(
    var: Any,
    accum: Any,
    lr: Scalar,
    l1: Scalar,
    l2: Scalar,
    grad: Any,
    indices: Any = None,
    *,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    return _sparse_proximal(var, accum, lr, l1, l2, grad, indices, use_locking, out_of_range)


@half_rows("var", "accum")
def sparse_apply_proximal_adagrad(
    var: Any,
    accum: Any,
    lr: Scalar,
    l1: Scalar,
    l2: Scalar,
    grad: Any,
    indices: Any = None,
    *,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    return _sparse_proximal(var, accum, lr, l1, l2, grad, indices, use_locking, out_of_range)


fused_sparse_proximal_adagrad.__doc__ = _PROX_DOC.format(
    title="Sparse proximal Adagrad in place (MindSpore ``ops.FusedSparseProximalAdagrad``; lazy, duplicates "
    "merged).",
    extra="\n    MindSpore returns shape-(1,) dummies; here the updated arrays are returned. Out-of-range\n"
    '    indices raise unless ``out_of_range="drop"`` (MindSpore drops them).',
)
sparse_apply_proximal_adagrad.__doc__ = _PROX_DOC.format(
    title="Sparse proximal Adagrad in place (MindSpore ``ops.SparseApplyProximalAdagrad``): the math of the "
    "fused op.",
    extra="\n    MindSpore's docs call duplicated indices undefined; here they are summed, as the fused op\n"
    "    does.",
)
