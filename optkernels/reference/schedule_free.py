"""Float64 reference of Schedule-Free AdamW and SGD (MODERN §11.2-11.3: one step in train mode, y = the
parameter)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee


def _lerp(x: np.ndarray, y: np.ndarray, w: np.float64) -> np.ndarray:
    """torch's lerp: ``x + w·(y − x)`` for |w| < 0.5, else ``y − (y − x)·(1 − w)``."""
    return x + w * (y - x) if abs(w) < 0.5 else y - (y - x) * (1.0 - w)


def _y_and_z(
    y: np.ndarray, z: np.ndarray, g: np.ndarray, lr: np.float64, beta: np.float64, c: np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """``y' = lerp(y, z, c) + lr·(β·(1 − c) − 1)·g``, ``z' = z − lr·g``."""
    return _lerp(y, z, c) + lr * (beta * (1.0 - c) - 1.0) * g, z - lr * g


@ieee
def schedule_free_adamw(
    y: ArrayLike,
    z: ArrayLike,
    exp_avg_sq: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    weight_decay: ArrayLike,
    c: ArrayLike,
    step: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Schedule-Free AdamW step (``lr``: warmed up; ``c``: averaging weight; ``step`` = k + 1)::

        v = β2·v + (1 − β2)·g²;  ĝ = g/(√(v/(1 − β2^step)) + ε);  ĝ = ĝ + wd·y (wd ≠ 0)
        y = lerp(y, z, c) + lr·(β1·(1 − c) − 1)·ĝ;  z = z − lr·ĝ

    Returns:
        ``(y, z, exp_avg_sq)``: new float64 arrays.
    """
    y_, z_, v = as_array(y, "y"), as_array(z, "z"), as_array(exp_avg_sq, "exp_avg_sq")
    g = as_array(grad, "grad")
    check_same_shape("y", y_, z=z_, exp_avg_sq=v, grad=g)
    lr_, b1, b2, eps = (
        as_scalar(x, n) for x, n in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (epsilon, "epsilon"))
    )
    wd, c_, t = as_scalar(weight_decay, "weight_decay"), as_scalar(c, "c"), as_scalar(step, "step")
    v = b2 * v + (1.0 - b2) * g * g
    normed = g / (np.sqrt(v / (1.0 - b2**t)) + eps)
    if wd != 0:
        normed = normed + wd * y_
    y_, z_ = _y_and_z(y_, z_, normed, lr_, b1, c_)
    return y_, z_, v


@ieee
def schedule_free_sgd(
    y: ArrayLike,
    z: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    momentum: ArrayLike,
    weight_decay: ArrayLike,
    c: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """One Schedule-Free SGD step: ``g = g + wd·y`` (wd ≠ 0), then
    ``y = lerp(y, z, c) + lr·(momentum·(1 − c) − 1)·g``, ``z = z − lr·g``.

    Returns:
        ``(y, z)``: new float64 arrays.
    """
    y_, z_, g = as_array(y, "y"), as_array(z, "z"), as_array(grad, "grad")
    check_same_shape("y", y_, z=z_, grad=g)
    lr_, mom = as_scalar(lr, "lr"), as_scalar(momentum, "momentum")
    wd, c_ = as_scalar(weight_decay, "weight_decay"), as_scalar(c, "c")
    if wd != 0:
        g = g + wd * y_
    return _y_and_z(y_, z_, g, lr_, mom, c_)
