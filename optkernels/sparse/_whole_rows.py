"""The CPU row loop of updates that need each distinct row whole (row-wise Adagrad's mean of squares):
the merge plan, prefetching and balanced tasks of :mod:`._rows`' loop in one ``prange`` driver whose row
statement is the caller's (:class:`WholeRowUpdate`), and :func:`launch_cpu` to run such a driver.

The other sparse updates run per element of a row through :mod:`._rows`' C row workers; a whole-row update
keeps rows back in per-worker buffers to update several at once, which that worker interface has no room for.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ..kernels._elementwise import _digest
from ..kernels._intrinsics import CACHE_LINE_BYTES, fetch_add, prefetch_read, prefetch_write
from ..kernels._threading import for_this_process, parallel_launch
from ._plan import plan_buffers, plan_into, position_example
from ._rows import (
    JIT_OPTIONS,
    PREFETCH_GRAD_ROWS,
    PREFETCH_STATE_ROWS,
    STATE_ROW_COST,
    TASKS_PER_THREAD,
    WAIT_PREFETCH_ROWS,
    fill_balanced_tasks,
    generate,
    worker_count,
)

__all__ = ["WholeRowUpdate", "launch_cpu"]

# The CPU driver. The first thread to arrive computes the merge plan (claimed with an atomic add, so it is
# always a running thread: no thread ever waits for one that has not started) while the others -- often just
# woken from sleep -- join; once the plan is published they all take tasks. A bad index publishes no tasks:
# nothing is written.
_CPU_ROWS = """
# {source_digest}
def {name}(n_workers, indices, limit, stop_at_bad, positions_like, grad, {params}):
    n = indices.shape[0]
    row_len = grad.shape[1]
    line = max(1, CACHE_LINE_BYTES // grad.itemsize)
    lines = (row_len + line - 1) // line  # a range with a step would divide at every loop's start
    order, order_tmp, counts, rows, starts = plan_buffers(n, positions_like)
    bounds = np.empty(n_workers * TASKS_PER_THREAD + 1, np.int64)
    # [plan claimed, n_tasks + 1 once published, next task, bad position + 1, next gradient row to
    # prefetch], only ever read and written by fetch_add (Numba does not see the intrinsic's writes: a plain
    # read after the loop may see 0). Set element by element: np.zeros would be a parallel loop of its own, a
    # second launch whose end waits for every thread to wake (about 0.1 ms when they sleep).
    sync = np.empty(5, np.int64)
    for i in range(5):
        sync[i] = 0
    for _ in prange(n_workers):
        if fetch_add(sync, 0, 1) == 0:
            bad, _kept, n_rows = plan_into(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts)
            n_tasks = 0
            if bad >= 0:
                fetch_add(sync, 3, bad + 1)
            else:
                n_tasks = fill_balanced_tasks(starts, n_rows, bounds, STATE_ROW_COST * {n_states})
            fetch_add(sync, 1, n_tasks + 1)
        else:
            # meanwhile, pull the gradient into the caches, WAIT_PREFETCH_ROWS rows at a time from a shared
            # counter (no two threads fetch the same rows): the row loop then gathers it from cache
            while fetch_add(sync, 1, 0) == 0:
                ahead = fetch_add(sync, 4, WAIT_PREFETCH_ROWS)
                for k in range(ahead, min(ahead + WAIT_PREFETCH_ROWS, n)):
                    for q in range(lines):
                        prefetch_read(grad, k, q * line)
        n_tasks = fetch_add(sync, 1, 0) - 1
        block = np.empty(({block_rows}, row_len), grad.dtype)
        {scratch}
        while True:
            task = fetch_add(sync, 2, 1)
            if task >= n_tasks:
                break
            first = bounds[task]
            last = bounds[task + 1]
            k_last = starts[last]
            for j in range(first, min(first + PREFETCH_STATE_ROWS, last)):
                r = rows[j]
                {prefetch_states}
            for k in range(starts[first], min(starts[first] + PREFETCH_GRAD_ROWS, k_last)):
                src = order[k]
                for q in range(lines):
                    prefetch_read(grad, src, q * line)
            for j in range(first, last):
                if j + PREFETCH_STATE_ROWS < last:
                    r = rows[j + PREFETCH_STATE_ROWS]
                    {prefetch_states}
                for k in range(starts[j], starts[j + 1]):
                    if k + PREFETCH_GRAD_ROWS < k_last:
                        ahead = order[k + PREFETCH_GRAD_ROWS]
                        for q in range(lines):
                            prefetch_read(grad, ahead, q * line)
                    src = order[k]
                    if k == starts[j]:
                        for c in range(row_len):
                            block[n_held, c] = grad[src, c]
                    else:
                        for c in range(row_len):
                            block[n_held, c] += grad[src, c]
                r = rows[j]
                {row_update}
    return fetch_add(sync, 3, 0) - 1
"""


def launch_cpu(
    driver: Callable, indices: np.ndarray, num_rows: int, drop: bool, arrays: list, scalars: tuple
) -> int:
    """Run a CPU row driver (:attr:`RowUpdate.cpu`, :attr:`WholeRowUpdate.cpu`) over C-contiguous NumPy
    ``indices`` with ``arrays`` (the 2-D gradient, then the 2-D states) and ``scalars``; return the position
    of the first out-of-range index (nothing was written then; never with ``drop``) or -1."""
    with parallel_launch():
        return int(
            for_this_process(driver)(
                worker_count(),
                indices,
                num_rows,
                not drop,
                position_example(indices.shape[0]),
                *arrays,
                *scalars,
            )
        )


@numba.njit(inline="always", **JIT_OPTIONS)
def prefetch_row(array, r, line):
    """Prefetch every cache line of row ``r`` of the 2-D ``array`` for writing (``line`` elements a line)."""
    c = 0
    while c < array.shape[1]:  # not a range with a step, which divides to count its iterations
        prefetch_write(array, r, c)
        c += line


def _cpu_driver(
    fn: Any, states: list[str], scalars: list[str], row_update: str, scratch: str, block_rows: int
) -> Callable:
    """The compiled CPU driver of :data:`_CPU_ROWS` over the state arrays ``states`` and the scalars
    ``scalars`` (argument names), whose statement ``row_update`` updates row ``r`` from its summed gradient
    row ``block[n_held]`` by calling ``fn`` (as ``update``); ``scratch``: a statement allocating each
    worker's buffers; ``block_rows``: the rows of each worker's block of summed gradient rows."""
    namespace = {
        "prange": numba.prange,
        "np": np,
        "update": fn,
        "plan_into": plan_into,
        "plan_buffers": plan_buffers,
        "fill_balanced_tasks": fill_balanced_tasks,
        "fetch_add": fetch_add,
        "prefetch_read": prefetch_read,
        "prefetch_row": prefetch_row,
        "CACHE_LINE_BYTES": CACHE_LINE_BYTES,
        "TASKS_PER_THREAD": TASKS_PER_THREAD,
        "STATE_ROW_COST": STATE_ROW_COST,
        "PREFETCH_GRAD_ROWS": PREFETCH_GRAD_ROWS,
        "PREFETCH_STATE_ROWS": PREFETCH_STATE_ROWS,
        "WAIT_PREFETCH_ROWS": WAIT_PREFETCH_ROWS,
    }
    driver = generate(
        _CPU_ROWS,
        f"_cpu_rows_{fn.py_func.__name__}",
        fn.py_func,
        namespace,
        prefetch_states="; ".join(f"prefetch_row({s}, r, line)" for s in states),
        row_update=row_update,
        scratch=scratch,
        block_rows=str(block_rows),
        source_digest=_source_digest(),
        n_states=str(len(states)),
        params=", ".join(states + scalars),
    )
    return numba.njit(parallel=True, cache=True, **JIT_OPTIONS)(driver)


class WholeRowUpdate:
    """An update that needs each distinct row whole (a reduction over the row before anything is written,
    such as row-wise Adagrad's mean of squares), on the CPU row loop of :class:`RowUpdate` (the same merge
    plan, prefetching and tasks; the same summed gradient rows, in the same order).

    Args:
        row_fn: a Numba function ``f(r, block, n, last, scratch_1, ..., state_1, ..., state_k, scalar_1,
            ...) -> n`` called for each distinct row ``r`` (ascending within a task), whose summed gradient
            the driver has just written into ``block[n]`` (``block``: the worker's ``(block_rows,
            row_len)`` buffer, in the gradient's dtype); ``last``: whether ``r`` is its task's last row. It
            holds rows back (``n``: how many it held before ``r``, 0 at a task's start; it returns the new
            count, at most ``block_rows`` - 1) to update several at once, so that their dependency chains
            interleave, and must have updated every row it holds when ``last`` is true or the block is
            full. The states are 2-D ``(rows, width)`` views, updated in place; a task's rows are never
            another's.
        n_states: ``k``, the number of state arrays.
        scratch: name -> the expression allocating that buffer (or view) for each worker, in terms of
            ``row_len``, ``grad`` (the 2-D gradient), ``block`` and the states, in ``f``'s order.
        block_rows: the rows of ``block``.
    """

    def __init__(self, row_fn: Any, n_states: int, scratch: dict[str, str], block_rows: int):
        self.fn = row_fn
        params = list(inspect.signature(row_fn.py_func).parameters)
        first = 4 + len(scratch)
        self.scratch = scratch
        self.block_rows = block_rows
        self.states, self.scalars = params[first : first + n_states], params[first + n_states :]

    @functools.cached_property
    def cpu(self) -> Callable:
        """The parallel CPU driver, called as :attr:`RowUpdate.cpu` (2-D gradient and states, whose row
        widths may differ)."""
        names = list(self.scratch)
        call = (
            f"n_held = update(r, block, n_held, j == last - 1, "
            f"{', '.join(names + self.states + self.scalars)})"
        )
        allocate = "; ".join(["n_held = 0"] + [f"{name} = {expr}" for name, expr in self.scratch.items()])
        return _cpu_driver(self.fn, self.states, self.scalars, call, allocate, self.block_rows)


@functools.cache
def _source_digest() -> str:
    """A digest of this module's source, written into every driver (see :func:`._rows.generate`)."""
    return _digest(inspect.getsource(sys.modules[__name__]))
