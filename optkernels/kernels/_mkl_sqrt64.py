"""MKL's float64 vector sqrt for the AVX path (``vmdSqrt``, kernels ``H8``/``EX``, mode ``VML_HA``), the one
torch's CPU ``sqrt`` runs on AMD processors among others, reproduced operation for operation.

For a normal ``x`` in :math:`[2^{-1022}, 2^{1022})`, with :math:`x = y \\cdot 4^k`, :math:`y \\in [1, 4)`:

.. math::

   r &= \\mathrm{rsqrtss}(y_{24}) \\cdot 2^{-k} \\qquad (y_{24}: y \\text{ truncated to 24 bits, a float32}) \\\\
   x_h &= x \\text{ truncated to 26 bits},\\quad x_l = x - x_h \\\\
   t &= (1 - (r r) x_h) - (r r) x_l \\\\
   p &= (((c_0 t + c_1) t + c_2) t + c_3)\\, t \\qquad (\\approx (1 - t)^{-1/2} - 1) \\\\
   \\sqrt{x} &\\approx x_h r + (x_l r + (p r) x)

every operation rounded to float64, no FMA; other inputs take IEEE ``sqrt`` (MKL's special path gives the
same). The truncations are done with ``frexp``/``floor``/``ldexp`` (exact), so the function compiles for
every target and runs as Python under the CUDA simulator.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from ._intrinsics import rsqrt_estimate

__all__ = ["mkl_avx_sqrt64"]

# MKL's polynomial for (1 - t)^(-1/2) - 1 (the Taylor coefficients 35/128, 5/16, 3/8, 1/2, adjusted)
_C0 = float(np.uint64(0x3FD1800032338CBB).view(np.float64))
_C1 = float(np.uint64(0x3FD40000B13001D9).view(np.float64))
_C2 = float(np.uint64(0x3FD80000000000F6).view(np.float64))
_C3 = float(np.uint64(0x3FDFFFFFFFFFFE71).view(np.float64))
_DBL_MIN = 2.0**-1022
_X_MAX = 2.0**1022


@register_jitable(inline="always")
def mkl_avx_sqrt64(x):
    """MKL's ``H8``/``EX`` float64 sqrt of the float64 ``x`` (module docstring): 1 ulp from IEEE ``sqrt`` on
    about 1.0 % of the inputs with an even exponent and 1.6 % of those with an odd one."""
    if not (x >= _DBL_MIN and x < _X_MAX):
        return math.sqrt(x)
    m, e = math.frexp(x)  # x = m·2^e, m in [0.5, 1)
    if e % 2 == 0:
        y, k = 4.0, (e - 2) // 2  # x = (4m)·4^k, 4m in [2, 4)
    else:
        y, k = 2.0, (e - 1) // 2  # x = (2m)·4^k, 2m in [1, 2)
    y24 = np.float32(math.floor(m * 16777216.0) * (y / 16777216.0))
    r = math.ldexp(np.float64(rsqrt_estimate(y24)), -k)
    x_hi = math.ldexp(math.floor(m * 67108864.0), e - 26)
    x_lo = x - x_hi
    rr = r * r
    t = (1.0 - rr * x_hi) - rr * x_lo
    p = (((t * _C0 + _C1) * t + _C2) * t + _C3) * t
    return x_hi * r + (x_lo * r + (p * r) * x)
