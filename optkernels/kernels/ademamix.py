"""AdEMAMix (Pagliardini et al. 2024, "The AdEMAMix Optimizer: Better, Faster, Older"): Adam with a second,
slow momentum, as bitsandbytes' reference class computes it, with the paper's α and β3 warmups (MODERN §10)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import attr_bool, check_arrays, check_range, to_scalar
from ._elementwise import elementwise
from .adam import Scalar

__all__ = ["ademamix", "ademamix_scalars", "ademamix_schedule"]

_FLOAT64 = np.dtype(np.float64)


@elementwise
def _ademamix(
    i,
    var,
    m1,
    m2,
    nu,
    grad,
    neg_lr,
    beta1,
    one_minus_beta1,
    beta2,
    one_minus_beta2,
    beta3,
    one_minus_beta3,
    alpha,
    bias_correction1,
    root_bias_correction2,
    epsilon,
    weight_decay,
    decay_factor,
    decay_after_update,
):
    g = grad[i]
    a = m1[i] * beta1 + g * one_minus_beta1
    b = m2[i] * beta3 + g * one_minus_beta3
    v = nu[i] * beta2 + (one_minus_beta2 * g) * g
    m1[i] = a
    m2[i] = b
    nu[i] = v
    u = (a / bias_correction1 + b * alpha) / (math.sqrt(v) / root_bias_correction2 + epsilon)
    w = var[i]
    if decay_after_update:  # bitsandbytes' CUDA kernel: decay the updated parameter
        var[i] = (w + u * neg_lr) * decay_factor
    else:  # the reference (the paper's rule): lr·(u + wd·w)
        var[i] = w + (u + w * weight_decay) * neg_lr


# its three divisions and root hold the loop's loads back: prefetched, it runs at memory speed
_ademamix.prefetch = True


def ademamix_schedule(
    step: int,
    alpha: float,
    beta1: float,
    beta3: float,
    t_alpha: float | None = None,
    t_beta3: float | None = None,
) -> tuple[float, float]:
    """``(α_t, β3_t)`` of step ``t = step`` (from 1), the paper's warmups as bitsandbytes computes them::

        α_t  = min(t·α/T_α, α)                                                  (T_α given, else α)
        β3_t = min(exp(ln β1·ln β3 / ((1 − s)·ln β3 + s·ln β1)), β3),  s = t/T_β3   (T_β3 given, else β3)

    β3_t is linear in the half-life ``ln 0.5/ln β − 1`` from β1's to β3's. A ``T`` of None or 0 means no
    warmup (bitsandbytes' ``AdEMAMix``)."""
    alpha_t = min(step * alpha / t_alpha, alpha) if t_alpha else alpha
    if not t_beta3:
        return alpha_t, beta3
    ln_beta1, ln_beta3 = math.log(beta1), math.log(beta3)
    s = step / t_beta3
    return alpha_t, min(math.exp((ln_beta1 * ln_beta3) / ((1 - s) * ln_beta3 + s * ln_beta1)), beta3)


def ademamix_scalars(
    dtype: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    beta3: Scalar,
    alpha: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    step: Scalar,
    decay_after_update: bool = False,
) -> tuple:
    """The element function's scalars in ``dtype``, after range checks (``beta3`` and ``alpha``: this step's
    values, see :func:`ademamix_schedule`): ``−lr``, each β and ``1 − β``, ``α``, ``1 − β1^t``,
    ``√(1 − β2^t)``, ``ε``, ``wd``, ``1 − lr·wd`` and the flag. Host values are computed in float64 and
    rounded once."""
    lr_, b1, b2, b3, a, eps, wd, t = (
        float(to_scalar(name, value, _FLOAT64))
        for name, value in (
            ("lr", lr),
            ("beta1", beta1),
            ("beta2", beta2),
            ("beta3", beta3),
            ("alpha", alpha),
            ("epsilon", epsilon),
            ("weight_decay", weight_decay),
            ("step", step),
        )
    )
    check_range("lr", lr_, 0.0)
    for name, beta in (("beta1", b1), ("beta2", b2), ("beta3", b3)):
        check_range(name, beta, 0.0, 1.0, high_open=True)
    check_range("alpha", a, 0.0)
    check_range("epsilon", eps, 0.0)
    check_range("weight_decay", wd, 0.0)
    check_range("step", t, 1.0)
    c = np.dtype(dtype).type
    return (
        c(-lr_),
        c(b1),
        c(1.0 - b1),
        c(b2),
        c(1.0 - b2),
        c(b3),
        c(1.0 - b3),
        c(a),
        c(1.0 - b1**t),
        c((1.0 - b2**t) ** 0.5),
        c(eps),
        c(wd),
        c(1.0 - lr_ * wd),
        bool(decay_after_update),
    )


def ademamix(
    var: Any,
    m1: Any,
    m2: Any,
    nu: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    beta3: Scalar,
    alpha: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    step: Scalar,
    *,
    decay_after_update: bool = False,
) -> tuple[Any, Any, Any, Any]:
    r"""One AdEMAMix step in place (``beta3`` and ``alpha``: this step's values, after any warmup; see
    :func:`ademamix_schedule`)::

        m1 ← β1·m1 + (1 − β1)·g;  m2 ← β3·m2 + (1 − β3)·g;  ν ← β2·ν + (1 − β2)·g²
        u  = (m1/(1 − β1^t) + α·m2) / (√ν/√(1 − β2^t) + ε)        (the slow m2 is not bias-corrected)
        var ← var − lr·(u + wd·var)                                 (decay of the old var)
        var ← (var − lr·u)·(1 − lr·wd)                              (decay_after_update)

    ``decay_after_update`` is bitsandbytes' CUDA kernel's order (it decays the updated parameter, a
    difference of lr²·wd·u); the default is its reference class's and the paper's. Arithmetic in the arrays'
    dtype (float16/bfloat16 storage: float32).

    Args:
        var: parameter, updated in place (float16/bfloat16/float32/float64, C-contiguous, NumPy or CUDA).
        m1, m2: fast and slow momenta, same shape and dtype, updated in place.
        nu: second moment, same shape and dtype, updated in place.
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        beta1, beta2, beta3: decays of m1, nu and m2, in [0, 1).
        alpha: weight of the slow momentum, >= 0.
        epsilon: added to the corrected root, >= 0.
        weight_decay: decoupled decay coefficient (times lr), >= 0.
        step: t, this step's number, >= 1 (bias corrections).
        decay_after_update: bitsandbytes' CUDA order of the decay.

    Returns:
        ``(var, m1, m2, nu)``, the updated arrays themselves.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    after = attr_bool("decay_after_update", decay_after_update)
    batch = check_arrays({"var": var, "m1": m1, "m2": m2, "nu": nu}, {"grad": grad})
    scalars = ademamix_scalars(
        batch.dtype, lr, beta1, beta2, beta3, alpha, epsilon, weight_decay, step, after
    )
    _ademamix.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, m1, m2, nu
