"""AdamWeightDecay: MindSpore's ``ops.AdamWeightDecay`` (decoupled weight decay, no bias correction)."""

from __future__ import annotations

import math
from typing import Any

from ._checks import attr_bool, check_arrays, check_range
from ._elementwise import elementwise
from .adam import Scalar, _betas_epsilon


@elementwise
def _adam_weight_decay(i, var, m, v, gradient, lr, one_minus_beta1, one_minus_beta2, epsilon, decay):
    g = gradient[i]
    m_new = m[i] + (g - m[i]) * one_minus_beta1
    v_new = v[i] + (g * g - v[i]) * one_minus_beta2
    m[i] = m_new
    v[i] = v_new
    update = m_new / (math.sqrt(v_new) + epsilon) + decay * var[i]
    var[i] = var[i] - lr * update


def adam_weight_decay(
    var: Any,
    m: Any,
    v: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    decay: Scalar,
    gradient: Any,
    *,
    use_locking: bool = False,
) -> tuple[Any, Any, Any]:
    r"""AdamW update in place (MindSpore ``ops.AdamWeightDecay``; note the input order)::

        m      ← m + (g − m)·(1 − beta1)
        v      ← v + (g·g − v)·(1 − beta2)
        update = m / (sqrt(v) + epsilon) + decay·var
        var    ← var − lr·update

    No bias correction at all (no beta powers); the decay is decoupled from the gradient and scaled by lr.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        m, v: first and second moments, same shape and dtype as var, updated in place.
        lr: learning rate, >= 0.
        beta1, beta2: moment decays, in (0, 1).
        epsilon: added to ``sqrt(v)``, >= 0.
        decay: weight-decay coefficient, >= 0 (pass 0 for parameters that are not decayed).
        gradient: the gradient (read only).
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, m, v)``.

    Raises:
        TypeError: wrong types, dtypes (m and v must share var's dtype here) or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    attr_bool("use_locking", use_locking)
    batch = check_arrays({"var": var, "m": m, "v": v}, {"gradient": gradient})
    lr_ = batch.scalar("lr", lr)
    check_range("lr", lr_, 0.0)
    b1, b2, eps = _betas_epsilon(batch, beta1, beta2, epsilon)
    wd = batch.scalar("decay", decay)
    check_range("decay", wd, 0.0)
    one = batch.dtype.type(1)
    _adam_weight_decay.launch(batch.device, batch.size, *batch.flat, lr_, one - b1, one - b2, eps, wd)
    return var, m, v
