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
from numba.core import cgutils

from ._intrinsics import _estimate_call, _mask
from ._root_variants import branching_root, rare_lanes, root_function, splat

__all__ = ["branching_h8_root"]

#: ``(lanes, packed rsqrt, index into _FIXUP_PACKED)`` of the vector variants (the estimate has no 16-lane
#: form: the 16-lane variant runs the 8-lane one on each half).
_PACKED = (
    (4, "llvm.x86.sse.rsqrt.ps", 0),
    (8, "llvm.x86.avx.rsqrt.ps.256", 1),
    (16, "llvm.x86.avx.rsqrt.ps.256", 2),
)
_FLT_MIN = 2.0**-126


def _root(builder: Any, x: Any, estimate: Callable, fixup: Callable) -> Any:
    """H8 of ``x`` (a float32 or a vector of them): ``r = estimate(x)``, ``s = x·r``, ``h = r/2``,
    ``t = 1/2 − s·h``, ``s' = s + s·t``, ``h' = h + h·t``, ``s' + (x − s'·s')·h'`` (each operation rounded);
    IEEE ``sqrt`` in the lanes of subnormal ``x`` (a branch taken only where a lane has one); ``fixup(root,
    x)`` last (IEEE's bits for ``x`` ≤ 0, +∞, NaN)."""
    value_type = x.type
    half = splat(value_type, 0.5)
    r = estimate(x)
    s = builder.fmul(x, r)
    h = builder.fmul(r, half)
    t = builder.fsub(half, builder.fmul(s, h))
    s = builder.fadd(s, builder.fmul(s, t))
    h = builder.fadd(h, builder.fmul(h, t))
    root = builder.fadd(s, builder.fmul(builder.fsub(x, builder.fmul(s, s)), h))
    tiny = builder.and_(
        builder.fcmp_ordered(">", x, splat(value_type, 0.0)),
        builder.fcmp_ordered("<", x, splat(value_type, _FLT_MIN)),
    )
    name = f"v{value_type.count}f32" if isinstance(value_type, ir.VectorType) else "f32"
    sqrt = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(value_type, [value_type]), f"llvm.sqrt.{name}"
    )
    merged = rare_lanes(builder, tiny, root, lambda: builder.select(tiny, builder.call(sqrt, [x]), root))
    return fixup(merged, x)


def _h8_function(module: Any) -> Any:
    """``float optkernels.avx_h8_sqrt_ss(float)`` in ``module``, with its 4-, 8- and 16-lane variants."""

    def estimate(builder: Any, packed: str | None, v: Any) -> Any:
        if packed is None:
            return _estimate_call(builder, "llvm.x86.sse.rsqrt.ss", v)
        if v.type.count <= 8:
            return _estimate_call(builder, packed, v)
        halves = [
            _estimate_call(builder, packed, builder.shuffle_vector(v, v, _mask(list(range(k, k + 8)))))
            for k in (0, 8)
        ]
        return builder.shuffle_vector(halves[0], halves[1], _mask(list(range(16))))

    return root_function(module, "avx_h8_sqrt_ss", _PACKED, _root, estimate)


def branching_h8_root(without_avx512: Callable) -> Any:
    """An intrinsic computing MKL's float32 ``H8`` of a float32: in CPU code for a processor with AVX-512
    (and its 128- and 256-bit forms), the function above (IEEE ``sqrt`` only in vectors with a subnormal
    input); elsewhere ``without_avx512`` (a jitable Python function of ``x`` with the same bits), compiled
    in its place."""
    return branching_root("h8_root", _h8_function, without_avx512, vector_lengths=True)
