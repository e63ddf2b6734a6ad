"""LAMB: the per-parameter math of ``nn.Lamb`` / the inner ``Lamb`` primitive, 2.0 behaviour
(KERNELS.md section 16.1)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["lamb"]

_TRUST_MAX = 10.0


def _l2_norm(x: np.ndarray) -> np.float64:
    """Euclidean norm of the whole tensor, ``sqrt(sum(x*x))`` in float64."""
    return np.sqrt(np.sum(x * x))


@ieee
def lamb(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    decay: ArrayLike,
    global_step: ArrayLike,
    gradient: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LAMB step (``Lamb`` primitive / ``nn.Lamb`` per parameter, MindSpore 2.0 behaviour).

    Update rule (g = gradient, w = var before the step, t = global_step, lambda = decay)::

        m_new  = beta1 * m + (1 - beta1) * g
        v_new  = beta2 * v + (1 - beta2) * g * g
        m_hat  = m_new / (1 - beta1**t)
        v_hat  = v_new / (1 - beta2**t)
        update = m_hat / (sqrt(v_hat) + epsilon) + lambda * w
        w_norm = ||w||_2                                           (whole tensor)
        g_norm = ||m_hat / sqrt(v_hat + epsilon) + lambda * w||_2  (whole tensor; epsilon INSIDE the sqrt)
        trust  = w_norm / g_norm   if w_norm > 0 and g_norm > 0, else 1
        trust  = clip(trust, 0, 10)                                (NaN stays NaN)
        var    = w - trust * lr * update

    ``t`` is the optimizer's step count after its increment for the current step (first step t = 1),
    used as a float in ``pow(beta, t)``. Epsilon is outside the square root in ``update`` but inside it in
    the trust-ratio denominator; the kernel does this and the reference keeps it. Norms are
    ``sqrt(sum(x*x))`` in float64. This is the 2.0 behaviour: the 1.x composite graph conditioned the
    trust ratio on the raw gradient norm and could use a different ``lambda`` in the norm than in
    ``update``; a caller that turns decay off for a parameter passes ``decay = 0``.

    Non-finite values propagate (optkernels' IEEE policy): an infinite weight with ``lambda > 0`` makes
    ``w_norm / g_norm = inf / inf = NaN``, and a NaN trust ratio makes every element of ``var`` NaN.
    MindSpore's GPU kernel clips a NaN trust ratio to 0 (``var`` then keeps its value), which hides the
    divergence; a NaN norm (NaN in the inputs) fails ``w_norm > 0`` and gives trust 1, as in MindSpore.

    Args:
        var: parameter tensor.
        m: first-moment slot, same shape as ``var``.
        v: second-moment slot, same shape as ``var``.
        lr: learning rate (scalar).
        beta1, beta2: moment decays (scalars).
        epsilon: numerical-stability constant (scalar).
        decay: weight-decay coefficient lambda (scalar; 0 for parameters without decay).
        global_step: step count t, first step 1 (scalar).
        gradient: gradient, same shape as ``var``.

    Returns:
        ``(var, m, v)``: new float64 arrays.
    """
    w = as_array(var, "var")
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    g = as_array(gradient, "gradient")
    check_same_shape("var", w, m=m_, v=v_, gradient=g)
    lr_ = as_scalar(lr, "lr")
    b1 = as_scalar(beta1, "beta1")
    b2 = as_scalar(beta2, "beta2")
    eps = as_scalar(epsilon, "epsilon")
    wd = as_scalar(decay, "decay")
    t = as_scalar(global_step, "global_step")

    m_new = b1 * m_ + (1.0 - b1) * g
    v_new = b2 * v_ + (1.0 - b2) * (g * g)
    m_hat = m_new / (1.0 - np.power(b1, t))
    v_hat = v_new / (1.0 - np.power(b2, t))
    update = m_hat / (np.sqrt(v_hat) + eps) + wd * w

    w_norm = _l2_norm(w)
    g_norm = _l2_norm(m_hat / np.sqrt(v_hat + eps) + wd * w)
    if w_norm > 0 and g_norm > 0:
        trust = w_norm / g_norm
    else:
        trust = np.float64(1.0)
    trust = trust if np.isnan(trust) else np.float64(min(max(trust, 0.0), _TRUST_MAX))
    var_new = w - trust * lr_ * update
    return var_new, m_new, v_new
