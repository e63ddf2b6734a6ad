"""MKL's float32 ``H8``/``EX`` square root for AVX-512 loops, its inputs off the kernel's path fixed up.

:func:`optkernels.kernels.torch_rules.torch_sqrt`'s ``H8`` kernel (the AVX path MKL runs on AMD processors
among others) computes ``rsqrtss`` and a Newton step on the normal positive inputs; MKL gives every other
input IEEE ``sqrt``. Without branches every vector computes both the kernel and IEEE ``sqrt`` and selects
(the square root costs as much as the kernel). Here the kernel's result is fixed up by the class of the
input (``vfixupimmps``: IEEE's bits for ±0, negatives, +∞ and NaN, as :func:`._intrinsics.sqrt_special`),
and only a vector holding a subnormal input (``kortest``) computes IEEE ``sqrt`` for it: the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._intrinsics import (
    _FIXUP_PACKED,
    _FIXUP_SCALAR,
    _I32,
    _SQRT_FIXUP_TABLE,
    ESTIMATE_PREFIX,
    _avx512_here,
    _estimate_call,
    _fixup_call,
    _target_features,
    _with_vector_variants,
)

__all__ = ["branching_h8_root"]

#: ``(lanes, packed rsqrt, index into _FIXUP_PACKED)`` of the vector variants (the estimate has no 16-lane
#: form: MKL's path runs ``vrsqrtps`` on 256-bit registers).
_PACKED = (
    (4, "llvm.x86.sse.rsqrt.ps", 0),
    (8, "llvm.x86.avx.rsqrt.ps.256", 1),
    (16, "llvm.x86.avx.rsqrt.ps.256", 2),
)
_FLT_MIN = 2.0**-126


def _mask(values: Any) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(list(values))), list(values))


def _splat(value_type: Any, value: float) -> Any:
    if isinstance(value_type, ir.VectorType):
        return ir.Constant(value_type, [value] * value_type.count)
    return ir.Constant(value_type, value)


def _root(builder: Any, x: Any, estimate: Callable, fixup: Callable) -> Any:
    """H8 of ``x`` (a float32 or a vector of them): ``r = estimate(x)``, ``s = x·r``, ``h = r/2``,
    ``t = 1/2 − s·h``, ``s' = s + s·t``, ``h' = h + h·t``, ``s' + (x − s'·s')·h'`` (each operation rounded);
    IEEE ``sqrt`` in the lanes of subnormal ``x`` (a branch taken only where a lane has one); ``fixup(root,
    x)`` last (IEEE's bits for ``x`` ≤ 0, +∞, NaN)."""
    value_type = x.type
    half = _splat(value_type, 0.5)
    r = estimate(x)
    s = builder.fmul(x, r)
    h = builder.fmul(r, half)
    t = builder.fsub(half, builder.fmul(s, h))
    s = builder.fadd(s, builder.fmul(s, t))
    h = builder.fadd(h, builder.fmul(h, t))
    root = builder.fadd(s, builder.fmul(builder.fsub(x, builder.fmul(s, s)), h))
    tiny = builder.and_(
        builder.fcmp_ordered(">", x, _splat(value_type, 0.0)),
        builder.fcmp_ordered("<", x, _splat(value_type, _FLT_MIN)),
    )
    if isinstance(value_type, ir.VectorType):
        bits = ir.IntType(value_type.count)
        any_tiny = builder.icmp_unsigned("!=", builder.bitcast(tiny, bits), bits(0))
    else:
        any_tiny = tiny
    function = builder.function
    entry = builder.block
    tiny_block = function.append_basic_block("h8_subnormal")
    done = function.append_basic_block("h8_done")
    builder.cbranch(any_tiny, tiny_block, done)
    builder.position_at_end(tiny_block)
    name = f"v{value_type.count}f32" if isinstance(value_type, ir.VectorType) else "f32"
    sqrt = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(value_type, [value_type]), f"llvm.sqrt.{name}"
    )
    ieee = builder.select(tiny, builder.call(sqrt, [x]), root)
    builder.branch(done)
    builder.position_at_end(done)
    merged = builder.phi(value_type)
    merged.add_incoming(root, entry)
    merged.add_incoming(ieee, tiny_block)
    return fixup(merged, x)


def _h8_function(module: Any) -> Any:
    """``float optkernels.avx_h8_sqrt_ss(float)`` in ``module``, with its 4- and 8-lane variants."""

    def estimate(builder: Any, packed: str, v: Any) -> Any:
        lanes = v.type.count
        if lanes <= 8:
            return _estimate_call(builder, packed, v)
        halves = [
            _estimate_call(builder, packed, builder.shuffle_vector(v, v, _mask(range(k, k + 8))))
            for k in (0, 8)
        ]
        return builder.shuffle_vector(halves[0], halves[1], _mask(range(16)))

    def vector_body(builder: Any, packed: str, index: int, args: list) -> Any:
        _, fixup_name, rounding = _FIXUP_PACKED[index]
        return _root(
            builder,
            args[0],
            lambda v: estimate(builder, packed, v),
            lambda root, x: _fixup_call(builder, fixup_name, root, x, rounding, _SQRT_FIXUP_TABLE),
        )

    def scalar_body(builder: Any, args: list) -> Any:
        vector = ir.VectorType(ir.FloatType(), 4)

        def fixup(root: Any, x: Any) -> Any:
            root, x = (builder.insert_element(ir.Constant(vector, None), a, _I32(0)) for a in (root, x))
            fixed = _fixup_call(builder, _FIXUP_SCALAR, root, x, True, _SQRT_FIXUP_TABLE)
            return builder.extract_element(fixed, _I32(0))

        return _root(builder, args[0], lambda v: _estimate_call(builder, "llvm.x86.sse.rsqrt.ss", v), fixup)

    return _with_vector_variants(
        module, ESTIMATE_PREFIX + "avx_h8_sqrt_ss", ir.FloatType(), 1, _PACKED, vector_body, scalar_body
    )


def branching_h8_root(without_avx512: Callable) -> Any:
    """An intrinsic computing MKL's float32 ``H8`` of a float32: in CPU code for a processor with AVX-512
    (and its 128- and 256-bit forms), the function above (IEEE ``sqrt`` only in vectors with a subnormal input); elsewhere ``without_avx512``
    (a jitable Python function of ``x`` with the same bits), compiled in its place."""

    @intrinsic
    def h8_root(typingctx, x):
        if x != types.float32:
            raise TypingError(f"the H8 root takes a float32, got {x}")

        def codegen(context, builder, signature, args):
            if _avx512_here(context) and "+avx512vl" in _target_features().split(","):
                return builder.call(_h8_function(builder.module), list(args))
            return context.compile_internal(builder, without_avx512, signature, args)

        return types.float32(x), codegen

    return h8_root
