"""Update rules of ``torch.optim`` that no MindSpore op computes: RMSprop (epsilon outside the square root,
the learning rate applied after the momentum buffer) and Adamax (epsilon inside the infinity norm's max).

``optkernels.torch`` maps every other torch optimizer onto MindSpore's kernels (torch's Adam is ``apply_adam``
with a scaled epsilon, its SGD is ``apply_momentum``, ...); these two have no honest mapping, so their
per-element math is written here once, in torch's order of operations, for the CPU and CUDA. Arithmetic is in
the arrays' dtype; the scalars are given already converted to it.
"""
from __future__ import annotations

import math
from typing import Any

from ._checks import check_arrays, check_range
from ._elementwise import elementwise, scalar_math
from .adam import Scalar

__all__ = ["torch_adamax", "torch_rms_prop"]


@scalar_math
def rms_prop_denominator(square_avg, g, alpha, one_minus_alpha, epsilon):
    """torch's ``square_avg ← α·square_avg + (1 − α)·g·g`` and its ``√square_avg + ε``."""
    sa = square_avg * alpha + one_minus_alpha * g * g
    return sa, math.sqrt(sa) + epsilon


@elementwise
def _rms_prop(i, var, square_avg, grad, lr, alpha, one_minus_alpha, epsilon):
    g = grad[i]
    sa, denominator = rms_prop_denominator(square_avg[i], g, alpha, one_minus_alpha, epsilon)
    square_avg[i] = sa
    var[i] = var[i] - lr * g / denominator


@elementwise
def _rms_prop_momentum(i, var, square_avg, momentum_buffer, grad, lr, alpha, one_minus_alpha, epsilon,
                       momentum):
    g = grad[i]
    sa, denominator = rms_prop_denominator(square_avg[i], g, alpha, one_minus_alpha, epsilon)
    square_avg[i] = sa
    buf = momentum_buffer[i] * momentum + g / denominator
    momentum_buffer[i] = buf
    var[i] = var[i] - lr * buf


@scalar_math
def centered_denominator(square_avg, grad_avg, g, alpha, one_minus_alpha, epsilon):
    """torch's centered RMSprop: the new averages and ``√(square_avg − grad_avg²) + ε``."""
    sa = square_avg * alpha + one_minus_alpha * g * g
    ga = grad_avg + (g - grad_avg) * one_minus_alpha
    return sa, ga, math.sqrt(sa - ga * ga) + epsilon


@elementwise
def _centered_rms_prop(i, var, square_avg, grad_avg, grad, lr, alpha, one_minus_alpha, epsilon):
    g = grad[i]
    sa, ga, denominator = centered_denominator(square_avg[i], grad_avg[i], g, alpha, one_minus_alpha, epsilon)
    square_avg[i] = sa
    grad_avg[i] = ga
    var[i] = var[i] - lr * g / denominator


@elementwise
def _centered_rms_prop_momentum(i, var, square_avg, grad_avg, momentum_buffer, grad, lr, alpha,
                                one_minus_alpha, epsilon, momentum):
    g = grad[i]
    sa, ga, denominator = centered_denominator(square_avg[i], grad_avg[i], g, alpha, one_minus_alpha, epsilon)
    square_avg[i] = sa
    grad_avg[i] = ga
    buf = momentum_buffer[i] * momentum + g / denominator
    momentum_buffer[i] = buf
    var[i] = var[i] - lr * buf


@elementwise
def _adamax(i, var, exp_avg, exp_inf, grad, clr, one_minus_beta1, beta2, epsilon):
    g = grad[i]
    m = exp_avg[i] + (g - exp_avg[i]) * one_minus_beta1
    u = max(exp_inf[i] * beta2, abs(g) + epsilon)
    exp_avg[i] = m
    exp_inf[i] = u
    var[i] = var[i] - clr * m / u


def rms_prop_kernel(centered: bool, momentum: bool) -> Any:
    """The element function of torch's RMSprop for the given flags (arrays: var, square_avg[, grad_avg]
    [, momentum_buffer], grad; scalars: lr, alpha, 1 − alpha, epsilon[, momentum])."""
    return ((_rms_prop, _rms_prop_momentum), (_centered_rms_prop, _centered_rms_prop_momentum))[centered][
        momentum]


def torch_rms_prop(var: Any, square_avg: Any, grad: Any, lr: Scalar, alpha: Scalar, epsilon: Scalar, *,
                   momentum: Scalar = 0.0, momentum_buffer: Any = None, grad_avg: Any = None
                   ) -> tuple[Any, ...]:
    r"""torch.optim.RMSprop's update in place (one tensor, after torch's maximize/weight-decay pre-step)::

        square_avg ← α·square_avg + (1 − α)·g·g
        grad_avg   ← grad_avg + (g − grad_avg)·(1 − α)                     (centered: grad_avg given)
        avg        = √(square_avg − grad_avg²) + ε   (centered)   or   √square_avg + ε
        buf        ← μ·buf + g/avg;   var ← var − lr·buf                    (momentum_buffer given)
        var        ← var − lr·g/avg                                          (otherwise)

    MindSpore's ``apply_rms_prop`` differs: its epsilon is inside the square root and its learning rate
    multiplies the gradient before the momentum buffer.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        square_avg: running average of g², updated in place.
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        alpha: smoothing constant, in [0, 1].
        epsilon: added to the root, >= 0.
        momentum: momentum factor (used with ``momentum_buffer``).
        momentum_buffer: momentum buffer, updated in place, or None for torch's momentum = 0 rule.
        grad_avg: running average of g (centered RMSprop), updated in place, or None.

    Returns:
        The updated arrays, in the order var, square_avg[, grad_avg][, momentum_buffer].

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    states = {"var": var, "square_avg": square_avg}
    if grad_avg is not None:
        states["grad_avg"] = grad_avg
    if momentum_buffer is not None:
        states["momentum_buffer"] = momentum_buffer
    batch = check_arrays(states, {"grad": grad})
    lr_, a, eps = batch.scalar("lr", lr), batch.scalar("alpha", alpha), batch.scalar("epsilon", epsilon)
    check_range("lr", lr_, 0.0)
    check_range("alpha", a, 0.0, 1.0)
    check_range("epsilon", eps, 0.0)
    scalars: tuple[Any, ...] = (lr_, a, batch.dtype.type(1) - a, eps)
    if momentum_buffer is not None:
        scalars += (batch.scalar("momentum", momentum),)
    kernel = rms_prop_kernel(grad_avg is not None, momentum_buffer is not None)
    kernel.launch(batch.device, batch.size, *batch.flat, *scalars)
    return tuple(states.values())


def torch_adamax(var: Any, exp_avg: Any, exp_inf: Any, grad: Any, lr: Scalar, beta1: Scalar, beta2: Scalar,
                 epsilon: Scalar, step: int) -> tuple[Any, Any, Any]:
    r"""torch.optim.Adamax's update in place (one tensor, after torch's maximize/weight-decay pre-step)::

        exp_avg ← exp_avg + (g − exp_avg)·(1 − β1)
        exp_inf ← max(β2·exp_inf, |g| + ε)
        var     ← var − lr/(1 − β1^step)·exp_avg/exp_inf

    MindSpore's ``apply_ada_max`` differs: its epsilon is added to ``v`` after the max, not inside it.

    Args:
        var, exp_avg, exp_inf: parameter and slots, updated in place (same shape and dtype).
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        beta1, beta2: decays, in [0, 1).
        epsilon: >= 0.
        step: this step's number, from 1.

    Returns:
        ``(var, exp_avg, exp_inf)``.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`; ``step < 1`` is a ValueError.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    batch = check_arrays({"var": var, "exp_avg": exp_avg, "exp_inf": exp_inf}, {"grad": grad})
    lr_, b1, b2 = batch.scalar("lr", lr), batch.scalar("beta1", beta1), batch.scalar("beta2", beta2)
    eps = batch.scalar("epsilon", epsilon)
    check_range("lr", lr_, 0.0)
    check_range("beta1", b1, 0.0, 1.0, high_open=True)
    check_range("beta2", b2, 0.0, 1.0, high_open=True)
    check_range("epsilon", eps, 0.0)
    clr = batch.dtype.type(float(lr_) / (1.0 - float(b1) ** step))
    _adamax.launch(batch.device, batch.size, *batch.flat, clr, batch.dtype.type(1) - b1, b2, eps)
    return var, exp_avg, exp_inf
