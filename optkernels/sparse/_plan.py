"""The merge plan of a row-sparse gradient: its distinct rows, sorted, and where each row's occurrences are.

Every sparse op and :func:`~optkernels.sparse.merge_duplicates` first turn the index array into a
:class:`MergePlan` (a small, sequential Numba pass over the indices, O(len(indices)) time and memory, nothing
proportional to the number of rows of the table): out-of-range indices are found (or dropped), and a stable
LSD radix sort groups the positions of each distinct row in order of appearance. The row loops then sum each
row's gradient in that order, so results never depend on the thread count or on the target (the CUDA path
computes the same plan on the host from a copy of the index array). The plan is built by one compiled worker
per index dtype (:func:`plan_worker`), shared by every sparse op: the CPU row loops call it from their own
worker, everything else runs it on the calling thread.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np

from ..kernels._intrinsics import fetch_add
from ..kernels._workers import PackedWorker, packed

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


@numba.njit(cache=True)
def fill_balanced_tasks(starts, n_rows, bounds, row_cost):
    """Cut the distinct rows ``0 .. n_rows - 1`` into at most ``len(bounds) - 1`` runs of about equal cost,
    a run's cost being its gradient rows (from ``starts``) plus ``row_cost`` per distinct row; write the
    boundaries into ``bounds[:n_tasks + 1]`` and return ``n_tasks`` (0 when there are no rows). A Zipf
    batch's first few rows hold half its gradient rows, so equal numbers of rows would not balance."""
    bounds[0] = 0
    if n_rows == 0:
        return 0
    n_tasks = bounds.shape[0] - 1
    if n_rows < n_tasks:
        n_tasks = n_rows
    total = (starts[n_rows] - starts[0]) + row_cost * n_rows
    j = 0
    for t in range(1, n_tasks):
        target = total * t // n_tasks
        while j < n_rows and (starts[j] - starts[0]) + row_cost * j < target:
            j += 1
        bounds[t] = j
    bounds[n_tasks] = n_rows
    return n_tasks


# A copy inlined (as Numba IR) into the plan worker.
inline_fill_balanced_tasks = numba.njit(inline="always", **_JIT)(fill_balanced_tasks.py_func)


@numba.njit(cache=True)
def balanced_tasks(starts, n_tasks, row_cost):
    """The boundaries of :func:`fill_balanced_tasks` over all of ``starts``' rows, as a new array."""
    bounds = np.empty(max(1, n_tasks) + 1, np.int64)
    return bounds[: fill_balanced_tasks(starts, starts.shape[0] - 1, bounds, row_cost) + 1]


#: The shared counters of a planned row loop (``sync``), only ever read and written by ``fetch_add`` inside
#: compiled code (Numba does not see the intrinsic's writes: a plain read there may see a stale value):
#: [plan claimed, n_tasks + 1 once published, next task, first bad position + 1, next gradient row to
#: prefetch while waiting, distinct rows, kept positions, next worker's scratch row].
SYNC_SLOTS = 8

#: The plan worker's arguments, which open the arguments of every row worker (which calls the plan worker
#: with its own packed arguments: their first members are laid out alike).
PLAN_ARGS = "indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds, row_cost, sync"


def _plan_tasks(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds, row_cost, sync):
    """Write the merge plan of ``indices`` into the given buffers and cut its rows into at most
    ``len(bounds) - 1`` tasks of about equal cost (:func:`fill_balanced_tasks`, ``row_cost`` per distinct
    row); publish in ``sync`` (see :data:`SYNC_SLOTS`) the plan's length, the first bad position + 1 and,
    last, the number of tasks + 1 (1 when an index is bad: no tasks). The body of :func:`plan_worker`.

    The plan (see :class:`MergePlan`) is ``rows[:n_rows]``, ``starts[:n_rows + 1]``, ``order[:n_kept]``.
    Buffers: ``order``, ``order_tmp`` (one integer type) and ``rows`` of ``len(indices)`` elements, ``starts``
    of ``len(indices) + 1``, ``counts`` an int64 array of shape ``(MAX_PASSES, 2**RADIX_BITS + 1)``.
    ``limit < 0`` means no upper bound. ``stop_at_bad``: stop at the first out-of-range index and publish
    its position; otherwise out-of-range indices are left out.

    The radix sort moves positions only: a pass reads each position's key from ``indices`` (which stays in
    cache), so it writes half the bytes that (key, position) pairs would. (Conditional expressions rather
    than ``min``/``max``, and loops rather than slice assignments: each of those compiles a function of its
    own on first use.)
    """
    n = indices.shape[0]
    kept = 0
    largest = 0
    for k in range(n):
        x = np.int64(indices[k])
        if x >= 0 and (limit < 0 or x < limit):
            kept += 1
            if x > largest:
                largest = x
        elif stop_at_bad:
            fetch_add(sync, 3, k + 1)
            fetch_add(sync, 1, 1)
            return
    bits = 1
    while (largest >> bits) > 0:
        bits += 1
    n_passes = (bits + RADIX_BITS - 1) // RADIX_BITS
    digit_bits = (bits + n_passes - 1) // n_passes
    mask = (1 << digit_bits) - 1
    for p in range(n_passes):
        for d in range(mask + 2):
            counts[p, d] = 0
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
    n_tasks = inline_fill_balanced_tasks(starts, n_rows, bounds, row_cost)
    fetch_add(sync, 5, n_rows)
    fetch_add(sync, 6, kept)
    fetch_add(sync, 1, n_tasks + 1)


_INT64S = numba.types.int64[::1]


def readonly_array(dtype: Any, ndim: int) -> Any:
    """The Numba type of a read-only C-contiguous array (a worker compiled for it takes writeable ones too:
    the same structure)."""
    return numba.types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C", readonly=True)


def plan_types(index_dtype: Any, position_dtype: Any) -> tuple:
    """The Numba types of :data:`PLAN_ARGS` for one index and one position dtype."""
    positions = numba.types.Array(numba.from_dtype(np.dtype(position_dtype)), 1, "C")
    return (
        readonly_array(index_dtype, 1),
        numba.types.int64,
        numba.types.boolean,
        positions,
        positions,
        numba.types.int64[:, ::1],
        _INT64S,
        _INT64S,
        _INT64S,
        numba.types.int64,
        _INT64S,
    )


_plan_workers: dict[tuple, PackedWorker] = {}


def plan_worker(index_dtype: Any, position_dtype: Any) -> PackedWorker:
    """:func:`_plan_tasks` as a packed worker (:mod:`~optkernels.kernels._workers`, run once per call,
    cached on disk) for one index and one position dtype: one for every sparse op and float dtype."""
    key = (np.dtype(index_dtype), np.dtype(position_dtype))
    found = _plan_workers.get(key)
    if found is None:
        worker = packed(_plan_tasks, plan_types(*key), each_part=False)
        found = _plan_workers.setdefault(key, worker)
    return found


def plan_arguments(indices: np.ndarray, limit: int, stop_at_bad: bool, n_tasks: int, row_cost: int) -> tuple:
    """The values of :data:`PLAN_ARGS` for ``indices`` (see :func:`_plan_tasks` for ``limit`` and
    ``stop_at_bad``): new buffers for the plan, room for ``n_tasks`` tasks of ``row_cost`` per distinct
    row, counters at zero."""
    n = indices.shape[0]
    positions = position_example(n).dtype
    return (
        indices,
        limit,
        stop_at_bad,
        np.empty(n, positions),
        np.empty(n, positions),
        np.empty((MAX_PASSES, (1 << RADIX_BITS) + 1), np.int64),
        np.empty(n, np.int64),
        np.empty(n + 1, np.int64),
        np.empty(n_tasks + 1, np.int64),
        row_cost,
        np.zeros(SYNC_SLOTS, np.int64),
    )


def _plan(indices: np.ndarray, limit: int, stop_at_bad: bool) -> tuple[int, MergePlan]:
    """``(bad, plan)``: the plan worker run on the calling thread, the plan cut to its length."""
    indices = np.ascontiguousarray(indices)  # the worker reads a C-contiguous array
    args = plan_arguments(indices, limit, stop_at_bad, 1, 0)
    plan_worker(indices.dtype, args[3].dtype).launch(1, args)
    sync = args[-1]
    n_rows, kept = int(sync[5]), int(sync[6])
    return int(sync[3]) - 1, MergePlan(args[6][:n_rows], args[7][: n_rows + 1], args[3][:kept])


def first_out_of_range(indices: np.ndarray, num_rows: int | None) -> int:
    """Position of the first index outside ``[0, num_rows)`` (``[0, inf)`` if None), or -1 if none."""
    if indices.shape[0] == 0:
        return -1
    return int(_first_out_of_range(indices, -1 if num_rows is None else num_rows))


_INT32_POSITIONS, _INT64_POSITIONS = np.zeros(0, np.int32), np.zeros(0, np.int64)


def position_example(n: int) -> np.ndarray:
    """An empty array of the integer type of positions into an index array of length ``n``: int32, or
    int64 from 2**31 indices."""
    return _INT32_POSITIONS if n < 2**31 else _INT64_POSITIONS


def _empty_plan() -> MergePlan:
    return MergePlan(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32))


def plan_merge(indices: np.ndarray, num_rows: int | None) -> MergePlan:
    """The :class:`MergePlan` of a C-contiguous int32/int64 NumPy index array; indices outside
    ``[0, num_rows)`` (negative ones when ``num_rows`` is None) are left out."""
    if indices.shape[0] == 0:
        return _empty_plan()
    return _plan(indices, -1 if num_rows is None else num_rows, False)[1]


def plan_in_range(indices: np.ndarray, num_rows: int | None) -> tuple[int, MergePlan | None]:
    """``(-1, plan)`` when every index is in ``[0, num_rows)`` (``[0, inf)`` if None); else ``(position of the
    first index out of range, None)`` (one pass less than :func:`first_out_of_range` followed by
    :func:`plan_merge`)."""
    if indices.shape[0] == 0:
        return -1, _empty_plan()
    bad, plan = _plan(indices, -1 if num_rows is None else num_rows, True)
    return (bad, None) if bad >= 0 else (-1, plan)
