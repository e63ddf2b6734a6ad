"""A float32 quotient by a per-step constant as one multiplication, with the division's bits.

Update rules divide by host constants (``1 − β2^t``, ``√(1 − β2^t)``); a float32 division costs a divider
slot per lane, while the float64 product below gives the same float32 for every input (the argument is in
:func:`divide_by_constant`'s docstring; tests/test_torch_rules_kernels.py checks every float32 significand).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

__all__ = ["constant_inverse", "divide_by_constant"]


@register_jitable
def divide_by_constant(s, c, inv_c):
    """``s / c`` rounded once in ``s``'s dtype. ``inv_c`` None: a division. Else (float32 ``s`` and ``c``,
    ``inv_c`` the float64 ``1/c`` correctly rounded): ``float32(float64(s)·inv_c)``, the same bits for
    every ``s`` at the cost of a multiplication: the product is within 2⁻⁵² (relative) of ``s/c``, while
    a quotient of two float32 numbers is never a float32 rounding midpoint and lies at least 2⁻⁴⁹
    (relative) from every one, so both round to the same float32 (no underflow or overflow for
    ``0 < c ≤ 1``; zeros, infinities and NaN as the division gives them)."""
    if inv_c is None:
        return s / c
    return np.float32(np.float64(np.float32(s)) * inv_c)


def constant_inverse(c: Any, like: Any) -> Any:
    """:func:`divide_by_constant`'s ``inv_c`` for the constant ``c`` (already rounded to the arithmetic's
    dtype) of a kernel over arrays like ``like`` (an array; on the host a dtype too): the float64 ``1/c``
    when that arithmetic is float32 (float32, float16 or bfloat16 arrays), None (a division) for float64."""
    if (like if isinstance(like, np.dtype) else np.dtype(like.dtype)) == np.float64:
        return None
    return 1.0 / float(c)


@overload(constant_inverse, jit_options=dict(error_model="numpy", fastmath=False))
def _constant_inverse_compiled(c, like):
    if like.dtype == types.float64:
        return lambda c, like: None
    return lambda c, like: 1.0 / np.float64(c)
