"""LARS gradient scaling: ``mindspore.ops.LARSUpdate`` (Ascend ``LarsV2Update``; KERNELS.md section 15)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["lars_update"]


@ieee
def lars_update(
    weight: ArrayLike,
    gradient: ArrayLike,
    norm_weight: ArrayLike,
    norm_gradient: ArrayLike,
    weight_decay: ArrayLike,
    learning_rate: ArrayLike,
    *,
    epsilon: float = 1e-5,
    hyperpara: float = 0.001,
    use_clip: bool = False,
) -> tuple[np.ndarray]:
    """Layer-wise adaptive rate scaling of the gradient, ``mindspore.ops.LARSUpdate``.

    Update rule (wd = weight_decay)::

        wn    = sqrt(norm_weight)                         # norm_weight   = sum(weight**2)
        gn    = sqrt(norm_gradient)                       # norm_gradient = sum(gradient**2)
        coeff = hyperpara * wn / (gn + wd * wn + epsilon)
        if use_clip: coeff = max(min(coeff / learning_rate, 1), 0)
        new_gradient = coeff * (gradient + wd * weight)

    ``norm_weight`` and ``norm_gradient`` are sums of squares (what ``SquareSumAll`` gives), not norms.
    Nothing is updated in place; ``learning_rate`` only matters when ``use_clip`` is set. A zero weight
    norm gives ``coeff = 0`` (no special case). The nn.LARS docstring omits epsilon; the kernel (and this
    reference) adds it to the denominator.

    Args:
        weight: parameter tensor.
        gradient: gradient, same shape as ``weight``.
        norm_weight: sum of squares of ``weight`` (scalar).
        norm_gradient: sum of squares of ``gradient`` (scalar).
        weight_decay: weight-decay coefficient (scalar).
        learning_rate: learning rate (scalar; used only with ``use_clip``).
        epsilon: MindSpore attribute (default 1e-5).
        hyperpara: MindSpore attribute, the trust coefficient (default 0.001).
        use_clip: MindSpore attribute (default False).

    Returns:
        ``(new_gradient,)``: a one-element tuple holding a new float64 array.
    """
    w = as_array(weight, "weight")
    g = as_array(gradient, "gradient")
    check_same_shape("weight", w, gradient=g)
    nw = as_scalar(norm_weight, "norm_weight")
    ng = as_scalar(norm_gradient, "norm_gradient")
    wd = as_scalar(weight_decay, "weight_decay")
    lr = as_scalar(learning_rate, "learning_rate")
    eps = as_scalar(epsilon, "epsilon")
    hp = as_scalar(hyperpara, "hyperpara")

    wn = np.sqrt(nw)
    gn = np.sqrt(ng)
    coeff = hp * wn / (gn + wd * wn + eps)
    if use_clip:
        coeff = np.maximum(np.minimum(coeff / lr, 1.0), 0.0)
    return (coeff * (g + wd * w),)
