"""The NaN bits torch's CPU loops write into float16/bfloat16 tensors, for the torch-rule element functions.

torch converts an operation's float32 result to bfloat16 with a vector instruction sequence that writes every
NaN as ``0xFFFF`` in the vector body of its loop, and with ``c10::BFloat16``'s scalar conversion, which
writes ``0x7FC0``, in the scalar tail (:func:`.torch_rules.torch_tail`); for float16 the vector conversion
keeps the NaN's sign and payload and the scalar one writes the quiet NaN of its sign (``0x7E00`` or
``0xFE00``). An element function passes each value it writes as an operation's result through
:func:`torch_nan`; the function is listed in :data:`._lowp.KEEPS_NAN_PAYLOAD`, whose bfloat16 writes then
keep the bits chosen (a copied value, not passed through, keeps the bits it was read with).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from ._lowp import f32_bits, f32_from_bits

__all__ = ["torch_max_nan", "torch_nan"]

_BF16_BODY, _BF16_TAIL = np.uint32(0xFFFF0000), np.uint32(0x7FC00000)
_SIGN, _QUIET, _ALL_ONES = np.uint32(0x80000000), np.uint32(0x7FC00000), np.uint32(0xFFFFFFFF)


@intrinsic
def _is_nan_bits(typingctx, x):
    """Whether the float32 ``x`` is a NaN, tested on its bits: ``(bits & 0x7FFFFFFF) > 0x7F800000`` (njit
    only). The same answer as ``x != x``; vectorised, an integer AND and compare where that is a
    floating-point compare (the vector loops of torch's bfloat16 rules are short of floating-point ports,
    not of integer ones)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        magnitude = builder.and_(builder.bitcast(args[0], i32), ir.Constant(i32, 0x7FFFFFFF))
        return builder.icmp_unsigned(">", magnitude, ir.Constant(i32, 0x7F800000))

    return types.boolean(types.float32), codegen


def torch_nan(x: Any, like: Any, tail: bool) -> Any:
    """``x``, except where ``x`` is a NaN written to a float16/bfloat16 array (``like``, a fused element
    function's half marker: see :func:`._lowp.rounded_as`): the float32 NaN whose conversion writes torch's
    bits there, bfloat16 ``0xFFFF`` (vector body) or ``0x7FC0`` (scalar ``tail``), float16 ``x`` (body) or
    the quiet NaN of ``x``'s sign (tail). ``x`` unchanged for any other ``like``, and from Python."""
    return x


@overload(torch_nan, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_nan_compiled(x, like, tail):
    if like in (types.uint16, types.int8):  # bfloat16 (int8: in an all-bfloat16 call)

        def bf16(x, like, tail):
            if not _is_nan_bits(x):
                return x
            return f32_from_bits(_BF16_TAIL if tail else _BF16_BODY)

        def bf16_any(x, like, tail):  # a value of another type (not met in the half rules' float32 math)
            if x == x:
                return x
            return f32_from_bits(_BF16_TAIL if tail else _BF16_BODY)

        return bf16 if x == types.float32 else bf16_any
    if like == types.int16:  # float16

        def f16(x, like, tail):
            if x == x or not tail:
                return x
            return f32_from_bits((f32_bits(x) & _SIGN) | _QUIET)

        return f16
    return lambda x, like, tail: x


def torch_max_nan(x: Any, like: Any, tail: bool) -> Any:
    """As :func:`torch_nan`, for the result of ``torch.maximum``, whose vector loop writes every NaN with all
    bits set (float16 ``0xFFFF`` too)."""
    return x


@overload(torch_max_nan, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_max_nan_compiled(x, like, tail):
    if like == types.int16:  # float16

        def f16(x, like, tail):
            if x == x:
                return x
            if tail:
                return f32_from_bits((f32_bits(x) & _SIGN) | _QUIET)
            return f32_from_bits(_ALL_ONES)

        return f16
    return lambda x, like, tail: torch_nan(x, like, tail)
