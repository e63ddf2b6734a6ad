"""BLAS-1 helpers on NumPy or CUDA arrays: ``axpy`` (y ← α·x + y), ``scal`` (x ← α·x) and ``axpy_scal``
(out ← (α·x + y)·β in one pass).

The optimizers use them where a parameter or gradient lives on a CUDA device and NumPy's operators cannot
reach it: AdamOffload adds the host-computed step to a device parameter (``axpy(1, delta, param)``), and
weight decay and loss-scale division run on device gradients; ``axpy_scal`` does both in one pass into a
buffer the optimizer keeps (the coupled weight decay ``w·wd + g`` followed by ``·(1/loss_scale)``). On
NumPy arrays they give the same bits as ``alpha*x + y``, ``alpha*x`` and ``(alpha*x + y)*beta`` in NumPy
(one rounding per operation, no fastmath); a GPU may contract ``alpha*x + y`` into a fused multiply-add,
which can differ in the last bit.
"""

from __future__ import annotations

from typing import Any

from ._checks import check_arrays
from ._elementwise import elementwise
from .adam import Scalar

__all__ = ["axpy", "axpy_scal", "scal"]


@elementwise
def _axpy(i, y, x, alpha):
    y[i] = alpha * x[i] + y[i]


@elementwise
def _scal(i, x, alpha):
    x[i] = alpha * x[i]


@elementwise
def _axpy_scal(i, out, x, y, alpha, beta, add, scale):
    t = y[i]
    if add:
        t = alpha * x[i] + t
    if scale:
        t = t * beta
    out[i] = t


def axpy(alpha: Scalar, x: Any, y: Any) -> Any:
    """``y ← alpha·x + y`` in place (BLAS axpy); returns ``y``.

    Args:
        alpha: a real scalar (converted to the arrays' dtype; any value, including 0 and negatives).
        x: read only, the shape and dtype of ``y`` (any layout on the CPU).
        y: updated in place (float32/float64, C-contiguous, NumPy or CUDA).

    Raises:
        TypeError: wrong types, dtypes that differ or are not float32/float64, arrays on different devices.
        ValueError: shapes differ, ``y`` is read-only or not contiguous, or the arrays share memory.
    """
    batch = check_arrays({"y": y}, {"x": x})
    _axpy.launch(batch.device, batch.size, *batch.flat, batch.scalar("alpha", alpha))
    return y


def scal(alpha: Scalar, x: Any) -> Any:
    """``x ← alpha·x`` in place (BLAS scal); returns ``x``.

    Args:
        alpha: a real scalar (converted to the array's dtype).
        x: updated in place (float32/float64, C-contiguous, NumPy or CUDA).

    Raises:
        TypeError: not a float32/float64 array.
        ValueError: ``x`` is read-only or not contiguous.
    """
    batch = check_arrays({"x": x})
    _scal.launch(batch.device, batch.size, *batch.flat, batch.scalar("alpha", alpha))
    return x


def axpy_scal(
    alpha: Scalar, x: Any, y: Any, beta: Scalar, *, out: Any, add: bool = True, scale: bool = True
) -> Any:
    """``out ← (alpha·x + y)·beta`` in one pass (each operation rounded in the arrays' dtype, as NumPy's
    ``(alpha*x + y)*beta``); ``add=False`` skips ``alpha·x +``, ``scale=False`` skips ``·beta``. Returns
    ``out``.

    Args:
        alpha, beta: real scalars (converted to the arrays' dtype).
        x, y: read only, of ``out``'s shape and dtype.
        out: written (float32/float64, C-contiguous, NumPy or CUDA); it may not share memory with x or y.
        add, scale: bools.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: shapes differ, ``out`` read-only or not contiguous, or overlapping arrays.
    """
    batch = check_arrays({"out": out}, {"x": x, "y": y})
    _axpy_scal.launch(
        batch.device,
        batch.size,
        *batch.flat,
        batch.scalar("alpha", alpha),
        batch.scalar("beta", beta),
        bool(add),
        bool(scale),
    )
    return out
