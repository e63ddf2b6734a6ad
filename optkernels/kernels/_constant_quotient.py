"""A float32 value divided by a float32 constant ``c``, correctly rounded, in float32 arithmetic.

The CPU loops divide by a per-launch constant (Adam's ``bias_correction2**0.5``): :func:`divide_by_reciprocal`
gives the bits of IEEE ``s/c`` with a multiplication, three ``fma`` and one ``vfixupimmps`` on the vector's
float32 lanes, from the float64 ``1/c`` that the host computes once per launch (in place of a division, or
of a float64 product, which costs two conversions of each half of the vector each way); on AMD's Zen cores,
whose divider is fast, by the division itself.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._intrinsics import quotient_special_value, zen_target

__all__ = ["QUOTIENT_DIVIDEND_RANGE", "QUOTIENT_DIVISOR_RANGE", "divide_by_reciprocal"]

#: ``(low, high)``: :func:`divide_by_reciprocal` is exact for ``low ≤ |s| ≤ high`` (and for ±0, ±∞, NaN).
#: Every square root of a float32 lies there (``√(2⁻¹⁴⁹) ≈ 2⁻⁷⁴·⁵``, ``√(FLT_MAX) < 2⁶⁴``).
QUOTIENT_DIVIDEND_RANGE = (2.0**-90, 2.0**90)
#: ``(low, high)``: the divisors ``c`` for which :func:`divide_by_reciprocal` is exact (Adam's
#: ``bias_correction2**0.5`` for 0 ≤ β2 < 1 lies in [2⁻²⁷, 1]; in CUDA code, the float64 product's range).
QUOTIENT_DIVISOR_RANGE = (2.0**-32, 1.0)
#: Compile the division itself for AMD's Zen cores (tests set False to check the reciprocal's steps there;
#: the decision is taken when a function is compiled).
DIVIDE_ON_ZEN = True


def _fma(builder: Any, a: Any, b: Any, c: Any) -> Any:
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(a.type, [a.type] * 3), f"llvm.fma.{a.type.intrinsic_name}"
    )
    return builder.call(function, [a, b, c])


def _quotient(context: Any, builder: Any, s: Any, c: Any, inverse: Any) -> Any:
    from numba.core.cpu import CPUContext

    f32, f64 = ir.FloatType(), ir.DoubleType()
    if not isinstance(context, CPUContext):  # CUDA: the float64 product (one rounding to float32 each way)
        return builder.fptrunc(builder.fmul(builder.fpext(s, f64), inverse), f32)
    if DIVIDE_ON_ZEN and zen_target():  # a fast divider: the division itself (the loops wait on latency)
        return builder.fdiv(s, c)
    y = builder.fptrunc(inverse, f32)  # RN(1/c); y, low: once per loop (LLVM hoists them)
    low = builder.fptrunc(builder.fsub(inverse, builder.fpext(y, f64)), f32)
    q0 = _fma(builder, s, y, builder.fmul(s, low))  # faithful
    r = _fma(builder, builder.fneg(q0), c, s)  # exact
    q = _fma(builder, r, y, q0)  # RN(s/c)
    return quotient_special_value(context, builder, q, s, y)


@intrinsic
def divide_by_reciprocal(typingctx, s, c, inverse):
    """``s/c`` rounded to float32 (round to nearest even), the bits of IEEE division, for float32 ``s`` and
    ``c`` and ``inverse`` the float64 ``1/c`` rounded once, for ``s`` ±0, ±∞, NaN or in
    :data:`QUOTIENT_DIVIDEND_RANGE` and ``c`` in :data:`QUOTIENT_DIVISOR_RANGE` (the caller's promise;
    outside them the result may be an ulp off). CPU code, with ``y = float32(inverse)`` and ``ℓ =
    float32(inverse − y)`` (once per loop)::

        q₀ = fma(s, y, s·ℓ),   r = fma(−q₀, c, s),   q = fma(r, y, q₀)

    and ±0, ±∞, NaN ``s`` passed (a NaN quieted) by
    :func:`~optkernels.kernels._intrinsics.quotient_special`; compiled for AMD's Zen cores
    (:func:`~optkernels.kernels._intrinsics.zen_target`), whose divider is fast, the division itself.
    CUDA code: ``float32(float64(s)·inverse)`` (the same bits: see
    :func:`optkernels.kernels.torch_rules.divide_by_constant`).

    Why ``q = RN(s/c)`` (Markstein's theorem, here with its proof). Scale by powers of two, which changes
    no step in these ranges (none overflows, and only ``s·ℓ`` may be subnormal, an absolute error far
    below step 2's margin): write ``x = s/c > 0``
    (the sign is symmetric), ``c = C·2^γ``, ``q₀ = Q·2^κ`` with ``2²³ ≤ C, Q < 2²⁴``.

    1. ``y = RN(1/c)``: the float64 ``1/c`` is within 2⁻⁵³ (relative) of ``1/c``, a quotient of float32
       numbers that lies at least 2⁻⁴⁹ from every float32 rounding midpoint, so rounding it again to
       float32 rounds ``1/c``. So ``y = (1 + ε)/c`` with ``|ε| = c·|y − 1/c| ≤ c·½ulp(1/c) = C·2⁻⁴⁸``
       (``ε = 0`` where ``1/c`` is a power of two).
    2. ``q₀`` is faithful (one of the two float32 numbers around ``x``): ``y + ℓ`` is within about 2⁻⁴⁸
       of ``1/c`` and ``s·ℓ`` is rounded with an error below 2⁻⁴⁸·``x``, so the ``fma``'s exact value is
       within 2⁻⁴⁶·``x``, far inside half an ulp of ``x``, and its rounding is faithful.
    3. ``r = s − q₀c`` exactly: ``q₀c`` is a multiple of 2^(γ+κ), and so is ``s`` (it is within an ulp of
       ``q₀c ≥ 2⁴⁶⁺ᵞ⁺ᵏ``, so ``ulp(s) ≥ 2²²⁺ᵞ⁺ᵏ``), while ``|s − q₀c| = c·|x − q₀| < c·2^κ < 2²⁴⁺ᵞ⁺ᵏ``:
       ``r`` has at most 24 significant bits.
    4. ``z = q₀ + r·y = q₀ + (x − q₀)(1 + ε)``, computed exactly by the ``fma`` and rounded once. Let
       ``m`` be the midpoint between ``q₀`` and its neighbour on ``x``'s side: the only rounding boundary
       near ``x``. ``RN(z) ≠ RN(x)`` only if ``m − q₀`` lies between ``x − q₀`` and ``(x − q₀)(1 + ε)``,
       that is (times ``c``) ``c(m − q₀)`` between ``r`` and ``r(1 + ε)``. Now ``c(m − q₀) = ±C·u`` with
       ``u = 2^(γ+κ−1)`` (``2^(γ+κ−2)`` below a power of two ``q₀``) and ``r`` is a multiple of ``2u``:
       ``r/u`` would be an integer in an interval with one end at ``C`` and length at most
       ``C·|ε|/(1 − |ε|) ≤ C²·2⁻⁴⁸/(1 − 2⁻²⁴) < 1``: ``C`` itself, so ``x = m``. But no quotient of float32
       numbers is a midpoint (``s = c·m`` would make the odd part of ``s``'s significand a multiple of
       ``m``'s odd 25-bit one, larger than 2²⁴). So ``q = RN(x)`` (``r = 0``: ``q = q₀ = x``).

    The ranges keep ``x`` normal and finite and ``r`` above the subnormals (``|s| ≥ 2⁻¹⁰²`` suffices for
    step 3). tests/test_constant_quotient.py checks it against IEEE division on every significand of ``s``
    for the hardest divisors (largest ``C·|ε|``) and Adam's, and on random pairs across the ranges."""
    if not (s == c == types.float32 and inverse == types.float64):
        raise TypingError(
            f"divide_by_reciprocal takes (float32, float32, float64), got ({s}, {c}, {inverse})"
        )

    def codegen(context, builder, signature, args):
        return _quotient(context, builder, *args)

    return types.float32(s, c, inverse), codegen
