"""RMSProp: ``mindspore.ops.ApplyRMSProp`` and ``ApplyCenteredRMSProp`` (KERNELS.md sections 9, 10)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_rms_prop", "apply_centered_rms_prop"]


@ieee
def apply_rms_prop(
    var: ArrayLike,
    mean_square: ArrayLike,
    moment: ArrayLike,
    learning_rate: ArrayLike,
    grad: ArrayLike,
    decay: ArrayLike,
    momentum: ArrayLike,
    epsilon: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RMSProp step of ``mindspore.ops.ApplyRMSProp`` (note: ``learning_rate`` comes before ``grad``).

    Update rule (element-wise, g = grad, rho = decay)::

        mean_square = mean_square + (g * g - mean_square) * (1 - rho)
        moment      = moment * momentum + (g * learning_rate) / sqrt(mean_square + epsilon)
        var         = var - moment

    Epsilon is inside the square root, as in the docs, the GPU kernel and the CPU kernel's scalar path.
    (The CPU kernel's AVX path computes ``sqrt(mean_square) + epsilon`` for blocks of 8 elements; this
    reference does not reproduce that inconsistency.) The slots are updated even where ``g == 0``.

    Args:
        var: parameter tensor.
        mean_square: running mean of ``g*g``, same shape as ``var``.
        moment: momentum buffer, same shape as ``var``.
        learning_rate: learning rate (scalar).
        grad: gradient, same shape as ``var``.
        decay: decay rate rho (scalar).
        momentum: momentum coefficient (scalar).
        epsilon: added inside the square root (scalar).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, mean_square, moment)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    ms = as_array(mean_square, "mean_square")
    mom = as_array(moment, "moment")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, mean_square=ms, moment=mom, grad=g)
    lr = as_scalar(learning_rate, "learning_rate")
    rho = as_scalar(decay, "decay")
    mu = as_scalar(momentum, "momentum")
    eps = as_scalar(epsilon, "epsilon")

    ms_new = ms + (g * g - ms) * (1.0 - rho)
    mom_new = mom * mu + (g * lr) / np.sqrt(ms_new + eps)
    var_new = var_ - mom_new
    return var_new, ms_new, mom_new


@ieee
def apply_centered_rms_prop(
    var: ArrayLike,
    mean_gradient: ArrayLike,
    mean_square: ArrayLike,
    moment: ArrayLike,
    grad: ArrayLike,
    learning_rate: ArrayLike,
    decay: ArrayLike,
    momentum: ArrayLike,
    epsilon: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centered RMSProp step of ``mindspore.ops.ApplyCenteredRMSProp`` (``grad`` before ``learning_rate``).

    Update rule (element-wise, g = grad, rho = decay)::

        mean_square   = mean_square + (g * g - mean_square) * (1 - rho)
        mean_gradient = mean_gradient + (g - mean_gradient) * (1 - rho)
        denom         = (mean_square - mean_gradient * mean_gradient) + epsilon
        where denom > 0:
            moment = moment * momentum + (g * learning_rate) / sqrt(denom)
            var    = var - moment
        elsewhere moment and var are left unchanged (mean_square, mean_gradient are still updated).

    The ``denom > 0`` guard follows the CPU kernel's scalar path (the GPU kernel has no guard and gives
    ``nan`` for a negative denominator; the CPU AVX path tests ``denom >= 0``).

    Args:
        var: parameter tensor.
        mean_gradient: running mean of ``g``, same shape as ``var``.
        mean_square: running mean of ``g*g``, same shape as ``var``.
        moment: momentum buffer, same shape as ``var``.
        grad: gradient, same shape as ``var``.
        learning_rate: learning rate (scalar).
        decay: decay rate rho (scalar).
        momentum: momentum coefficient (scalar).
        epsilon: added to the variance estimate (scalar).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, mean_gradient, mean_square, moment)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    mg = as_array(mean_gradient, "mean_gradient")
    ms = as_array(mean_square, "mean_square")
    mom = as_array(moment, "moment")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, mean_gradient=mg, mean_square=ms, moment=mom, grad=g)
    lr = as_scalar(learning_rate, "learning_rate")
    rho = as_scalar(decay, "decay")
    mu = as_scalar(momentum, "momentum")
    eps = as_scalar(epsilon, "epsilon")

    ms_new = ms + (g * g - ms) * (1.0 - rho)
    mg_new = mg + (g - mg) * (1.0 - rho)
    denom = (ms_new - mg_new * mg_new) + eps
    ok = denom > 0
    safe_denom = np.where(ok, denom, 1.0)
    mom_new = np.where(ok, mom * mu + (g * lr) / np.sqrt(safe_denom), mom)
    var_new = np.where(ok, var_ - mom_new, var_)
    return var_new, mg_new, ms_new, mom_new
