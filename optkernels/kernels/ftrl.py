"""FTRL-proximal: MindSpore's ``ops.ApplyFtrl`` (TensorFlow ``ApplyFtrl``) and TensorFlow's ``ApplyFtrlV2``
(FTRL with L2 shrinkage), from one shared per-element step (:func:`_ftrl_shrink`)."""

from __future__ import annotations

import math
from typing import Any

from ._checks import attr_bool, check_arrays, check_range
from ._elementwise import ZERO, elementwise, scalar_math
from .adam import Scalar


@scalar_math
def _ftrl_shrink(w, accum_new, linear, g, lr, l1, two_l2, y_new, y_old):
    """The FTRL step once ``y_new = accum_new^p`` and ``y_old = accum^p`` are known."""
    sigma = (y_new - y_old) / lr
    lin = linear + (g - sigma * w)
    if abs(lin) > l1:
        signed_l1 = l1 if lin > 0 else -l1
        w_new = (signed_l1 - lin) / (y_new / lr + two_l2)
    else:
        w_new = ZERO
    return w_new, accum_new, lin


@scalar_math
def ftrl_math(w, accum, linear, g, lr, l1, two_l2, neg_lr_power):
    """One FTRL-proximal step of one element, any ``lr_power`` (``x^p`` with pow): returns ``(w, accum,
    linear)`` new (see :func:`apply_ftrl`). Shared by :func:`apply_ftrl` and the row-sparse FTRL ops
    (MindSpore's sparse CPU kernel computes the same expression, ``linear += g - sigma*var``, in this order)."""
    accum_new = accum + g * g
    return _ftrl_shrink(w, accum_new, linear, g, lr, l1, two_l2, accum_new**neg_lr_power, accum**neg_lr_power)


@scalar_math
def ftrl_sqrt_math(w, accum, linear, g, lr, l1, two_l2):
    """:func:`ftrl_math` for ``lr_power == -0.5`` (standard FTRL): ``x^0.5`` as a square root, as TensorFlow
    does. A separate function, not a branch, so that each loop compiles without the other's pow calls."""
    accum_new = accum + g * g
    return _ftrl_shrink(w, accum_new, linear, g, lr, l1, two_l2, math.sqrt(accum_new), math.sqrt(accum))


@scalar_math
def ftrl_v2_math(w, accum, linear, g, lr, l1, two_l2, neg_lr_power, two_shrinkage):
    """:func:`ftrl_math` with L2 shrinkage (TensorFlow ``ApplyFtrlV2``): ``linear`` takes the gradient
    ``g + 2·l2_shrinkage·w``, ``accum`` the plain ``g``. A separate entry, so that v1's bits (-0.0, NaN, inf
    gradients included) never see the extra term."""
    accum_new = accum + g * g
    return _ftrl_shrink(
        w,
        accum_new,
        linear,
        g + two_shrinkage * w,
        lr,
        l1,
        two_l2,
        accum_new**neg_lr_power,
        accum**neg_lr_power,
    )


@scalar_math
def ftrl_v2_sqrt_math(w, accum, linear, g, lr, l1, two_l2, two_shrinkage):
    """:func:`ftrl_v2_math` for ``lr_power == -0.5`` (square roots, as :func:`ftrl_sqrt_math`)."""
    accum_new = accum + g * g
    return _ftrl_shrink(
        w, accum_new, linear, g + two_shrinkage * w, lr, l1, two_l2, math.sqrt(accum_new), math.sqrt(accum)
    )


@elementwise
def _ftrl(i, var, accum, linear, grad, lr, l1, two_l2, neg_lr_power):
    var[i], accum[i], linear[i] = ftrl_math(
        var[i], accum[i], linear[i], grad[i], lr, l1, two_l2, neg_lr_power
    )


@elementwise
def _ftrl_sqrt(i, var, accum, linear, grad, lr, l1, two_l2):
    var[i], accum[i], linear[i] = ftrl_sqrt_math(var[i], accum[i], linear[i], grad[i], lr, l1, two_l2)


@elementwise
def _ftrl_v2(i, var, accum, linear, grad, lr, l1, two_l2, neg_lr_power, two_shrinkage):
    var[i], accum[i], linear[i] = ftrl_v2_math(
        var[i], accum[i], linear[i], grad[i], lr, l1, two_l2, neg_lr_power, two_shrinkage
    )


@elementwise
def _ftrl_v2_sqrt(i, var, accum, linear, grad, lr, l1, two_l2, two_shrinkage):
    var[i], accum[i], linear[i] = ftrl_v2_sqrt_math(
        var[i], accum[i], linear[i], grad[i], lr, l1, two_l2, two_shrinkage
    )


def ftrl_variant(hyper: tuple, sqrt_variant, pow_variant) -> tuple:
    """(the variant to run, its scalars) for :func:`ftrl_hyper`'s output: the square-root variant when
    ``lr_power == -0.5``, else the pow one (which also takes ``-lr_power``)."""
    lr, l1, two_l2, neg_lr_power, half_power = hyper
    return (sqrt_variant, (lr, l1, two_l2)) if half_power else (pow_variant, (lr, l1, two_l2, neg_lr_power))


def ftrl_hyper(batch, lr: Scalar, l1: Scalar, l2: Scalar, lr_power: Scalar) -> tuple:
    """Validated FTRL scalars in the batch dtype: (lr, l1, 2·l2, −lr_power, lr_power == −0.5)."""
    lr_ = batch.scalar("lr", lr)
    l1_ = batch.scalar("l1", l1)
    l2_ = batch.scalar("l2", l2)
    power = batch.scalar("lr_power", lr_power)
    check_range("lr", lr_, 0.0, low_open=True)
    check_range("l1", l1_, 0.0)
    check_range("l2", l2_, 0.0)
    check_range("lr_power", power, None, 0.0)
    return lr_, l1_, l2_ + l2_, -power, bool(power == -0.5)


def ftrl_v2_hyper(batch, lr: Scalar, l1: Scalar, l2: Scalar, l2_shrinkage: Scalar, lr_power: Scalar) -> tuple:
    """:func:`ftrl_hyper` for FTRL-V2, then 2·l2_shrinkage (>= 0) appended."""
    lr_, l1_, two_l2, neg_power, half = ftrl_hyper(batch, lr, l1, l2, lr_power)
    shrink = batch.scalar("l2_shrinkage", l2_shrinkage)
    check_range("l2_shrinkage", shrink, 0.0)
    return lr_, l1_, two_l2, neg_power, half, shrink + shrink


def ftrl_v2_variant(hyper: tuple, sqrt_variant, pow_variant) -> tuple:
    """:func:`ftrl_variant` for :func:`ftrl_v2_hyper`'s output (2·l2_shrinkage is the last scalar)."""
    kernel, scalars = ftrl_variant(hyper[:5], sqrt_variant, pow_variant)
    return kernel, scalars + (hyper[5],)


def apply_ftrl(
    var: Any,
    accum: Any,
    linear: Any,
    grad: Any,
    lr: Scalar,
    l1: Scalar,
    l2: Scalar,
    lr_power: Scalar,
    *,
    use_locking: bool = False,
) -> tuple[Any, Any, Any]:
    r"""FTRL-proximal update in place (MindSpore ``ops.ApplyFtrl``, TensorFlow ``ApplyFtrl``)::

        p          = −lr_power
        accum_new  = accum + g²
        sigma      = (accum_new^p − accum^p) / lr
        linear     ← linear + (g − sigma·var)
        var        ← (sign(linear)·l1 − linear) / (accum_new^p / lr + 2·l2)   if |linear| > l1,  else 0
        accum      ← accum_new

    ``x^0.5`` is computed with sqrt when ``lr_power == -0.5`` (the common case), with pow otherwise.
    Follows the documentation, TensorFlow and MindSpore's GPU and sparse kernels in using
    ``sign(linear)``: MindSpore's dense CPU kernel (2.0-alpha) takes ``+l1`` whenever linear is non-zero,
    which differs when ``l1 > 0`` and ``linear < 0``.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accum, linear: slots, same shape and dtype, updated in place.
        grad: the gradient (read only).
        lr: learning rate, > 0.
        l1: L1 strength, >= 0.
        l2: L2 strength, >= 0.
        lr_power: <= 0 (0 gives a fixed learning rate).
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, accum, linear)`` (MindSpore returns only var).

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range (e.g. ``lr_power > 0``).
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays({"var": var, "accum": accum, "linear": linear}, {"grad": grad})
    kernel, scalars = ftrl_variant(ftrl_hyper(batch, lr, l1, l2, lr_power), _ftrl_sqrt, _ftrl)
    kernel.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, accum, linear


def apply_ftrl_v2(
    var: Any,
    accum: Any,
    linear: Any,
    grad: Any,
    lr: Scalar,
    l1: Scalar,
    l2: Scalar,
    l2_shrinkage: Scalar,
    lr_power: Scalar,
    *,
    use_locking: bool = False,
) -> tuple[Any, Any, Any]:
    r"""FTRL-proximal with L2 shrinkage in place (TensorFlow ``ApplyFtrlV2``, its input order)::

        p          = −lr_power
        g_shrink   = g + 2·l2_shrinkage·var
        accum_new  = accum + g²                                 (the plain gradient)
        sigma      = (accum_new^p − accum^p) / lr
        linear     ← linear + (g_shrink − sigma·var)
        var        ← (sign(linear)·l1 − linear) / (accum_new^p / lr + 2·l2)   if |linear| > l1,  else 0
        accum      ← accum_new

    The shrinkage enters only the gradient of ``linear`` (not the quadratic term), as in TensorFlow. With
    ``l2_shrinkage == 0`` the result equals :func:`apply_ftrl`'s. ``x^0.5`` is a square root when
    ``lr_power == -0.5``. MindSpore has no dense FTRL-V2 primitive (only ``SparseApplyFtrlV2``).

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accum, linear: slots, same shape and dtype, updated in place.
        grad: the gradient (read only).
        lr: learning rate, > 0.
        l1: L1 strength, >= 0.
        l2: L2 strength (of the quadratic term), >= 0.
        l2_shrinkage: L2 shrinkage strength (added to the gradient of linear), >= 0.
        lr_power: <= 0 (0 gives a fixed learning rate).
        use_locking: accepted for compatibility.

    Returns:
        ``(var, accum, linear)``.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays({"var": var, "accum": accum, "linear": linear}, {"grad": grad})
    kernel, scalars = ftrl_v2_variant(
        ftrl_v2_hyper(batch, lr, l1, l2, l2_shrinkage, lr_power), _ftrl_v2_sqrt, _ftrl_v2
    )
    kernel.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, accum, linear
