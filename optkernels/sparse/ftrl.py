"""Sparse FTRL-proximal: MindSpore's ``ops.FusedSparseFtrl``, ``ops.SparseApplyFtrl`` and
``ops.SparseApplyFtrlV2`` (L2 shrinkage).

The per-element math is :func:`optkernels.kernels.ftrl.ftrl_math` (``ftrl_sqrt_math`` when lr_power == -0.5),
shared with the dense ``apply_ftrl``:
MindSpore's sparse CPU kernel computes the same expression in the same order
(``linear += g - (y_new - y_old)/lr * var``).
"""

from __future__ import annotations

from typing import Any

from ..kernels._checks import attr_bool, attr_float
from ..kernels.ftrl import (
    ftrl_hyper,
    ftrl_math,
    ftrl_sqrt_math,
    ftrl_v2_hyper,
    ftrl_v2_math,
    ftrl_v2_sqrt_math,
    ftrl_v2_variant,
    ftrl_variant,
)
from ._call import check_sparse_call
from ._half_rows import half_rows
from ._rows import RowUpdate

_ftrl_rows = RowUpdate(ftrl_math)
_ftrl_sqrt_rows = RowUpdate(ftrl_sqrt_math)
_ftrl_v2_rows = RowUpdate(ftrl_v2_math)
_ftrl_v2_sqrt_rows = RowUpdate(ftrl_v2_sqrt_math)

_FTRL_DOC = r"""{title}

    Duplicate indices are merged first: their gradient rows are summed (in order of appearance, in the
    arrays' dtype; see :func:`~optkernels.sparse.merge_duplicates`), then each distinct row gets one FTRL
    step with its summed gradient g, element-wise (p = −lr_power)::

        accum_new = accum + g²
        sigma     = (accum_new^p − accum^p) / lr
        linear    ← linear + (g − sigma·var)
        var       ← (sign(linear)·l1 − linear) / (accum_new^p / lr + 2·l2)   if |linear| > l1,  else 0
        accum     ← accum_new

    i.e. :func:`optkernels.kernels.apply_ftrl`'s math (the same compiled function) on the merged rows; other
    rows are not touched; no indices: nothing changes. ``x^p`` is a square root when ``lr_power == -0.5``.
    {extra}

    Args:
        var: parameter, updated in place (float32/float64, at least 1-D, C-contiguous, NumPy or CUDA).
        accum: accumulator, same shape and dtype, updated in place.
        linear: linear term, same shape and dtype, updated in place.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``, same dtype (read only); or a
            :class:`~optkernels.sparse.RowSparse` with ``dense_shape == var.shape`` and ``indices=None``.
        indices: 1-D int32/int64 row indices on var's device; duplicates allowed (summed).
        lr: float attribute, learning rate, > 0.
        l1: float attribute, L1 strength, >= 0.
        l2: float attribute, L2 strength, >= 0.
        lr_power: float attribute, <= 0 (-0.5 is standard FTRL; 0 a fixed learning rate).
        use_locking: accepted for MindSpore compatibility.
        out_of_range: ``"raise"`` (default): an index outside ``[0, var.shape[0])`` (negative ones too) raises
            IndexError naming its value and position, before anything is written; ``"drop"``: such indices
            are skipped silently, as MindSpore's fused ops do.

    Returns:
        ``(var, accum, linear)``, the updated arrays themselves.

    Raises:
        TypeError: wrong types, dtypes or devices; an attribute that is not a float (an int too, as
            MindSpore's check).
        ValueError: shapes, layout, 2-D indices, an attribute out of range (lr <= 0, l1 < 0, l2 < 0,
            lr_power > 0) or not finite.
        IndexError: an out-of-range index with ``out_of_range="raise"``.
"""


def _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power, use_locking, out_of_range):
    attr_bool("use_locking", use_locking)
    attrs = [
        attr_float(name, value)
        for name, value in (("lr", lr), ("l1", l1), ("l2", l2), ("lr_power", lr_power))
    ]
    call = check_sparse_call({"var": var, "accum": accum, "linear": linear}, grad, indices, out_of_range)
    rows, scalars = ftrl_variant(ftrl_hyper(call, *attrs), _ftrl_sqrt_rows, _ftrl_rows)
    rows.launch(call, *scalars)
    return var, accum, linear


@half_rows("var", "accum", "linear")
def fused_sparse_ftrl(
    var: Any,
    accum: Any,
    linear: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float,
    l1: float,
    l2: float,
    lr_power: float,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    return _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power, use_locking, out_of_range)


@half_rows("var", "accum", "linear")
def sparse_apply_ftrl(
    var: Any,
    accum: Any,
    linear: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float,
    l1: float,
    l2: float,
    lr_power: float,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    return _sparse_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power, use_locking, out_of_range)


fused_sparse_ftrl.__doc__ = _FTRL_DOC.format(
    title="Sparse FTRL-proximal in place (MindSpore ``ops.FusedSparseFtrl``; lazy, duplicates merged).",
    extra="\n    MindSpore returns shape-(1,) dummies; here the updated arrays are returned. Out-of-range\n"
    '    indices raise unless ``out_of_range="drop"`` (MindSpore drops them).',
)
sparse_apply_ftrl.__doc__ = _FTRL_DOC.format(
    title="Sparse FTRL-proximal in place (MindSpore ``ops.SparseApplyFtrl``): the math of FusedSparseFtrl.",
    extra="\n    MindSpore's docs call duplicated indices undefined (its CPU kernel applies one step per\n"
    "    occurrence and does not check bounds; TensorFlow applies repeats one after another): here\n"
    "    they are summed, as the fused op does. MindSpore's published example passes an out-of-range\n"
    '    index and shows no change: that needs ``out_of_range="drop"``.',
)


@half_rows("var", "accum", "linear")
def sparse_apply_ftrl_v2(
    var: Any,
    accum: Any,
    linear: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float,
    l1: float,
    l2: float,
    l2_shrinkage: float,
    lr_power: float,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    r"""Sparse FTRL-proximal with L2 shrinkage in place (MindSpore ``ops.SparseApplyFtrlV2``).

    Duplicate indices are merged first (their gradient rows summed in order of appearance, in the arrays'
    dtype, as :func:`sparse_apply_ftrl` does), then each distinct row gets one step with its summed
    gradient g, element-wise (p = −lr_power)::

        g_shrink  = g + 2·l2_shrinkage·var
        accum_new = accum + g²                              (the plain gradient)
        sigma     = (accum_new^p − accum^p) / lr
        linear    ← linear + (g_shrink − sigma·var)
        var       ← (sign(linear)·l1 − linear) / (accum_new^p / lr + 2·l2)   if |linear| > l1,  else 0
        accum     ← accum_new

    i.e. :func:`optkernels.kernels.apply_ftrl_v2`'s math (the same compiled function) on the merged rows;
    other rows are not touched. The shrinkage enters only linear's gradient, as in TensorFlow's
    ``SparseApplyFtrlV2``. MindSpore's docs call duplicated indices undefined (TensorFlow applies repeats
    one after another): here they are summed, as for the other sparse ops. MindSpore ran the op on Ascend
    only and deprecated it from 2.1 (in favour of ``SparseApplyFtrl``, which has no shrinkage); its docs
    give ``l2_shrinkage`` no range: here it must be >= 0, as TensorFlow requires.

    Args:
        var: parameter, updated in place (float32/float64, at least 1-D, C-contiguous, NumPy or CUDA).
        accum: accumulator, same shape and dtype, updated in place.
        linear: linear term, same shape and dtype, updated in place.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``, same dtype (read only); or a
            :class:`~optkernels.sparse.RowSparse` with ``dense_shape == var.shape`` and ``indices=None``.
        indices: 1-D int32/int64 row indices on var's device; duplicates allowed (summed).
        lr: float attribute, learning rate, > 0.
        l1: float attribute, L1 strength, >= 0.
        l2: float attribute, L2 strength of the quadratic term, >= 0.
        l2_shrinkage: float attribute, L2 shrinkage strength, >= 0.
        lr_power: float attribute, <= 0.
        use_locking: accepted for MindSpore compatibility.
        out_of_range: ``"raise"`` (default) or ``"drop"``, as in :func:`sparse_apply_ftrl`.

    Returns:
        ``(var, accum, linear)``, the updated arrays themselves.

    Raises:
        TypeError: wrong types, dtypes or devices; an attribute that is not a float (an int too).
        ValueError: shapes, layout, 2-D indices, an attribute out of range or not finite.
        IndexError: an out-of-range index with ``out_of_range="raise"``.
    """
    attr_bool("use_locking", use_locking)
    attrs = [
        attr_float(name, value)
        for name, value in (
            ("lr", lr),
            ("l1", l1),
            ("l2", l2),
            ("l2_shrinkage", l2_shrinkage),
            ("lr_power", lr_power),
        )
    ]
    call = check_sparse_call({"var": var, "accum": accum, "linear": linear}, grad, indices, out_of_range)
    rows, scalars = ftrl_v2_variant(ftrl_v2_hyper(call, *attrs), _ftrl_v2_sqrt_rows, _ftrl_v2_rows)
    rows.launch(call, *scalars)
    return var, accum, linear
