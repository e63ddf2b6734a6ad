"""torch's ``lerp(x, y, w)`` with a scalar weight, as an element-wise helper shared by the kernels that
reproduce it (ADOPT's momentum, Schedule-Free's y and x): ``x + w·(y − x)`` if ``|w| < 0.5``, else
``y − (y − x)·(1 − w)``, each operation rounded in the arrays' dtype (torch's CPU kernel fuses the
multiply-add; this does not)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._elementwise import scalar_math

__all__ = ["lerp", "lerp_scalars"]


@scalar_math
def lerp(x, y, weight, one_minus_weight, small):
    """``lerp(x, y, weight)`` in torch's two-sided form (``small``: ``|weight| < 0.5``)."""
    if small:
        return x + weight * (y - x)
    return y - (y - x) * one_minus_weight


def lerp_scalars(dtype: Any, weight: float) -> tuple:
    """``(w, 1 − w, |w| < 0.5)`` for :func:`lerp`: ``w`` rounded once to ``dtype``, ``1 − w`` computed in
    ``dtype`` from it (as torch's kernel computes it in the tensor's math type)."""
    t = np.dtype(dtype).type
    w = t(weight)
    return w, t(1) - w, bool(abs(w) < 0.5)
