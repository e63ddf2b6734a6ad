"""Float64 reference of Lion (MODERN §8.1, google/automl's order of operations)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee


@ieee
def lion(
    var: ArrayLike,
    exp_avg: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    weight_decay: ArrayLike = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """One Lion step::

        p = p·(1 − lr·wd);  c = m·β1 + g·(1 − β1);  p = p − lr·sign(c);  m = m·β2 + g·(1 − β2)

    ``sign(NaN) = 0`` (torch's CPU rule: a NaN interpolation does not move the parameter).

    Returns:
        ``(var, exp_avg)``: new float64 arrays.
    """
    p = as_array(var, "var")
    m = as_array(exp_avg, "exp_avg")
    g = as_array(grad, "grad")
    check_same_shape("var", p, exp_avg=m, grad=g)
    lr_, b1, b2 = as_scalar(lr, "lr"), as_scalar(beta1, "beta1"), as_scalar(beta2, "beta2")
    wd = as_scalar(weight_decay, "weight_decay")
    p = p * (1.0 - lr_ * wd)
    c = m * b1 + g * (1.0 - b1)
    p = p - lr_ * np.nan_to_num(np.sign(c), nan=0.0)
    m = m * b2 + g * (1.0 - b2)
    return p, m
