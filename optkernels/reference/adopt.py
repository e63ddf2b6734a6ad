"""Float64 reference of ADOPT (MODERN §9.1: torch-adopt 0.1.0, the clipped algorithm)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee


@ieee
def adopt(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    weight_decay: ArrayLike,
    step: ArrayLike,
    clip: ArrayLike = math.inf,
    *,
    decouple: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One ADOPT call; ``step`` = k counts the earlier calls::

        g = g + wd·p                           (coupled, unless decouple; wd = 0: skipped)
        k == 0: v = v + g²                     (nothing else)
        else:   p = p − lr·wd·p (decouple);  ĝ = clip(g / max(√v, ε), ±clip)
                m = m + (1 − β1)·(ĝ − m);  p = p − lr·m;  v = β2·v + (1 − β2)·g²

    NaN in ``√v`` or ``ĝ`` passes the max and the clip (torch's clamp).

    Returns:
        ``(var, exp_avg, exp_avg_sq)``: new float64 arrays.
    """
    p, m, v = as_array(var, "var"), as_array(exp_avg, "exp_avg"), as_array(exp_avg_sq, "exp_avg_sq")
    g = as_array(grad, "grad")
    check_same_shape("var", p, exp_avg=m, exp_avg_sq=v, grad=g)
    lr_, b1, b2 = as_scalar(lr, "lr"), as_scalar(beta1, "beta1"), as_scalar(beta2, "beta2")
    eps, wd, c = (
        as_scalar(epsilon, "epsilon"),
        as_scalar(weight_decay, "weight_decay"),
        as_scalar(clip, "clip"),
    )
    if wd != 0 and not decouple:  # torch-adopt skips a zero decay (an inf p stays out of g)
        g = g + wd * p
    if as_scalar(step, "step") == 0:
        return p, m, v + g * g
    if wd != 0 and decouple:
        p = p - lr_ * wd * p
    root = np.sqrt(v)
    denominator = np.where(root < eps, eps, root)
    normed = g / denominator
    normed = np.where(normed > c, c, np.where(normed < -c, -c, normed))
    m = m + (1.0 - b1) * (normed - m)
    p = p - lr_ * m
    v = b2 * v + (1.0 - b2) * g * g
    return p, m, v
