"""Element functions of torch's NAdam, RAdam, Adadelta, ASGD, Rprop and Adafactor for float16/bfloat16 CPU
tensors, with torch's per-operation rounding.

torch runs each operation of its single-tensor step (``foreach=False``) on a half tensor in float32
("opmath") and stores the result in the tensor's dtype: every intermediate tensor is rounded. These functions
follow those operations one by one, each result passed through :func:`~._lowp.rounded_as` (the identity for
float32/float64 arrays and on CUDA, where the functions compute the float rules rounded once), with the
rules of :mod:`.torch_rules` for torch's scalars: ``x.add(y, alpha=a)`` is :func:`.torch_rules.torch_add_alpha`
(its scalar tail, :func:`.torch_rules.torch_tail`, rounds otherwise), an added scalar is first cast to the
half dtype (:func:`.torch_rules.torch_add_eps`), a multiplying or dividing scalar stays float32; ``sqrt`` is
IEEE's (torch's half ``sqrt`` never runs MKL). The scalars are those of the float functions of
:mod:`.torch_family` followed by :func:`.torch_rules.torch_tail`'s three.
"""

from __future__ import annotations

import math

from numba.extending import register_jitable

from ._elementwise import ZERO, elementwise
from ._intrinsics import fma
from ._lowp import KEEPS_NAN_PAYLOAD, rounded_as
from ._torch_nan import torch_nan
from .torch_family import torch_lerp, torch_sign
from .torch_rules import TAKES_TAIL, torch_add_alpha, torch_add_eps, torch_tail

__all__: list[str] = []

_helper = register_jitable(inline="always")


@_helper
def _gradient(grad, p, wd, maximize, coupled, like, tail):
    """``g = −grad`` (maximize, exact), then ``grad.add(param, alpha=wd)`` (coupled, rounded)."""
    g = -grad if maximize else grad
    if coupled:
        g = torch_add_alpha(g, p, wd, like, tail)
    return g


@_helper
def _moments(m, v, g, b1w, b1c, b1s, beta2, one_minus_beta2, like):
    """``m.lerp_(g, 1 − β1)`` and ``v.mul_(β2).addcmul_(g, g, value=1 − β2)``, each op rounded."""
    m = rounded_as(torch_lerp(m, g, b1w, b1c, b1s), like)
    v = rounded_as(fma(one_minus_beta2 * g, g, rounded_as(v * beta2, like)), like)
    return m, v


# ---------------------------------------------------------------------------------------------- NAdam


@elementwise
def _nadam_half(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction2,
    eps,
    c_grad,
    c_avg,
    tail_from,
    chunk,
    chunk_tail,
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    w = param[i]
    g = _gradient(grad[i], w, wd, maximize, coupled, param, tail)
    if decoupled:
        w = rounded_as(w * decay, param)
    m, v = _moments(exp_avg[i], exp_avg_sq[i], g, b1w, b1c, b1s, beta2, one_minus_beta2, param)
    exp_avg[i] = torch_nan(m, param, tail)
    exp_avg_sq[i] = torch_nan(v, param, tail)
    # exp_avg_sq.div(bias_correction2).sqrt(), denom.add_(eps), two addcdiv_
    root = rounded_as(math.sqrt(rounded_as(v / bias_correction2, param)), param)
    den = torch_add_eps(root, eps, param)
    w = rounded_as(w + (c_grad * g) / den, param)
    param[i] = torch_nan(rounded_as(w + (c_avg * m) / den, param), param, tail)


# ---------------------------------------------------------------------------------------------- RAdam


@elementwise
def _radam_half(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction1,
    lr,
    rectified,
    eps,
    sqrt_bc2,
    rect,
    one,
    tail_from,
    chunk,
    chunk_tail,
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    w = param[i]
    g = _gradient(grad[i], w, wd, maximize, coupled, param, tail)
    if decoupled:
        w = rounded_as(w * decay, param)
    m, v = _moments(exp_avg[i], exp_avg_sq[i], g, b1w, b1c, b1s, beta2, one_minus_beta2, param)
    exp_avg[i] = torch_nan(m, param, tail)
    exp_avg_sq[i] = torch_nan(v, param, tail)
    update = rounded_as(rounded_as(m / bias_correction1, param) * lr, param)  # exp_avg / bc1 * lr
    if rectified:
        # (bias_correction2**0.5) / exp_avg_sq.sqrt().add_(eps): reciprocal() * scalar; then * rect
        den = torch_add_eps(rounded_as(math.sqrt(v), param), eps, param)
        adaptive = rounded_as(rounded_as(one / den, param) * sqrt_bc2, param)
        update = rounded_as(rounded_as(update * adaptive, param) * rect, param)
    param[i] = torch_nan(
        rounded_as(w - update, param), param, tail
    )  # param.add_(update, alpha=-1.0): exact in both loops


# ---------------------------------------------------------------------------------------------- Adadelta


@elementwise
def _adadelta_half(
    i,
    param,
    square_avg,
    acc_delta,
    grad,
    wd,
    maximize,
    coupled,
    rho,
    one_minus_rho,
    eps,
    neg_lr,
    tail_from,
    chunk,
    chunk_tail,
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    w = param[i]
    g = _gradient(grad[i], w, wd, maximize, coupled, param, tail)
    sq = rounded_as(fma(one_minus_rho * g, g, rounded_as(square_avg[i] * rho, param)), param)
    square_avg[i] = torch_nan(sq, param, tail)
    std = rounded_as(math.sqrt(torch_add_eps(sq, eps, param)), param)
    acc = acc_delta[i]
    delta = rounded_as(math.sqrt(torch_add_eps(acc, eps, param)), param)
    delta = rounded_as(rounded_as(delta / std, param) * g, param)  # delta.div_(std).mul_(grad)
    acc = rounded_as(fma(one_minus_rho * delta, delta, rounded_as(acc * rho, param)), param)
    acc_delta[i] = torch_nan(acc, param, tail)
    param[i] = torch_nan(torch_add_alpha(w, delta, neg_lr, param, tail), param, tail)


# ---------------------------------------------------------------------------------------------- ASGD


@elementwise
def _asgd_half(
    i, param, ax, grad, wd, maximize, coupled, decay, neg_eta, mu, averaging, tail_from, chunk, chunk_tail
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    w = param[i]
    g = _gradient(grad[i], w, wd, maximize, coupled, param, tail)
    w = torch_nan(torch_add_alpha(rounded_as(w * decay, param), g, neg_eta, param, tail), param, tail)
    param[i] = w
    if averaging:  # ax.add_(param.sub(ax).mul_(mu))
        a = ax[i]
        ax[i] = torch_nan(
            rounded_as(a + rounded_as(rounded_as(w - a, param) * mu, param), param), param, tail
        )
    else:
        ax[i] = w  # ax.copy_(param): param's bits


# ---------------------------------------------------------------------------------------------- Rprop


@elementwise
def _rprop_half(
    i,
    param,
    prev,
    step_size,
    grad,
    maximize,
    eta_plus,
    eta_minus,
    step_min,
    step_max,
    one,
    tail_from,
    chunk,
    chunk_tail,
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    g = -grad[i] if maximize else grad[i]
    # sign = grad.mul(prev).sign(); sign[sign > 0] = etaplus; sign[sign < 0] = etaminus; sign[sign == 0] = 1
    f = torch_sign(rounded_as(g * prev[i], param), one)
    minus = rounded_as(eta_minus, param)
    if f > ZERO:
        f = rounded_as(eta_plus, param)
    if f < ZERO:
        f = minus
    if f == ZERO:
        f = one
    s = rounded_as(step_size[i] * f, param)  # step_size.mul_(sign).clamp_(min, max)
    low, high = rounded_as(step_min, param), rounded_as(step_max, param)
    if s < low:
        s = low
    if s > high:
        s = high
    step_size[i] = torch_nan(s, param, tail)
    if f == minus:
        g = one * ZERO
    param[i] = torch_nan(rounded_as(fma(-torch_sign(g, one), s, param[i]), param), param, tail)
    # prev.copy_(grad): the gradient's bits (negated: the sign bit flipped in the vector loop, in the scalar
    # tail a rounded result)
    prev[i] = torch_nan(g, param, tail) if maximize and tail else g


# ---------------------------------------------------------------------------------------------- Adafactor


@_helper
def _adafactor_update(estimate, g, eps1_sq, one, like, tail):
    """``estimate.clamp_(min=ε1²).rsqrt_().mul_(g)``, each op rounded. ``rsqrt`` is ``1/√x`` in float32 in
    torch's vector loop, ``1/round(√x)`` (the half ``sqrt`` rounded first) in its scalar ``tail``."""
    if estimate < eps1_sq:
        estimate = eps1_sq
    root = math.sqrt(rounded_as(estimate, like))
    if tail:
        root = rounded_as(root, like)
    return rounded_as(rounded_as(one / root, like) * g, like)


@elementwise
def _adafactor_vector_half(
    i, variance, update, grad, maximize, bw, bc, bs, eps1_sq, one, tail_from, chunk, chunk_tail
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, update)
    g = -grad[i] if maximize else grad[i]
    v = rounded_as(torch_lerp(variance[i], rounded_as(g * g, update), bw, bc, bs), update)
    variance[i] = torch_nan(v, update, tail)
    update[i] = torch_nan(_adafactor_update(v, g, eps1_sq, one, update, tail), update, tail)


@elementwise
def _adafactor_factored_half(
    i,
    update,
    grad,
    row_var,
    col_var,
    row_means,
    n_rows,
    n_cols,
    maximize,
    eps1_sq,
    one,
    tail_from,
    chunk,
    chunk_tail,
):
    tail = torch_tail(i, tail_from, chunk, chunk_tail, update)
    # row_var, col_var, row_means: float32 copies of the half moments (exact), indexed per row / column
    r = i // n_cols
    b = r // n_rows
    g = -grad[i] if maximize else grad[i]
    outer = rounded_as(row_var[r] * col_var[b * n_cols + i % n_cols], update)  # row_var @ col_var
    estimate = rounded_as(outer / row_means[b], update)
    update[i] = torch_nan(_adafactor_update(estimate, g, eps1_sq, one, update, tail), update, tail)


@elementwise
def _decayed_step_half(i, param, update, decayed, decay, neg_step, tail_from, chunk, chunk_tail):
    """``param.mul_(decay)`` (``decayed``) then ``param.add_(update, alpha=neg_step)``, each rounded."""
    tail = torch_tail(i, tail_from, chunk, chunk_tail, param)
    w = param[i]
    if decayed:
        w = rounded_as(w * decay, param)
    param[i] = torch_nan(torch_add_alpha(w, update[i], neg_step, param, tail), param, tail)


_TORCH_RULES = (
    _nadam_half,
    _radam_half,
    _adadelta_half,
    _asgd_half,
    _rprop_half,
    _adafactor_vector_half,
    _adafactor_factored_half,
    _decayed_step_half,
)
TAKES_TAIL.update(_TORCH_RULES[:5])
KEEPS_NAN_PAYLOAD.update(f.py_func for f in _TORCH_RULES)  # their writes pass through torch_nan
