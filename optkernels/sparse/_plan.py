"""The merge plan of a row-sparse gradient: its distinct rows, sorted, and where each row's occurrences are.

Every sparse op and :func:`~optkernels.sparse.merge_duplicates` first turn the index array into a
:class:`MergePlan` (a small, sequential Numba pass over the indices, O(len(indices)) time and memory, nothing
proportional to the number of rows of the table): out-of-range indices are found (or dropped), and a stable
LSD radix sort groups the positions of each distinct row in order of appearance. The row loops then sum each
row's gradient in that order, so results never depend on the thread count or on the target (the CUDA path
computes the same plan on the host from a copy of the index array).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

_JIT = dict(cache=True, error_model="numpy", fastmath=False)

#: The largest digit of the radix sort: keys below 2**22 (tables up to 4M rows) take two passes.
RADIX_BITS = 11
#: Passes for the largest int64 key.
MAX_PASSES = (63 + RADIX_BITS - 1) // RADIX_BITS


class MergePlan(NamedTuple):
    """Distinct rows of an index array and where their occurrences are.

    Attributes:
        rows: int64, the distinct in-range indices, ascending.
        starts: int64, ``len(rows) + 1`` offsets into ``order``.
        order: int32 (int64 for 2**31 indices or more) positions into the original index array: ``order[starts[j]:starts[j + 1]]`` are the
            occurrences of ``rows[j]``, in order of appearance. Dropped (out-of-range) positions are absent.
    """

    rows: np.ndarray
    starts: np.ndarray
    order: np.ndarray


@numba.njit(**_JIT)
def _first_out_of_range(indices, limit):
    """Position of the first index outside [0, limit) ([0, inf) when limit < 0), or -1."""
    for k in range(indices.shape[0]):
        x = indices[k]
        if x < 0 or (limit >= 0 and x >= limit):
            return k
    return -1


@numba.njit(**_JIT)
def plan_into(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts):
    """Write the plan of ``indices`` into the given buffers; return ``(bad, n_kept, n_rows)``.

    The plan (see :class:`MergePlan`) is ``rows[:n_rows]``, ``starts[:n_rows + 1]``, ``order[:n_kept]``.
    Buffers: ``order``, ``order_tmp`` (one integer type) and ``rows`` of ``len(indices)`` elements, ``starts``
    of ``len(indices) + 1``, ``counts`` an int64 array of shape ``(MAX_PASSES, 2**RADIX_BITS + 1)``.
    ``limit < 0`` means no upper bound. ``stop_at_bad``: stop at the first out-of-range index and return its
    position as ``bad`` (nothing else is meaningful then); otherwise out-of-range indices are left out and
    ``bad = -1``.

    The radix sort moves positions only: a pass reads each position's key from ``indices`` (which stays in
    cache), so it writes half the bytes that (key, position) pairs would.
    """
    n = indices.shape[0]
    kept = 0
    largest = 0
    for k in range(n):
        x = np.int64(indices[k])
        if x >= 0 and (limit < 0 or x < limit):
            kept += 1
            largest = max(largest, x)
        elif stop_at_bad:
            return k, 0, 0
    bits = 1
    while (largest >> bits) > 0:
        bits += 1
    n_passes = (bits + RADIX_BITS - 1) // RADIX_BITS
    digit_bits = (bits + n_passes - 1) // n_passes
    mask = (1 << digit_bits) - 1
    counts[:n_passes, : mask + 2] = 0
    for k in range(n):
        x = np.int64(indices[k])
        if x >= 0 and (limit < 0 or x < limit):
            for p in range(n_passes):
                counts[p, ((x >> (p * digit_bits)) & mask) + 1] += 1
    for p in range(n_passes):
        for d in range(mask + 1):
            counts[p, d + 1] += counts[p, d]
    # Stable LSD radix sort of the positions by key: equal keys keep their order of appearance. The passes
    # alternate between the two buffers, starting so that the last one writes into ``order``.
    source, target = (order_tmp, order) if n_passes % 2 == 1 else (order, order_tmp)
    for k in range(n):  # the first digit, straight from the indices (positions ascending)
        x = np.int64(indices[k])
        if x >= 0 and (limit < 0 or x < limit):
            d = x & mask
            t = counts[0, d]
            counts[0, d] = t + 1
            target[t] = k
    for p in range(1, n_passes):
        source, target = target, source
        shift = p * digit_bits
        for k in range(kept):
            position = source[k]
            d = (np.int64(indices[position]) >> shift) & mask
            t = counts[p, d]
            counts[p, d] = t + 1
            target[t] = position
    n_rows = 0
    previous = -1
    for k in range(kept):
        x = np.int64(indices[order[k]])
        if x != previous:
            rows[n_rows] = x
            starts[n_rows] = k
            n_rows += 1
            previous = x
    starts[n_rows] = kept
    return -1, kept, n_rows


@numba.njit(**_JIT)
def plan_buffers(n, positions_like):
    """New buffers ``(order, order_tmp, counts, rows, starts)`` for :func:`plan_into` over ``n`` indices,
    the positions of ``positions_like``'s integer type."""
    return (
        np.empty(n, positions_like.dtype),
        np.empty(n, positions_like.dtype),
        np.empty((MAX_PASSES, (1 << RADIX_BITS) + 1), np.int64),
        np.empty(n, np.int64),
        np.empty(n + 1, np.int64),
    )


# Copies of plan_into and plan_buffers inlined (as Numba IR) into the functions that call them: one
# compiled function each, not three (each with its own wrappers, and linked and optimised again).
inline_plan_into = numba.njit(inline="always", **_JIT)(plan_into.py_func)
inline_plan_buffers = numba.njit(inline="always", **_JIT)(plan_buffers.py_func)


@numba.njit(**_JIT)
def _plan(indices, limit, stop_at_bad, positions_like):
    """``(bad, rows, starts, order)``: :func:`plan_into` on new buffers, the plan cut to its length."""
    order, order_tmp, counts, rows, starts = inline_plan_buffers(indices.shape[0], positions_like)
    bad, kept, n_rows = inline_plan_into(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts)
    return bad, rows[:n_rows], starts[: n_rows + 1], order[:kept]


def first_out_of_range(indices: np.ndarray, num_rows: int | None) -> int:
    """Position of the first index outside ``[0, num_rows)`` (``[0, inf)`` if None), or -1 if none."""
    if indices.shape[0] == 0:
        return -1
    return int(_first_out_of_range(indices, -1 if num_rows is None else num_rows))


_INT32_POSITIONS, _INT64_POSITIONS = np.zeros(0, np.int32), np.zeros(0, np.int64)


def position_example(n: int) -> np.ndarray:
    """An empty array of the integer type of positions into an index array of length ``n``: int32, or
    int64 from 2**31 indices (a jitted function types an array argument faster than a NumPy type)."""
    return _INT32_POSITIONS if n < 2**31 else _INT64_POSITIONS


def plan_merge(indices: np.ndarray, num_rows: int | None) -> MergePlan:
    """The :class:`MergePlan` of a C-contiguous int32/int64 NumPy index array; indices outside
    ``[0, num_rows)`` (negative ones when ``num_rows`` is None) are left out."""
    n = indices.shape[0]
    if n == 0:
        return MergePlan(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32))
    _, *plan = _plan(indices, -1 if num_rows is None else num_rows, False, position_example(n))
    return MergePlan(*plan)


def plan_in_range(indices: np.ndarray, num_rows: int | None) -> tuple[int, MergePlan | None]:
    """``(-1, plan)`` when every index is in ``[0, num_rows)`` (``[0, inf)`` if None); else ``(position of the
    first index out of range, None)`` (one pass less than :func:`first_out_of_range` followed by
    :func:`plan_merge`)."""
    n = indices.shape[0]
    if n == 0:
        return -1, MergePlan(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32))
    bad, *plan = _plan(indices, -1 if num_rows is None else num_rows, True, position_example(n))
    return (int(bad), None) if bad >= 0 else (-1, MergePlan(*plan))
