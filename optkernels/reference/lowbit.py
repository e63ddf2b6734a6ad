"""Reference of the low-bit optimizer state (LOWBIT.md): bitsandbytes' dynamic map, blockwise quantization,
the 8-bit blockwise optimizer step and its 32-bit twin, FBGEMM's row-wise Adagrad and torchdistx's
Kahan-compensated ``AnyPrecisionAdamW``.

Unlike the rest of :mod:`optkernels.reference`, the quantized step is computed in NumPy **float32**, in the
association order of LOWBIT.md §3: its contract is the float32 arithmetic of bitsandbytes' kernels (which
code a state gets depends on its float32 value), so a float64 computation could not check codes and absmax
bit for bit. It is written independently of the kernels: whole-array NumPy operations, the nearest code by
``np.searchsorted`` over the float32 midpoints, the dynamic map by the scalar recipe of LOWBIT.md §1.1.
Row-wise Adagrad is float64, as the rest of the reference; so is ``AnyPrecisionAdamW``'s step (each
operation rounded to its output's dtype). Functions are pure: they return new arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import as_array, ieee
from .sparse import merge_duplicates

__all__ = [
    "dynamic_map",
    "quantize_blockwise",
    "dequantize_blockwise",
    "optimizer_update_8bit_blockwise",
    "optimizer_update_32bit",
    "rowwise_adagrad",
    "any_precision_adamw",
]

f32 = np.float32
_BLOCK = 256


def dynamic_map(signed: bool = True) -> np.ndarray:
    """bitsandbytes' ``create_dynamic_map(signed, 7, 8)`` (LOWBIT.md §1.1): float32 ``linspace`` terms as
    one fused multiply-add each (exact in float64, rounded once), interval midpoints scaled per decade."""

    def linspace(n: int) -> list:
        start, end = f32(0.1), f32(1.0)
        step = f32(f32(end - start) / f32(n - 1))
        return [
            f32(np.float64(start) + np.float64(step) * k)
            if k < n // 2
            else f32(np.float64(end) - np.float64(step) * (n - 1 - k))
            for k in range(n)
        ]

    values = [f32(0.0), f32(1.0)]
    for i in range(7):
        bounds = linspace(2**i + 1 if signed else 2 ** (i + 1) + 1)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            x = f32(f32(10.0 ** (i - 6)) * f32(f32(lo + hi) / f32(2)))
            values += [x, -x] if signed else [x]
    return np.array(sorted(values), dtype=f32)


def _nearest(x: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Nearest entry of the ascending table; exactly on a float32 midpoint → the even index; NaN → 0."""
    mids = (code[:-1] + code[1:]) * f32(0.5)
    below = np.searchsorted(mids, x, side="left")  # midpoints strictly below x
    tie = (below < 255) & (x == mids[np.minimum(below, 254)])
    idx = np.where(tie & (below % 2 == 1), below + 1, below)
    return np.where(np.isnan(x), 0, idx).astype(np.uint8)


def _blocks(a: np.ndarray, blocksize: int, fill: Any) -> np.ndarray:
    n = a.size
    pad = -n % blocksize
    return np.concatenate([a.reshape(-1), np.full(pad, fill, a.dtype)]).reshape(-1, blocksize)


def _absmax(x: np.ndarray) -> np.ndarray:
    """Per row max |x| starting from −FLT_MAX, NaN ignored (CUDA ``fmaxf``)."""
    start = np.full((x.shape[0], 1), -np.finfo(f32).max, f32)
    return np.fmax.reduce(np.concatenate([start, np.abs(x)], axis=1), axis=1)


@ieee
def quantize_blockwise(A: Any, code: Any = None, blocksize: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, absmax)`` of bitsandbytes' CUDA ``quantize_blockwise`` (LOWBIT.md §2)."""
    a = np.asarray(A, dtype=f32)
    code = dynamic_map(True) if code is None else np.asarray(code, f32)
    n = a.size
    rows = _blocks(a, blocksize, f32(0))
    absmax = _absmax(rows)
    if n % blocksize:  # the zero padding must not enter the maximum
        last = a.reshape(-1)[(n // blocksize) * blocksize :]
        absmax[-1] = _absmax(last.reshape(1, -1))[0]
    x = rows * (f32(1) / absmax)[:, None]
    return _nearest(x, code).reshape(-1)[:n].reshape(a.shape), absmax


def dequantize_blockwise(codes: Any, absmax: Any, code: Any = None, blocksize: int = 4096) -> np.ndarray:
    """float32 ``code[codes]·absmax[block]``."""
    c = np.asarray(codes)
    code = dynamic_map(True) if code is None else np.asarray(code, f32)
    block = np.arange(c.size) // blocksize
    return (code[c.reshape(-1)] * np.asarray(absmax, f32).reshape(-1)[block]).reshape(c.shape)


def _scalars(step: int, lr: float, b1: float, b2: float, eps: float, wd: float) -> dict:
    lr, b1, b2, eps, wd = f32(lr), f32(b1), f32(b2), f32(eps), f32(wd)
    corr1 = f32(1) - f32(np.float64(b1) ** step)
    corr2 = f32(np.sqrt(np.float64(f32(1) - f32(np.float64(b2) ** step))))
    return dict(
        corr1=corr1,
        corr2=corr2,
        step_size=f32(f32(-lr * corr2) / corr1),
        eps_corr2=f32(corr2 * eps),
        decay=f32(1) - f32(lr * wd),
    )


def _rule(
    name: str,
    p: np.ndarray,
    g: np.ndarray,
    m1: np.ndarray,
    m2: np.ndarray,
    v: np.ndarray,
    step: int,
    lr: float,
    b1: float,
    b2: float,
    b3: float,
    alpha: float,
    eps: float,
    wd: float,
    fold_all: bool,
) -> tuple:
    """Whole-array float32 update of LOWBIT.md §3.1-3.3; returns (p', m1', m2', v')."""
    lr, b1, b2, b3, alpha, eps, wd = (f32(x) for x in (lr, b1, b2, b3, alpha, eps, wd))
    s = _scalars(step, lr, b1, b2, eps, wd)
    one = f32(1)
    if name in ("adam", "ademamix"):
        finite = np.isfinite(g)
        g0 = np.where(finite, g, f32(0))
        v = v * b2 + ((one - b2) * g0) * g0
        m1 = m1 * b1 + (one - b1) * g0
        if name == "adam":
            q = p + s["step_size"] * (m1 / (np.sqrt(v) + s["eps_corr2"]))
        else:
            m2 = m2 * b3 + (one - b3) * g0
            q = p - lr * ((m1 / s["corr1"] + alpha * m2) / (np.sqrt(v) / s["corr2"] + eps))
        if wd > 0:
            q = q * s["decay"]
        zero = f32(0)
        return (
            np.where(finite, q, p),
            np.where(finite, m1, zero),
            np.where(finite, m2, zero),
            np.where(finite, v, zero),
        )
    gs = g + p * wd if wd > 0 and (fold_all or name != "lion") else g
    if name == "lion" and wd > 0 and not fold_all:
        p = p * s["decay"]
    numerator = gs if fold_all else g
    if name == "momentum":
        m1 = gs.copy() if step == 1 else m1 * b1 + gs
        return p - lr * m1, m1, m2, v
    if name == "lion":
        u = lr * np.sign(m1 * b1 + (one - b1) * gs).astype(f32)
        u = np.where(np.isnan(u), f32(0), u)
        return p - u, m1 * b2 + (one - b2) * gs, m2, v
    m1 = m1 * b1 + (one - b1) * (gs * gs) if name == "rmsprop" else m1 + gs * gs
    return p - lr * (numerator / (np.sqrt(m1) + eps)), m1, m2, v


def _signed_codes(s: np.ndarray, top: np.ndarray, code: np.ndarray) -> np.ndarray:
    c = _nearest(s / top[:, None], code).astype(np.int32)
    wrong = np.signbit(code[c]) != np.signbit(s)
    c = np.where(wrong, np.where(s > 0, c + 1, c - 1), c)
    return (c % 256).astype(np.uint8)


@ieee
def optimizer_update_8bit_blockwise(
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
) -> tuple:
    """bitsandbytes' CUDA 8-bit blockwise step (LOWBIT.md §3) on copies; returns ``(p, state1, state2,
    absmax1, absmax2)`` (state2/absmax2 None for 1-state rules), float32 and uint8 arrays.

    Each block of 256 is padded with CUDA's phantom elements (``p = g = 0``, codes 128 / 0), which join the
    absmax maxima and are dropped afterwards.
    """
    p0 = np.asarray(p, f32)
    shape, n = p0.shape, p0.size
    two = name in ("adam", "ademamix")
    q1 = np.asarray(qmap1, f32)
    q2 = np.asarray(qmap2, f32) if two else None
    s1 = np.asarray(state1).reshape(2 if name == "ademamix" else 1, n)
    a1 = np.asarray(absmax1, f32).reshape(s1.shape[0], -1)
    P, G = _blocks(p0, _BLOCK, f32(0)), _blocks(np.asarray(g, f32), _BLOCK, f32(0))
    m1 = q1[_blocks(s1[0], _BLOCK, np.uint8(128))] * a1[0][:, None]
    m2 = (
        q1[_blocks(s1[1], _BLOCK, np.uint8(128))] * a1[1][:, None]
        if name == "ademamix"
        else np.zeros_like(m1)
    )
    if q2 is not None:
        v = q2[_blocks(np.asarray(state2), _BLOCK, np.uint8(0))] * np.asarray(absmax2, f32)[:, None]
    else:
        v = np.zeros_like(m1)
    P, m1, m2, v = _rule(
        name, P, G, m1, m2, v, step, lr, beta1, beta2, beta3, alpha, eps, weight_decay, False
    )
    top1, top2, top3 = _absmax(m1), _absmax(v), _absmax(m2)
    c1 = _signed_codes(m1, top1, q1).reshape(-1)[:n]
    new_p = P.reshape(-1)[:n].reshape(shape)
    if name == "ademamix":
        c3 = _signed_codes(m2, top3, q1).reshape(-1)[:n]
        state1_new, absmax1_new = np.stack([c1, c3]).reshape((2,) + shape), np.stack([top1, top3])
    else:
        state1_new, absmax1_new = c1.reshape(shape), top1
    if q2 is None:
        return new_p, state1_new, None, absmax1_new, None
    c2 = _nearest(v / top2[:, None], q2).reshape(-1)[:n].reshape(shape)
    return new_p, state1_new, c2, absmax1_new, top2


@ieee
def optimizer_update_32bit(
    name: str,
    g: Any,
    p: Any,
    state1: Any,
    beta1: float,
    eps: float,
    step: int,
    lr: float,
    state2: Any = None,
    beta2: float = 0.0,
    beta3: float = 0.0,
    alpha: float = 0.0,
    weight_decay: float = 0.0,
) -> tuple:
    """bitsandbytes' 32-bit step (float32 states; weight decay folded into every 1-state gradient);
    returns ``(p, state1, state2)`` copies (state2 None for 1-state rules)."""
    p0, g0 = np.asarray(p, f32), np.asarray(g, f32)
    s1 = np.asarray(state1, f32)
    m1, m2 = (s1[0], s1[1]) if name == "ademamix" else (s1, np.zeros_like(p0))
    v = np.asarray(state2, f32) if state2 is not None else np.zeros_like(p0)
    q, m1, m2, v = _rule(
        name, p0, g0, m1, m2, v, step, lr, beta1, beta2, beta3, alpha, eps, weight_decay, True
    )
    s1_new = np.stack([m1, m2]) if name == "ademamix" else m1
    return q, s1_new, (v if name in ("adam", "ademamix") else None)


@ieee
def rowwise_adagrad(
    var: Any,
    momentum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float = 0.01,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mode: str = "none",
    max_norm: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """FBGEMM's exact row-wise Adagrad (LOWBIT.md §8.2) in float64: ``(var, momentum)`` new arrays. Dense
    gradient (``indices`` None): every row; row-sparse: duplicates summed (:func:`merge_duplicates`,
    out-of-range indices dropped), one update per distinct row. Squares summed left to right over a row."""
    w, h = as_array(var, "var"), as_array(momentum, "momentum")
    g = as_array(grad, "grad")
    if indices is None:
        rows = np.arange(w.shape[0])
    else:
        rows, g = merge_duplicates(np.asarray(indices), g, w.shape[0])
        rows = np.asarray(rows, np.int64)
    w2, g2 = w.reshape(w.shape[0], -1), g.reshape(len(rows), -1)
    d = w2.shape[1]
    for j, r in enumerate(rows):
        gh = g2[j] + weight_decay * w2[r] if weight_decay_mode == "l2" else g2[j]
        total = 0.0
        for c in range(d):
            total += gh[c] * gh[c]
        h[r] += total / d
        mult = lr / (np.sqrt(h[r]) + eps)
        corr = {"l2": 1 - mult * weight_decay, "decoupled": 1 - lr * weight_decay}.get(weight_decay_mode, 1.0)
        new = corr * w2[r] - mult * g2[j]
        if max_norm > 0:
            norm = np.sqrt(sum(x * x for x in new))
            if norm > max_norm:
                new = new * (max_norm / norm)
        w2[r] = new
    return w, h


def _rounded(x: np.ndarray, dtype: Any) -> np.ndarray:
    """A float64 result of one float32 operation (exact in float64, or within float64 rounding of +, −, ×,
    ÷, √ of float32 operands: innocuous double rounding) stored in ``dtype``: rounded to float32, then to
    ``dtype`` (the float32 math and storage of torch's bfloat16 CPU ops), back as float64."""
    return np.asarray(x, np.float64).astype(f32).astype(dtype).astype(np.float64)


def _fma_f32(product: np.ndarray, addend: np.ndarray) -> np.ndarray:
    """``product + addend`` rounded once to float32, for an exact float64 ``product`` (of two float32
    values) and a float32-valued ``addend``: the float64 sum is made round-to-odd (its error, from TwoSum,
    decides the last bit), so that rounding it to float32 is the correctly rounded result."""
    with np.errstate(invalid="ignore", over="ignore"):
        total = product + addend
        back = total - product
        error = (product - (total - back)) + (addend - back)
        even = (total.view(np.int64) & 1) == 0
        fix = (error != 0) & even & np.isfinite(total)
        total = np.where(fix, np.nextafter(total, np.where(error > 0, np.inf, -np.inf)), total)
    return total.astype(f32).astype(np.float64)


def any_precision_adamw(
    p: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    grad: Any,
    step: int,
    compensation: Any = None,
    *,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> tuple:
    r"""One ``AnyPrecisionAdamW`` step (torchdistx; LOWBIT.md §9.3), each operation in float64 from its
    float32 operands, rounded to float32 and then to its output array's dtype; ``compensation`` given:
    Kahan-compensated update of ``p``. Scalars as torchdistx's torch ops get them: ``1−β`` and
    ``1−lr·wd`` computed in float64 (Python floats), then rounded to float32; ``step_size = lr/(1−β1^t)``
    (as ``lr·(1/(1−β1^t))``: torch's ``float / tensor``) and ``sqrt(1−β2^t)`` from float32 operations;
    an add's scalar (``1−β1`` when ``p`` and ``exp_avg`` are bfloat16, ``eps`` when ``exp_avg_sq`` is)
    rounded to bfloat16. The moments' last operation is one fused multiply-add (``m·β1`` rounded, then
    ``(1−β1)·g + that`` rounded once; ``((1−β2)·g)·g + v·β2`` likewise), as torch's CPU ``add(alpha=)``
    and ``addcmul`` vector loops compute it on x86-64 builds with FMA.

    .. math::

        p \leftarrow p(1-\mathrm{lr}\,\mathrm{wd}), \quad m \leftarrow m\beta_1 + (1-\beta_1)g, \quad
        v \leftarrow v\beta_2 + ((1-\beta_2)g)g, \quad d = \sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon, \quad
        u = (-\mathrm{step\_size}\cdot m)/d

    Kahan: :math:`c \leftarrow c + u`, :math:`p' = p + c`, :math:`c \leftarrow c + (p - p')`,
    :math:`p \leftarrow p'`; plain: :math:`p \leftarrow p + u`. Returns new arrays ``(p, exp_avg,
    exp_avg_sq, compensation)`` of the inputs' dtypes (compensation None without Kahan).
    """
    dt = [np.asarray(a).dtype for a in (p, exp_avg, exp_avg_sq)]
    x, m, v = (np.asarray(a).astype(np.float64) for a in (p, exp_avg, exp_avg_sq))
    g = np.asarray(grad).astype(f32).astype(np.float64)
    s = {
        k: float(f32(val))
        for k, val in (("lr", lr), ("b1", beta1), ("b2", beta2), ("eps", eps), ("wd", weight_decay))
    }
    one = np.float64(1.0)
    omb1, omb2 = float(f32(one - float(beta1))), float(f32(one - float(beta2)))
    # an add's scalar takes the op's dtype: bfloat16 when all its tensors are (a multiplier stays float32)
    if dt[0] == dt[1] == np.asarray(grad).dtype != np.dtype(f32):
        omb1 = float(_rounded(np.float64(omb1), dt[1]))
    eps_v = float(_rounded(np.float64(s["eps"]), dt[2]))
    if weight_decay:
        x = _rounded(x * float(f32(one - float(lr) * float(weight_decay))), dt[0])
    m = _rounded(_fma_f32(omb1 * g, _rounded(m * s["b1"], dt[1])), dt[1])
    v = _rounded(_fma_f32(_rounded(omb2 * g, f32) * g, _rounded(v * s["b2"], dt[2])), dt[2])
    step_size = float(f32(float(f32(one / float(f32(one - float(f32(s["b1"] ** step)))))) * s["lr"]))
    corr2 = float(f32(np.sqrt(float(f32(one - float(f32(s["b2"] ** step)))))))
    d = _rounded(_rounded(_rounded(np.sqrt(v), dt[2]) / corr2, dt[2]) + eps_v, dt[2])
    u = _rounded(_rounded(-step_size * m, f32) / d, f32)
    if compensation is None:
        return _rounded(x + u, dt[0]).astype(dt[0]), m.astype(dt[1]), v.astype(dt[2]), None
    dc = np.asarray(compensation).dtype
    c = _rounded(np.asarray(compensation).astype(np.float64) + u, dc)
    new = _rounded(x + c, dt[0])
    c = _rounded(c + _rounded(x - new, dt[0]), dc)
    return new.astype(dt[0]), m.astype(dt[1]), v.astype(dt[2]), c.astype(dc)
