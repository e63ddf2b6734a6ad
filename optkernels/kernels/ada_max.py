"""AdaMax: MindSpore's ``ops.ApplyAdaMax``."""

from __future__ import annotations

from typing import Any

from ._checks import check_arrays, check_range
from ._elementwise import elementwise
from ._ieee import nan_max
from .adam import Scalar, _betas_epsilon


@elementwise
def _ada_max(i, var, m, v, grad, lr_t, one_minus_beta1, beta2, epsilon):
    g = grad[i]
    m_new = m[i] + (g - m[i]) * one_minus_beta1
    v_new = nan_max(beta2 * v[i], abs(g))
    m[i] = m_new
    v[i] = v_new
    var[i] = var[i] - lr_t * (m_new / (v_new + epsilon))


def apply_ada_max(
    var: Any,
    m: Any,
    v: Any,
    beta1_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    grad: Any,
) -> tuple[Any, Any, Any]:
    r"""AdaMax update in place (MindSpore ``ops.ApplyAdaMax``)::

        m   ← m + (g − m)·(1 − beta1)
        v   ← max(beta2·v, |g|)
        var ← var − (lr / (1 − beta1_power)) · (m / (v + epsilon))

    ``m`` is computed in the single-rounding "delta" form, as TensorFlow does; it reproduces MindSpore's
    published example bit for bit (``beta1·m + (1 − beta1)·g`` in float32 is 1 ulp off there). Non-finite
    values propagate (README "Non-finite values"), as in the float64 reference: an infinite m gives
    ``inf − inf = NaN`` (TensorFlow's form does too; MindSpore CPU's form keeps ±inf), and the max is NaN
    when either operand is (TensorFlow's Eigen ``cwiseMax`` may keep ``beta2·v`` for a NaN gradient).

    Args:
        var, m, v: parameter and moments, updated in place (same shape and dtype, float32/float64).
        beta1_power: ``beta1**t`` for the current step (t starts at 1), in [0, 1) (1 is an error, as on
            MindSpore's CPU).
        lr: learning rate, >= 0.
        beta1, beta2: decays, in (0, 1).
        epsilon: added to v, >= 0.
        grad: the gradient (read only).

    Returns:
        ``(var, m, v)``.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    batch = check_arrays({"var": var, "m": m, "v": v}, {"grad": grad})
    b1p = batch.scalar("beta1_power", beta1_power)
    check_range("beta1_power", b1p, 0.0, 1.0, high_open=True)
    lr_ = batch.scalar("lr", lr)
    check_range("lr", lr_, 0.0)
    b1, b2, eps = _betas_epsilon(batch, beta1, beta2, epsilon)
    one = batch.dtype.type(1)
    _ada_max.launch(batch.device, batch.size, *batch.flat, lr_ / (one - b1p), one - b1, b2, eps)
    return var, m, v
