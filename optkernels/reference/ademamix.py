"""Float64 reference of AdEMAMix (MODERN §10.1: bitsandbytes' reference class, the paper's rule)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee


@ieee
def ademamix(
    var: ArrayLike,
    m1: ArrayLike,
    m2: ArrayLike,
    nu: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    beta3: ArrayLike,
    alpha: ArrayLike,
    epsilon: ArrayLike,
    weight_decay: ArrayLike,
    step: ArrayLike,
    *,
    decay_after_update: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One AdEMAMix step at t = ``step`` (``beta3``, ``alpha``: the step's scheduled values)::

        m1 = β1·m1 + (1 − β1)·g;  m2 = β3·m2 + (1 − β3)·g;  ν = β2·ν + (1 − β2)·g²
        u  = (m1/(1 − β1^t) + α·m2) / (√ν/√(1 − β2^t) + ε)
        p  = p − lr·(u + wd·p)          or, decay_after_update:  p = (p − lr·u)·(1 − lr·wd)

    Returns:
        ``(var, m1, m2, nu)``: new float64 arrays.
    """
    p, a, b, v = as_array(var, "var"), as_array(m1, "m1"), as_array(m2, "m2"), as_array(nu, "nu")
    g = as_array(grad, "grad")
    check_same_shape("var", p, m1=a, m2=b, nu=v, grad=g)
    lr_, b1, b2, b3 = (
        as_scalar(x, n) for x, n in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (beta3, "beta3"))
    )
    al, eps, wd, t = (
        as_scalar(x, n)
        for x, n in ((alpha, "alpha"), (epsilon, "epsilon"), (weight_decay, "weight_decay"), (step, "step"))
    )
    a = b1 * a + (1.0 - b1) * g
    b = b3 * b + (1.0 - b3) * g
    v = b2 * v + (1.0 - b2) * g * g
    u = (a / (1.0 - b1**t) + al * b) / (np.sqrt(v) / np.sqrt(1.0 - b2**t) + eps)
    if decay_after_update:
        p = (p - lr_ * u) * (1.0 - lr_ * wd)
    else:
        p = p - lr_ * (u + wd * p)
    return p, a, b, v
