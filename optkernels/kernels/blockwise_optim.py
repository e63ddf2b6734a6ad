"""bitsandbytes' 8-bit blockwise optimizer step (CUDA semantics, LOWBIT.md §3) and its 32-bit twin, CPU and CUDA.

The per-element rule of each algorithm (:func:`_rule`) is written once; the 8-bit kernel runs it per
quantization block of 256 (one CPU loop iteration or one CUDA thread per block: dequantize with the old
absmax, update in float32, new absmax, parameter, requantize with :func:`.quantization.nearest_code`), the
32-bit kernel per element on float32 states (bitsandbytes' path for tensors under ``min_8bit_size``). Blocks
are independent, so results do not depend on the thread count. Arithmetic is IEEE float32 without FMA and
with exact division and square root (bitsandbytes' CUDA build uses fast math: the codes agree wherever a
value is not within a few ulps of a decision midpoint).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _cuda
from ._checks import _array_facts, _flatten, plain_array, to_scalar
from ._elementwise import ZERO, elementwise, scalar_math
from ._upcast import via_float32
from .quantization import (
    NEG_MAX,
    check_code,
    fast_search,
    nearest_code,
    nearest_code_slow,
    scratch_block_elementwise,
    search_tables,
    sign_bit,
    table_math,
)

BLOCK = 256
"""Elements per quantization block of the 8-bit optimizers (bitsandbytes >= 0.44)."""

ALGORITHMS = ("adam", "ademamix", "momentum", "lion", "rmsprop", "adagrad")
"""bitsandbytes' optimizer names accepted by the kernels (their index is the kernels' ``algo``)."""
ADAM, ADEMAMIX, MOMENTUM, LION, RMSPROP, ADAGRAD = range(6)
_F32 = np.float32


@scalar_math
def _rule(
    algo,
    p,
    g,
    m1,
    m2,
    v,
    first,
    decayed,
    b1,
    b2,
    b3,
    omb1,
    omb2,
    omb3,
    alpha,
    lr,
    wd,
    eps,
    step_size,
    corr1,
    corr2,
    eps_corr2,
    decay,
    fold_all,
    param,
):
    """One element: (p, m1, m2, v) -> (p', m1', m2', v') in float32 (bitsandbytes' kernel order); with
    ``param`` False the parameter's own arithmetic is skipped (p' is then meaningless)."""
    if algo <= ADEMAMIX:  # the 2-state kernel
        if math.isinf(g) or g != g:
            return p, ZERO, ZERO, ZERO
        v = v * b2 + (omb2 * g) * g
        m1 = m1 * b1 + omb1 * g
        if algo == ADEMAMIX:
            m2 = m2 * b3 + omb3 * g
        if not param:
            return p, m1, m2, v
        if algo == ADAM:
            p = p + step_size * (m1 / (math.sqrt(v) + eps_corr2))
        else:
            p = p - lr * ((m1 / corr1 + alpha * m2) / (math.sqrt(v) / corr2 + eps))
        if decayed:
            p = p * decay
        return p, m1, m2, v
    gs = g
    if decayed:
        if algo == LION and not fold_all:
            p = p * decay
        else:
            gs = g + p * wd
    numerator = gs if fold_all else g
    if algo == MOMENTUM:
        m1 = gs if first else m1 * b1 + gs
        p = p - lr * m1
    elif algo == LION:
        c = m1 * b1 + omb1 * gs
        u = lr if c > ZERO else (-lr if c < ZERO else ZERO)
        m1 = m1 * b2 + omb2 * gs
        p = p - u
    elif algo == RMSPROP:
        m1 = m1 * b1 + omb1 * (gs * gs)
        if param:
            p = p - lr * (numerator / (math.sqrt(m1) + eps))
    else:
        m1 = m1 + gs * gs
        if param:
            p = p - lr * (numerator / (math.sqrt(m1) + eps))
    return p, m1, m2, v


@table_math
def _sign_fixed(c, s, code):
    """Code ``c`` of ``s``, moved one step where its sign differs from ``s``'s (bitsandbytes' state-1 sign
    fix; uint8 wrap-around). Without branches (see :func:`.quantization.nearest_code`)."""
    fix = int(sign_bit(code[c]) != sign_bit(s))
    return (c + fix * (2 * int(s > ZERO) - 1)) & 255


@table_math
def _requantize(out, s, x, count, code, mids, start, signed):
    """``out[k]`` = the code of ``s[k]`` whose quotient by the block's maximum is ``x[k]``, for k < count:
    the nearest code of ``x[k]``, sign-fixed where ``signed`` (in a loop of its own: the search's loop is
    vectorised)."""
    if fast_search(start):
        for k in range(count):
            out[k] = nearest_code(x[k], mids, start)
    else:
        for k in range(count):
            out[k] = nearest_code_slow(x[k], mids)
    if signed:
        for k in range(count):
            out[k] = _sign_fixed(int(out[k]), s[k], code)


@table_math
def _abs_max(x, count, top):
    """``max(top, |x[0]|, ..., |x[count-1]|)`` with NaN left out (``fmaxf`` from ``top``), in four
    independent chains (the same value: the maximum of a set)."""
    t0, t1, t2, t3 = top, top, top, top
    k = 0
    while k + 4 <= count:
        a0, a1, a2, a3 = abs(x[k]), abs(x[k + 1]), abs(x[k + 2]), abs(x[k + 3])
        t0 = a0 if a0 > t0 else t0
        t1 = a1 if a1 > t1 else t1
        t2 = a2 if a2 > t2 else t2
        t3 = a3 if a3 > t3 else t3
        k += 4
    while k < count:
        a0 = abs(x[k])
        t0 = a0 if a0 > t0 else t0
        k += 1
    t0 = t1 if t1 > t0 else t0
    t2 = t3 if t3 > t2 else t2
    return t2 if t2 > t0 else t0


@table_math
def _block_8bit(
    algo,
    b,
    p,
    g,
    c1,
    c2,
    c3,
    a1,
    a2,
    a3,
    q1,
    q2,
    mids1,
    start1,
    mids2,
    start2,
    size,
    first,
    decayed,
    hyper,
    scratch,
    base,
):
    # Quantization block b; c3/a3: AdEMAMix's second EMA (codes with map q1, its own absmax); hyper: the
    # float32 scalars of step_scalars (an array: a call of more than 30 arguments could not be inlined);
    # scratch[base:base + 1024] (the driver's): the block's new p, m1, m2, v between the passes.
    b1, b2, b3, omb1, omb2, omb3, alpha, lr = (
        hyper[0],
        hyper[1],
        hyper[2],
        hyper[3],
        hyper[4],
        hyper[5],
        hyper[6],
        hyper[7],
    )
    wd, eps, step_size, corr1, corr2, eps_corr2, decay = (
        hyper[8],
        hyper[9],
        hyper[10],
        hyper[11],
        hyper[12],
        hyper[13],
        hyper[14],
    )
    two = algo <= ADEMAMIX
    start = b * 256
    stop = min(start + 256, size)
    count = stop - start
    # The block's own views: loops over distinct views, one job each, are vectorised where they have no
    # table lookup (the rule); the lookups (dequantize, nearest code) run in loops of their own.
    pb, gb, cb1, cb2, cb3 = p[start:stop], g[start:stop], c1[start:stop], c2[start:stop], c3[start:stop]
    sx, sm1, sm2, sv = (
        scratch[base : base + 256],
        scratch[base + 256 : base + 512],
        scratch[base + 512 : base + 768],
        scratch[base + 768 : base + 1024],
    )
    o1 = a1[b]
    o2 = a2[b] if two else ZERO
    o3 = a3[b] if algo == ADEMAMIX else ZERO
    for k in range(count):
        sm1[k] = q1[cb1[k]] * o1
    if two:
        for k in range(count):
            sv[k] = q2[cb2[k]] * o2
    if algo == ADEMAMIX:
        for k in range(count):
            sm2[k] = q1[cb3[k]] * o3
    for k in range(count):
        x, m1, m2, v = _rule(
            algo,
            pb[k],
            gb[k],
            sm1[k],
            sm2[k],
            sv[k],
            first,
            decayed,
            b1,
            b2,
            b3,
            omb1,
            omb2,
            omb3,
            alpha,
            lr,
            wd,
            eps,
            step_size,
            corr1,
            corr2,
            eps_corr2,
            decay,
            False,
            True,
        )
        sx[k] = x
        sm1[k] = m1
        sm2[k] = m2
        sv[k] = v
    top1, top2, top3 = NEG_MAX, NEG_MAX, NEG_MAX
    if count < 256:  # the phantom elements of a partial block (p = g = 0, codes 128 / 128 / 0)
        _, top1, top3, top2 = _rule(
            algo,
            ZERO,
            ZERO,
            q1[128] * o1,
            q1[128] * o3,
            q2[0] * o2,
            first,
            decayed,
            b1,
            b2,
            b3,
            omb1,
            omb2,
            omb3,
            alpha,
            lr,
            wd,
            eps,
            step_size,
            corr1,
            corr2,
            eps_corr2,
            decay,
            False,
            False,
        )
        top1 = abs(top1) if abs(top1) > NEG_MAX else NEG_MAX  # fmaxf: a NaN does not count
        top2 = abs(top2) if abs(top2) > NEG_MAX else NEG_MAX
        top3 = abs(top3) if abs(top3) > NEG_MAX else NEG_MAX
    top1 = _abs_max(sm1, count, top1)
    a1[b] = top1
    for k in range(count):
        pb[k] = sx[k]
    for k in range(count):  # the quotients apart: a vectorised division
        sx[k] = sm1[k] / top1
    _requantize(cb1, sm1, sx, count, q1, mids1, start1, True)
    if two:
        top2 = _abs_max(sv, count, top2)
        a2[b] = top2
        for k in range(count):
            sx[k] = sv[k] / top2
        _requantize(cb2, sv, sx, count, q2, mids2, start2, False)
    if algo == ADEMAMIX:
        top3 = _abs_max(sm2, count, top3)
        a3[b] = top3
        for k in range(count):
            sx[k] = sm2[k] / top3
        _requantize(cb3, sm2, sx, count, q1, mids1, start1, True)


@scratch_block_elementwise
def _update_8bit(
    b,
    p,
    g,
    c1,
    c2,
    c3,
    a1,
    a2,
    a3,
    q1,
    q2,
    mids1,
    start1,
    mids2,
    start2,
    size,
    algo,
    first,
    decayed,
    hyper,
    scratch,
    base,
):
    # One block per algorithm's own copy of the block's loops (the algorithm a constant there, so that
    # its branches fold away and the loops vectorise).
    if algo == ADAM:
        _block_8bit(
            ADAM,
            b,
            p,
            g,
            c1,
            c2,
            c3,
            a1,
            a2,
            a3,
            q1,
            q2,
            mids1,
            start1,
            mids2,
            start2,
            size,
            first,
            decayed,
            hyper,
            scratch,
            base,
        )
    else:
        _block_8bit(
            algo,
            b,
            p,
            g,
            c1,
            c2,
            c3,
            a1,
            a2,
            a3,
            q1,
            q2,
            mids1,
            start1,
            mids2,
            start2,
            size,
            first,
            decayed,
            hyper,
            scratch,
            base,
        )


@elementwise
def _update_32bit(i, p, g, s1, s2, s3, algo, first, decayed, hyper):
    b1, b2, b3, omb1, omb2, omb3, alpha, lr = (
        hyper[0],
        hyper[1],
        hyper[2],
        hyper[3],
        hyper[4],
        hyper[5],
        hyper[6],
        hyper[7],
    )
    wd, eps, step_size, corr1, corr2, eps_corr2, decay = (
        hyper[8],
        hyper[9],
        hyper[10],
        hyper[11],
        hyper[12],
        hyper[13],
        hyper[14],
    )
    m2 = s3[i] if algo == ADEMAMIX else ZERO
    v = s2[i] if algo <= ADEMAMIX else ZERO
    x, m1, m2, v = _rule(
        algo,
        p[i],
        g[i],
        s1[i],
        m2,
        v,
        first,
        decayed,
        b1,
        b2,
        b3,
        omb1,
        omb2,
        omb3,
        alpha,
        lr,
        wd,
        eps,
        step_size,
        corr1,
        corr2,
        eps_corr2,
        decay,
        True,
        True,
    )
    p[i] = x
    s1[i] = m1
    if algo <= ADEMAMIX:
        s2[i] = v
    if algo == ADEMAMIX:
        s3[i] = m2


def _algo(name: Any) -> int:
    if not isinstance(name, str):
        raise TypeError(f"optimizer_name must be a str, got {type(name).__name__}")
    if name not in ALGORITHMS:
        raise ValueError(f"optimizer_name must be one of {ALGORITHMS}, got {name!r}")
    return ALGORITHMS.index(name)


def step_scalars(
    algo: int,
    step: Any,
    lr: Any,
    beta1: Any,
    beta2: Any,
    beta3: Any,
    alpha: Any,
    eps: Any,
    weight_decay: Any,
    device: str = "cpu",
) -> tuple:
    """``(first step, decayed, hyper)``: the kernels' scalars of one step, ``hyper`` a float32 array (on
    ``device``) of ``β1, β2, β3, 1−β1, 1−β2, 1−β3, α, lr, wd, ε, step_size, corr1, corr2, corr2·ε, decay``,
    computed as bitsandbytes' kernels compute them::

        corr1 = 1 − β1^t        corr2 = sqrt(1 − β2^t)        step_size = (−lr·corr2)/corr1
        1 − β (float32 subtraction of float32 β)              decay = 1 − lr·wd

    Range checks (ValueError): ``step`` an int >= 1, ``lr``, ``eps``, ``weight_decay`` >= 0, betas in [0, 1).
    """
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step must be an int, got {type(step).__name__}")
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    values = {}
    for name, value in (
        ("lr", lr),
        ("beta1", beta1),
        ("beta2", beta2),
        ("beta3", beta3),
        ("alpha", alpha),
        ("eps", eps),
        ("weight_decay", weight_decay),
    ):
        values[name] = to_scalar(name, value, np.dtype(np.float32))
    for name in ("lr", "eps", "weight_decay"):
        if not values[name] >= 0:
            raise ValueError(f"{name} must be >= 0, got {values[name]}")
    for name in ("beta1", "beta2", "beta3"):
        if not 0 <= values[name] < 1:
            raise ValueError(f"{name} must be in [0, 1), got {values[name]}")
    one = _F32(1)
    lr_, b1, b2, b3, wd = (values[k] for k in ("lr", "beta1", "beta2", "beta3", "weight_decay"))
    corr1 = one - _F32(float(b1) ** int(step))
    corr2 = _F32(math.sqrt(one - _F32(float(b2) ** int(step))))
    step_size = _F32(-lr_ * corr2) / corr1 if algo <= ADEMAMIX else _F32(0)
    hyper = np.array(
        [
            b1,
            b2,
            b3,
            one - b1,
            one - b2,
            one - b3,
            values["alpha"],
            lr_,
            wd,
            values["eps"],
            step_size,
            corr1,
            corr2,
            _F32(corr2 * values["eps"]),
            one - _F32(lr_ * wd),
        ],
        _F32,
    )
    if device != "cpu":
        hyper = _cuda.module().to_device(hyper)
    return int(step) == 1, bool(wd > 0), hyper


def _facts(name: str, x: Any, device: str | None = None) -> tuple:
    dev, shape, dtype, contiguous, writeable, _ = _array_facts(name, x)
    if device is not None and dev != device:
        raise TypeError(f"{name} is a {dev} array but p is a {device} array")
    return dev, tuple(shape), dtype, contiguous, writeable


def _state(name: str, x: Any, device: str, shape: tuple, dtype: Any) -> Any:
    _, xshape, xdtype, contiguous, writeable = _facts(name, x, device)
    if xdtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {xdtype}")
    if xshape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {xshape}")
    if not writeable:
        raise ValueError(f"{name} is read-only")
    if not contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return _flatten(plain_array(name, x), device)


def _param_and_grad(p: Any, g: Any) -> tuple:
    device, shape, dtype, contiguous, writeable = _facts("p", p)
    if dtype != np.float32:
        raise TypeError(
            f"p must be float32 (float16/bfloat16 are widened by the public functions), got {dtype}"
        )
    if not writeable or not contiguous:
        raise ValueError("p must be writeable and C-contiguous")
    _, gshape, gdtype, _, _ = _facts("g", g, device)
    if gdtype != np.float32:
        raise TypeError(f"g must have p's dtype float32, got {gdtype}")
    if gshape != shape:
        raise ValueError(f"g must have p's shape {shape}, got {gshape}")
    return device, shape, _flatten(plain_array("p", p), device), _flatten(plain_array("g", g), device)


def _dummy(device: str, dtype: Any) -> Any:
    host = np.zeros(1, dtype)
    return host if device == "cpu" else _cuda.module().to_device(host)


@via_float32()
def optimizer_update_8bit_blockwise(
    optimizer_name: str,
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
) -> Any:
    r"""One 8-bit blockwise optimizer step in place (bitsandbytes ``optimizer_update_8bit_blockwise``, its
    CUDA kernels ``kOptimizerStatic8bit{1,2}StateBlockwise``; LOWBIT.md §3).

    Per block of 256 elements: dequantize the states with the old absmax (``m = qmap1[state1]·absmax1``),
    update in float32, ``absmax ← max |state'|`` over the block (the phantom elements of a partial last block
    take part with ``g = p = 0`` and codes 128 / 0), update ``p`` from the unquantized states, requantize
    (nearest code, ties to the even index; a state-1 code whose sign differs from the value's moves one
    step). With :math:`c_1 = 1-\beta_1^t`, :math:`c_2 = \sqrt{1-\beta_2^t}`:

    * ``adam``: :math:`v' = v\beta_2 + ((1-\beta_2)g)g`, :math:`m' = m\beta_1 + (1-\beta_1)g`,
      :math:`p \leftarrow p + \frac{-\mathrm{lr}\,c_2}{c_1}\cdot\frac{m'}{\sqrt{v'} + c_2\epsilon}`, then
      :math:`p \leftarrow p(1-\mathrm{lr}\cdot\mathrm{wd})` if wd > 0; a non-finite ``g`` zeroes m', v' and
      leaves p.
    * ``ademamix``: as adam with a second EMA :math:`m_2' = m_2\beta_3 + (1-\beta_3)g` and
      :math:`p \leftarrow p - \mathrm{lr}\frac{m'/c_1 + \alpha m_2'}{\sqrt{v'}/c_2 + \epsilon}`.
    * ``momentum``: :math:`g \leftarrow g + \mathrm{wd}\,p`; :math:`m' = g` at t = 1, else
      :math:`m\beta_1 + g`; :math:`p \leftarrow p - \mathrm{lr}\,m'`.
    * ``lion``: :math:`p \leftarrow p(1-\mathrm{lr}\cdot\mathrm{wd})`;
      :math:`p \leftarrow p - \mathrm{lr}\,\mathrm{sgn}(m\beta_1 + (1-\beta_1)g)`;
      :math:`m' = m\beta_2 + (1-\beta_2)g`.
    * ``rmsprop``: :math:`m' = m\beta_1 + (1-\beta_1)(g_s g_s)`, ``adagrad``: :math:`m' = m + g_s g_s`, with
      :math:`g_s = g + \mathrm{wd}\,p`; :math:`p \leftarrow p - \mathrm{lr}\, g/(\sqrt{m'} + \epsilon)` (raw g).

    Parameters
    ----------
    optimizer_name : str
        One of :data:`ALGORITHMS`.
    g : array
        The gradient (read only), p's shape and dtype.
    p : array
        The parameter, float32 (float16/bfloat16: computed on a float32 copy, rounded once), updated.
    state1 : array
        uint8 codes of the first state, p's shape (AdEMAMix: ``(2, *p.shape)``, m1 then m2), updated.
    state2 : array or None
        uint8 codes of the second state (adam, ademamix), p's shape, updated; None for 1-state rules.
    beta1, beta2, beta3, alpha, eps : float
        Hyper-parameters (betas in [0, 1); momentum: ``beta1`` = momentum; rmsprop: ``beta1`` = alpha; lion:
        ``beta1``, ``beta2``; ademamix: all).
    step : int
        The step number, >= 1 (bias corrections; momentum's first step).
    lr : float
        Learning rate, >= 0.
    qmap1, qmap2 : array
        float32 maps (256 values) of state 1 (signed) and state 2 (unsigned; None for 1-state rules).
    absmax1, absmax2 : array
        float32 block maxima, ``ceil(n/256)`` values (AdEMAMix ``absmax1``: ``(2, blocks)``), updated.
    weight_decay : float
        >= 0.

    Returns
    -------
    array
        ``p``.

    Raises
    ------
    TypeError, ValueError
        A wrong name, type, dtype, shape, device or range (before anything is written).
    """
    algo = _algo(optimizer_name)
    device, shape, flat_p, flat_g = _param_and_grad(p, g)
    n = math.prod(shape)
    blocks = -(-n // BLOCK)
    two = algo <= ADEMAMIX
    scalars = step_scalars(algo, step, lr, beta1, beta2, beta3, alpha, eps, weight_decay, device)
    q1 = check_code("qmap1", qmap1, device)
    if algo == ADEMAMIX:
        s1 = _state("state1", state1, device, (2,) + shape, np.uint8)
        a1 = _state("absmax1", absmax1, device, (2, blocks), np.float32)
        c1, c3, a1, a3 = s1[:n], s1[n:], a1[:blocks], a1[blocks:]
    else:
        c1 = _state("state1", state1, device, shape, np.uint8)
        a1 = _state("absmax1", absmax1, device, (blocks,), np.float32)
        c3, a3 = _dummy(device, np.uint8), _dummy(device, np.float32)
    if two:
        c2 = _state("state2", state2, device, shape, np.uint8)
        a2 = _state("absmax2", absmax2, device, (blocks,), np.float32)
        q2 = check_code("qmap2", qmap2, device)
    else:
        c2, a2, q2 = _dummy(device, np.uint8), _dummy(device, np.float32), q1
    if n:
        _update_8bit.launch(
            device,
            blocks,
            flat_p,
            flat_g,
            c1,
            c2,
            c3,
            a1,
            a2,
            a3,
            q1,
            q2,
            *search_tables(q1, device),
            *search_tables(q2, device),
            n,
            algo,
            *scalars,
        )
    return p


@via_float32()
def optimizer_update_32bit(
    optimizer_name: str,
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
) -> Any:
    r"""One step with float32 states in place (bitsandbytes ``optimizer_update_32bit``: what its 8-bit
    optimizers run for tensors under ``min_8bit_size``).

    The rules of :func:`optimizer_update_8bit_blockwise` without quantization, except that (as in
    bitsandbytes' 32-bit kernels) the 1-state rules fold the weight decay into the gradient everywhere:
    :math:`g \leftarrow g + \mathrm{wd}\,p` is also Lion's gradient (no decoupled decay) and the RMSprop and
    Adagrad numerators.

    Parameters
    ----------
    optimizer_name : str
        One of :data:`ALGORITHMS`.
    g, p : array
        Gradient (read only) and float32 parameter (updated; half dtypes via a float32 copy).
    state1 : array
        float32 first state, p's shape (AdEMAMix ``(2, *p.shape)``), updated.
    beta1, eps, step, lr : float, float, int, float
        As :func:`optimizer_update_8bit_blockwise`.
    state2 : array or None
        float32 second state (adam, ademamix), updated.
    beta2, beta3, alpha, weight_decay : float
        As :func:`optimizer_update_8bit_blockwise`.

    Returns
    -------
    array
        ``p``.

    Raises
    ------
    TypeError, ValueError
        As :func:`optimizer_update_8bit_blockwise`.
    """
    algo = _algo(optimizer_name)
    device, shape, flat_p, flat_g = _param_and_grad(p, g)
    n = math.prod(shape)
    scalars = step_scalars(algo, step, lr, beta1, beta2, beta3, alpha, eps, weight_decay, device)
    if algo == ADEMAMIX:
        s = _state("state1", state1, device, (2,) + shape, np.float32)
        s1, s3 = s[:n], s[n:]
    else:
        s1, s3 = _state("state1", state1, device, shape, np.float32), _dummy(device, np.float32)
    s2 = (
        _state("state2", state2, device, shape, np.float32)
        if algo <= ADEMAMIX
        else _dummy(device, np.float32)
    )
    if n:
        _update_32bit.launch(device, n, flat_p, flat_g, s1, s2, s3, algo, *scalars)
    return p
