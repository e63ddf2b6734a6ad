"""Momentum family: ``mindspore.ops.ApplyMomentum`` and ``mindspore.ops.SGD`` (KERNELS.md sections 7, 8)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_momentum", "sgd"]


@ieee
def apply_momentum(
    variable: ArrayLike,
    accumulation: ArrayLike,
    learning_rate: ArrayLike,
    gradient: ArrayLike,
    momentum: ArrayLike,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    gradient_scale: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Heavy-ball momentum step of ``mindspore.ops.ApplyMomentum``.

    Update rule (element-wise)::

        g            = gradient * gradient_scale
        accumulation = accumulation * momentum + g
        plain:    variable = variable - accumulation * learning_rate
        Nesterov: variable = variable - (g * learning_rate + accumulation * momentum * learning_rate)

    (``accumulation`` in the variable update is the new one.) No dampening and no first-step special case.

    Deliberate differences from MindSpore's kernels:

    * ``use_nesterov``: the CPU kernel ignores it and always does the plain update; this reference
      implements Nesterov as the GPU/Ascend kernels and TensorFlow do.
    * ``gradient_scale``: the CPU and GPU kernels only validate it; this reference applies its documented
      meaning (the gradient is multiplied by ``gradient_scale`` before the update). With the default 1.0
      the two agree exactly.

    Args:
        variable: parameter tensor.
        accumulation: momentum buffer, same shape as ``variable``.
        learning_rate: learning rate (scalar).
        gradient: gradient, same shape as ``variable``.
        momentum: momentum coefficient (scalar).
        use_locking: MindSpore attribute; no effect here.
        use_nesterov: use the Nesterov update.
        gradient_scale: factor applied to the gradient first (default 1.0).

    Returns:
        ``(variable, accumulation)``: new float64 arrays.
    """
    var_ = as_array(variable, "variable")
    acc = as_array(accumulation, "accumulation")
    g = as_array(gradient, "gradient")
    check_same_shape("variable", var_, accumulation=acc, gradient=g)
    lr = as_scalar(learning_rate, "learning_rate")
    mom = as_scalar(momentum, "momentum")
    scale = as_scalar(gradient_scale, "gradient_scale")

    g = g * scale
    acc_new = acc * mom + g
    if use_nesterov:
        var_new = var_ - (g * lr + acc_new * mom * lr)
    else:
        var_new = var_ - acc_new * lr
    return var_new, acc_new


@ieee
def sgd(
    parameters: ArrayLike,
    gradient: ArrayLike,
    learning_rate: ArrayLike,
    accum: ArrayLike,
    momentum: ArrayLike,
    stat: ArrayLike,
    *,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SGD with momentum, dampening, L2 weight decay and Nesterov: ``mindspore.ops.SGD`` (CPU == GPU).

    Update rule (element-wise, p = parameters, g = gradient)::

        g' = g + weight_decay * p          if weight_decay > 0, else g
        if momentum > 0:
            if stat > 0:                   # first step for this element
                accum = g';  stat = 0      # no dampening on the first step
            else:
                accum = accum * momentum + (1 - dampening) * g'
            g' = g' + momentum * accum     if nesterov, else accum      (new accum)
        (if momentum <= 0, accum and stat are left unchanged)
        p = p - learning_rate * g'

    ``stat`` is a per-element "not started yet" flag (nn.SGD initialises it to ones, ``accum`` to zeros).
    MindSpore 2.x's ``nn.SGD`` decays through the optimizer base and passes ``weight_decay=0`` here.
    This is the 2.0 CPU/GPU rule, which reproduces the 2.0 doc example; the 1.x docs printed a result
    without the first-step rule. MindSpore raises at construction when ``nesterov`` and
    ``dampening != 0``; this reference does no such check.

    Args:
        parameters: parameter tensor.
        gradient: gradient, same shape as ``parameters``.
        learning_rate: learning rate (scalar).
        accum: momentum buffer, same shape as ``parameters``.
        momentum: momentum coefficient (scalar).
        stat: first-step flags, same shape as ``parameters``.
        dampening: MindSpore attribute (default 0.0).
        weight_decay: MindSpore attribute: L2 coefficient added to the gradient (default 0.0).
        nesterov: MindSpore attribute: Nesterov momentum (default False).

    Returns:
        ``(parameters, accum, stat)``: new float64 arrays.
    """
    p = as_array(parameters, "parameters")
    g = as_array(gradient, "gradient")
    acc = as_array(accum, "accum")
    st = as_array(stat, "stat")
    check_same_shape("parameters", p, gradient=g, accum=acc, stat=st)
    lr = as_scalar(learning_rate, "learning_rate")
    mom = as_scalar(momentum, "momentum")
    damp = as_scalar(dampening, "dampening")
    wd = as_scalar(weight_decay, "weight_decay")

    if wd > 0:
        g = g + wd * p
    if mom > 0:
        first = st > 0
        acc_new = np.where(first, g, acc * mom + (1.0 - damp) * g)
        st_new = np.where(first, 0.0, st)
        if nesterov:
            g = g + mom * acc_new
        else:
            g = acc_new
    else:
        acc_new = acc
        st_new = st
    p_new = p - lr * g
    return p_new, acc_new, st_new
