"""Element functions of torch's fused CPU Adam/AdamW (``torch._fused_adam_``/``_fused_adamw_``, what
``torch.optim.Adam(fused=True)`` runs on CPU tensors), with the bits of torch's AVX-512 CPU kernels.

torch computes one element in the parameter's dtype (float32 for a float16/bfloat16 parameter: "opmath",
each stored tensor rounded once, the float32 values used on)::

    g ← g / grad_scale (AMP; torch writes it back to the gradient);  g ← −g (maximize)
    g ← fma(w, wd, g) (Adam's weight_decay);  w ← w·(1 − lr·wd) (AdamW's)
    m ← fma(1 − β1, g − m, m)   (|1 − β1| < 0.5; else fma((1 − β1) − 1, g − m, g))
    v ← fma((1 − β2)·g, g, v·β2)   (torch's vector loops; its scalar loop: fma(v, β2, (1 − β2)·g·g))
    v̂ ← max(v̂, v) (amsgrad, used below instead of v)
    w ← w + (−lr/(1 − β1^t))·m / (√v / √(1 − β2^t) + ε)

the scalars computed in float64 from the Python values (``t`` the float32 step counter) and converted to the
computing dtype. torch splits a tensor into vectors of 64 bytes and a tail of ``n mod (64 / itemsize)``
elements; its compiler vectorises that tail loop in 32-byte vectors, so only the last
``n mod (32 / itemsize)`` elements run the scalar loop, whose ``v`` takes the other fused multiply-add, whose
maximum is ``v̂ < v ? v : v̂`` (the vector loops': the all-ones NaN where either is NaN) and whose half stores
write torch's scalar NaN bits (:func:`~._torch_nan.torch_nan`); confirmed bit for bit against torch 2.13 on
every tail length, NaN included. The thread split does not move these boundaries: torch's tasks are whole
64-byte lines.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, register_jitable

from ._constant_quotient import QUOTIENT_DIVISOR_RANGE
from ._elementwise import elementwise
from ._intrinsics import fma
from ._lowp import KEEPS_NAN_PAYLOAD
from ._torch_nan import torch_nan
from ._torch_tail import torch_tail
from .torch_rules import divide_root_by_constant

__all__ = ["fused_adam_group_scalars", "fused_adam_step_scalars", "fused_tails", "VECTOR_BYTES"]

_helper = register_jitable  # a call, which LLVM inlines (numba's IR inlining warns on reassigned names)

#: Bytes per vector of torch's compiled scalar loop (its 32-byte tail vectors, see the module docstring).
VECTOR_BYTES = 32


@_helper
def fused_adam_moments(
    p, m, v, g, negate, coupled, weight_decay, decoupled, decay, w, w1, small, b2, c2, vector
):
    """``(p, m, v)`` after the gradient, decay and moment steps of the module docstring (``p`` the parameter's
    element, ``w`` the weight of ``m``'s lerp and ``w1`` it minus one; ``vector``: the element lies in one of
    torch's vector loops)."""
    if negate:
        g = -g
    if coupled:
        g = fma(p, weight_decay, g)
    if decoupled:
        p = p * decay
    d = g - m
    m = fma(w, d, m) if small else fma(w1, d, g)
    if vector:
        v = fma(c2 * g, g, v * b2)
    else:
        v = fma(v, b2, c2 * g * g)
    return p, m, v


@_helper
def fused_adam_param(p, m, v, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size):
    """``w + (−step_size)·m / (√v / √(1 − β2^t) + ε)``, each operation rounded (the division by the
    constant through :func:`~.torch_rules.divide_root_by_constant`: the quotient's bits)."""
    denom = divide_root_by_constant(math.sqrt(v), bc2_sqrt, inv_bc2_sqrt) + eps
    return p + neg_step_size * m / denom


@intrinsic
def _all_ones(typingctx, x):
    """The NaN of ``x``'s float type with every bit set (what torch's vector ``maximum`` writes)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        width = context.get_value_type(signature.return_type)
        return builder.bitcast(ir.Constant(ir.IntType(signature.return_type.bitwidth), -1), width)

    return x(x), codegen


@_helper
def fused_max(old, v, vector):
    """torch's ``max(v̂, v)``: in its vector loops the all-ones NaN where either is NaN, in its scalar loop
    ``v̂ < v ? v : v̂``."""
    if vector:
        if old != old or v != v:
            return _all_ones(v)
        return v if v > old else old
    return v if old < v else old


@elementwise
def _fused_adam(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    grad,
    scaled,
    grad_scale,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w,
    w1,
    small,
    b2,
    c2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    lanes,
):
    """One float32/float64 element; ``lanes``: elements per 32-byte vector (the last ``n mod lanes`` run
    torch's scalar loop). ``scaled``: the gradient divided by ``grad_scale`` (the caller stores the quotient
    back, as torch does: in place, by the same division)."""
    n = var.shape[0]
    vector = np.int64(i) < n - n % lanes
    g = grad[i]
    if scaled:
        g = g / grad_scale
    p, m, v = fused_adam_moments(
        var[i], exp_avg[i], exp_avg_sq[i], g, negate, coupled, weight_decay, decoupled, decay, w, w1,
        small, b2, c2, vector,
    )  # fmt: skip
    exp_avg[i] = m
    exp_avg_sq[i] = v
    var[i] = fused_adam_param(p, m, v, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size)


# its root and two divisions hold the loop's loads back: its large lists are prefetched ahead
_fused_adam.prefetch_large = True


@elementwise
def _fused_adam_amsgrad(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    grad,
    scaled,
    grad_scale,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w,
    w1,
    small,
    b2,
    c2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    lanes,
):
    """:func:`_fused_adam` with AMSGrad's maximum."""
    n = var.shape[0]
    vector = np.int64(i) < n - n % lanes
    g = grad[i]
    if scaled:
        g = g / grad_scale
    p, m, v = fused_adam_moments(
        var[i], exp_avg[i], exp_avg_sq[i], g, negate, coupled, weight_decay, decoupled, decay, w, w1,
        small, b2, c2, vector,
    )  # fmt: skip
    top = fused_max(max_exp_avg_sq[i], v, vector)
    exp_avg[i] = m
    exp_avg_sq[i] = v
    max_exp_avg_sq[i] = top
    var[i] = fused_adam_param(p, m, top, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size)


# not prefetched (prefetch_large stays off): with the maximum its loop is bound by its arithmetic, not by
# memory, and the prefetches only add instructions to it (its large lists ran slower with them)


@elementwise
def _fused_adam_half(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    grad,
    scaled,
    grad_scale,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w,
    w1,
    small,
    b2,
    c2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    lanes,
    tail_from,
    chunk,
    chunk_tail,
):
    """One float16/bfloat16 element, in float32; the tail of :func:`~._torch_tail.torch_tail`
    (:func:`fused_tails`): torch's scalar loop (``lanes`` unused). ``scaled``: the gradient divided by
    ``grad_scale`` in float32, unrounded (the caller stores the rounded quotient back, as torch does)."""
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)  # (a loop of each: _torch_tail.tail_variants)
    vector = not tail
    g = grad[i]
    if scaled:
        g = g / grad_scale
    p, m, v = fused_adam_moments(
        var[i], exp_avg[i], exp_avg_sq[i], g, negate, coupled, weight_decay, decoupled, decay, w, w1,
        small, b2, c2, vector,
    )  # fmt: skip
    exp_avg[i] = torch_nan(m, var, tail)
    exp_avg_sq[i] = torch_nan(v, var, tail)
    var[i] = torch_nan(fused_adam_param(p, m, v, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size), var, tail)


@elementwise
def _fused_adam_half_amsgrad(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    grad,
    scaled,
    grad_scale,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w,
    w1,
    small,
    b2,
    c2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    lanes,
    tail_from,
    chunk,
    chunk_tail,
):
    """:func:`_fused_adam_half` with AMSGrad's maximum."""
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)  # (a loop of each: _torch_tail.tail_variants)
    vector = not tail
    g = grad[i]
    if scaled:
        g = g / grad_scale
    p, m, v = fused_adam_moments(
        var[i], exp_avg[i], exp_avg_sq[i], g, negate, coupled, weight_decay, decoupled, decay, w, w1,
        small, b2, c2, vector,
    )  # fmt: skip
    top = fused_max(max_exp_avg_sq[i], v, vector)
    exp_avg[i] = torch_nan(m, var, tail)
    exp_avg_sq[i] = torch_nan(v, var, tail)
    max_exp_avg_sq[i] = torch_nan(top, var, tail)
    var[i] = torch_nan(fused_adam_param(p, m, top, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size), var, tail)


KEEPS_NAN_PAYLOAD.update((_fused_adam_half.py_func, _fused_adam_half_amsgrad.py_func))
for _kernel in (_fused_adam, _fused_adam_amsgrad, _fused_adam_half, _fused_adam_half_amsgrad):
    _kernel.constant_flags = True  # one loop per flag combination, without the branches it turns off


def fused_tails(n: int, itemsize: int) -> tuple:
    """``(tail_from, chunk, chunk_tail)``: :func:`~._torch_tail.torch_tail`'s description of torch's scalar
    loop in a tensor of ``n`` elements of ``itemsize`` bytes, its last ``n mod (32 / itemsize)`` elements
    (one tail: torch's tasks are whole 64-byte lines), the last scalars of the half element functions."""
    return np.int64(n - n % (VECTOR_BYTES // itemsize)), np.int64(1), np.int64(0)


def fused_adam_group_scalars(
    dtype: np.dtype,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    maximize: bool,
) -> tuple:
    """The part of the scalars that does not depend on the step (an opaque tuple for
    :func:`fused_adam_step_scalars`), in the computing ``dtype`` (float32 for half parameters): torch's
    float64 values ``1 − lr·wd``, ``1 − β1``, ``1 − β2`` converted, as its kernel converts them."""
    convert = np.dtype(dtype).type
    w = convert(1 - beta1)
    head = (
        bool(maximize),
        weight_decay != 0 and not decoupled,
        convert(weight_decay),
        weight_decay != 0 and decoupled,
        convert(1 - lr * weight_decay),
        w,
        w - convert(1),
        bool(abs(w) < convert(0.5)),
        convert(beta2),
        convert(1 - beta2),
    )
    return convert, float(lr), float(beta1), float(beta2), head, convert(eps)


def fused_adam_step_scalars(
    group: tuple, step: float, grad_scale: Any = None, reciprocal: bool = True
) -> tuple:
    """The element functions' scalars before the tails, for step counter ``step`` (torch reads the float32
    counter as a float64) from ``group`` (:func:`fused_adam_group_scalars`): ``scaled`` and ``grad_scale``
    (AMP's float32 scale converted, or none), ``√(1 − β2^t)`` (with its float64 reciprocal for a float32
    quotient, see :func:`~.torch_rules.divide_root_by_constant`; none for ``reciprocal=False``: the half
    functions divide, which is faster there), ``−lr/(1 − β1^t)`` and ``lanes``."""
    convert, lr, beta1, beta2, head, eps = group
    t = float(step)
    bc2_sqrt = convert(math.sqrt(1 - math.pow(beta2, t)))
    low, high = QUOTIENT_DIVISOR_RANGE
    inv: Any = None
    if reciprocal and convert is np.float32 and low <= bc2_sqrt <= high:
        inv = 1.0 / float(bc2_sqrt)
    scale = (False, convert(1)) if grad_scale is None else (True, convert(np.float32(grad_scale)))
    lanes = np.int64(VECTOR_BYTES // np.dtype(convert).itemsize)
    return (*scale, *head, bc2_sqrt, inv, eps, convert(-(lr / (1 - math.pow(beta1, t)))), lanes)
