"""LARS: MindSpore's ``ops.LARSUpdate`` (the layer-wise trust ratio applied to a gradient)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._checks import attr_bool, attr_float, check_arrays, check_range, output_like
from ._elementwise import elementwise
from .adam import Scalar


@elementwise
def _lars(i, out, weight, gradient, coefficient, weight_decay):
    out[i] = coefficient * (gradient[i] + weight_decay * weight[i])


def lars_update(
    weight: Any,
    gradient: Any,
    norm_weight: Scalar,
    norm_gradient: Scalar,
    weight_decay: Scalar,
    learning_rate: Scalar,
    *,
    epsilon: float = 1e-5,
    hyperpara: float = 0.001,
    use_clip: bool = False,
    out: Any = None,
) -> Any:
    r"""The LARS-scaled gradient (MindSpore ``ops.LARSUpdate``); nothing is updated in place::

        wn    = sqrt(norm_weight),  gn = sqrt(norm_gradient)
        coeff = hyperpara·wn / (gn + weight_decay·wn + epsilon)
        coeff = clip(coeff / learning_rate, 0, 1)           (only if use_clip)
        out   = coeff·(gradient + weight_decay·weight)

    ``norm_weight`` and ``norm_gradient`` are SUMS OF SQUARES (what MindSpore's nn.LARS passes from
    SquareSumAll), not norms. ``learning_rate`` is used only when ``use_clip``. A zero weight norm gives a
    zero gradient (no special case).

    Args:
        weight: the parameter (read only; float32/float64, NumPy or CUDA).
        gradient: its gradient, same shape and dtype (read only).
        norm_weight: ``sum(weight²)``, >= 0.
        norm_gradient: ``sum(gradient²)``, >= 0.
        weight_decay: >= 0.
        learning_rate: > 0 when use_clip.
        epsilon: float attribute added to the denominator.
        hyperpara: float attribute, the trust coefficient.
        use_clip: bool attribute.
        out: optional output array (optkernels extension, for allocation-free use).

    Returns:
        The new gradient.

    Raises:
        TypeError: wrong types, dtypes or devices; attributes of the wrong type.
        ValueError: shapes, or a scalar out of range.
    """
    eps = attr_float("epsilon", epsilon)
    trust = attr_float("hyperpara", hyperpara)
    clip = attr_bool("use_clip", use_clip)
    batch = check_arrays({}, {"weight": weight, "gradient": gradient})
    dt = batch.dtype.type
    nw = batch.scalar("norm_weight", norm_weight)
    ng = batch.scalar("norm_gradient", norm_gradient)
    wd = batch.scalar("weight_decay", weight_decay)
    lr = batch.scalar("learning_rate", learning_rate)
    check_range("norm_weight", nw, 0.0)
    check_range("norm_gradient", ng, 0.0)
    check_range("weight_decay", wd, 0.0)
    check_range("learning_rate", lr, 0.0, low_open=clip)
    result, flat_out = output_like("out", out, weight, batch)
    with np.errstate(all="ignore"):  # IEEE results (inf/NaN norms propagate), without NumPy warnings
        wn = np.sqrt(nw)
        coeff = dt(trust) * wn / (np.sqrt(ng) + wd * wn + dt(eps))
        if clip:
            coeff = min(max(coeff / lr, dt(0)), dt(1))
    _lars.launch(batch.device, batch.size, flat_out, *batch.flat, coeff, wd)
    return result
