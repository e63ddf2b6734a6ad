"""The pieces under the sparse row loops: the merge plan (a stable radix sort of positions), the balanced task
boundaries, and the two kinds of CPU intrinsics (atomic fetch-add, prefetches)."""
import numba
import numpy as np
import pytest

from optkernels.kernels._intrinsics import (
    fetch_add,
    prefetch_address,
    prefetch_read,
    prefetch_read_far,
    prefetch_write,
    prefetch_write_item,
)
from optkernels.sparse._plan import RADIX_BITS, balanced_tasks, fill_balanced_tasks, plan_in_range, plan_merge


def _expected_plan(indices, limit):
    """rows, starts, order by NumPy: in-range positions, stably sorted by index."""
    keep = indices >= 0
    if limit is not None:
        keep &= indices < limit
    positions = np.nonzero(keep)[0]
    order = positions[np.argsort(indices[keep], kind="stable")]
    rows, counts = np.unique(indices[keep], return_counts=True)
    return rows, np.concatenate([[0], np.cumsum(counts)]), order


# Largest keys needing 1, 2, 3 and 4+ radix passes (the passes alternate between two buffers: both parities).
LIMITS = [100, 1 << (RADIX_BITS + 3), 1 << (2 * RADIX_BITS + 3), 1 << 40, None]


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_plan_is_a_stable_sort_of_the_in_range_positions(limit, index_dtype):
    rng = np.random.default_rng(0)
    top = np.iinfo(index_dtype).max if limit is None else min(limit, np.iinfo(index_dtype).max)
    indices = np.concatenate([rng.integers(0, top, 500), rng.integers(0, 7, 500),  # many repeats
                              rng.integers(-5, 0, 20)]).astype(index_dtype)
    if limit is not None and limit < np.iinfo(index_dtype).max:
        indices[::37] = limit  # just out of range
    rng.shuffle(indices)
    plan = plan_merge(indices, limit)
    rows, starts, order = _expected_plan(indices.astype(np.int64), limit)
    assert np.array_equal(plan.rows, rows)
    assert np.array_equal(plan.starts, starts)
    assert np.array_equal(plan.order, order)
    assert plan.order.dtype == np.int32


def test_plan_in_range_names_the_first_bad_position():
    indices = np.array([4, 1, 4, 9, 0, 12, -1], np.int64)
    assert plan_in_range(indices, 9) == (3, None)
    assert plan_in_range(indices[:3], 9)[0] == -1
    assert plan_in_range(np.array([-1, 3]), 9) == (0, None)
    bad, plan = plan_in_range(np.zeros(0, np.int32), 9)
    assert bad == -1 and plan.rows.size == 0 and np.array_equal(plan.starts, [0])


@pytest.mark.parametrize("n_tasks", [1, 2, 7, 64])
@pytest.mark.parametrize("row_cost", [0, 1, 12])
def test_balanced_tasks_cover_every_row_once_in_runs_of_similar_cost(n_tasks, row_cost):
    rng = np.random.default_rng(n_tasks)
    counts = np.minimum(rng.zipf(1.3, 3000), 500)  # a few very heavy rows first, as a Zipf batch
    counts[:3] = [900, 400, 300]
    starts = np.concatenate([[0], np.cumsum(counts)])
    bounds = balanced_tasks(starts, n_tasks, row_cost)
    assert bounds[0] == 0 and bounds[-1] == len(counts) and len(bounds) - 1 == n_tasks
    assert np.all(np.diff(bounds) >= 0)
    cost = np.diff(starts[bounds]) + row_cost * np.diff(bounds)
    heaviest_row = counts.max() + row_cost
    assert cost.max() <= cost.sum() / n_tasks + heaviest_row  # no run more than one row over its share


def test_balanced_tasks_edge_cases():
    assert list(balanced_tasks(np.array([0]), 4, 3)) == [0]           # no rows: no tasks
    assert list(balanced_tasks(np.array([0, 5, 6]), 8, 1)) == [0, 1, 2]  # never more tasks than rows
    bounds = np.full(5, -1, np.int64)
    assert fill_balanced_tasks(np.array([0, 2, 4, 6]), 3, bounds, 0) == 3
    assert list(bounds[:4]) == [0, 1, 2, 3]


@numba.njit(parallel=True)
def _take_tickets(n):
    counter = np.zeros(1, np.int64)
    tickets = np.empty(n, np.int64)
    for i in numba.prange(n):
        tickets[i] = fetch_add(counter, 0, 1)
    return fetch_add(counter, 0, 0), tickets  # a plain counter[0] may not see the atomic writes


def test_fetch_add_hands_out_each_ticket_once():
    total, tickets = _take_tickets(10_000)
    assert total == 10_000
    assert np.array_equal(np.sort(tickets), np.arange(10_000))


@numba.njit
def _prefetch_everything(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            prefetch_read(a, i, j)
            prefetch_read_far(a, np.int64(i), j)
            prefetch_write(b, np.int32(i), j)
    return a.sum() + b.sum()


def test_prefetch_changes_nothing():
    a = np.arange(12.0).reshape(3, 4)
    b = a.astype(np.float32) * 2
    before = a.copy(), b.copy()
    assert _prefetch_everything(a, b) == a.sum() + b.sum()
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])


@numba.njit
def _prefetch_items(a, b):
    for i in range(a.shape[0]):
        prefetch_write_item(a, i)
        prefetch_write_item(b, np.uint32(i))
    return a.sum() + b.sum()


def test_prefetch_write_item_changes_nothing_and_prefetches_for_writing():
    a = np.arange(40, dtype=np.int32)
    b = np.arange(40, dtype=np.int64) * 3
    assert _prefetch_items(a, b) == 780 + 3 * 780
    assert np.array_equal(a, np.arange(40)) and np.array_equal(b, np.arange(40) * 3)
    ir = _prefetch_items.inspect_llvm(_prefetch_items.signatures[0])
    # llvm.prefetch(address, rw = 1 (write), locality 3, data cache)
    assert "@llvm.prefetch" in ir and ", i32 1, i32 3, i32 1)" in ir


@numba.njit
def _prefetch_addresses(a, addresses):
    for address in addresses:
        prefetch_address(address)
    return a.sum()


def test_prefetch_address_never_faults_and_changes_nothing():
    a = np.arange(12.0)
    # the array's lines, a null pointer, an unmapped page's address and the highest address: never a fault
    addresses = np.array([a.ctypes.data, a.ctypes.data + 64, 0, 8, 4096, -1], np.int64)
    assert _prefetch_addresses(a, addresses) == 66.0
    assert np.array_equal(a, np.arange(12.0))


def test_intrinsics_reject_wrong_arguments():
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: prefetch_read(a, 0, 0))(np.zeros(3))  # 1-D
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: prefetch_read_far(a, 0, 0.5))(np.zeros((3, 3)))  # float index
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: fetch_add(a, 0, 1))(np.zeros(3, np.int32))  # not int64
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: prefetch_address(a))(np.zeros(3))  # not an integer address
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: prefetch_write_item(a, 0))(np.zeros((3, 3)))  # 2-D
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(lambda a: prefetch_write_item(a, 0.5))(np.zeros(3))  # float index


def _count_part(part, hits):
    fetch_add(hits, part, 1)


def _echo(part, table, flag, small, single, double, wide, out):
    # every packed argument back into out (a bool, then a float32 and an int32 between 8-byte members: the
    # Python packing must lay them out as Numba's tuple does)
    out[0] = table.shape[0]
    out[1] = table.shape[1]
    out[2] = table[1, 2]
    out[3] = flag
    out[4] = small
    out[5] = single
    out[6] = double
    out[7] = wide


@pytest.mark.parametrize("parts", [1, 2, 7, 200])
def test_packed_workers_run_every_part_once(parts):
    """A launch from Python (no parallel loop compiled) runs each of its parts exactly once, whatever the
    threading layer's split of the parts among its threads."""
    from optkernels.kernels._workers import run_parts

    hits = np.zeros(parts, np.int64)
    run_parts(parts, _count_part, (hits,))
    assert np.array_equal(hits, np.ones(parts, np.int64))


def test_packed_arguments_arrive_as_given():
    from optkernels.kernels._workers import run_parts

    table = np.arange(12.0).reshape(3, 4)[:, ::-1].copy()  # a C-contiguous copy: table[1, 2] == 5
    out = np.zeros(8)
    run_parts(1, _echo, (table, True, np.int32(-7), np.float32(0.1), 2.5, -(2**40), out))
    assert out.tolist() == [3, 4, 5, 1, -7, float(np.float32(0.1)), 2.5, -(2.0**40)]


def test_plan_tasks_decrease_for_the_row_loops_and_stay_equal_for_merge():
    """16 distinct rows of one occurrence each, no per-row cost, 4 tasks: the row loops' plan cuts runs of
    7, 5, 3, 1 rows ((2(n - t) - 1) / n² of 16), merge_duplicates' tasks 4 of 4; a Zipf-like head row
    alone fills the first run of either."""
    starts = np.arange(17, dtype=np.int64)
    bounds = np.zeros(5, np.int64)
    assert fill_balanced_tasks(starts, 16, bounds, 0, True) == 4
    assert np.diff(bounds).tolist() == [7, 5, 3, 1]
    assert fill_balanced_tasks(starts, 16, bounds, 0) == 4 and np.diff(bounds).tolist() == [4, 4, 4, 4]
    head = np.concatenate([[0], 100 + np.arange(16)]).astype(np.int64)  # row 0: 100 occurrences
    assert fill_balanced_tasks(head, 16, bounds, 0, True) == 4 and bounds[1] == 1 and bounds[4] == 16
