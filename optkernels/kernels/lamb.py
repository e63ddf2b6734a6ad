"""Lamb: the per-parameter update of MindSpore's nn.Lamb (the 2.0 inner ``Lamb`` primitive)."""

from __future__ import annotations

import math
from typing import Any

from ._checks import check_arrays, check_range
from ._elementwise import chunked_sums_of_squares, elementwise
from ._upcast import via_float32
from .adam import Scalar, _betas_epsilon


@chunked_sums_of_squares
def _lamb_moments(
    i, var, m, v, gradient, beta1, one_minus_beta1, beta2, one_minus_beta2, bias1, bias2, epsilon, decay
):
    g = gradient[i]
    m_new = beta1 * m[i] + one_minus_beta1 * g
    v_new = beta2 * v[i] + one_minus_beta2 * (g * g)
    m[i] = m_new
    v[i] = v_new
    w = var[i]
    return w, (m_new / bias1) / math.sqrt(v_new / bias2 + epsilon) + decay * w


@elementwise
def _lamb_apply(i, var, m, v, trust_lr, bias1, bias2, epsilon, decay):
    w = var[i]
    update = (m[i] / bias1) / (math.sqrt(v[i] / bias2) + epsilon) + decay * w
    var[i] = w - trust_lr * update


@via_float32()
def lamb(
    var: Any,
    m: Any,
    v: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    decay: Scalar,
    global_step: Scalar,
    gradient: Any,
) -> tuple[Any, Any, Any]:
    r"""One Lamb step for one parameter, in place (MindSpore nn.Lamb; inputs in the order of the 2.0 inner
    ``Lamb`` primitive)::

        m ← beta1·m + (1 − beta1)·g;   v ← beta2·v + (1 − beta2)·g²
        m̂ = m / (1 − beta1^t);        v̂ = v / (1 − beta2^t)
        update = m̂ / (sqrt(v̂) + epsilon) + decay·var
        w_norm = ‖var‖₂ (old var);     g_norm = ‖m̂ / sqrt(v̂ + epsilon) + decay·var‖₂   (epsilon inside)
        trust  = w_norm / g_norm if w_norm > 0 and g_norm > 0 else 1, clipped to [0, 10]
        var ← var − (trust·lr)·update

    A NaN trust ratio (an infinite weight with ``decay > 0``: inf/inf) is not clipped: it propagates to
    every element of var, as in the float64 reference (MindSpore's GPU kernel clips it to 0 instead).
    ``t = global_step`` is the step count after its increment (1 on the first step). The two norms keep
    MindSpore's mismatch of epsilon inside/outside the square root, for fidelity. They are computed in
    float64 over fixed chunks and combined exactly (``math.fsum``), so the result does not depend on the
    thread count; trust·lr is then rounded to the arrays' dtype. On CUDA the same chunking is used, but the
    GPU may fuse multiply-adds, so results can differ from the CPU's in the last bits.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        m, v: moments, same shape and dtype, updated in place.
        lr: learning rate, >= 0.
        beta1, beta2: in (0, 1).
        epsilon: >= 0.
        decay: decoupled weight decay for this parameter (0 when its decay flag is off), >= 0.
        global_step: t >= 1.
        gradient: the gradient (read only).

    Returns:
        ``(var, m, v)`` (MindSpore's primitive returns var).

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes, layout or a scalar out of range.
    """
    batch = check_arrays({"var": var, "m": m, "v": v}, {"gradient": gradient})
    lr_ = batch.scalar("lr", lr)
    check_range("lr", lr_, 0.0)
    b1, b2, eps = _betas_epsilon(batch, beta1, beta2, epsilon)
    wd = batch.scalar("decay", decay)
    check_range("decay", wd, 0.0)
    t = batch.scalar("global_step", global_step)
    check_range("global_step", t, 1.0)
    one = batch.dtype.type(1)
    bias1, bias2 = one - b1**t, one - b2**t
    w_sq, r_sq = _lamb_moments.launch(
        batch.device, batch.size, *batch.flat, b1, one - b1, b2, one - b2, bias1, bias2, eps, wd
    )
    w_norm, g_norm = math.sqrt(w_sq), math.sqrt(r_sq)
    trust = w_norm / g_norm if w_norm > 0.0 and g_norm > 0.0 else 1.0
    if not math.isnan(trust):  # a NaN trust ratio (inf/inf) propagates (the float64 reference's policy)
        trust = min(max(trust, 0.0), 10.0)
    var_flat, m_flat, v_flat, _ = batch.flat
    _lamb_apply.launch(
        batch.device,
        batch.size,
        var_flat,
        m_flat,
        v_flat,
        batch.dtype.type(trust) * lr_,
        bias1,
        bias2,
        eps,
        wd,
    )
    return var, m, v
