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
from numba.core import cgutils

from ._intrinsics import _estimate_call
from ._root_variants import branching_root, rare_lanes, root_function, splat

__all__ = ["branching_z0_root"]

#: ``(lanes, packed rsqrt14, index into _FIXUP_PACKED)`` of the vector variants.
_PACKED = (
    (4, "llvm.x86.avx512.rsqrt14.ps.128", 0),
    (8, "llvm.x86.avx512.rsqrt14.ps.256", 1),
    (16, "llvm.x86.avx512.rsqrt14.ps.512", 2),
)
_R_LARGE, _X_UP, _H_DOWN = 2.0**39, 2.0**78, 2.0**-78


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
    h = builder.fmul(r, splat(value_type, 0.5))
    s = builder.fmul(r, x)
    large = builder.fcmp_ordered(">", r, splat(value_type, _R_LARGE))
    plain = _fma(builder, _fma(builder, builder.fneg(s), s, x), h, s)

    def scaled() -> Any:
        xs = builder.select(large, builder.fmul(x, splat(value_type, _X_UP)), x)
        ss = builder.select(large, builder.fmul(s, splat(value_type, _R_LARGE)), s)
        hs = builder.select(large, builder.fmul(h, splat(value_type, _H_DOWN)), h)
        return _fma(builder, _fma(builder, builder.fneg(ss), ss, xs), hs, s)

    root = rare_lanes(builder, large, plain, scaled)
    # NaN exactly outside the path (x ≤ 0, +∞, NaN: s = r·x is NaN there), finite on it
    return fixup(root, x)


def _z0_function(module: Any) -> Any:
    """``float optkernels.avx512_z0_sqrt_ss(float)`` in ``module``, with its 4-, 8- and 16-lane variants."""

    def estimate(builder: Any, packed: str | None, v: Any) -> Any:
        return _estimate_call(builder, packed or "llvm.x86.avx512.rsqrt14.ss", v)

    return root_function(module, "avx512_z0_sqrt_ss", _PACKED, _root, estimate)


def branching_z0_root(without_avx512: Callable) -> Any:
    """An intrinsic computing MKL's float32 ``Z0`` of a float32: in CPU code for a processor with AVX-512,
    the function above (the scaled path behind a branch per vector); elsewhere ``without_avx512`` (a
    jitable Python function of ``x`` with the same bits), compiled in its place."""
    return branching_root("z0_root", _z0_function, without_avx512)
