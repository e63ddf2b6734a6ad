"""What MKL's float32 roots compiled as functions with vector variants share (:mod:`._mkl_z0`,
:mod:`._mkl_h8`): constants of a value's shape, the per-vector branch on a lane mask, the fix-up by the
input's class in each form, and the intrinsic that calls such a function where the target has AVX-512."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._intrinsics import (
    _FIXUP_PACKED,
    _FIXUP_SCALAR,
    _I32,
    _SQRT_FIXUP_TABLE,
    ESTIMATE_PREFIX,
    _avx512_here,
    _fixup_call,
    _target_features,
    _with_vector_variants,
)

__all__ = ["any_lane", "branching_root", "rare_lanes", "root_function", "splat"]


def splat(value_type: Any, value: float) -> Any:
    """The constant ``value`` of ``value_type`` (a float type, or a vector of one: every lane)."""
    if isinstance(value_type, ir.VectorType):
        return ir.Constant(value_type, [value] * value_type.count)
    return ir.Constant(value_type, value)


def any_lane(builder: Any, mask: Any) -> Any:
    """Whether any lane of ``mask`` (an i1, or a vector of them) is set: one ``kortest`` for a vector."""
    if isinstance(mask.type, ir.VectorType):
        bits = ir.IntType(mask.type.count)
        return builder.icmp_unsigned("!=", builder.bitcast(mask, bits), bits(0))
    return mask


def rare_lanes(builder: Any, mask: Any, common: Any, rare: Callable[[], Any]) -> Any:
    """``common``, or where a lane of ``mask`` is set ``rare()``, computed in a block of its own that a
    vector enters only then (one branch per vector)."""
    entry, function = builder.block, builder.function
    rare_block = function.append_basic_block("rare_lanes")
    done = function.append_basic_block("rare_lanes_done")
    builder.cbranch(any_lane(builder, mask), rare_block, done)
    builder.position_at_end(rare_block)
    value = rare()
    rare_end = builder.block
    builder.branch(done)
    builder.position_at_end(done)
    merged = builder.phi(common.type)
    merged.add_incoming(common, entry)
    merged.add_incoming(value, rare_end)
    return merged


def root_function(module: Any, name: str, packed_forms: tuple, root: Callable, estimate: Callable) -> Any:
    """``float optkernels.<name>(float)`` in ``module``, with a vector variant per ``(lanes, packed
    estimate, index into _FIXUP_PACKED)`` of ``packed_forms``: ``root(builder, x, estimate_of, fixup)``,
    where ``estimate_of(v)`` is ``estimate(builder, packed, v)`` (``packed`` None in the scalar form) and
    ``fixup(value, x)`` is ``vfixupimm`` of ``value`` by the class of ``x`` with IEEE ``sqrt``'s
    responses (:func:`._intrinsics.sqrt_special`), in each form."""

    def vector_body(builder: Any, packed: str, index: int, args: list) -> Any:
        _, fixup_name, rounding = _FIXUP_PACKED[index]
        return root(
            builder,
            args[0],
            lambda v: estimate(builder, packed, v),
            lambda value, x: _fixup_call(builder, fixup_name, value, x, rounding, _SQRT_FIXUP_TABLE),
        )

    def scalar_body(builder: Any, args: list) -> Any:
        vector = ir.VectorType(ir.FloatType(), 4)

        def fixup(value: Any, x: Any) -> Any:
            value, x = (builder.insert_element(ir.Constant(vector, None), a, _I32(0)) for a in (value, x))
            fixed = _fixup_call(builder, _FIXUP_SCALAR, value, x, True, _SQRT_FIXUP_TABLE)
            return builder.extract_element(fixed, _I32(0))

        return root(builder, args[0], lambda v: estimate(builder, None, v), fixup)

    return _with_vector_variants(
        module, ESTIMATE_PREFIX + name, ir.FloatType(), 1, packed_forms, vector_body, scalar_body
    )


def branching_root(
    name: str, function: Callable, without_avx512: Callable, vector_lengths: bool = False
) -> Any:
    """An intrinsic ``name(x)`` of a float32: in CPU code for a processor with AVX-512 (and AVX-512VL where
    ``vector_lengths``), a call of ``function(module)``; elsewhere ``without_avx512`` (a jitable Python
    function of ``x`` with the same bits), compiled in its place."""

    def typer(typingctx, x):
        if x != types.float32:
            raise TypingError(f"{name} takes a float32, got {x}")

        def codegen(context, builder, signature, args):
            here = _avx512_here(context)
            if here and vector_lengths:
                here = "+avx512vl" in _target_features().split(",")
            if here:
                return builder.call(function(builder.module), list(args))
            return context.compile_internal(builder, without_avx512, signature, args)

        return types.float32(x), codegen

    typer.__name__ = name
    return intrinsic(typer)
