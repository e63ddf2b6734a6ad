"""ADOPT (Taniguchi et al. 2024, "ADOPT: Modified Adam Can Converge with Any β2"), the authors' current
clipped algorithm as ``torch-adopt`` 0.1.0 computes it (MODERN §9.1)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import attr_bool, check_arrays, check_range, to_scalar
from ._elementwise import elementwise
from ._torch_lerp import lerp, lerp_scalars
from .adam import Scalar

__all__ = ["adopt", "adopt_scalars"]

_FLOAT64 = np.dtype(np.float64)


@elementwise
def _adopt(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    grad,
    lr,
    weight,
    one_minus_weight,
    small,
    beta2,
    one_minus_beta2,
    epsilon,
    clip,
    coupled,
    decoupled,
    first,
):
    g = grad[i]
    if coupled != 0:
        g = g + var[i] * coupled
    v = exp_avg_sq[i]
    if first:  # the first call only sets v = g² (no decay, no move)
        exp_avg_sq[i] = v + g * g
    else:
        w = var[i]
        if decoupled != 0:
            w = w + w * decoupled
        d = math.sqrt(v)
        if d < epsilon:  # clamp(√v, ε): NaN passes
            d = epsilon
        n = g / d
        if n > clip:
            n = clip
        elif n < -clip:
            n = -clip
        m = lerp(exp_avg[i], n, weight, one_minus_weight, small)
        exp_avg[i] = m
        var[i] = w - m * lr
        exp_avg_sq[i] = v * beta2 + (one_minus_beta2 * g) * g


# its root and division hold the loop's loads back: prefetched, it runs at memory speed
_adopt.prefetch = True


def adopt_scalars(
    dtype: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    step: Scalar,
    clip: Scalar = math.inf,
    decouple: bool = False,
    coupled: bool = True,
) -> tuple:
    """The element function's scalars in ``dtype``, after range checks: ``lr``, the lerp weight ``1 − β1``
    (see :func:`._torch_lerp.lerp_scalars`), ``β2, 1 − β2, ε``, the clip bound, the coupled decay
    (``wd`` when not ``decouple`` and ``coupled``, else 0), the decoupled factor ``−lr·wd`` (``decouple``)
    and ``step == 0``. Host values are computed in float64 and rounded once, as torch converts them."""
    lr_, b1, b2, eps, wd, k, c = (
        float(to_scalar(name, value, _FLOAT64))
        for name, value in (
            ("lr", lr),
            ("beta1", beta1),
            ("beta2", beta2),
            ("epsilon", epsilon),
            ("weight_decay", weight_decay),
            ("step", step),
            ("clip", clip),
        )
    )
    check_range("step", k, 0.0)
    check_range("lr", lr_, 0.0)
    check_range("beta1", b1, 0.0, 1.0, high_open=True)
    check_range("beta2", b2, 0.0, 1.0, high_open=True)
    check_range("epsilon", eps, 0.0)
    check_range("weight_decay", wd, 0.0)
    check_range("clip", c, 0.0)
    t = np.dtype(dtype).type
    decoupled = -lr_ * wd if decouple and wd != 0 else 0.0  # torch-adopt skips a zero decay
    return (
        t(lr_),
        *lerp_scalars(dtype, 1.0 - b1),
        t(b2),
        t(1.0 - b2),
        t(eps),
        t(c),
        t(wd if coupled and not decouple else 0.0),
        t(decoupled),
        k == 0,
    )


def adopt(
    var: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    step: Scalar,
    clip: Scalar = math.inf,
    *,
    decouple: bool = False,
) -> tuple[Any, Any, Any]:
    r"""One ADOPT call in place (``step`` = k, the number of earlier calls: 0 on the first)::

        g ← g + wd·var                                      (not decouple)
        k = 0:  exp_avg_sq ← exp_avg_sq + g²;  nothing else (no decay, no move)
        k ≥ 1:  var ← var − lr·wd·var                        (decouple)
                ĝ = clamp(g / max(√exp_avg_sq, ε), −clip, clip)      (the PREVIOUS exp_avg_sq)
                exp_avg ← lerp(exp_avg, ĝ, 1 − β1);  var ← var − lr·exp_avg
                exp_avg_sq ← β2·exp_avg_sq + (1 − β2)·g²

    The authors' clip bound for the k-th update is ``clip = k**0.25`` (``clip_lambda(k)``); ``inf`` turns
    clipping off. Arithmetic in the arrays' dtype (float16/bfloat16 storage: float32).

    Args:
        var: parameter, updated in place (float16/bfloat16/float32/float64, C-contiguous, NumPy or CUDA).
        exp_avg: first moment, same shape and dtype, updated in place.
        exp_avg_sq: second moment, same shape and dtype, updated in place.
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        beta1, beta2: moment decays, in [0, 1).
        epsilon: lower bound of ``√exp_avg_sq``, >= 0.
        weight_decay: >= 0; coupled (added to the gradient) unless ``decouple``.
        step: the number of earlier calls, >= 0 (0: the first call).
        clip: the clip bound, >= 0 (default: no clipping).
        decouple: decoupled decay ``var·(1 − lr·wd)`` instead of the coupled one.

    Returns:
        ``(var, exp_avg, exp_avg_sq)``, the updated arrays themselves.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    flag = attr_bool("decouple", decouple)
    batch = check_arrays({"var": var, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}, {"grad": grad})
    scalars = adopt_scalars(batch.dtype, lr, beta1, beta2, epsilon, weight_decay, step, clip, flag)
    _adopt.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, exp_avg, exp_avg_sq
