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

import threading
from typing import Any, NamedTuple

import numba
import numpy as np

from ..kernels._intrinsics import CACHE_LINE_BYTES, fetch_add, prefetch_write_item
from ..kernels._workers import PackedWorker, array_fields, data_address, packed

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
def fill_balanced_tasks(starts, n_rows, bounds, row_cost, decreasing=False):
    """Cut the distinct rows ``0 .. n_rows - 1`` into at most ``len(bounds) - 1`` runs of about equal cost,
    a run's cost being its gradient rows (from ``starts``) plus ``row_cost`` per distinct row; write the
    boundaries into ``bounds[:n_tasks + 1]`` and return ``n_tasks`` (0 when there are no rows). A Zipf
    batch's first few rows hold half its gradient rows, so equal numbers of rows would not balance.

    ``decreasing``: runs of linearly decreasing cost instead (run ``t`` of ``n`` about ``(2(n - t) - 1) /
    n²`` of the total), for threads that take the runs in order from a shared counter: the last runs are
    short, so the threads run out of work at about the same time."""
    bounds[0] = 0
    if n_rows == 0:
        return 0
    n_tasks = bounds.shape[0] - 1
    if n_rows < n_tasks:
        n_tasks = n_rows
    total = (starts[n_rows] - starts[0]) + row_cost * n_rows
    # each boundary: the first row whose cost before it reaches the target (a binary search: the cost
    # grows with the row, and so do the targets, so each search starts at the boundary before it)
    j = 0
    for t in range(1, n_tasks):
        if decreasing:
            rest = n_tasks - t
            target = total - total * rest * rest // (n_tasks * n_tasks)
        else:
            target = total * t // n_tasks
        high = n_rows
        while j < high:
            middle = (j + high) >> 1
            if (starts[middle] - starts[0]) + row_cost * middle < target:
                j = middle + 1
            else:
                high = middle
        bounds[t] = j
    bounds[n_tasks] = n_rows
    return n_tasks


# A copy inlined (as Numba IR) into the plan worker.
inline_fill_balanced_tasks = numba.njit(inline="always", **_JIT)(fill_balanced_tasks.py_func)


def balanced_tasks(starts: np.ndarray, n_tasks: int, row_cost: int) -> np.ndarray:
    """The boundaries of :func:`fill_balanced_tasks` over all of ``starts``' rows (an int64 array), as a
    new int64 array of at most ``n_tasks + 1`` entries: ``[0, b_1, ..., n_rows]``, ``[0]`` without rows.
    The array is made here, not in compiled code, so that a first call compiles only
    :func:`fill_balanced_tasks` (a compiled wrapper would also compile ``np.empty`` and ``max``)."""
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
    ``len(bounds) - 1`` tasks of decreasing cost (:func:`fill_balanced_tasks`, ``row_cost`` per distinct
    row: the row loops' threads take them in order); publish in ``sync`` (see :data:`SYNC_SLOTS`) the plan's length, the first bad position + 1 and,
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
    # the keys' range in a pass without branches (it vectorises): all in range is the common case; only
    # otherwise a second pass finds the first bad index, or counts the kept ones and their largest
    smallest = np.int64(0)
    largest = np.int64(0)
    for k in range(n):
        x = np.int64(indices[k])
        smallest = x if x < smallest else smallest
        largest = x if x > largest else largest
    kept = n
    if smallest < 0 or (limit >= 0 and largest >= limit):
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
    # The counting pass also prefetches, for writing, the lines of the two buffers that the sort's passes
    # then write at scattered places (a run per digit): between training steps those lines are cold, and
    # each first write to one would miss while the pass waits on its counters.
    position_mask = CACHE_LINE_BYTES // order.itemsize - 1
    for k in range(n):
        if (k & position_mask) == 0:
            prefetch_write_item(order, k)
            prefetch_write_item(order_tmp, k)
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
    # the distinct keys and where each one's run starts, without a branch per position: each position
    # writes its key and itself at the next free place, which only a new key then takes
    n_rows = 0
    previous = -1
    for k in range(kept):
        x = np.int64(indices[order[k]])
        rows[n_rows] = x
        starts[n_rows] = k
        n_rows += x != previous
        previous = x
    starts[n_rows] = kept
    n_tasks = inline_fill_balanced_tasks(starts, n_rows, bounds, row_cost, True)
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


#: Columns of the radix sort's counts (one more than the digit values).
COUNT_COLUMNS = (1 << RADIX_BITS) + 1


class PlanSpace(NamedTuple):
    """The buffers of a plan (:data:`PLAN_ARGS`) in one workspace, and its counters.

    Attributes:
        buffers: ``order``, ``order_tmp``, ``counts``, ``rows``, ``starts``, ``bounds`` as
            :class:`~optkernels.kernels._workers.Fields` of ``workspace``.
        workspace: the byte array holding the buffers, then the caller's extra bytes from ``extra`` on.
        offsets: the byte offsets of ``order``, ``rows`` and ``starts`` in ``workspace``.
        sync: the counters (see :data:`SYNC_SLOTS`), zero before the run.
        extra: the address of the extra bytes (aligned to 64 bytes).
    """

    buffers: tuple
    workspace: np.ndarray
    offsets: tuple
    sync: np.ndarray
    extra: int

    def args(self, indices: np.ndarray, limit: int, stop_at_bad: bool, row_cost: int) -> tuple:
        """The values of :data:`PLAN_ARGS` (see :func:`_plan_tasks`)."""
        return (indices, limit, stop_at_bad, *self.buffers, row_cost, self.sync)

    def plan(self) -> MergePlan:
        """The plan written by the run (views of :attr:`workspace`)."""
        n_rows, kept = int(self.sync[5]), int(self.sync[6])
        order, rows, starts = self.offsets
        positions = self.buffers[0][3]  # the positions' item size
        return MergePlan(
            self.workspace[rows : rows + 8 * n_rows].view(np.int64),
            self.workspace[starts : starts + 8 * (n_rows + 1)].view(np.int64),
            self.workspace[order : order + positions * kept].view(np.int32 if positions == 4 else np.int64),
        )


def _aligned(n: int, to: int = 8) -> int:
    return -(-n // to) * to


def _buffer_sizes(n: int, n_tasks: int) -> tuple:
    """The bytes of each of a plan's buffers (see :class:`PlanSpace`), aligned to 8."""
    position = position_example(n).itemsize
    return (
        _aligned(n * position),
        _aligned(n * position),
        8 * MAX_PASSES * COUNT_COLUMNS,
        8 * n,
        8 * (n + 1),
        8 * (n_tasks + 1),
    )


def plan_space_bytes(n: int, n_tasks: int, extra_bytes: int = 0) -> int:
    """The size of :func:`plan_space`'s workspace for these arguments."""
    return _aligned(sum(_buffer_sizes(n, n_tasks)), 64) + 64 + extra_bytes


def plan_space(n: int, n_tasks: int, extra_bytes: int = 0) -> PlanSpace:
    """New buffers for the plan of ``n`` indices cut into at most ``n_tasks`` tasks, in one workspace with
    ``extra_bytes`` more for the caller; counters at zero. One allocation and one address read, not one
    per buffer: a launch's arguments are packed from Python on every call."""
    position = position_example(n).itemsize
    sizes = _buffer_sizes(n, n_tasks)
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    extra = _aligned(offsets[-1], 64)
    workspace = np.empty(extra + 64 + extra_bytes, np.uint8)
    start = data_address(workspace)
    base = _aligned(start, 64) - start  # the extra bytes aligned to 64 in memory: shift everything
    at = [start + base + o for o in offsets]
    buffers = (
        array_fields(at[0], (n,), position),
        array_fields(at[1], (n,), position),
        array_fields(at[2], (MAX_PASSES, COUNT_COLUMNS), 8),
        array_fields(at[3], (n,), 8),
        array_fields(at[4], (n + 1,), 8),
        array_fields(at[5], (n_tasks + 1,), 8),
    )
    layout = (base + offsets[0], base + offsets[3], base + offsets[4])
    return PlanSpace(buffers, workspace, layout, np.zeros(SYNC_SLOTS, np.int64), start + base + extra)


#: The largest workspace a thread keeps for its next call (:func:`reused_plan_space`).
REUSED_BYTES = 1 << 22

_reused = threading.local()


def reused_plan_space(n: int, n_tasks: int, extra_bytes: int = 0) -> PlanSpace:
    """:func:`plan_space`, kept by the calling thread for its next call of the same sizes (counters set back
    to zero), up to :data:`REUSED_BYTES`: for launches whose plan does not outlive them (the row loops),
    where a new workspace and its fields would be a good part of a small call's time."""
    key = (n, n_tasks, extra_bytes)
    kept = getattr(_reused, "space", None)
    if kept is not None and kept[0] == key:
        space = kept[1]
        space.sync.fill(0)
        return space
    space = plan_space(n, n_tasks, extra_bytes)
    if space.workspace.nbytes <= REUSED_BYTES:
        _reused.space = (key, space)
    return space


def _plan(indices: np.ndarray, limit: int, stop_at_bad: bool) -> tuple[int, MergePlan]:
    """``(bad, plan)``: the plan worker run on the calling thread, the plan cut to its length."""
    indices = np.ascontiguousarray(indices)  # the worker reads a C-contiguous array
    space = plan_space(indices.shape[0], 1)
    plan_worker(indices.dtype, position_example(indices.shape[0]).dtype).launch(
        1, space.args(indices, limit, stop_at_bad, 0)
    )
    return int(space.sync[3]) - 1, space.plan()


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
