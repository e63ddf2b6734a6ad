"""MKL's float32 ``Z0`` square root for AVX-512 loops, its rare scaled path behind one branch per vector.

:func:`optkernels.kernels.torch_rules.torch_sqrt`'s ``Z0`` kernel scales its operands by powers of two where
the estimate ``r = vrsqrt14(x)`` exceeds 2³⁹ (``x`` below about 2⁻⁷⁸). Without branches every vector pays
for that path (a compare and three masked multiplications); here a vector takes it only where one of its
lanes needs it (``kortest``), and every other vector runs the plain path's operations, which are the scaled
path's with every scale factor 1: the same bits either way.
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
    _with_vector_variants,
)

__all__ = ["branching_z0_root"]

#: ``(lanes, packed rsqrt14, index into _FIXUP_PACKED)`` of the vector variants.
_PACKED = (
    (4, "llvm.x86.avx512.rsqrt14.ps.128", 0),
    (8, "llvm.x86.avx512.rsqrt14.ps.256", 1),
    (16, "llvm.x86.avx512.rsqrt14.ps.512", 2),
)
_R_LARGE, _X_UP, _H_DOWN = 2.0**39, 2.0**78, 2.0**-78


def _splat(value_type: Any, value: float) -> Any:
    if isinstance(value_type, ir.VectorType):
        return ir.Constant(value_type, [value] * value_type.count)
    return ir.Constant(value_type, value)


def _fma(builder: Any, a: Any, b: Any, c: Any) -> Any:
    t = a.type
    name = f"v{t.count}f32" if isinstance(t, ir.VectorType) else "f32"
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t] * 3), f"llvm.fma.{name}")
    return builder.call(function, [a, b, c])


def _root(builder: Any, x: Any, estimate: Callable, fixup: Callable) -> Any:
    """Z0 of ``x`` (a float32 or a vector of them): ``r = estimate(x)``, ``h = r/2``, ``s = r·x``, then
    ``fma(fma(−s, s, x), h, s)`` where no lane has ``r > 2³⁹``, else the scaled operands (``x·2⁷⁸``,
    ``s·2³⁹``, ``h·2⁻⁷⁸`` in those lanes) in the same ``fma`` pair; ``fixup(root, x)`` last."""
    value_type = x.type
    r = estimate(x)
    h = builder.fmul(r, _splat(value_type, 0.5))
    s = builder.fmul(r, x)
    large = builder.fcmp_ordered(">", r, _splat(value_type, _R_LARGE))
    if isinstance(value_type, ir.VectorType):
        bits = ir.IntType(value_type.count)
        any_large = builder.icmp_unsigned("!=", builder.bitcast(large, bits), bits(0))
    else:
        any_large = large
    function = builder.function
    plain_block = function.append_basic_block("z0_plain")
    scaled_block = function.append_basic_block("z0_scaled")
    done = function.append_basic_block("z0_done")
    builder.cbranch(any_large, scaled_block, plain_block)
    builder.position_at_end(plain_block)
    plain = _fma(builder, _fma(builder, builder.fneg(s), s, x), h, s)
    builder.branch(done)
    builder.position_at_end(scaled_block)
    xs = builder.select(large, builder.fmul(x, _splat(value_type, _X_UP)), x)
    ss = builder.select(large, builder.fmul(s, _splat(value_type, _R_LARGE)), s)
    hs = builder.select(large, builder.fmul(h, _splat(value_type, _H_DOWN)), h)
    scaled = _fma(builder, _fma(builder, builder.fneg(ss), ss, xs), hs, s)
    builder.branch(done)
    builder.position_at_end(done)
    root = builder.phi(value_type)
    root.add_incoming(plain, plain_block)
    root.add_incoming(scaled, scaled_block)
    # NaN exactly outside the path (x ≤ 0, +∞, NaN: s = r·x is NaN there), finite on it
    return fixup(root, x)


def _z0_function(module: Any) -> Any:
    """``float optkernels.avx512_z0_sqrt_ss(float)`` in ``module``, with its 4-, 8- and 16-lane variants."""

    def vector_body(builder: Any, packed: str, index: int, args: list) -> Any:
        _, fixup_name, rounding = _FIXUP_PACKED[index]
        return _root(
            builder,
            args[0],
            lambda v: _estimate_call(builder, packed, v),
            lambda root, x: _fixup_call(builder, fixup_name, root, x, rounding, _SQRT_FIXUP_TABLE),
        )

    def scalar_body(builder: Any, args: list) -> Any:
        vector = ir.VectorType(ir.FloatType(), 4)

        def fixup(root: Any, x: Any) -> Any:
            root, x = (builder.insert_element(ir.Constant(vector, None), a, _I32(0)) for a in (root, x))
            fixed = _fixup_call(builder, _FIXUP_SCALAR, root, x, True, _SQRT_FIXUP_TABLE)
            return builder.extract_element(fixed, _I32(0))

        return _root(
            builder, args[0], lambda v: _estimate_call(builder, "llvm.x86.avx512.rsqrt14.ss", v), fixup
        )

    return _with_vector_variants(
        module, ESTIMATE_PREFIX + "avx512_z0_sqrt_ss", ir.FloatType(), 1, _PACKED, vector_body, scalar_body
    )


def branching_z0_root(without_avx512: Callable) -> Any:
    """An intrinsic computing MKL's float32 ``Z0`` of a float32: in CPU code for a processor with AVX-512,
    the function above (the scaled path behind a branch per vector); elsewhere ``without_avx512`` (a
    jitable Python function of ``x`` with the same bits), compiled in its place."""

    @intrinsic
    def z0_root(typingctx, x):
        if x != types.float32:
            raise TypingError(f"the Z0 root takes a float32, got {x}")

        def codegen(context, builder, signature, args):
            if _avx512_here(context):
                return builder.call(_z0_function(builder.module), list(args))
            return context.compile_internal(builder, without_avx512, signature, args)

        return types.float32(x), codegen

    return z0_root
