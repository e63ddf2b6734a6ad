"""AdaMax: ``mindspore.ops.ApplyAdaMax`` (KERNELS.md section 5)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_ada_max"]


@ieee
def apply_ada_max(
    var: ArrayLike,
    m: ArrayLike,
    v: ArrayLike,
    beta1_power: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    grad: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AdaMax step of ``mindspore.ops.ApplyAdaMax`` (infinity-norm Adam).

    Update rule (element-wise, g = grad)::

        m   = m + (g - m) * (1 - beta1)
        v   = max(beta2 * v, |g|)                                         # NaN if either is NaN
        var = var - (lr / (1 - beta1_power)) * (m / (v + epsilon))      # new m and v

    ``beta1_power`` is ``beta1**t`` for the current step t (t from 1; the docs' ``beta1^(t+1)`` is the same
    with t counted from 0). Epsilon is added to ``v`` itself (there is no square root). The moment update
    is evaluated in TensorFlow's delta form ``m + (g-m)*(1-beta1)``, as optkernels' kernel (which
    reproduces MindSpore's published example bit for bit with it); MindSpore's CPU kernel writes
    ``beta1*m + (1-beta1)*g``, the same number up to rounding for finite inputs. Non-finite values follow
    IEEE arithmetic: an infinite ``m`` gives ``inf - inf = NaN`` in the delta form (as TensorFlow's kernel
    does), where the CPU kernel's form would keep ``±inf``; ``max`` propagates NaN (``np.maximum``). The CPU
    kernel raises when ``beta1_power == 1``; this reference does no range check (the result is then
    ``inf``/``nan``).

    Args:
        var: parameter tensor.
        m: first-moment slot, same shape as ``var``.
        v: infinity-norm slot, same shape as ``var``.
        beta1_power: ``beta1**t`` (scalar).
        lr: learning rate (scalar).
        beta1, beta2: decays (scalars).
        epsilon: added to ``v`` (scalar).
        grad: gradient, same shape as ``var``.

    Returns:
        ``(var, m, v)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    m_ = as_array(m, "m")
    v_ = as_array(v, "v")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, m=m_, v=v_, grad=g)
    b1p = as_scalar(beta1_power, "beta1_power")
    lr_ = as_scalar(lr, "lr")
    b1 = as_scalar(beta1, "beta1")
    b2 = as_scalar(beta2, "beta2")
    eps = as_scalar(epsilon, "epsilon")

    m_new = m_ + (g - m_) * (1.0 - b1)
    v_new = np.maximum(b2 * v_, np.abs(g))
    var_new = var_ - (lr_ / (1.0 - b1p)) * (m_new / (v_new + eps))
    return var_new, m_new, v_new
