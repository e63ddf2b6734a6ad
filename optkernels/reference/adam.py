"""Adam family: ``Adam`` (ApplyAdam), ``ApplyAdamWithAmsgrad``, ``AdamNoUpdateParam``, ``AdamWeightDecay``.

Spec: KERNELS.md sections 1, 1.1, 1.2 and 2.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalars, check_same_shape, ieee

__all__ = ["apply_adam", "apply_adam_with_amsgrad", "adam_no_update_param", "adam_weight_decay"]


def _adam_lr_t(lr: np.float64, beta1_power: np.float64, beta2_power: np.float64) -> np.float64:
    """Bias-corrected step size ``lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)``.

    Evaluated left to right as in the CPU kernel: ``(lr * sqrt(1 - beta2_power)) / (1 - beta1_power)``.
    No check for ``beta1_power == 1`` (the dense op has none either): that gives ``inf``/``nan``.
    """
    return lr * np.sqrt(1.0 - beta2_power) / (1.0 - beta1_power)


@ieee
def apply_adam(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    beta1_power: ArrayLike,
    beta2_power: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    gradient: ArrayLike,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam step of ``mindspore.ops.Adam`` (TF ``ApplyAdam``), bias correction folded into the step size.

    Update rule (element-wise, g = gradient)::

        lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        m    = m + (g - m) * (1 - beta1)                  # delta form, as the CPU kernel
        v    = v + (g * g - v) * (1 - beta2)
        plain:    var = var - (lr_t * m) / (sqrt(v) + epsilon)
        Nesterov: var = var - (lr_t * (beta1 * m + (1 - beta1) * g)) / (sqrt(v) + epsilon)   # m = new m

    ``v`` is never bias-corrected and epsilon sits outside the square root, unscaled; the effective
    epsilon relative to the textbook ``m_hat / (sqrt(v_hat) + eps)`` is therefore ``eps / sqrt(1 - beta2^t)``.

    Args:
        var: parameter tensor.
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        beta1_power: ``beta1**t`` for the current step t (t starts at 1); the caller keeps it.
        beta2_power: ``beta2**t``.
        lr: learning rate (scalar).
        beta1: first-moment decay (scalar).
        beta2: second-moment decay (scalar).
        epsilon: added to ``sqrt(v)`` (scalar).
        gradient: gradient, same shape as ``var``.
        use_locking: MindSpore attribute; no effect here (no concurrency).
        use_nesterov: use the Nesterov numerator. MindSpore's GPU kernel ignores this flag; the CPU kernel
            and TensorFlow implement it as above, and so does this reference.

    Returns:
        ``(var, m, v)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    g = as_array(gradient, "gradient")
    check_same_shape("var", var_, m=m_, v=v_, gradient=g)
    b1p, b2p, lr_, b1, b2, eps = as_scalars(
        beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon
    )

    lr_t = _adam_lr_t(lr_, b1p, b2p)
    m_new = m_ + (g - m_) * (1.0 - b1)
    v_new = v_ + (g * g - v_) * (1.0 - b2)
    if use_nesterov:
        numer = b1 * m_new + (1.0 - b1) * g
    else:
        numer = m_new
    var_new = var_ - (lr_t * numer) / (np.sqrt(v_new) + eps)
    return var_new, m_new, v_new


@ieee
def apply_adam_with_amsgrad(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    vhat: ArrayLike,
    beta1_power: ArrayLike,
    beta2_power: ArrayLike,
    lr: ArrayLike,
    grad: ArrayLike,
    *,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """AMSGrad step of ``mindspore.ops.ApplyAdamWithAmsgrad`` (used by ``nn.Adam(use_amsgrad=True)``).

    Update rule (element-wise, g = grad)::

        lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        m    = m + (g - m) * (1 - beta1)
        v    = v + (g * g - v) * (1 - beta2)
        vhat = max(vhat, v)                               # with the new v; NaN if either is NaN
        var  = var - (lr_t * m) / (sqrt(vhat) + epsilon)

    ``max`` is ``np.maximum``: it propagates NaN (optkernels' IEEE policy; TensorFlow's Eigen ``cwiseMax``
    may keep ``vhat`` when ``v`` is NaN).

    Args:
        var: parameter tensor.
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        vhat: running maximum of ``v``, same shape as ``var``.
        beta1_power: ``beta1**t`` (scalar).
        beta2_power: ``beta2**t`` (scalar).
        lr: learning rate (scalar).
        grad: gradient, same shape as ``var``.
        beta1, beta2, epsilon: MindSpore attributes (defaults 0.9, 0.999, 1e-8).
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, m, v, vhat)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    vhat_ = as_array(vhat, "vhat")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, m=m_, v=v_, vhat=vhat_, grad=g)
    b1p, b2p, lr_, b1, b2, eps = as_scalars(
        beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon
    )

    lr_t = _adam_lr_t(lr_, b1p, b2p)
    m_new = m_ + (g - m_) * (1.0 - b1)
    v_new = v_ + (g * g - v_) * (1.0 - b2)
    vhat_new = np.maximum(vhat_, v_new)
    var_new = var_ - (lr_t * m_new) / (np.sqrt(vhat_new) + eps)
    return var_new, m_new, v_new, vhat_new


@ieee
def adam_no_update_param(
    m: ArrayLike,
    v: ArrayLike,
    beta1_power: ArrayLike,
    beta2_power: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    gradient: ArrayLike,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam without the parameter write: ``AdamNoUpdateParam`` (CPU op behind ``Adam(use_offload=True)``).

    Update rule (element-wise, g = gradient)::

        lr_t  = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        m     = beta1 * m + (1 - beta1) * g               # non-delta form, as this CPU kernel
        v     = beta2 * v + (1 - beta2) * g * g
        plain:    delta = -(lr_t * m) / (sqrt(v) + epsilon)
        Nesterov: delta = -(lr_t * (beta1 * m + (1 - beta1) * g)) / (sqrt(v) + epsilon)   # m = new m

    The caller then applies ``param = param + delta``.

    Args:
        m: first-moment slot.
        v: second-moment slot, same shape as ``m``.
        beta1_power, beta2_power: ``beta1**t``, ``beta2**t`` (scalars).
        lr: learning rate (scalar).
        beta1, beta2: moment decays (scalars).
        epsilon: added to ``sqrt(v)`` (scalar).
        gradient: gradient, same shape as ``m``.
        use_locking: MindSpore attribute; no effect here.
        use_nesterov: use the Nesterov numerator.

    Returns:
        ``(delta, m, v)``: new float64 arrays (``delta`` first, unlike the other ops).
    """
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    g = as_array(gradient, "gradient")
    check_same_shape("m", m_, v=v_, gradient=g)
    b1p, b2p, lr_, b1, b2, eps = as_scalars(
        beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon
    )

    lr_t = _adam_lr_t(lr_, b1p, b2p)
    m_new = b1 * m_ + (1.0 - b1) * g
    v_new = b2 * v_ + (1.0 - b2) * (g * g)
    if use_nesterov:
        numer = b1 * m_new + (1.0 - b1) * g
    else:
        numer = m_new
    delta = -(lr_t * numer) / (np.sqrt(v_new) + eps)
    return delta, m_new, v_new


@ieee
def adam_weight_decay(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    decay: ArrayLike,
    gradient: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AdamW step of ``mindspore.ops.AdamWeightDecay``: no bias correction, decoupled weight decay.

    Update rule (element-wise, g = gradient, var_old = the input var)::

        m      = m + (g - m) * (1 - beta1)                # delta form, as the CPU kernel
        v      = v + (g * g - v) * (1 - beta2)
        update = m / (sqrt(v) + epsilon) + decay * var_old
        var    = var_old - lr * update

    There are no beta powers and no step count; the weight decay multiplies the parameter (not added to
    the gradient) and is scaled by ``lr``. Note the input order: ``lr`` before the betas, ``decay`` just
    before ``gradient``.

    Args:
        var: parameter tensor.
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        lr: learning rate (scalar).
        beta1, beta2: moment decays (scalars).
        epsilon: added to ``sqrt(v)`` (scalar).
        decay: weight-decay coefficient (scalar).
        gradient: gradient, same shape as ``var``.
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, m, v)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    g = as_array(gradient, "gradient")
    check_same_shape("var", var_, m=m_, v=v_, gradient=g)
    lr_, b1, b2, eps, wd = as_scalars(lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon, decay=decay)

    m_new = m_ + (g - m_) * (1.0 - b1)
    v_new = v_ + (g * g - v_) * (1.0 - b2)
    update = m_new / (np.sqrt(v_new) + eps) + wd * var_
    var_new = var_ - lr_ * update
    return var_new, m_new, v_new
