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

import functools
import math
from typing import Any

import numba
import numpy as np

from . import _cuda
from ._checks import _array_facts, _flatten, plain_array, to_scalar
from ._elementwise import _JIT_OPTIONS, ZERO, elementwise, scalar_math
from ._intrinsics import (
    byte_permutes,
    register_search,
    scalar_lookups,
    search_block,
    search_dynamic_finite,
    search_dynamic_nonnegative,
)
from ._lowp import f32_bits, f32_from_bits
from ._pointers import address_as_pointer
from ._upcast import via_float32
from .quantization import (
    NEG_INF,
    NEG_MAX,
    REGISTER_WORDS,
    bucket_code,
    bucket_key,
    check_code,
    fast_search,
    nearest_code,
    nearest_code_fixed,
    nearest_code_slow,
    registers_dynamic,
    registers_exact,
    registers_unsigned_dynamic,
    scratch_block_elementwise,
    search_tables,
    sign_bit,
    sign_fix_baked,
    sign_split,
    step_register_tables,
    table_lookup,
    table_math,
    table_planes,
)

BLOCK = 256
"""Elements per quantization block of the 8-bit optimizers (bitsandbytes >= 0.44)."""

ALGORITHMS = ("adam", "ademamix", "momentum", "lion", "rmsprop", "adagrad")
"""bitsandbytes' optimizer names accepted by the kernels (their index is the kernels' ``algo``)."""
ADAM, ADEMAMIX, MOMENTUM, LION, RMSPROP, ADAGRAD = range(6)
_F32 = np.float32
INF = np.float32(np.inf)
NAN = np.float32(np.nan)


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


# _rule as a call (inlined by LLVM, not into Numba's IR): an inlined function's returned tuple counts as a
# possible array alias in the parallel loop's analysis, which would cost its arrays their noalias marks.
_rule_call = numba.njit(**_JIT_OPTIONS)(_rule.py_func)


@table_math
def _sign_fixed(c, s, negatives):
    """Code ``c`` of ``s``, moved one step where its sign differs from ``s``'s (bitsandbytes' state-1 sign
    fix; uint8 wrap-around), for a table whose first ``negatives`` entries have the sign bit set and no
    other does (:func:`.quantization.sign_split`). Without branches, in 32-bit integers (see
    :func:`.quantization.nearest_code`)."""
    i32 = np.int32  # every result cast back: Numba widens integer arithmetic to 64 bits
    fix = i32(i32(c < negatives) ^ i32(sign_bit(s)))
    step = i32(i32(i32(s > ZERO) * i32(2)) - i32(1))
    return i32(i32(c + i32(fix * step)) & i32(255))


@table_math
def _code_sign_fixed(c, s, code):
    """:func:`_sign_fixed` of any table (the sign of ``code[c]`` looked up)."""
    fix = int(sign_bit(code[c]) != sign_bit(s))
    return (c + fix * (2 * int(s > ZERO) - 1)) & 255


@table_math
def _search_mode(start, negatives, signed, top):
    """How :func:`_requantize` searches: 0 the binary search, 1 :func:`.quantization.nearest_code` (and the
    sign fix where ``signed``), 2 :func:`.quantization.nearest_code_fixed` (the sign fix in the table,
    ``top`` finite and > 0). An int: booleans combined by ``and`` and tested in the loops' function keep
    them from being vectorised."""
    mode = 0
    if fast_search(start) and (negatives >= 0 or not signed):
        mode = 1
        if signed and sign_fix_baked(start):
            mode = 2 if top > ZERO and top < INF else 0
    return mode


def _requantize_loops(
    out, first, scratch, base, count, top, code, mids, start, negatives, signed, spare, keys, key_base, nonneg
):
    """``out[first + k]`` = the code of ``s = scratch[base + k]`` for k < count: the nearest code of
    ``s / top``, sign-fixed where ``signed`` (by :func:`_search_mode`; a block of zeros or infinities takes
    the binary search). Indices are unsigned (no wrap-around selects: the loop loads and stores
    contiguously and is vectorised, the table lookups as gathers). The CUDA twin of :func:`_requantize`
    (``keys``, ``key_base``, ``nonneg`` unused)."""
    mode = _search_mode(start, negatives, signed, top)
    if mode == 2:
        for k in range(count):
            c = nearest_code_fixed(scratch[np.uint64(base + k)] / top, start)
            out[np.uint64(first + k)] = c
    elif mode == 1:
        negatives = np.int32(negatives)
        for k in range(count):
            s = scratch[np.uint64(base + k)]
            c = nearest_code(s / top, mids, start)
            if signed:
                c = _sign_fixed(c, s, negatives)
            out[np.uint64(first + k)] = c
    else:
        for k in range(count):
            s = scratch[np.uint64(base + k)]
            c = nearest_code_slow(s / top, mids)
            if signed:
                c = _code_sign_fixed(c, s, code)
            out[np.uint64(first + k)] = c


_requantize_loops_cpu = table_math(_requantize_loops)


def _requantize_dynamic_loops(out, first, scratch, base, count, top, keys, key_base, signed, nonneg, finite):
    """CUDA twin of :func:`_requantize_dynamic`: never served (the caller then runs :func:`_requantize`)."""
    return False


_BYTE, _WORD, _FLOAT = np.zeros(0, np.uint8), np.zeros(0, np.int32), np.zeros(0, np.float32)


@numba.njit(**_JIT_OPTIONS)
def _dynamic_at(out_address, values_address, count, top, keys_address, signed, nonneg, finite):
    """:func:`_requantize_dynamic` on the bytes at ``out_address``, the float32 at ``values_address`` and
    the table words at ``keys_address``. A function of its own, compiled once for every call site and
    called with addresses: arrays would be referenced and released per call (atomic operations on
    counters every thread shares), and an inlined copy per call site costs compile time."""
    if not (count == BLOCK and register_search() and byte_permutes()):
        return False
    keys = numba.carray(address_as_pointer(keys_address, _WORD), REGISTER_WORDS)
    if not (registers_exact(keys, 0) and registers_dynamic(keys, 0)):
        return False
    if not (top > ZERO and top < INF):
        return False
    out = numba.carray(address_as_pointer(out_address, _BYTE), BLOCK)
    values = numba.carray(address_as_pointer(values_address, _FLOAT), BLOCK)
    if signed:
        if not finite:
            return False
        search_dynamic_finite(out, 0, values, 0, top, keys, 0, False)
        return True
    if not (nonneg and registers_unsigned_dynamic(keys, 0)):
        return False
    search_dynamic_nonnegative(out, 0, values, 0, top, keys, 0, True)
    return True


@table_math(device=_requantize_dynamic_loops)
def _requantize_dynamic(out, first, scratch, base, count, top, keys, key_base, signed, nonneg, finite):
    """The codes of a full block of a dynamic map searched in registers where the CPU has AVX-512 VBMI
    (a start from the value's decade, one threshold looked up by byte permutes), for values the caller
    vouches for: ``finite`` (a signed map; every ``s`` finite, hence ``|s| <= top``, their absmax):
    :func:`._intrinsics.search_dynamic_finite`; ``nonneg`` (the unsigned map; the states a map of entries
    >= +0 times a finite scale >= 0, updated by adding products >= +0, so ``+0 <= s <= top``):
    :func:`._intrinsics.search_dynamic_nonnegative`; both only for ``top`` finite and > 0. Whether it
    served the block; else the caller runs :func:`_requantize` with the same arguments (the same codes).
    By :func:`_dynamic_at`, called with the arrays' addresses."""
    return _dynamic_at(
        out.ctypes.data + first,
        scratch.ctypes.data + 4 * base,
        count,
        top,
        keys.ctypes.data + 4 * key_base,
        signed,
        nonneg,
        finite,
    )


@table_math(device=_requantize_loops, inline=False)
def _requantize(
    out, first, scratch, base, count, top, code, mids, start, negatives, signed, spare, keys, key_base, nonneg
):
    """:func:`_requantize_loops`; a full block searched by the start table takes three loops instead, so
    that its table lookups are scalar loads (:func:`._intrinsics.scalar_lookups`) rather than gathers:
    ``x = s / top`` (kept in ``scratch[base + k]``, NaN as -inf where the sign fix is not in the table)
    and its :func:`.quantization.bucket_key` (as bits in ``scratch[spare + k]``), the lookups, then
    :func:`.quantization.bucket_code` (and the sign fix). A full block of a table the start table cannot
    search (the binary search) is searched in registers where the CPU allows
    (:func:`._intrinsics.search_block` with the table's ``keys[key_base:]``, the sign fix folded in where
    ``signed``, then only for a finite ``top`` > 0). The kernel first tries :func:`_requantize_dynamic`
    (``nonneg`` is its word, unused here). The same codes."""
    mode = _search_mode(start, negatives, signed, top)
    registers = count == BLOCK and register_search() and registers_exact(keys, key_base)
    if registers and (not signed or (top > ZERO and top < INF)) and mode == 0:
        search_block(out, first, scratch, base, top, keys, key_base, not signed)
        return
    if count != BLOCK or mode == 0:
        _requantize_loops_cpu(
            out,
            first,
            scratch,
            base,
            count,
            top,
            code,
            mids,
            start,
            negatives,
            signed,
            spare,
            keys,
            key_base,
            nonneg,
        )
        return
    keep = 1 if mode == 2 or not signed else 0  # x replaces s (no sign fix of s's sign left to do)
    for k in range(BLOCK):
        x = scratch[np.uint64(base + k)] / top
        x = x if x == x or mode == 2 else NEG_INF  # nearest_code's NaN (the fixed table has NaN's buckets)
        if keep == 1:
            scratch[np.uint64(base + k)] = x
        scratch[np.uint64(spare + k)] = f32_from_bits(bucket_key(x))
    scalar_lookups(scratch, spare, BLOCK, start)
    negatives = np.int32(negatives)
    for k in range(BLOCK):
        s = scratch[np.uint64(base + k)]
        x = s
        if keep == 0:
            x = s / top
            x = x if x == x else NEG_INF
        c = bucket_code(x, f32_bits(scratch[np.uint64(spare + k)]))
        if keep == 0:
            c = _sign_fixed(c, s, negatives)
        out[np.uint64(first + k)] = c


def _magnitude_float(x):
    """CUDA twin of :func:`_magnitude`: ``|x|``, -1 for a NaN."""
    return abs(x) if x == x else np.float32(-1.0)


@table_math(device=_magnitude_float, inline=False)
def _magnitude(x):
    """``|x|`` as its bits (an int32, ordered as the magnitudes, +inf's the largest), -1 for a NaN: a running
    maximum of these is an integer maximum (:func:`_merge_top` turns it into the float again), which
    :func:`_magnitude_max` takes where the rule's loop met a NaN."""
    bits = np.int32(f32_bits(x) & np.uint32(0x7FFFFFFF))
    return bits if bits <= np.int32(0x7F800000) else np.int32(-1)


def _abs_float(x):
    """CUDA twin of :func:`_abs_bits`: ``|x|`` (a NaN stays NaN, which a running maximum by ``>`` skips)."""
    return abs(x)


@table_math(device=_abs_float, inline=False)
def _abs_bits(x):
    """The bits of ``|x|`` as an int32: ordered as the magnitudes, +inf's the largest below every NaN's. A
    running maximum of these is one integer maximum per value in the rule's loop; a maximum above +inf's
    (:func:`_nan_among`) says a NaN came, and :func:`_magnitude_max` then gives the maximum without it."""
    return np.int32(f32_bits(x) & np.uint32(0x7FFFFFFF))


def _nan_among_float(most):
    """CUDA twin of :func:`_nan_among`: the running maximum of :func:`_abs_float` skipped the NaNs."""
    return False


@table_math(device=_nan_among_float, inline=False)
def _nan_among(most):
    """Whether a running maximum of :func:`_abs_bits` met a NaN."""
    return most > np.int32(0x7F800000)


@table_math(inline=False)
def _magnitude_max(scratch, base, count):
    """The running maximum of :func:`_magnitude` over ``scratch[base:base + count]`` (-1 where every value
    is a NaN): a block's maximum where a NaN came (:func:`_nan_among`)."""
    most = _magnitude(NAN)
    for k in range(count):
        h = _magnitude(scratch[np.uint64(base + k)])
        most = h if h > most else most
    return most


def _merge_top_float(most, top):
    """CUDA twin of :func:`_merge_top`."""
    return most if most > top else top


@table_math(device=_merge_top_float, inline=False)
def _merge_top(most, top):
    """``max(top, m)`` (``fmaxf`` from ``top``) of the magnitude ``m`` whose :func:`_magnitude` is ``most``
    (the running maximum over a block, -1 where no value counted)."""
    if most < 0:
        return top
    found = f32_from_bits(most)
    return found if found > top else top


@table_math
def _dequantize_into(scratch, base, codes, first, count, table, planes, plane_base, scale):
    """``scratch[base + k] = table[codes[first + k]]·scale`` for k < count: a full block by
    :func:`.quantization.table_lookup` (``planes[plane_base:]`` the table's planes), a partial one by a loop
    (a vectorised gather)."""
    if count == BLOCK:
        table_lookup(scratch, base, codes, first, table, planes, plane_base, scale)
    else:
        for k in range(count):
            scratch[np.uint64(base + k)] = table[codes[np.uint64(first + k)]] * scale


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
    planes,
    mids1,
    start1,
    mids2,
    start2,
    keys,
    negatives,
    size,
    first,
    decayed,
    hyper,
    scratch,
    base,
):
    # Quantization block b; c3/a3: AdEMAMix's second EMA (codes with map q1, its own absmax); hyper: the
    # float32 scalars of step_scalars (an array: a call of more than 30 arguments could not be inlined);
    # scratch[base:base + 1024] (the driver's): the block's m1, m2, v between the passes, then 256 words
    # for the requantization's table lookups. No array views:
    # the CPU loop then has no aliases, so its arrays are marked noalias and the gathers are vectorised.
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
    # The flags and table offsets passed to functions of their own (_rule_call, _requantize, _dynamic_at)
    # as plain bool and int (bool(), int()), not as constants: Numba compiles such a function once per
    # argument types, and a constant's type is its value; so one compiled _requantize and _dynamic_at
    # serve every call site and algorithm, one _rule per algorithm (LLVM inlines it and folds the flag).
    yes, no, words, zero = bool(True), bool(False), int(REGISTER_WORDS), int(0)  # noqa: UP018
    start = b * 256
    count = min(start + 256, size) - start
    sm1, sm2, sv, spare = base, base + 256, base + 512, base + 768
    o1 = a1[b]
    o2 = a2[b] if two else ZERO
    o3 = a3[b] if algo == ADEMAMIX else ZERO
    # Pass 1: dequantize (gathers), the rule and the parameter (vectorised), the new states kept.
    _dequantize_into(scratch, sm1, c1, start, count, q1, planes, 0, o1)
    if two:
        _dequantize_into(scratch, sv, c2, start, count, q2, planes, 1024, o2)
    if algo == ADEMAMIX:
        _dequantize_into(scratch, sm2, c3, start, count, q1, planes, 0, o3)
    # the new absmax of each state: running integer maxima of the magnitudes' bits in the same loop (one
    # and and one maximum per value; a NaN's bits exceed +inf's, so a maximum above them says a NaN came)
    most1, most2, most3 = _magnitude(NAN), _magnitude(NAN), _magnitude(NAN)
    for k in range(count):
        i = np.uint64(start + k)
        x, m1, m2, v = _rule_call(
            algo,
            p[i],
            g[i],
            scratch[np.uint64(sm1 + k)],
            scratch[np.uint64(sm2 + k)] if algo == ADEMAMIX else ZERO,
            scratch[np.uint64(sv + k)] if two else ZERO,
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
            yes,
        )
        p[i] = x
        scratch[np.uint64(sm1 + k)] = m1
        if algo == ADEMAMIX:
            scratch[np.uint64(sm2 + k)] = m2
        if two:
            scratch[np.uint64(sv + k)] = v
        h1 = _abs_bits(m1)
        most1 = h1 if h1 > most1 else most1
        if two:
            h2 = _abs_bits(v)
            most2 = h2 if h2 > most2 else most2
        if algo == ADEMAMIX:
            h3 = _abs_bits(m2)
            most3 = h3 if h3 > most3 else most3
    # where a NaN came (rare): the maxima without the NaNs, and the state left to _requantize
    finite1, finite3 = yes, yes
    if _nan_among(most1):
        most1 = _magnitude_max(scratch, sm1, count)
        finite1 = no
    if two and _nan_among(most2):
        most2 = _magnitude_max(scratch, sv, count)
    if algo == ADEMAMIX and _nan_among(most3):
        most3 = _magnitude_max(scratch, sm2, count)
        finite3 = no
    top1, top2, top3 = NEG_MAX, NEG_MAX, NEG_MAX
    if count < 256:  # the phantom elements of a partial block (p = g = 0, codes 128 / 128 / 0)
        _, top1, top3, top2 = _rule_call(
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
            no,
        )
        top1 = abs(top1) if abs(top1) > NEG_MAX else NEG_MAX  # fmaxf: a NaN does not count
        top2 = abs(top2) if abs(top2) > NEG_MAX else NEG_MAX
        top3 = abs(top3) if abs(top3) > NEG_MAX else NEG_MAX
    # Pass 2: the new absmax, then the codes. No NaN among the block's m' and a finite absmax (which
    # _requantize_dynamic checks): every m' is finite.
    top1 = _merge_top(most1, top1)
    a1[b] = top1
    if not _requantize_dynamic(c1, start, scratch, sm1, count, top1, keys, zero, yes, no, finite1):
        _requantize(
            c1, start, scratch, sm1, count, top1, q1, mids1, start1, negatives, yes, spare, keys, zero, no
        )
    if two:
        # v' = v·β2 + ((1−β2)·g)·g >= +0 (or 0 for a non-finite g) where v >= +0 is finite: a map of
        # entries >= +0 (_requantize checks it) times a finite old absmax >= 0
        nonneg = o2 >= ZERO and o2 < INF
        top2 = _merge_top(most2, top2)
        a2[b] = top2
        if not _requantize_dynamic(c2, start, scratch, sv, count, top2, keys, words, no, nonneg, no):
            _requantize(
                c2,
                start,
                scratch,
                sv,
                count,
                top2,
                q2,
                mids2,
                start2,
                negatives,
                no,
                spare,
                keys,
                words,
                nonneg,
            )
    if algo == ADEMAMIX:
        top3 = _merge_top(most3, top3)
        a3[b] = top3
        if not _requantize_dynamic(c3, start, scratch, sm2, count, top3, keys, zero, yes, no, finite3):
            _requantize(
                c3,
                start,
                scratch,
                sm2,
                count,
                top3,
                q1,
                mids1,
                start1,
                negatives,
                yes,
                spare,
                keys,
                zero,
                no,
            )


# The 8-bit step's element function (one quantization block b) for one algorithm, the algorithm a constant
# there so that its branches fold away and its loops vectorise; a call compiles only its own algorithm's.
_UPDATE_8BIT_PARAMS = (
    "b, p, g, c1, c2, c3, a1, a2, a3, q1, q2, planes, mids1, start1, mids2, start2, keys, negatives, size, "
    "first, decayed, hyper, scratch, base"
)
_UPDATE_8BIT = """
def _update_8bit_{name}({params}):
    _block_8bit({algo}, {params})
"""


@functools.cache
def _update_8bit(algo: int) -> Any:
    """The :class:`.quantization.ScratchBlockElementwise` kernel of the 8-bit step of ``ALGORITHMS[algo]``:
    ``launch(device, blocks, p, g, c1, c2, c3, a1, a2, a3, q1, q2, planes, mids1, start1, mids2, start2,
    keys, negatives, size, first, decayed, hyper)``. Its CPU loop calls :func:`_block_8bit` with the
    constant ``algo`` itself (``cpu_call``), without the per-algorithm wrapper that CUDA compiles: one level
    of Numba's IR inlining less in the first call's compile."""
    name = ALGORITHMS[algo]
    source = _UPDATE_8BIT.format(name=name, algo=algo, params=_UPDATE_8BIT_PARAMS)
    namespace = dict(globals())
    exec(compile(source, __file__, "exec"), namespace)
    element = namespace[f"_update_8bit_{name}"]
    element.__module__ = __name__
    return scratch_block_elementwise(element, cpu_call=(_block_8bit, (algo,)))


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
        hyper = _cuda.to_device(hyper)
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
    return host if device == "cpu" else _cuda.to_device(host)


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
        _update_8bit(algo).launch(
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
            table_planes(q1, q2) if device == "cpu" else _dummy(device, np.uint8),
            *search_tables(q1, device, sign_fix=True),
            *search_tables(q2, device),
            step_register_tables(q1, q2) if device == "cpu" else _dummy(device, np.int32),
            sign_split(q1),
            n,
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
