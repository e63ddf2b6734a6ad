"""torch's bfloat16 Adam step on blocks of 32 elements, its denominators read from a table in registers.

In the all-bfloat16 Adam loop (``torch_rules._torch_adam``) each element's denominator
``d = R(R(R(√v)/c) + R(ε))`` (``R``: rounding to bfloat16) costs a square root, a division (or the multiplier of
``torch_rules.bf16_bc2_multiplier``) and three roundings. Without ``ε``, ``q(v) = R(R(√v)/c)`` scales with
``v``: for a positive normal ``v = w·4^(j−64)`` (``j`` the high 7 bits of ``v``'s exponent, ``w ∈ [2, 8)``
with ``v``'s low exponent bit and significand) every step's value is ``√w``'s times ``2^(j−64)`` and stays
normal, so ``q(v) = q(w)·2^(j−64)``: 256 entries, indexed by ``v``'s low 8 bits, each step's ``q(w)``
computed per call (16 vectors, the roots constant) and kept in eight registers of 32 words, read by word
permutes (``vpermi2w``), the exponent added to their bits. ``ε`` is then negligible where ``q ≥ B``:
``B = 2^(e+10)`` for ``R(ε) < 2^(e+1)`` puts ``R(ε)`` below a quarter of ``q``'s last place, so ``R(q + R(ε))
= q``. A block where a lane is not such (``v`` zero, subnormal, negative, infinite or NaN, ``q < B``, or a
step's ``c`` whose entries leave the range where the scaling holds) computes its denominators as the loop
does. Every other operation is the loop's, in its order: the same bits (tests/test_bf16_adam_block.py).

Compiled only for AMD's Zen cores with AVX-512 BW (:func:`blocks_here`), where it was measured
(bench/results/target-notes.md); elsewhere the pair loop runs as before.
"""

from __future__ import annotations

import functools
from types import FunctionType
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ._bf16_pairs import _pair_array, _word_pointer
from ._intrinsics import _target_features, zen_target
from ._lowp import _ir_round_bf16 as _round  # (float32 lanes or a float32)

__all__ = ["adam_pair_blocks", "any_target_pair_blocks"]

#: Elements of a block: 16 words of two bfloat16 elements each.
BLOCK = 32
#: Fewer pairs than this in a stretch of the loop's body: the pair loop alone (each call first computes its
#: table, 16 vectors of roots divided and rounded).
LEAST_PAIRS = 256

_I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()
_WORDS, _FLOATS, _HALVES = ir.VectorType(_I32, 16), ir.VectorType(_F32, 16), ir.VectorType(_I16, 32)
_HIGH = 0xFFFF0000 - (1 << 32)  # (as a signed 32-bit constant)
#: The table's entries are stored with 64 taken off their exponent (``j − 64`` is added back).
_BIAS = 64 << 7
#: The entries' exponent fields where ``q(w)·2^(j−64)`` (j = 0 .. 127) and the products before its
#: rounding stay normal.
_ENTRY_LOW, _ENTRY_HIGH = 66 << 7, (191 << 7) | 0x7F
_NEVER = 0x7F80  # a bound no finite entry reaches


def word_permutes() -> bool:
    """Whether the target that Numba compiles for has AVX-512 BW (``vpermi2w``)."""
    return "+avx512bw" in _target_features().split(",")


def blocks_here() -> bool:
    """Whether loops compiled now by :func:`adam_pair_blocks` use the blocks: on AMD's Zen cores with AVX-512
    BW, where they were measured."""
    return zen_target() and word_permutes()


def _splat(value: Any, vector: Any = _WORDS) -> ir.Constant:
    return ir.Constant(vector, [value] * vector.count)


def _broadcast(builder: Any, scalar: Any) -> Any:
    vector = builder.insert_element(ir.Constant(_FLOATS, None), scalar, _I32(0))
    return builder.shuffle_vector(vector, ir.Constant(_FLOATS, None), ir.Constant(_WORDS, [0] * 16))


def _function(builder: Any, name: str, result: Any, *operands: Any) -> Any:
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, list(operands)), name)


def _stored(builder: Any, low: Any, high: Any, nan: bool = True) -> Any:
    """The words of two vectors of bfloat16 values (even and odd elements), a NaN as ``0xFFFF`` (the loop's
    ``torch_nan`` and ``_store_pair_keeping_nan`` of values already rounded); ``nan`` False: the values'
    own bits (for vectors known to hold no NaN)."""

    def bits(x: Any) -> Any:
        if not nan:
            return builder.bitcast(x, _WORDS)
        return builder.select(builder.fcmp_unordered("uno", x, x), _splat(_HIGH), builder.bitcast(x, _WORDS))

    return builder.or_(builder.lshr(bits(low), _splat(16)), builder.and_(bits(high), _splat(_HIGH)))


@functools.cache
def _blocks_intrinsic(negate: bool, coupled: bool, decoupled: bool, small: bool, multiply: bool) -> Any:
    """The intrinsic ``blocks(var, exp_avg, exp_avg_sq, grad, start, count, decay, weight_decay, w, beta2,
    one_minus_beta2, divisor, eps, neg_step_size)``: ``count`` blocks from the even element ``start``
    for one combination of the loop's flags (``w``: the lerp's weight, ``w1`` where ``small``, else
    ``w1 − 1``; ``divisor``: the float32 multiplier where ``multiply``, else ``bc2_sqrt``, which the root is
    divided by)."""

    @intrinsic
    def blocks(
        typingctx, var, exp_avg, exp_avg_sq, grad, start, count, decay, weight_decay, w, beta2,
        one_minus_beta2, divisor, eps, neg_step_size,
    ):  # fmt: skip
        arrays, scalars = (var, exp_avg, exp_avg_sq, grad), (decay, weight_decay, w, beta2, one_minus_beta2)
        scalars += (divisor, eps, neg_step_size)
        if not (all(_pair_array(a, start) for a in arrays) and isinstance(count, types.Integer)):
            return None
        if not all(s == types.float32 for s in scalars):
            return None
        signature = types.void(var, exp_avg, exp_avg_sq, grad, start, count, *scalars)
        return signature, functools.partial(_codegen, (negate, coupled, decoupled, small, multiply))

    return blocks


def _codegen(flags: tuple, context: Any, builder: Any, signature: Any, args: Any) -> Any:
    negate, coupled, decoupled, small, multiply = flags
    array_types, start_type = signature.args[:4], signature.args[4]
    decay, weight_decay, w, beta2, one_minus_beta2, divisor, eps, neg_step_size = args[6:]
    fma = _function(builder, "llvm.fma.v16f32", _FLOATS, _FLOATS, _FLOATS, _FLOATS)
    sqrt = _function(builder, "llvm.sqrt.v16f32", _FLOATS, _FLOATS)
    permute = _function(builder, "llvm.x86.avx512.vpermi2var.hi.512", _HALVES, _HALVES, _HALVES, _HALVES)
    decay, w, beta2, one_minus_beta2, neg_step_size = map(
        functools.partial(_broadcast, builder), (decay, w, beta2, one_minus_beta2, neg_step_size)
    )
    divisor = _broadcast(builder, divisor)
    stored_decay = _broadcast(builder, _round(builder, weight_decay))  # torch_add_alpha's α
    stored_eps = _round(builder, eps)  # torch_add_eps casts ε
    eps_lanes = _broadcast(builder, stored_eps)

    def quotient(root: Any) -> Any:  # R(root / c), as torch_div_scalar (times the multiplier, or divided)
        return _round(builder, builder.fmul(root, divisor) if multiply else builder.fdiv(root, divisor))

    def denominators(v: Any) -> Any:  # the loop's: R(R(R(√v)/c) + R(ε))
        q = quotient(_round(builder, builder.call(sqrt, [v])))
        return _round(builder, builder.fadd(q, eps_lanes))

    # the table: q(w) for w = bfloat16 bits 0x4000 + k (the roots constant), its exponent less 64
    entries = []
    for k in range(16):
        wk = ir.Constant(_WORDS, [(0x4000 + 16 * k + lane) << 16 for lane in range(16)])
        q = quotient(_round(builder, builder.call(sqrt, [builder.bitcast(wk, _FLOATS)])))
        entries.append(
            builder.trunc(builder.lshr(builder.bitcast(q, _WORDS), _splat(16)), ir.VectorType(_I16, 16))
        )
    table = [
        builder.sub(
            builder.shuffle_vector(
                entries[2 * r], entries[2 * r + 1], ir.Constant(ir.VectorType(_I32, 32), list(range(32)))
            ),
            _splat(_BIAS, _HALVES),
        )
        for r in range(8)
    ]
    lowest = highest = None
    for r in range(8):  # the entries' range (biased) as lane-wise minima and maxima
        lowest = table[r] if lowest is None else _min_max(builder, "<", lowest, table[r])
        highest = table[r] if highest is None else _min_max(builder, ">", highest, table[r])
    in_range = builder.and_(
        _all(builder, builder.icmp_signed(">=", lowest, _splat(_ENTRY_LOW - _BIAS, _HALVES))),
        _all(builder, builder.icmp_signed("<=", highest, _splat(_ENTRY_HIGH - _BIAS, _HALVES))),
    )
    bound = builder.select(in_range, _eps_bound(builder, stored_eps), ir.Constant(_I16, _NEVER))
    bound = builder.shuffle_vector(
        builder.insert_element(ir.Constant(_HALVES, None), bound, _I32(0)),
        ir.Constant(_HALVES, None),
        ir.Constant(ir.VectorType(_I32, 32), [0] * 32),
    )

    start = context.cast(builder, args[4], start_type, types.intp)
    count = context.cast(builder, args[5], signature.args[5], types.intp)
    with cgutils.for_range(builder, count) as loop:
        first = builder.add(start, builder.mul(loop.index, ir.Constant(start.type, BLOCK)))
        pointers = [
            builder.bitcast(_word_pointer(context, builder, t, a, first, types.intp), _WORDS.as_pointer())
            for t, a in zip(array_types, args[:4])
        ]
        words = [builder.load(pointer, align=2) for pointer in pointers]
        halves = [
            [
                builder.bitcast(builder.shl(word, _splat(16)), _FLOATS),
                builder.bitcast(builder.and_(word, _splat(_HIGH)), _FLOATS),
            ]
            for word in words
        ]
        ps, ms, vs = [], [], []
        for h in range(2):
            p, m, v, g = (x[h] for x in halves)
            if decoupled:
                p = _round(builder, builder.fmul(p, decay))
            if negate:
                g = builder.fneg(g)
            if coupled:
                g = _round(builder, builder.call(fma, [p, stored_decay, g]))
            d = builder.fsub(g, m)
            m = _round(builder, builder.call(fma, [w, d, m] if small else [w, d, g]))
            v = _round(builder, builder.fmul(v, beta2))
            v = _round(builder, builder.call(fma, [builder.fmul(one_minus_beta2, g), g, v]))
            ps.append(p)
            ms.append(m)
            vs.append(v)
        v_words = _stored(builder, vs[0], vs[1], nan=False)  # (a NaN's word fails the test below either way)
        index = builder.bitcast(v_words, _HALVES)
        looked = _looked_up(builder, permute, table, index)
        valid = builder.and_(
            builder.and_(
                builder.icmp_signed(">=", index, _splat(0x0080, _HALVES)),
                builder.icmp_signed("<=", index, _splat(0x7F7F, _HALVES)),
            ),
            builder.icmp_signed(">=", looked, bound),
        )
        found = builder.bitcast(looked, _WORDS)
        tabled = [
            builder.bitcast(builder.shl(found, _splat(16)), _FLOATS),
            builder.bitcast(builder.and_(found, _splat(_HIGH)), _FLOATS),
        ]
        before = builder.block
        with builder.if_then(builder.not_(_all(builder, valid)), likely=False):
            computed = [denominators(v) for v in vs]
            computed_block = builder.block
        ds = []
        for h in range(2):
            phi = builder.phi(_FLOATS)
            phi.add_incoming(tabled[h], before)
            phi.add_incoming(computed[h], computed_block)
            ds.append(phi)
        new_p = [
            _round(builder, builder.fadd(ps[h], builder.fdiv(builder.fmul(neg_step_size, ms[h]), ds[h])))
            for h in range(2)
        ]
        # A NaN m' or v' makes p' a NaN (through the quotient): where no p' is one, the words are stored
        # without the NaN step.
        nan = builder.or_(*(builder.fcmp_unordered("uno", x, x) for x in new_p))
        with builder.if_else(_any(builder, nan), likely=False) as (some, none):
            for mapped in (True, False):
                with some if mapped else none:
                    words = [_stored(builder, x[0], x[1], nan=mapped) for x in (new_p, ms, vs)]
                    for word, pointer in zip(words, pointers):
                        builder.store(word, pointer, align=2)
    return context.get_dummy_value()


def _min_max(builder: Any, op: str, a: Any, b: Any) -> Any:
    return builder.select(builder.icmp_signed(op, a, b), a, b)


def _all(builder: Any, mask: Any) -> Any:
    """Whether every lane of a vector of i1 is true."""
    bits = builder.bitcast(mask, ir.IntType(mask.type.count))
    return builder.icmp_signed("==", bits, ir.Constant(bits.type, -1))


def _any(builder: Any, mask: Any) -> Any:
    """Whether any lane of a vector of i1 is true."""
    bits = builder.bitcast(mask, ir.IntType(mask.type.count))
    return builder.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0))


def _looked_up(builder: Any, permute: Any, table: list, index: Any) -> Any:
    """The bfloat16 bits ``q(v)`` of 32 words ``v`` (:data:`_HALVES`): entry ``v & 0xFF`` (four permutes of
    64 entries, picked by bits 6 and 7) plus ``(v >> 8 & 0x7F) << 7`` (the entries hold ``−64 << 7``)."""
    quarters = [builder.call(permute, [table[2 * q], index, table[2 * q + 1]]) for q in range(4)]

    def bit(b: int) -> Any:
        return builder.icmp_unsigned("!=", builder.and_(index, _splat(b, _HALVES)), _splat(0, _HALVES))

    low = builder.select(bit(0x40), quarters[1], quarters[0])
    high = builder.select(bit(0x40), quarters[3], quarters[2])
    entry = builder.select(bit(0x80), high, low)
    return builder.add(entry, builder.and_(builder.lshr(index, _splat(1, _HALVES)), _splat(0x3F80, _HALVES)))


def _eps_bound(builder: Any, stored_eps: Any) -> Any:
    """The bfloat16 bits (an i16) of ``B`` for ``R(ε)`` (its float32 value): 0 for ±0; ``2^(e+10)`` for a
    positive ``R(ε)`` of exponent field ``e`` (1 for a subnormal), :data:`_NEVER` where that is not finite
    and for a negative or NaN ``R(ε)`` (no table then)."""
    bits = builder.lshr(builder.bitcast(stored_eps, _I32), _I32(16))
    exponent = builder.lshr(bits, _I32(7))
    exponent = builder.select(builder.icmp_unsigned("<", exponent, _I32(1)), _I32(1), exponent)
    power = builder.shl(builder.add(exponent, _I32(10)), _I32(7))
    positive = builder.select(builder.icmp_unsigned("<", power, _I32(_NEVER)), power, _I32(_NEVER))
    zero = builder.icmp_unsigned("==", builder.and_(bits, _I32(0x7FFF)), _I32(0))
    finite_positive = builder.icmp_unsigned("<", bits, _I32(0x7F80))
    result = builder.select(zero, _I32(0), builder.select(finite_positive, positive, _I32(_NEVER)))
    return builder.trunc(result, _I16)


def adam_pair_blocks(
    i, pairs, var, exp_avg, exp_avg_sq, grad, negate, coupled, weight_decay, decoupled, decay, w1,
    w1_minus_one, small1, beta2, one_minus_beta2, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl,
    tail_from, chunk, chunk_tail,
):  # fmt: skip
    """In the all-bfloat16 split loop of ``_torch_adam`` (compiled code): the pairs from element ``i``
    (even) that blocks updated (a multiple of 16, of ``pairs`` pairs), the rest left to the pair loop; 0
    where :func:`blocks_here` is false, for a ``mkl`` that is a table of denominators (the loop reads that),
    or where a flag is not a compile-time constant or a scalar not float32. The arguments are the element
    function's."""
    return 0


def _same_signature(name: str, doc: str | None = None) -> Any:
    """A new function of :func:`adam_pair_blocks`' signature and body (returning 0), named ``name``."""
    function = FunctionType(adam_pair_blocks.__code__, globals(), name)
    function.__doc__ = doc
    return function


any_target_pair_blocks = _same_signature(
    "any_target_pair_blocks",
    """:func:`adam_pair_blocks` wherever the target has AVX-512 BW (:func:`word_permutes`): the tests' way
    to check the blocks on any such host.""",
)
_no_blocks = _same_signature("_no_blocks")  # the overloads' implementation where there are no blocks


def _literal(flag: Any) -> bool | None:
    return flag.literal_value if isinstance(flag, types.BooleanLiteral) else None


def _pair_blocks(  # the overloads' typing: the blocks' implementation, or _no_blocks
    i, pairs, var, exp_avg, exp_avg_sq, grad, negate, coupled, weight_decay, decoupled, decay, w1,
    w1_minus_one, small1, beta2, one_minus_beta2, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl,
    tail_from, chunk, chunk_tail,
):  # fmt: skip
    from ._denominator_table import DenominatorTableType, PartTablesType

    flags = [_literal(f) for f in (negate, coupled, decoupled, small1)]
    scalars = (weight_decay, decay, w1, w1_minus_one, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size)
    usable = (
        None not in flags
        and not isinstance(mkl, (DenominatorTableType, PartTablesType))
        and all(_pair_array(a, i) for a in (var, exp_avg, exp_avg_sq, grad))
        and inv_bc2_sqrt in (types.float32, types.float64, types.none)
        and all(s == types.float32 for s in scalars)
    )
    if not usable:
        return _no_blocks
    negate_, coupled_, decoupled_, small_ = flags
    multiply = inv_bc2_sqrt == types.float32
    blocks = _blocks_intrinsic(negate_, coupled_, decoupled_, small_, multiply)

    def run(
        i, pairs, var, exp_avg, exp_avg_sq, grad, negate, coupled, weight_decay, decoupled, decay, w1,
        w1_minus_one, small1, beta2, one_minus_beta2, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl,
        tail_from, chunk, chunk_tail,
    ):  # fmt: skip
        if pairs < LEAST_PAIRS:
            return 0
        count = pairs // 16
        w = w1 if small_ else w1_minus_one
        divisor = inv_bc2_sqrt if multiply else bc2_sqrt
        blocks(
            var, exp_avg, exp_avg_sq, grad, i, count, decay, weight_decay, w, beta2, one_minus_beta2,
            divisor, eps, neg_step_size,
        )  # fmt: skip
        return count * 16

    return run


def _register(stub: Any, available: Any) -> None:
    """The overload of ``stub`` (:func:`adam_pair_blocks` or :func:`any_target_pair_blocks`): the blocks
    where ``available()`` is true when the loop is compiled."""

    @overload(stub, prefer_literal=True, jit_options=dict(error_model="numpy", fastmath=False))
    def compiled(
        i, pairs, var, exp_avg, exp_avg_sq, grad, negate, coupled, weight_decay, decoupled, decay, w1,
        w1_minus_one, small1, beta2, one_minus_beta2, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl,
        tail_from, chunk, chunk_tail,
    ):  # fmt: skip
        if not available():
            return _no_blocks
        return _pair_blocks(
            i, pairs, var, exp_avg, exp_avg_sq, grad, negate, coupled, weight_decay, decoupled, decay, w1,
            w1_minus_one, small1, beta2, one_minus_beta2, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl,
            tail_from, chunk, chunk_tail,
        )  # fmt: skip


_register(adam_pair_blocks, blocks_here)
_register(any_target_pair_blocks, word_permutes)
