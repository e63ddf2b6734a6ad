"""Sparse Adagrad: MindSpore's ``ops.SparseApplyAdagrad`` and ``ops.SparseApplyAdagradV2`` (TensorFlow
``SparseApplyAdagrad(V2)``).

The per-element math is :func:`optkernels.kernels.adagrad.adagrad_math`, shared with the dense
``apply_adagrad`` (``epsilon = 0``) and ``apply_adagrad_v2``.
"""

from __future__ import annotations

from typing import Any

from ..kernels._checks import attr_bool, attr_float, check_range
from ..kernels.adagrad import adagrad_math
from ._call import check_sparse_call
from ._half_rows import half_rows
from ._rows import RowUpdate

_adagrad_rows = RowUpdate(adagrad_math)

_ARGS = r"""
    Args:
        var: parameter, updated in place (float32/float64, at least 1-D, C-contiguous, NumPy or CUDA).
        accum: accumulated squared gradients, same shape and dtype, updated in place if update_slots.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``, same dtype (read only); or a
            :class:`~optkernels.sparse.RowSparse` with ``dense_shape == var.shape`` and ``indices=None``.
        indices: 1-D int32/int64 row indices on var's device; duplicates allowed (summed).
        lr: float attribute, learning rate, >= 0.{epsilon}
        update_slots: whether ``accum`` is updated (it is used either way).
        use_locking: accepted for MindSpore compatibility.
        out_of_range: ``"raise"`` (default): an index outside ``[0, var.shape[0])`` (negative ones too) raises
            IndexError naming its value and position, before anything is written; ``"drop"``: such indices
            are skipped silently, as MindSpore's fused ops do.

    Returns:
        ``(var, accum)``, the updated arrays themselves.

    Raises:
        TypeError: wrong types, dtypes or devices; a non-float attribute (an int too, as MindSpore's check);
            a non-bool ``update_slots``/``use_locking``.
        ValueError: shapes, layout, 2-D indices, an attribute out of range or not finite.
        IndexError: an out-of-range index with ``out_of_range="raise"``.
"""

_MERGE = """Duplicate indices are merged first: their gradient rows are summed (in order of appearance, in the
    arrays' dtype; see :func:`~optkernels.sparse.merge_duplicates`), then each distinct row gets one update
    with its summed gradient g, element-wise (TensorFlow's SparseApplyAdagrad instead applies repeats one
    after another, an order-dependent result)"""


def _sparse_adagrad(var, accum, grad, indices, lr, epsilon, update_slots, use_locking, out_of_range):
    attr_bool("use_locking", use_locking)
    slots = attr_bool("update_slots", update_slots)
    lr_ = attr_float("lr", lr)
    check_range("lr", lr_, 0.0)
    call = check_sparse_call({"var": var, "accum": accum}, grad, indices, out_of_range)
    _adagrad_rows.launch(call, call.dtype.type(lr_), call.dtype.type(epsilon), slots)
    return var, accum


@half_rows("var", "accum")
def sparse_apply_adagrad(
    var: Any,
    accum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float,
    update_slots: bool = True,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    return _sparse_adagrad(var, accum, grad, indices, lr, 0.0, update_slots, use_locking, out_of_range)


@half_rows("var", "accum")
def sparse_apply_adagrad_v2(
    var: Any,
    accum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float,
    epsilon: float,
    update_slots: bool = True,
    use_locking: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    eps = attr_float("epsilon", epsilon)
    check_range("epsilon", eps, 0.0)
    return _sparse_adagrad(var, accum, grad, indices, lr, eps, update_slots, use_locking, out_of_range)


sparse_apply_adagrad.__doc__ = f"""Sparse Adagrad in place (MindSpore ``ops.SparseApplyAdagrad``).

    {_MERGE}::

        accum ← accum + g²          (only if update_slots)
        var   ← var − lr·g / sqrt(accum)

    i.e. :func:`optkernels.kernels.apply_adagrad`'s math (the same compiled function: no hidden 1e-6, as the
    docs, the GPU kernel and TensorFlow) on the merged rows; other rows are not touched; no indices: nothing
    changes. (MindSpore's CPU kernel computes ``var − g·(lr·(1/sqrt(accum)))``, which can differ in the last
    bit.)
""" + _ARGS.format(epsilon="")

sparse_apply_adagrad_v2.__doc__ = f"""Sparse Adagrad with epsilon in place (MindSpore
    ``ops.SparseApplyAdagradV2``).

    {_MERGE}::

        accum ← accum + g²          (only if update_slots)
        var   ← var − lr·g / (sqrt(accum) + epsilon)

    i.e. :func:`optkernels.kernels.apply_adagrad_v2`'s math (the same compiled function) on the merged rows;
    other rows are not touched; no indices: nothing changes.

    Documented difference from MindSpore's CPU kernel: epsilon is added outside the root, ``sqrt(accum) +
    epsilon``, as MindSpore's documentation and TensorFlow say; MindSpore's CPU SparseApplyAdagradV2 divides
    by ``sqrt(accum + epsilon)`` (observed to 5e-8 on inputs without duplicates), against its own docs.

    ``update_slots`` defaults to True, as MindSpore's ``SparseApplyAdagradV2(lr, epsilon, update_slots=True,
    use_locking=False)`` (documented so from 1.8 to 2.5) and TensorFlow.
""" + _ARGS.format(
    epsilon="\n        epsilon: float attribute (required), >= 0, added outside the square root."
)
