"""SGD with momentum, dampening, L2 weight decay and Nesterov: MindSpore's ``ops.SGD``."""

from __future__ import annotations

from typing import Any

from ._checks import attr_bool, attr_float, check_arrays, check_range
from ._elementwise import elementwise
from .adam import Scalar


@elementwise
def _sgd(
    i, parameters, accum, stat, gradient, learning_rate, momentum, one_minus_dampening, weight_decay, nesterov
):
    g = gradient[i]
    if weight_decay > 0:
        g = g + weight_decay * parameters[i]
    if momentum > 0:
        if stat[i] > 0:
            a = g
            stat[i] = 0
        else:
            a = accum[i] * momentum + one_minus_dampening * g
        accum[i] = a
        if nesterov:
            g = g + momentum * a
        else:
            g = a
    parameters[i] = parameters[i] - learning_rate * g


def sgd(
    parameters: Any,
    gradient: Any,
    learning_rate: Scalar,
    accum: Any,
    momentum: Scalar,
    stat: Any,
    *,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> tuple[Any, Any, Any]:
    r"""Stochastic gradient descent in place (MindSpore ``ops.SGD``, same on its CPU and GPU)::

        g ← g + weight_decay·p                                  (if weight_decay > 0)
        if momentum > 0:
            if stat > 0:  accum ← g;  stat ← 0                  (first step: no dampening)
            else:         accum ← accum·momentum + (1 − dampening)·g
            g ← g + momentum·accum   (nesterov)   or   g ← accum
        p ← p − learning_rate·g

    ``stat`` is a per-element "not started yet" flag (MindSpore's nn.SGD fills it with ones and accum with
    zeros). With ``momentum <= 0`` accum and stat are left alone. MindSpore 2.x's ``nn.SGD`` (and
    :class:`optkernels.optimizers.SGD`) decays through the optimizer's pipeline and calls this op with
    ``weight_decay=0``.

    Args:
        parameters: updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        gradient: the gradient (read only), same shape and dtype.
        learning_rate: >= 0.
        accum: momentum buffer, updated in place.
        momentum: scalar (any value; <= 0 disables momentum, as in the kernel).
        stat: first-step flags, updated in place.
        dampening: float attribute.
        weight_decay: float attribute, L2 coefficient added to the gradient when > 0.
        nesterov: bool attribute; requires ``dampening == 0``.

    Returns:
        ``(parameters, accum, stat)`` (MindSpore returns only parameters).

    Raises:
        TypeError: wrong types, dtypes or devices; ``dampening``/``weight_decay`` not a float.
        ValueError: shapes, layout; ``nesterov`` with non-zero dampening; learning_rate < 0.
    """
    damp = attr_float("dampening", dampening)
    wd = attr_float("weight_decay", weight_decay)
    nest = attr_bool("nesterov", nesterov)
    if nest and damp != 0.0:
        raise ValueError(f"nesterov requires dampening == 0, got dampening={damp}")
    batch = check_arrays({"parameters": parameters, "accum": accum, "stat": stat}, {"gradient": gradient})
    lr = batch.scalar("learning_rate", learning_rate)
    check_range("learning_rate", lr, 0.0)
    mom = batch.scalar("momentum", momentum)
    one = batch.dtype.type(1)
    _sgd.launch(
        batch.device,
        batch.size,
        *batch.flat,
        lr,
        mom,
        one - batch.dtype.type(damp),
        batch.dtype.type(wd),
        nest,
    )
    return parameters, accum, stat
