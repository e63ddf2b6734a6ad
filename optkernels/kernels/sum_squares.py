"""Sums of squares of two arrays in one pass (MindSpore ``SquareSumAll``), NumPy or CUDA, deterministic."""

from __future__ import annotations

from typing import Any

from ._checks import check_arrays
from ._elementwise import chunked_sums_of_squares
from ._upcast import via_float32

__all__ = ["square_sum_all"]


@chunked_sums_of_squares
def _pair(i, x, y):
    return x[i], y[i]


@via_float32()
def square_sum_all(x: Any, y: Any) -> tuple[float, float]:
    """``(Σ x², Σ y²)`` as Python floats (MindSpore ``ops.SquareSumAll``; what nn.LARS passes as "norms").

    Each square is rounded to the arrays' dtype (float32 for float32 arrays), the squares are accumulated in
    float64 over fixed chunks and the chunk sums added exactly (``math.fsum``), so the result is the same
    bits whatever the thread count, NumPy or CUDA (see ``ChunkedSumsOfSquares``). MindSpore returns float32
    sums of float32 inputs; these are more accurate.

    Args:
        x, y: arrays of one shape and dtype (float32/float64, NumPy or CUDA; read only); float16/bfloat16
            arrays are summed from their exact float32 values.

    Raises:
        TypeError: wrong types, dtypes or devices.
        ValueError: the shapes differ.
    """
    batch = check_arrays({}, {"x": x, "y": y})
    return _pair.launch(batch.device, batch.size, *batch.flat)
