"""Proximal Adagrad: MindSpore's ``ops.ApplyProximalAdagrad`` (TensorFlow ``ApplyProximalAdagrad``)."""

from __future__ import annotations

import math
from typing import Any

from ._checks import attr_bool, check_arrays, check_range
from ._elementwise import ZERO, elementwise, scalar_math
from .adam import Scalar


@scalar_math
def proximal_adagrad_math(w, accum, g, lr, l1, l2, one):
    """One proximal-Adagrad step of one element: returns ``(w, accum)`` new (see
    :func:`apply_proximal_adagrad`). Shared by the dense and the row-sparse ops. ``one``: 1 in the dtype."""
    a = accum + g * g
    alpha = lr / math.sqrt(a)
    prox = w - g * alpha
    if l1 > 0:
        shrunk = abs(prox) - alpha * l1
        if shrunk <= 0:
            w_new = ZERO
        else:  # shrunk > 0, or NaN (NaN in var, accum, grad or alpha), which propagates
            w_new = (shrunk if prox > 0 else -shrunk) / (one + alpha * l2)
    else:
        w_new = prox / (one + alpha * l2)
    return w_new, a


@elementwise
def _proximal_adagrad(i, var, accum, grad, lr, l1, l2, one):
    var[i], accum[i] = proximal_adagrad_math(var[i], accum[i], grad[i], lr, l1, l2, one)


def proximal_hyper(batch, lr: Scalar, l1: Scalar, l2: Scalar) -> tuple:
    """Validated proximal-Adagrad scalars in the batch dtype: (lr, l1, l2, 1)."""
    lr_ = batch.scalar("lr", lr)
    l1_ = batch.scalar("l1", l1)
    l2_ = batch.scalar("l2", l2)
    check_range("lr", lr_, 0.0)
    check_range("l1", l1_, 0.0)
    check_range("l2", l2_, 0.0)
    return lr_, l1_, l2_, batch.dtype.type(1)


def apply_proximal_adagrad(
    var: Any, accum: Any, lr: Scalar, l1: Scalar, l2: Scalar, grad: Any, *, use_locking: bool = False
) -> tuple[Any, Any]:
    r"""Proximal Adagrad update in place (MindSpore ``ops.ApplyProximalAdagrad``)::

        accum ← accum + g²
        alpha = lr / sqrt(accum)
        prox  = var − g·alpha
        var   ← sign(prox)·max(|prox| − alpha·l1, 0) / (1 + alpha·l2)     if l1 > 0
        var   ← prox / (1 + alpha·l2)                                     otherwise

    The shrinkage uses the adaptive rate ``alpha``, as every MindSpore kernel and TensorFlow do (the
    MindSpore docstring writes the raw lr there). ``accum == 0`` after the update divides by zero.
    Non-finite values propagate as in the float64 reference (README "Non-finite values"): NaN in var, accum
    or grad, an infinite grad or ``lr = inf`` give NaN, never 0 (``max(NaN, 0)`` is NaN, as ``np.maximum``).

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accum: accumulator, same shape and dtype, updated in place.
        lr: learning rate, >= 0.
        l1: L1 strength, >= 0.
        l2: L2 strength, >= 0.
        grad: the gradient (read only).
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, accum)``.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays({"var": var, "accum": accum}, {"grad": grad})
    _proximal_adagrad.launch(batch.device, batch.size, *batch.flat, *proximal_hyper(batch, lr, l1, l2))
    return var, accum
