"""FTRL-Proximal: ``mindspore.ops.ApplyFtrl`` (KERNELS.md section 11) and TensorFlow's ``ApplyFtrlV2`` (L2
shrinkage); row math shared with the sparse ops."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_ftrl", "apply_ftrl_v2"]


def _ftrl_pow(x: np.ndarray, lr_power: np.float64) -> np.ndarray:
    """``x ** (-lr_power)``, with ``sqrt`` when ``lr_power == -0.5`` exactly (TensorFlow's fast path)."""
    if lr_power == -0.5:
        return np.sqrt(x)
    return np.power(x, -lr_power)


def _ftrl_math(
    var: np.ndarray,
    accum: np.ndarray,
    linear: np.ndarray,
    g: np.ndarray,
    lr: np.float64,
    l1: np.float64,
    l2: np.float64,
    lr_power: np.float64,
    l2_shrinkage: np.float64 | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Element-wise FTRL on float64 arrays (shared with the sparse ops). Returns new arrays. With
    ``l2_shrinkage`` (FTRL-V2), linear takes the gradient ``g + 2·l2_shrinkage·var``, accum the plain g."""
    accum_new = accum + g * g
    y_new = _ftrl_pow(accum_new, lr_power)
    sigma = (y_new - _ftrl_pow(accum, lr_power)) / lr
    g_linear = g if l2_shrinkage is None else g + (2.0 * l2_shrinkage) * var
    linear_new = linear + (g_linear - sigma * var)
    numer = np.sign(linear_new) * l1 - linear_new
    denom = y_new / lr + 2.0 * l2
    var_new = np.where(np.abs(linear_new) > l1, numer / denom, 0.0)
    return var_new, accum_new, linear_new


@ieee
def apply_ftrl(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    lr_power: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FTRL-Proximal step of ``mindspore.ops.ApplyFtrl`` (TF ``ApplyFtrl``).

    Update rule (element-wise, g = grad, p = -lr_power >= 0)::

        accum_new = accum + g * g
        sigma     = (accum_new**p - accum**p) / lr
        linear    = linear + (g - sigma * var)            # association of C++ 'linear += g - sigma*var'
        var       = (sign(linear) * l1 - linear) / (accum_new**p / lr + 2 * l2)   if |linear| > l1
                    0                                                           otherwise
        accum     = accum_new

    ``x**p`` is computed as ``sqrt(x)`` when ``lr_power == -0.5`` exactly (TensorFlow's fast path), else as
    ``pow(x, p)``. ``lr_power == 0`` gives ``sigma = 0`` and a fixed learning rate.

    Deliberate difference from MindSpore's dense CPU kernel (2.0-alpha): that kernel uses ``+l1`` whenever
    ``linear != 0`` instead of ``sign(linear) * l1``; this reference uses the sign, as TensorFlow, the GPU
    and Ascend kernels and MindSpore's own sparse CPU kernel do (visible only when ``l1 > 0`` and
    ``linear < 0``).

    Args:
        var: parameter tensor.
        accum: accumulator of squared gradients, same shape as ``var``.
        linear: linear term, same shape as ``var``.
        grad: gradient, same shape as ``var``.
        lr: learning rate (scalar, > 0).
        l1: L1 strength (scalar, >= 0).
        l2: L2 strength (scalar, >= 0).
        lr_power: learning-rate power (scalar, <= 0; -0.5 is standard FTRL).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum, linear)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    accum_ = as_array(accum, "accum")
    linear_ = as_array(linear, "linear")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, accum=accum_, linear=linear_, grad=g)
    return _ftrl_math(
        var_,
        accum_,
        linear_,
        g,
        as_scalar(lr, "lr"),
        as_scalar(l1, "l1"),
        as_scalar(l2, "l2"),
        as_scalar(lr_power, "lr_power"),
    )


@ieee
def apply_ftrl_v2(
    var: ArrayLike,
    accum: ArrayLike,
    linear: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    l2_shrinkage: ArrayLike,
    lr_power: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FTRL-Proximal with L2 shrinkage, TensorFlow ``ApplyFtrlV2`` (its input order).

    Update rule (element-wise, g = grad, p = -lr_power >= 0)::

        g_shrink  = g + 2 * l2_shrinkage * var
        accum_new = accum + g * g                         # the plain gradient
        sigma     = (accum_new**p - accum**p) / lr
        linear    = linear + (g_shrink - sigma * var)
        var       = (sign(linear) * l1 - linear) / (accum_new**p / lr + 2 * l2)   if |linear| > l1
                    0                                                           otherwise
        accum     = accum_new

    The shrinkage is not added to the quadratic term (as in TensorFlow's kernel). ``x**p`` is ``sqrt(x)``
    when ``lr_power == -0.5`` exactly.

    Args:
        var: parameter tensor.
        accum: accumulator of squared gradients, same shape as ``var``.
        linear: linear term, same shape as ``var``.
        grad: gradient, same shape as ``var``.
        lr: learning rate (scalar, > 0).
        l1: L1 strength (scalar, >= 0).
        l2: L2 strength of the quadratic term (scalar, >= 0).
        l2_shrinkage: L2 shrinkage strength (scalar, >= 0).
        lr_power: learning-rate power (scalar, <= 0).
        use_locking: no effect here.

    Returns:
        ``(var, accum, linear)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    accum_ = as_array(accum, "accum")
    linear_ = as_array(linear, "linear")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, accum=accum_, linear=linear_, grad=g)
    return _ftrl_math(
        var_,
        accum_,
        linear_,
        g,
        as_scalar(lr, "lr"),
        as_scalar(l1, "l1"),
        as_scalar(l2, "l2"),
        as_scalar(lr_power, "lr_power"),
        as_scalar(l2_shrinkage, "l2_shrinkage"),
    )
