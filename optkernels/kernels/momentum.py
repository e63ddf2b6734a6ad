"""Momentum: MindSpore's ``ops.ApplyMomentum``."""

from __future__ import annotations

from typing import Any

from ._checks import attr_bool, attr_float, check_arrays, check_range
from ._elementwise import elementwise
from .adam import Scalar


@elementwise
def _momentum(i, variable, accumulation, gradient, learning_rate, momentum, gradient_scale, use_nesterov):
    g = gradient[i] * gradient_scale
    a = accumulation[i] * momentum + g
    accumulation[i] = a
    if use_nesterov:
        variable[i] = variable[i] - (g * learning_rate + a * momentum * learning_rate)
    else:
        variable[i] = variable[i] - a * learning_rate


def apply_momentum(
    variable: Any,
    accumulation: Any,
    learning_rate: Scalar,
    gradient: Any,
    momentum: Scalar,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    gradient_scale: float = 1.0,
) -> tuple[Any, Any]:
    r"""Momentum update in place (MindSpore ``ops.ApplyMomentum``)::

        g            ← g·gradient_scale
        accumulation ← accumulation·momentum + g
        variable     ← variable − accumulation·learning_rate                              (plain)
        variable     ← variable − (g·learning_rate + accumulation·momentum·learning_rate)   (use_nesterov)

    Follows the documentation (and TensorFlow's ApplyMomentum for Nesterov) where MindSpore's CPU kernel
    does not: that kernel ignores ``use_nesterov`` and ``gradient_scale``. ``gradient_scale`` is documented
    as "the scale of the gradient" and multiplies it; the default 1.0 changes nothing.

    Args:
        variable: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accumulation: momentum buffer, same shape and dtype, updated in place.
        learning_rate: >= 0.
        gradient: the gradient (read only).
        momentum: >= 0.
        use_locking: accepted for MindSpore compatibility.
        use_nesterov: Nesterov momentum.
        gradient_scale: float attribute multiplying the gradient.

    Returns:
        ``(variable, accumulation)`` (MindSpore returns only variable; both are real, updated arrays).

    Raises:
        TypeError: wrong types, dtypes or devices; flags not bool; ``gradient_scale`` not a float.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    nesterov = attr_bool("use_nesterov", use_nesterov)
    scale = attr_float("gradient_scale", gradient_scale)
    batch = check_arrays({"variable": variable, "accumulation": accumulation}, {"gradient": gradient})
    lr = batch.scalar("learning_rate", learning_rate)
    check_range("learning_rate", lr, 0.0)
    mom = batch.scalar("momentum", momentum)
    check_range("momentum", mom, 0.0)
    _momentum.launch(batch.device, batch.size, *batch.flat, lr, mom, batch.dtype.type(scale), nesterov)
    return variable, accumulation
