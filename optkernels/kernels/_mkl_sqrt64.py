"""MKL's float64 vector sqrt kernels (``vmdSqrt``, mode ``VML_HA``), the ones torch's CPU ``sqrt`` runs,
reproduced operation for operation: the AVX path (``H8``, and ``EX`` for SSE4.2, the same operations), which
MKL runs on AMD processors among others, AVX2 (``L9``) and AVX-512 (``Z0``).

``H8`` and ``L9``, for a normal ``x`` in :math:`[2^{-1022}, 2^{1022})`, with :math:`x = y \\cdot 4^k`,
:math:`y \\in [1, 4)`, :math:`y_{24}` the float32 of :math:`y` truncated to 24 bits and :math:`x_h` the
26-bit truncation of :math:`x`, every operation rounded to float64:

.. math::

   r &= \\mathrm{rsqrtss}(y_{24}) \\cdot 2^{-k} \\\\
   \\texttt{H8}:\\quad t &= (1 - (r r) x_h) - (r r)(x - x_h),\\quad
       p = (((c_0 t + c_1) t + c_2) t + c_3)\\, t,\\quad
       \\sqrt{x} \\approx x_h r + ((x - x_h) r + (p r) x) \\\\
   \\texttt{L9}:\\quad t &= \\mathrm{fma}(-r r, x, 1),\\quad
       p = t\\,\\mathrm{fma}(\\mathrm{fma}(\\mathrm{fma}(c_0, t, c_1), t, c_2), t, c_3),\\quad
       \\sqrt{x} \\approx \\mathrm{fma}(r, x, x (r p))

(:math:`c_0 \\dots c_3` MKL's coefficients of :math:`(1 - t)^{-1/2} - 1`); other inputs take IEEE ``sqrt``,
as MKL's special path gives. ``Z0``, for :math:`0 < x < \\infty`: :math:`r = \\mathrm{vrsqrt14sd}(x)`,
:math:`h = r/2`, :math:`s = r x`, :math:`e = \\mathrm{fma}(-s, h, 1/2)`, :math:`s' = \\mathrm{fma}(e, s, s)`,
:math:`h' = \\mathrm{fma}(e, h, h)`, result :math:`\\mathrm{fma}(\\mathrm{fma}(-s', s', x), h', s')`, scaled by
powers of two where :math:`r > 2^{458}`. The truncations use ``frexp``/``floor``/``ldexp`` (exact), so the
functions compile for every target and run as Python under the CUDA simulator.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from ._intrinsics import fma, rsqrt14, rsqrt_estimate

__all__ = [
    "mkl_avx2_sqrt64",
    "mkl_avx512_sqrt64",
    "mkl_avx512_sqrt64_selected",
    "mkl_avx_sqrt64",
    "sqrt_outside",
]

# MKL's polynomial for (1 - t)^(-1/2) - 1 (the Taylor coefficients 35/128, 5/16, 3/8, 1/2, adjusted)
_C0 = float(np.uint64(0x3FD1800032338CBB).view(np.float64))
_C1 = float(np.uint64(0x3FD40000B13001D9).view(np.float64))
_C2 = float(np.uint64(0x3FD80000000000F6).view(np.float64))
_C3 = float(np.uint64(0x3FDFFFFFFFFFFE71).view(np.float64))
_DBL_MIN = 2.0**-1022
_X_MAX = 2.0**1022
_R_LARGE = 2.0**458
_X_UP = 2.0**916
_H_DOWN = 2.0**-916


@register_jitable
def sqrt_outside(x, inf):
    """IEEE ``sqrt`` of an ``x`` that is not finite and positive (``inf``: infinity in ``x``'s type),
    without a root: ``x`` for ±0 and +∞, ``(x − x)·∞`` else, the processor's default NaN for a negative
    ``x`` (as ``sqrt`` gives it) and a NaN ``x`` quieted with its sign and payload (as ``sqrt`` returns
    it). For the branch-free kernels, which select it for those inputs: a square root of every element
    costs more than the rest of the kernel."""
    return x if x >= 0 else (x - x) * inf


@register_jitable
def _main_path(x):
    """Whether ``x`` takes the main path of ``H8``/``L9`` (else IEEE ``sqrt``)."""
    return x >= _DBL_MIN and x < _X_MAX


@register_jitable
def _estimate(x):
    """``(r, m, e)``: ``H8``/``L9``'s scaled ``rsqrtss`` estimate of ``1/√x`` and ``frexp(x)``."""
    m, e = math.frexp(x)  # x = m·2^e, m in [0.5, 1)
    if e % 2 == 0:
        y, k = 4.0, (e - 2) // 2  # x = (4m)·4^k, 4m in [2, 4)
    else:
        y, k = 2.0, (e - 1) // 2  # x = (2m)·4^k, 2m in [1, 2)
    y24 = np.float32(math.floor(m * 16777216.0) * (y / 16777216.0))
    return math.ldexp(np.float64(rsqrt_estimate(y24)), -k), m, e


@register_jitable
def mkl_avx_sqrt64(x):
    """MKL's ``H8``/``EX`` float64 sqrt of the float64 ``x`` (module docstring): 1 ulp from IEEE ``sqrt`` on
    about 1.0 % of the inputs with an even exponent and 1.6 % of those with an odd one."""
    if not _main_path(x):
        return math.sqrt(x)
    r, m, e = _estimate(x)
    x_hi = math.ldexp(math.floor(m * 67108864.0), e - 26)
    x_lo = x - x_hi
    rr = r * r
    t = (1.0 - rr * x_hi) - rr * x_lo
    p = (((t * _C0 + _C1) * t + _C2) * t + _C3) * t
    return x_hi * r + (x_lo * r + (p * r) * x)


@register_jitable
def mkl_avx2_sqrt64(x):
    """MKL's ``L9`` float64 sqrt of the float64 ``x`` (module docstring)."""
    if not _main_path(x):
        return math.sqrt(x)
    r = _estimate(x)[0]
    t = fma(-(r * r), x, 1.0)
    p = t * fma(fma(fma(_C0, t, _C1), t, _C2), t, _C3)
    return fma(r, x, x * (r * p))


@register_jitable
def _z0_refined(x):
    """Z0's estimate ``r = rsqrt14(x)`` and its once-refined root and half-reciprocal: ``h = r/2``,
    ``s = r·x``, ``e = fma(−s, h, 1/2)``, ``s ← fma(e, s, s)``, ``h ← fma(e, h, h)``; returns ``(r, s, h)``."""
    r = rsqrt14(x)
    h = r * 0.5
    s = r * x
    e = fma(-s, h, 0.5)
    return r, fma(e, s, s), fma(e, h, h)


@register_jitable
def mkl_avx512_sqrt64_selected(x):
    """:func:`mkl_avx512_sqrt64` without branches, for compiled loops (they vectorise): both the scaled and
    the plain result computed, one selected, and :func:`sqrt_outside` for the inputs outside the path."""
    r, s, h = _z0_refined(x)
    scaled = s * _R_LARGE
    tiny = fma(fma(-scaled, scaled, x * _X_UP), h * _H_DOWN, s)
    plain = fma(fma(-s, s, x), h, s)
    mkl = tiny if r > _R_LARGE else plain
    # NaN exactly outside the path (x ≤ 0, +∞, NaN: s = r·x is NaN there), finite on it: one test
    return mkl if mkl == mkl else sqrt_outside(x, math.inf)


@register_jitable
def mkl_avx512_sqrt64(x):
    """MKL's ``Z0`` float64 sqrt of the float64 ``x`` (module docstring)."""
    if not (x > 0.0 and x < math.inf):
        return math.sqrt(x)
    r, s, h = _z0_refined(x)
    if r > _R_LARGE:
        scaled = s * _R_LARGE
        return fma(fma(-scaled, scaled, x * _X_UP), h * _H_DOWN, s)
    return fma(fma(-s, s, x), h, s)
