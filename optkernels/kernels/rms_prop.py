"""RMSProp: MindSpore's ``ops.ApplyRMSProp`` and ``ops.ApplyCenteredRMSProp``."""

from __future__ import annotations

import math
from typing import Any

from ._checks import attr_bool, check_arrays, check_range
from ._elementwise import elementwise
from .adam import Scalar


@elementwise
def _rms_prop(i, var, mean_square, moment, grad, learning_rate, one_minus_decay, momentum, epsilon):
    g = grad[i]
    ms = mean_square[i] + (g * g - mean_square[i]) * one_minus_decay
    mom = moment[i] * momentum + (g * learning_rate) / math.sqrt(ms + epsilon)
    mean_square[i] = ms
    moment[i] = mom
    var[i] = var[i] - mom


@elementwise
def _centered_rms_prop(
    i, var, mean_gradient, mean_square, moment, grad, learning_rate, one_minus_decay, momentum, epsilon
):
    g = grad[i]
    ms = mean_square[i] + (g * g - mean_square[i]) * one_minus_decay
    mg = mean_gradient[i] + (g - mean_gradient[i]) * one_minus_decay
    mean_square[i] = ms
    mean_gradient[i] = mg
    denom = (ms - mg * mg) + epsilon
    if denom > 0:
        mom = moment[i] * momentum + (g * learning_rate) / math.sqrt(denom)
        moment[i] = mom
        var[i] = var[i] - mom


def _hyper(batch, learning_rate, decay, momentum, epsilon):
    lr = batch.scalar("learning_rate", learning_rate)
    rho = batch.scalar("decay", decay)
    mom = batch.scalar("momentum", momentum)
    eps = batch.scalar("epsilon", epsilon)
    check_range("learning_rate", lr, 0.0)
    check_range("decay", rho, 0.0, 1.0)
    check_range("momentum", mom, 0.0)
    check_range("epsilon", eps, 0.0)
    return lr, batch.dtype.type(1) - rho, mom, eps


def apply_rms_prop(
    var: Any,
    mean_square: Any,
    moment: Any,
    learning_rate: Scalar,
    grad: Any,
    decay: Scalar,
    momentum: Scalar,
    epsilon: Scalar,
    *,
    use_locking: bool = False,
) -> tuple[Any, Any, Any]:
    r"""RMSProp update in place (MindSpore ``ops.ApplyRMSProp``; learning_rate comes before grad)::

        mean_square ← mean_square + (g·g − mean_square)·(1 − decay)
        moment      ← moment·momentum + (g·learning_rate) / sqrt(mean_square + epsilon)
        var         ← var − moment

    Epsilon is inside the square root (MindSpore's AVX path puts it outside for blocks of 8 elements; its
    scalar path, its GPU kernel and TensorFlow put it inside, as here).

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        mean_square, moment: slots, same shape and dtype, updated in place.
        learning_rate: >= 0.
        grad: the gradient (read only).
        decay: in [0, 1].
        momentum: >= 0.
        epsilon: >= 0.
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, mean_square, moment)`` (MindSpore returns only var).

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays({"var": var, "mean_square": mean_square, "moment": moment}, {"grad": grad})
    _rms_prop.launch(
        batch.device, batch.size, *batch.flat, *_hyper(batch, learning_rate, decay, momentum, epsilon)
    )
    return var, mean_square, moment


def apply_centered_rms_prop(
    var: Any,
    mean_gradient: Any,
    mean_square: Any,
    moment: Any,
    grad: Any,
    learning_rate: Scalar,
    decay: Scalar,
    momentum: Scalar,
    epsilon: Scalar,
    *,
    use_locking: bool = False,
) -> tuple[Any, Any, Any, Any]:
    r"""Centered RMSProp update in place (MindSpore ``ops.ApplyCenteredRMSProp``; grad comes before
    learning_rate, the opposite of :func:`apply_rms_prop`)::

        mean_square   ← mean_square + (g·g − mean_square)·(1 − decay)
        mean_gradient ← mean_gradient + (g − mean_gradient)·(1 − decay)
        denom         = (mean_square − mean_gradient²) + epsilon
        if denom > 0:
            moment ← moment·momentum + (g·learning_rate) / sqrt(denom)
            var    ← var − moment
        (else moment and var keep their values, as in MindSpore's CPU kernel; its GPU kernel has no guard)

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        mean_gradient, mean_square, moment: slots, same shape and dtype, updated in place.
        grad: the gradient (read only).
        learning_rate: >= 0.
        decay: in [0, 1].
        momentum: >= 0.
        epsilon: >= 0.
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, mean_gradient, mean_square, moment)`` (MindSpore returns only var).

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays(
        {"var": var, "mean_gradient": mean_gradient, "mean_square": mean_square, "moment": moment},
        {"grad": grad},
    )
    _centered_rms_prop.launch(
        batch.device, batch.size, *batch.flat, *_hyper(batch, learning_rate, decay, momentum, epsilon)
    )
    return var, mean_gradient, mean_square, moment
