"""Adagrad: ``mindspore.ops.ApplyAdagrad`` and ``ApplyAdagradV2`` (KERNELS.md section 6)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_adagrad", "apply_adagrad_v2"]


def _adagrad_math(
    var: np.ndarray, accum: np.ndarray, lr: np.float64, g: np.ndarray, update_slots: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise Adagrad on float64 arrays (shared with the sparse ops). Returns new arrays."""
    accum_new = accum + g * g if update_slots else accum.copy()
    var_new = var - lr * g / np.sqrt(accum_new)
    return var_new, accum_new


def _adagrad_v2_math(
    var: np.ndarray, accum: np.ndarray, lr: np.float64, g: np.ndarray, epsilon: np.float64, update_slots: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise AdagradV2 on float64 arrays (shared with the sparse ops). Returns new arrays."""
    accum_new = accum + g * g if update_slots else accum.copy()
    var_new = var - lr * g / (np.sqrt(accum_new) + epsilon)
    return var_new, accum_new


@ieee
def apply_adagrad(
    var: ArrayLike, accum: ArrayLike, lr: ArrayLike, grad: ArrayLike, *, update_slots: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Adagrad step of ``mindspore.ops.ApplyAdagrad``.

    Update rule (element-wise, g = grad)::

        if update_slots: accum = accum + g * g
        var = var - lr * g / sqrt(accum)                  # accum after the optional update

    With ``update_slots=False`` the accumulator is returned unchanged but still used.

    Deliberate difference from MindSpore's CPU kernel: that kernel computes
    ``var - lr * g * (1 / sqrt(accum + 1e-6))`` with a hidden 1e-6 inside the square root. This reference
    follows the documented formula, MindSpore's GPU kernel and TensorFlow (no hidden epsilon), because
    that is the op's published contract. Consequence: ``accum == 0`` with ``g == 0`` gives ``0/0 = nan``.

    Args:
        var: parameter tensor.
        accum: accumulator of squared gradients, same shape as ``var``.
        lr: learning rate (scalar).
        grad: gradient, same shape as ``var``.
        update_slots: whether to add ``g*g`` to ``accum`` first.

    Returns:
        ``(var, accum)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    accum_ = as_array(accum, "accum")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, accum=accum_, grad=g)
    lr_ = as_scalar(lr, "lr")
    return _adagrad_math(var_, accum_, lr_, g, bool(update_slots))


@ieee
def apply_adagrad_v2(
    var: ArrayLike,
    accum: ArrayLike,
    lr: ArrayLike,
    grad: ArrayLike,
    *,
    epsilon: float,
    update_slots: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Adagrad step with epsilon, ``mindspore.ops.ApplyAdagradV2``.

    Update rule (element-wise, g = grad)::

        if update_slots: accum = accum + g * g
        var = var - lr * g / (sqrt(accum) + epsilon)      # epsilon outside the square root

    Deliberate difference from MindSpore's CPU kernel: when the denominator is exactly 0 that kernel adds
    1e-6 to it. This reference follows the docs and TensorFlow (no special case), so a zero denominator
    gives ``inf``/``nan`` by IEEE rules.

    Args:
        var: parameter tensor.
        accum: accumulator of squared gradients, same shape as ``var``.
        lr: learning rate (scalar).
        grad: gradient, same shape as ``var``.
        epsilon: MindSpore attribute (required), added to ``sqrt(accum)``.
        update_slots: whether to add ``g*g`` to ``accum`` first.

    Returns:
        ``(var, accum)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    accum_ = as_array(accum, "accum")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, accum=accum_, grad=g)
    lr_ = as_scalar(lr, "lr")
    eps = as_scalar(epsilon, "epsilon")
    return _adagrad_v2_math(var_, accum_, lr_, g, eps, bool(update_slots))
