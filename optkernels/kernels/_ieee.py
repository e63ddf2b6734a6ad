"""IEEE 754 helpers for the element functions: the NaN policy written once.

Policy (README, "Non-finite values"): NaN and inf propagate through every update by IEEE arithmetic, as
the float64 reference computes them; no max, sign or comparison may turn a NaN into a finite value.
Python's and Numba's ``max(a, b)`` keep ``a`` when ``b`` is NaN (the comparison is false), so the kernels
use :func:`nan_max`, which follows ``np.maximum``.
"""

from __future__ import annotations

from ._elementwise import scalar_math


@scalar_math
def nan_max(a, b):
    """``max(a, b)``, NaN when either is NaN (NumPy's ``np.maximum`` rule; ``a`` on a tie)."""
    if a >= b or a != a:
        return a
    return b
