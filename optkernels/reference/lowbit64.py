"""Float64 reference of bitsandbytes' 8-bit blockwise optimizer step (LOWBIT.md §3), beside the float32 one of
:mod:`optkernels.reference.lowbit`: the same dequantize → update → requantize, every operation in float64,
and, per element, how far a float32 computation of the step may stray from it (so a test can say where the
float32 kernels' codes must equal these and where a code is decided by float32 rounding alone).

Error model, with :math:`u = 2^{-24}` (float32 unit roundoff): a float32 state update of at most ``K = 6``
roundings differs from the exact one by at most :math:`K u\\,\\mu`, where :math:`\\mu` is the sum of the
magnitudes of its terms (``|m·β1| + |(1−β1)·g|`` for Adam's first moment); the block's absmax then differs by
at most :math:`K u \\max_{block}\\mu`, and the normalised value ``x = state/absmax`` by

.. math::

    E = K u\\,(\\mu + |x| \\max_{block}\\mu)/\\mathrm{absmax} + 2u|x|.

A code is *undecided* where the float64 ``x`` lies within ``E`` (plus a float32 rounding of the midpoint) of
the midpoint between two neighbouring codes, or where the state's sign is not decided (``|state| <= K u μ``:
the sign fix of state 1). Everywhere else a correct float32 step must give exactly these codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["optimizer_update_8bit_blockwise_f64"]

_BLOCK = 256
_U = 2.0**-24
_K = 6.0
f32 = np.float32


def _blocks(a: np.ndarray, fill: Any) -> np.ndarray:
    pad = -a.size % _BLOCK
    return np.concatenate([a.reshape(-1), np.full(pad, fill, a.dtype)]).reshape(-1, _BLOCK)


def _nearest(x: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest entry, ties to the even index; distance of ``x`` to the nearest midpoint)."""
    mids = (code[:-1] + code[1:]) / 2.0
    below = np.searchsorted(mids, x, side="left")
    tie = (below < mids.size) & (x == mids[np.minimum(below, mids.size - 1)])
    idx = np.where(tie & (below % 2 == 1), below + 1, below)
    lo = np.abs(x - mids[np.clip(below - 1, 0, mids.size - 1)])
    hi = np.abs(x - mids[np.minimum(below, mids.size - 1)])
    return idx, np.minimum(lo, hi)


def _quantize(s: np.ndarray, mu: np.ndarray, code: np.ndarray, sign_fix: bool) -> tuple:
    """(codes, absmax, undecided) of the float64 block rows ``s`` with term magnitudes ``mu``."""
    absmax = np.abs(s).max(axis=1)
    safe = np.where(absmax > 0, absmax, 1.0)[:, None]
    x = np.where(absmax[:, None] > 0, s / safe, np.nan)
    idx, gap = _nearest(np.nan_to_num(x, nan=0.0), code)
    idx = np.where(np.isnan(x), 0, idx)
    err = _K * _U * (mu + np.abs(x) * mu.max(axis=1)[:, None]) / safe + 2 * _U * np.abs(x)
    undecided = gap <= err + _U * np.abs(x) + 1e-45
    if sign_fix:
        wrong = np.signbit(code[idx]) != np.signbit(s)
        idx = np.where(wrong, np.where(s > 0, idx + 1, idx - 1), idx)
        undecided |= np.abs(s) <= _K * _U * mu
    undecided &= absmax[:, None] > 0
    return (idx % 256).astype(np.uint8), absmax, undecided


def optimizer_update_8bit_blockwise_f64(
    name: str,
    g: Any,
    p: Any,
    state1: Any,
    state2: Any,
    beta1: float,
    beta2: float,
    beta3: float,
    alpha: float,
    eps: float,
    step: int,
    lr: float,
    qmap1: Any,
    qmap2: Any,
    absmax1: Any,
    absmax2: Any,
    weight_decay: float = 0.0,
) -> dict[str, Any]:
    r"""One 8-bit blockwise step (``name`` in adam, ademamix, momentum, lion, rmsprop, adagrad; arguments as
    :func:`optkernels.reference.lowbit.optimizer_update_8bit_blockwise`) in float64 on copies.

    The hyper-parameters are taken as float32 values (what the kernels receive), then every operation is
    float64: dequantize ``code[c]·absmax`` (exact), update the states and the parameter by the formulas of
    LOWBIT.md §3 (CUDA's phantom elements of a partial last block join the absmax), absmax, nearest code
    (ties to the even index, state-1 sign fix).

    Returns
    -------
    dict
        ``p`` (float64), ``state1``, ``state2`` (uint8 codes; state2 None for 1-state rules), ``absmax1``,
        ``absmax2`` (float64), ``undecided1``, ``undecided2`` (bool, the codes a float32 step may choose
        otherwise, see the module docstring), ``absmax_tol1``, ``absmax_tol2`` (the float32 bound on each
        absmax) and ``p_tol`` (the float32 bound on each parameter:
        :math:`K u (|p| + \mathrm{update\ magnitude}) + u|p'|`, plus, for Adam and AdEMAMix, the update
        magnitude times :math:`u(\beta_1^t/(1-\beta_1^t) + \beta_2^t/(1-\beta_2^t))` (the bias corrections
        computed from float32 powers cancel); twice the step for Lion where its sign is undecided).
    """
    lr, b1, b2, b3, alpha, eps, wd = (
        float(f32(x)) for x in (lr, beta1, beta2, beta3, alpha, eps, weight_decay)
    )
    p0 = np.asarray(p, np.float64)
    shape, n = p0.shape, p0.size
    q1 = np.asarray(qmap1, f32).astype(np.float64)
    q2 = np.asarray(qmap2, f32).astype(np.float64) if qmap2 is not None else None
    s1 = np.asarray(state1).reshape(2 if name == "ademamix" else 1, n)
    a1 = np.asarray(absmax1, f32).astype(np.float64).reshape(s1.shape[0], -1)
    P, G = _blocks(p0, 0.0), _blocks(np.asarray(g, f32).astype(np.float64), 0.0)
    m = q1[_blocks(s1[0], np.uint8(128))] * a1[0][:, None]
    m2 = q1[_blocks(s1[1], np.uint8(128))] * a1[1][:, None] if name == "ademamix" else None
    v = None
    if q2 is not None and state2 is not None:
        v = (
            q2[_blocks(np.asarray(state2), np.uint8(0))]
            * np.asarray(absmax2, f32).astype(np.float64)[:, None]
        )
    corr1 = 1.0 - b1**step
    corr2 = np.sqrt(1.0 - b2**step)
    out: dict[str, Any] = {"state2": None, "absmax2": None, "undecided2": None, "absmax_tol2": None}
    mu2 = None
    sign_undecided = np.zeros_like(P, bool)
    if name in ("adam", "ademamix"):
        finite = np.isfinite(G)
        G0 = np.where(finite, G, 0.0)
        assert v is not None
        v_new = v * b2 + (1.0 - b2) * G0 * G0
        mu2 = v_new  # every term is >= 0
        m_new = m * b1 + (1.0 - b1) * G0
        mu1 = np.abs(m * b1) + np.abs((1.0 - b1) * G0)
        den = np.sqrt(v_new) + corr2 * eps
        if name == "adam":
            step_size = lr * corr2 / corr1
            upd, upd_mag = -step_size * m_new / den, step_size * mu1 / den
        else:
            assert m2 is not None
            m2_new = m2 * b3 + (1.0 - b3) * G0
            mu3 = np.abs(m2 * b3) + np.abs((1.0 - b3) * G0)
            den = np.sqrt(v_new) / corr2 + eps
            upd = -lr * (m_new / corr1 + alpha * m2_new) / den
            upd_mag = lr * (mu1 / corr1 + alpha * mu3) / den
        q = P + upd
        if wd > 0:
            q = q * (1.0 - lr * wd)
        q = np.where(finite, q, P)
        m_new, v_new = np.where(finite, m_new, 0.0), np.where(finite, v_new, 0.0)
    else:
        gs = G + wd * P if wd > 0 and name != "lion" else G
        gmag = np.abs(G) + (np.abs(wd * P) if wd > 0 and name != "lion" else 0.0)
        if name == "momentum":
            m_new = gs if step == 1 else m * b1 + gs
            mu1 = gmag if step == 1 else np.abs(m * b1) + gmag
            q, upd_mag = P - lr * m_new, lr * mu1
        elif name == "lion":
            Pd = P * (1.0 - lr * wd) if wd > 0 else P
            c = m * b1 + (1.0 - b1) * G
            sign_undecided = np.abs(c) <= _K * _U * (np.abs(m * b1) + np.abs((1.0 - b1) * G))
            q = Pd - lr * np.sign(c)
            upd_mag = np.where(sign_undecided, 2.0 * lr, 0.0) / (_K * _U)
            m_new = m * b2 + (1.0 - b2) * G
            mu1 = np.abs(m * b2) + np.abs((1.0 - b2) * G)
        else:
            if name == "rmsprop":
                m_new = m * b1 + (1.0 - b1) * (gs * gs)
                mu1 = np.abs(m * b1) + (1.0 - b1) * gmag * gmag
            else:
                m_new = m + gs * gs
                mu1 = np.abs(m) + gmag * gmag
            den = np.sqrt(m_new) + eps
            q = P - lr * G / den
            upd_mag = lr * np.abs(G) / den * (1.0 + mu1 / np.maximum(m_new, 1e-300))
    c1, top1, und1 = _quantize(m_new, mu1, q1, True)
    # the bias corrections 1 − β^t cancel: a float32 β^t's rounding is relative u·β^t/(1 − β^t) of them
    scalars = _U * (b1**step / corr1 + b2**step / (1.0 - b2**step)) if name in ("adam", "ademamix") else 0.0
    p_tol = _K * _U * (np.abs(P) + upd_mag) + scalars * upd_mag + _U * np.abs(q)
    out["p_tol"] = p_tol.reshape(-1)[:n].reshape(shape)
    out["p"] = q.reshape(-1)[:n].reshape(shape)
    out["absmax_tol1"] = _K * _U * mu1.max(axis=1)
    if name == "ademamix":
        c3, top3, und3 = _quantize(m2_new, mu3, q1, True)
        out["state1"] = np.stack([c1.reshape(-1)[:n], c3.reshape(-1)[:n]]).reshape((2,) + shape)
        out["absmax1"] = np.stack([top1, top3])
        out["undecided1"] = np.stack([und1.reshape(-1)[:n], und3.reshape(-1)[:n]]).reshape((2,) + shape)
        out["absmax_tol1"] = np.stack([out["absmax_tol1"], _K * _U * mu3.max(axis=1)])
    else:
        out["state1"] = c1.reshape(-1)[:n].reshape(shape)
        out["absmax1"] = top1
        out["undecided1"] = und1.reshape(-1)[:n].reshape(shape)
    if mu2 is not None and q2 is not None:
        c2, top2, und2 = _quantize(v_new, mu2, q2, False)
        out.update(
            state2=c2.reshape(-1)[:n].reshape(shape),
            absmax2=top2,
            undecided2=und2.reshape(-1)[:n].reshape(shape),
            absmax_tol2=_K * _U * mu2.max(axis=1),
        )
    return out
