"""The CPU row loop of updates that need each distinct row whole (row-wise Adagrad's mean of squares):
the merge plan, prefetching and balanced tasks of :mod:`._rows`' loop in one packed row worker whose row
statement is the caller's (:class:`WholeRowUpdate`), :func:`launch_cpu` to run it, and :class:`KeptLaunch`
to run it call after call over the same states with its arguments packed once.

The other sparse updates run per element of a row (:class:`._rows.RowUpdate`); a whole-row update keeps
rows back in per-worker buffers to update several at once.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import struct
import sys
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ..kernels._elementwise import _digest
from ..kernels._intrinsics import (
    CACHE_LINE_BYTES,
    call_cfunc,
    fetch_add,
    prefetch_read,
    prefetch_read_far,
    prefetch_write,
)
from ..kernels._workers import PackedWorker, _code, array_fields, loader, type_key
from ._plan import (
    PLAN_ARGS,
    REUSED_BYTES,
    SYNC_SLOTS,
    plan_space,
    plan_space_bytes,
    plan_types,
    plan_worker,
    position_example,
    readonly_array,
)
from ._rows import (
    FAR_GRAD_ROWS,
    FAR_STATE_ROWS,
    JIT_OPTIONS,
    PREFETCH_GRAD_ROWS,
    PREFETCH_STATE_ROWS,
    STATE_ROW_COST,
    TASKS_PER_THREAD,
    WAIT_PREFETCH_ROWS,
    generate,
    row_loop_arguments,
    smaller,
    worker_count,
)

__all__ = ["KeptLaunch", "WholeRowUpdate", "launch_cpu"]

# The CPU row worker, run once by every thread of a launch (as _rows' _CPU_ROWS). The first to arrive computes
# the merge plan (claimed with an atomic add, so it is always a running thread: no thread ever waits for one
# that has not started) by calling the plan worker with this call's packed arguments, while the others --
# often just woken from sleep -- join; once the plan is published they all take tasks. A bad index
# publishes no tasks: nothing is written.
_CPU_ROWS = """
# {source_digest}
def {name}(_args, _dims, _steps, _data):
    {plan_args}, plan, scratch, grad, {params}, = load_packed(_data)
    n = indices.shape[0]
    row_len = grad.shape[1]
    line = CACHE_LINE_BYTES // grad.itemsize
    lines = (row_len + line - 1) // line  # a range with a step would divide at every loop's start
    if fetch_add(sync, 0, 1) == 0:
        call_cfunc(plan, (_args, _dims, _steps, _data))
    else:
        # meanwhile, pull into the caches, WAIT_PREFETCH_ROWS positions at a time from a shared counter (no
        # two threads fetch the same positions), each position's gradient row and its index's state rows:
        # scattered over the table, those are the row loop's slowest reads, which a waiting thread can
        # start while the plan (compute over the indices only) leaves its memory system idle
        while fetch_add(sync, 1, 0) == 0:
            ahead = fetch_add(sync, 4, WAIT_PREFETCH_ROWS)
            for k in range(ahead, smaller(ahead + WAIT_PREFETCH_ROWS, n)):
                for q in range(lines):
                    prefetch_read(grad, k, q * line)
                r = indices[k]
                if r >= 0 and (limit < 0 or r < limit):
                    {prefetch_states}
    n_tasks = fetch_add(sync, 1, 0) - 1
    # this worker's scratch rows (packed memory: views of it carry no reference count, whose atomic
    # updates would order the row loop's memory accesses)
    work_rows = {work_rows}
    slot = fetch_add(sync, 7, 1)
    work = scratch[slot * work_rows : (slot + 1) * work_rows]
    block = work[: {block_rows}]
    {scratch}
    while True:
        task = fetch_add(sync, 2, 1)
        if task >= n_tasks:
            break
        first = bounds[task]
        last = bounds[task + 1]
        k_last = starts[last]
        for j in range(first, smaller(first + PREFETCH_STATE_ROWS, last)):
            r = rows[j]
            {prefetch_states}
        for k in range(starts[first], smaller(starts[first] + PREFETCH_GRAD_ROWS, k_last)):
            src = order[k]
            for q in range(lines):
                prefetch_read(grad, src, q * line)
        for j in range(first, last):
            if j + PREFETCH_STATE_ROWS < last:
                r = rows[j + PREFETCH_STATE_ROWS]
                {prefetch_states}
                if j + FAR_STATE_ROWS < last:
                    r = rows[j + FAR_STATE_ROWS]
                    {prefetch_states_far}
            for k in range(starts[j], starts[j + 1]):
                if k + PREFETCH_GRAD_ROWS < k_last:
                    ahead = order[k + PREFETCH_GRAD_ROWS]
                    for q in range(lines):
                        prefetch_read(grad, ahead, q * line)
                    if k + FAR_GRAD_ROWS < k_last:
                        ahead = order[k + FAR_GRAD_ROWS]
                        for q in range(lines):
                            prefetch_read_far(grad, ahead, q * line)
                src = order[k]
                if k == starts[j]:
                    for c in range(row_len):
                        block[n_held, c] = grad[src, c]
                else:
                    for c in range(row_len):
                        block[n_held, c] += grad[src, c]
            {row_update}
"""


def launch_cpu(
    update: WholeRowUpdate,
    indices: np.ndarray,
    num_rows: int,
    drop: bool,
    arrays: list,
    scalars: tuple,
) -> int:
    """Run ``update``'s CPU row worker over C-contiguous NumPy ``indices`` with ``arrays`` (the 2-D
    gradient, then the 2-D states) and ``scalars``; return the position of the first out-of-range index
    (nothing was written then; never with ``drop``) or -1."""
    n_states = len(update.states)
    head, positions, space = row_loop_arguments(
        indices, num_rows, not drop, n_states, arrays[0], update.work_rows(arrays[0].shape[1])
    )
    worker = update.cpu_worker(indices.dtype, positions, arrays, scalars)
    worker.launch(None, (*head, *arrays, *scalars))
    return space.sync.item(3) - 1


class KeptLaunch:
    """A launch of a whole-row update's CPU row worker (:func:`launch_cpu`) kept for its next calls over the
    same states: its arguments packed once, into memory of its own, with a plan workspace of its own (for
    gradients of one length and index dtype, a stop-at-bad flag and a thread pool size); each :meth:`run`
    rewrites only the indices' and the gradient's addresses and, when they are new, the scalars, and sets the
    plan's counters back to zero. Between training steps every Python operation runs with cold caches, where
    packing all the arguments again (each array's address read through ctypes, the plan's buffers, the
    workspace's reuse) is a good part of a step's time.

    Args:
        update: the update; ``worker``: its CPU row worker for these types (:meth:`WholeRowUpdate.cpu_worker`
            with the positions' dtype of ``count`` indices).
        index_dtype: the indices' dtype; ``count``: how many (at least 1); ``limit``, ``stop_at_bad``: see
            :func:`launch_cpu` (``num_rows``, ``not drop``).
        row_len: the gradient's row length (at least 1); ``dtype``: its dtype.
        states: the 2-D states (arrays, or their :class:`~optkernels.kernels._workers.Fields`: only their
            addresses and layout are kept, of memory the caller keeps alive for every run); ``scalars``: the
            first run's scalars.
    """

    __slots__ = (
        "worker",
        "count",
        "nbytes",
        "data",
        "scalars",
        "_indices",
        "_grad",
        "_words",
        "_sync",
        "_sync_bytes",
        "_scalar_at",
        "_scalar_format",
        "_space",
    )

    def __init__(
        self,
        update: WholeRowUpdate,
        worker: PackedWorker,
        index_dtype: np.dtype,
        count: int,
        limit: int,
        stop_at_bad: bool,
        row_len: int,
        dtype: np.dtype,
        states: list,
        scalars: tuple,
    ) -> None:
        workers = worker_count()
        n_scratch = workers * update.work_rows(row_len)
        itemsize = dtype.itemsize
        space = plan_space(count, workers * TASKS_PER_THREAD, n_scratch * row_len * itemsize)
        positions = position_example(count).dtype
        plan = plan_worker(index_dtype, positions).address
        scratch = array_fields(space.extra, (n_scratch, row_len), itemsize)
        row_cost = STATE_ROW_COST * len(update.states)

        def head(indices: int) -> tuple:  # the plan's arguments, the plan worker, the scratch rows
            fields = array_fields(indices, (count,), index_dtype.itemsize)
            return (*space.args(fields, limit, stop_at_bad, row_cost), plan, scratch)  # type: ignore[arg-type]

        def pack(indices: int, grad: int) -> bytes:
            rows = array_fields(grad, (count, row_len), itemsize)
            return worker.pack((*head(indices), rows, *states, *scalars))

        packed = pack(0, 0)  # the addresses are written by each run
        # byte offsets of the indices' and the gradient's data pointers (the fifth word of an array's
        # fields) and of the scalars, in the native layout (each field aligned to its size), checked below
        word = struct.calcsize("@P")
        types = worker.arg_types
        grad_at = _aligned_end(types[: len(head(0))], word) + 4 * word
        scalar_format = struct.Struct("@" + _codes_of(types[len(types) - len(scalars) :]))
        scalar_at = _aligned_end(types[: len(types) - len(scalars)], 8)
        written = bytearray(packed)
        struct.pack_into("@P", written, 4 * word, 8)  # the indices at 8, the gradient at 16
        struct.pack_into("@P", written, grad_at, 16)
        rescaled = bytearray(packed)
        rescaled[scalar_at:] = bytes(len(packed) - scalar_at)
        scalar_format.pack_into(rescaled, scalar_at, *scalars)
        if bytes(written) != pack(8, 16) or bytes(rescaled) != packed:
            raise RuntimeError("KeptLaunch: packed argument layout not as expected")
        self.data = ctypes.create_string_buffer(packed, len(packed))
        # plain memoryviews (no ctypes call in a run): the packed words, the counters and their bytes
        self._words = memoryview(self.data).cast("B").cast("P")
        self._indices, self._grad = 4, grad_at // word
        self._scalar_at, self._scalar_format = scalar_at, scalar_format
        self._space = space  # the plan's memory, alive as long as this launch
        self._sync, self._sync_bytes = space.sync.data, space.sync.data.cast("B")
        self.worker, self.count, self.scalars = worker, count, scalars
        self.nbytes = space.workspace.nbytes  # the memory this launch keeps

    def run(self, indices: int, grad: int, scalars: tuple) -> int:
        """Run the row worker over the ``count`` indices at address ``indices`` (C-contiguous) with the
        gradient rows at ``grad`` (C-contiguous, ``(count, row_len)``) and ``scalars`` (of the first run's
        types); return the position of the first out-of-range index (nothing was written then) or -1."""
        words = self._words
        words[self._indices] = indices
        words[self._grad] = grad
        if scalars is not self.scalars:
            self._scalar_format.pack_into(self.data, self._scalar_at, *scalars)
            self.scalars = scalars
        self._sync_bytes[:] = _ZERO_SYNC
        self.worker.launch_packed(None, self.data)
        return self._sync[3] - 1


#: The counters of a plan (:data:`~optkernels.sparse._plan.SYNC_SLOTS` int64) at zero.
_ZERO_SYNC = bytes(8 * SYNC_SLOTS)


def kept_launch_fits(update: WholeRowUpdate, count: int, row_len: int, itemsize: int) -> bool:
    """Whether a :class:`KeptLaunch` of ``update`` over ``count`` indices and rows of ``row_len`` items of
    ``itemsize`` bytes keeps a plan workspace no larger than the row loops reuse
    (:data:`~optkernels.sparse._plan.REUSED_BYTES`)."""
    workers = worker_count()
    scratch = workers * update.work_rows(row_len) * row_len * itemsize
    return plan_space_bytes(count, workers * TASKS_PER_THREAD, scratch) <= REUSED_BYTES


def _codes_of(arg_types: Any) -> str:
    return "".join(map(_code, arg_types))


def _aligned_end(arg_types: Any, align: int) -> int:
    """Where a field aligned to ``align`` bytes starts after packed arguments of ``arg_types``."""
    return -(-struct.calcsize("@" + _codes_of(arg_types)) // align) * align


@numba.njit(inline="always", **JIT_OPTIONS)
def prefetch_row(array, r, line):
    """Prefetch every cache line of row ``r`` of the 2-D ``array`` for writing (``line`` elements a line)."""
    c = 0
    while c < array.shape[1]:  # not a range with a step, which divides to count its iterations
        prefetch_write(array, r, c)
        c += line


@numba.njit(inline="always", **JIT_OPTIONS)
def prefetch_row_far(array, r, line):
    """Prefetch every cache line of row ``r`` of the 2-D ``array`` for reading into the caches below the
    first (``prefetch_read_far``; ``line`` elements a line)."""
    c = 0
    while c < array.shape[1]:
        prefetch_read_far(array, r, c)
        c += line


def _cpu_source(
    fn: Any,
    states: list[str],
    scalars: list[str],
    row_update: str,
    scratch: str,
    block_rows: int,
    work_rows: str,
    arg_types: tuple,
) -> Callable:
    """The Python function of the CPU row worker (:data:`_CPU_ROWS`) over the state arrays ``states`` and
    the scalars ``scalars`` (argument names) for packed arguments of ``arg_types``, whose statement
    ``row_update`` updates row ``j`` of the plan from its summed gradient row ``block[n_held]`` by calling
    ``fn`` (as ``update``); ``scratch``: a statement naming each worker's buffers; ``block_rows``: the rows
    of each worker's block of summed gradient rows, the first of its ``work_rows`` (an expression in
    ``row_len``) scratch rows."""
    namespace = {
        "np": np,
        "update": fn,
        "load_packed": loader(arg_types),
        "smaller": smaller,
        "call_cfunc": call_cfunc,
        "fetch_add": fetch_add,
        "prefetch_read": prefetch_read,
        "prefetch_row": prefetch_row,
        "CACHE_LINE_BYTES": CACHE_LINE_BYTES,
        "PREFETCH_GRAD_ROWS": PREFETCH_GRAD_ROWS,
        "PREFETCH_STATE_ROWS": PREFETCH_STATE_ROWS,
        "WAIT_PREFETCH_ROWS": WAIT_PREFETCH_ROWS,
        "prefetch_read_far": prefetch_read_far,
        "FAR_GRAD_ROWS": FAR_GRAD_ROWS,
        "FAR_STATE_ROWS": FAR_STATE_ROWS,
        "prefetch_row_far": prefetch_row_far,
    }
    return generate(
        _CPU_ROWS,
        f"_cpu_rows_{fn.py_func.__name__}_{_digest(str(arg_types))}",
        fn.py_func,
        namespace,
        plan_args=PLAN_ARGS,
        prefetch_states="; ".join(f"prefetch_row({s}, r, line)" for s in states),
        prefetch_states_far="; ".join(f"prefetch_row_far({s}, r, line)" for s in states),
        row_update=row_update,
        scratch=scratch,
        block_rows=str(block_rows),
        work_rows=work_rows,
        source_digest=_source_digest(),
        params=", ".join(states + scalars),
    )


class WholeRowUpdate:
    """An update that needs each distinct row whole (a reduction over the row before anything is written,
    such as row-wise Adagrad's mean of squares), on the CPU row loop of :class:`RowUpdate` (the same merge
    plan, prefetching and tasks; the same summed gradient rows, in the same order).

    Args:
        row_fn: a Numba function ``f(j, rows, block, n, last, scratch_1, ..., state_1, ..., state_k,
            scalar_1, ...) -> n`` called for each distinct row ``rows[j]`` (``rows``: the plan's distinct
            rows, ascending; ``j`` ascending within a task), whose summed gradient the driver has just
            written into ``block[n]`` (``block``: the worker's ``(block_rows, row_len)`` buffer, in the
            gradient's dtype); ``last``: whether ``j`` is its task's last row. It holds rows back (``n``: how
            many it held before ``j``, 0 at a task's start: the held rows are ``rows[j - n : j]``; it returns
            the new count, at most ``block_rows`` - 1) to update several at once, so that their dependency
            chains interleave, and must have updated every row it holds when ``last`` is true or the block
            is full. The states are 2-D ``(rows, width)`` views, updated in place; a task's rows are never
            another's.
        n_states: ``k``, the number of state arrays.
        scratch: name -> the expression of that buffer (or view) for each worker, in terms of ``row_len``,
            ``grad`` (the 2-D gradient), ``work`` (the worker's ``(work_rows, row_len)`` scratch rows, in
            the gradient's dtype, whose first ``block_rows`` are ``block``) and the states, in ``f``'s
            order. Views of ``work`` and of the states cost nothing per row; a new array would be counted
            by reference (atomic updates) wherever the row loop passes it on.
        block_rows: the rows of ``block``.
        work_rows: an expression in ``row_len``: the rows of ``work`` (default: ``block_rows``).
    """

    def __init__(
        self, row_fn: Any, n_states: int, scratch: dict[str, str], block_rows: int, work_rows: str = ""
    ):
        self.fn = row_fn
        params = list(inspect.signature(row_fn.py_func).parameters)
        first = 5 + len(scratch)
        self.scratch = scratch
        self.block_rows = block_rows
        self.work_rows_source = work_rows or str(block_rows)
        self.work_rows: Callable[[int], int] = eval(f"lambda row_len: {self.work_rows_source}")
        self.states, self.scalars = params[first : first + n_states], params[first + n_states :]
        self._workers: dict[tuple, PackedWorker] = {}
        #: Workers that a caller finds by a key of its own (with the positions' dtype), from which it vouches
        #: that the worker's argument types follow (:meth:`cpu_worker` reads every array's flags).
        self.keyed: dict[tuple, PackedWorker] = {}

    def cpu_worker(self, index_dtype: Any, position_dtype: Any, arrays: list, scalars: tuple) -> PackedWorker:
        """The CPU row worker (a packed worker, compiled on first use or loaded from Numba's cache) for
        these index and position dtypes, ``arrays`` (the 2-D gradient, then the 2-D states, whose row
        widths may differ) and ``scalars``: its packed arguments are :func:`launch_cpu`'s."""
        key = (index_dtype, position_dtype, *map(type_key, arrays), *map(type, scalars))
        worker = self._workers.get(key)
        if worker is None:
            grad, *states = arrays
            arg_types = (
                *plan_types(index_dtype, position_dtype),
                numba.types.int64,
                numba.types.Array(numba.from_dtype(grad.dtype), 2, "C"),
                readonly_array(grad.dtype, 2),
                *map(numba.typeof, states),
                *map(numba.typeof, scalars),
            )
            names = list(self.scratch)
            call = (
                f"n_held = update(j, rows, block, n_held, j == last - 1, "
                f"{', '.join(names + self.states + self.scalars)})"
            )
            allocate = "; ".join(["n_held = 0"] + [f"{name} = {expr}" for name, expr in self.scratch.items()])
            source = _cpu_source(
                self.fn,
                self.states,
                self.scalars,
                call,
                allocate,
                self.block_rows,
                self.work_rows_source,
                arg_types,
            )
            worker = self._workers.setdefault(key, PackedWorker(source, arg_types))
        return worker


@functools.cache
def _source_digest() -> str:
    """A digest of this module's source, written into every driver (see :func:`._rows.generate`)."""
    return _digest(inspect.getsource(sys.modules[__name__]))
