"""Row loops of the sparse ops: the drivers that apply a per-element update to every distinct row of a merged
row-sparse gradient, on the CPU and on CUDA.

A row update is a :func:`~optkernels.kernels._elementwise.scalar_math` function
``f(state_1, ..., state_k, g, scalar_1, ...) -> (state_1, ..., state_k)`` (the same functions the dense
kernels call, where the math is the same). :class:`RowUpdate` generates its two drivers from that one
definition, with each distinct row's summed gradient computed on the fly:

* CPU: one parallel region per call (:func:`drive_rows`, a one-line parallel loop), each of whose threads
  runs the update's row worker, a C function (``numba.cfunc``) called through its address
  (:func:`~optkernels.kernels._intrinsics.call_cfunc`): the row code is compiled once per update and dtype
  as a plain function, not lowered again inside Numba's parallel-loop machinery, and the merge plan's code
  (:func:`plan_tasks_worker`) once for every update. The first thread to arrive builds the merge plan
  (:func:`~optkernels.sparse._plan.plan_into`: range check, stable radix sort of the positions) while the
  others wake up and stream the gradient into the caches; the distinct rows are then cut into runs of about
  equal cost (:func:`fill_balanced_tasks`),
  which the threads take from a shared atomic counter. For each row, its gradient rows are gathered and added
  into a row buffer in order of appearance (``g = g_1; g += g_2; ...``, in the arrays' dtype), then ``f``
  runs over the row's elements (a contiguous, vectorisable loop). The gradient rows
  :data:`PREFETCH_GRAD_ROWS` ahead and the state rows :data:`PREFETCH_STATE_ROWS` ahead are prefetched
  meanwhile (the rows are scattered over the table: each is a cache miss).
* CUDA: one thread per (distinct row, column): the same sum in the same order, then ``f``.

Each element's sum is computed by one thread in a fixed order, so results are the same bits with any number
of threads, whichever thread runs which task, and on both targets (up to FMA contraction of ``f`` on a real
GPU). The drivers' code is attributed to the file that defines ``f`` (as the dense drivers are), so Numba's
on-disk cache is refreshed when the math changes; their names carry a digest of the template (see
:func:`generate`), so it is refreshed when the driver changes too.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ..kernels import _cuda, _intrinsics
from ..kernels._elementwise import CUDA_MAX_BLOCKS, CUDA_THREADS_PER_BLOCK, _digest
from ..kernels._intrinsics import CACHE_LINE_BYTES, call_cfunc, fetch_add, prefetch_read, prefetch_write
from ..kernels._threading import for_this_process, parallel_launch
from ._plan import MAX_PASSES, RADIX_BITS, inline_plan_into, position_example

JIT_OPTIONS = dict(error_model="numpy", fastmath=False)

#: Tasks per thread of the CPU row loop. Threads take tasks from a shared counter (an atomic add), so a
#: thread that starts late (woken from sleep, or sharing its core) takes fewer of them.
TASKS_PER_THREAD = 8

#: How many gradient rows ahead of the one being summed, and how many distinct rows ahead of the one being
#: updated, the CPU row loop prefetches (software prefetch, one instruction per cache line). The rows are
#: scattered over a large table, so each is a cache miss; prefetching keeps about 16 + 3 x 4 rows' misses in
#: flight at once instead of one.
PREFETCH_GRAD_ROWS = 16
PREFETCH_STATE_ROWS = 4

#: While the first thread builds the merge plan, the others prefetch the gradient (the whole array, in its
#: order: a stream the memory system serves faster than the scattered gathers of the row loop), this many
#: rows per turn between looks at whether the plan is ready.
WAIT_PREFETCH_ROWS = 8

#: The cost of a task (to balance the tasks) counts each gradient row once and each distinct row this many
#: times per state array (a state row is read and written).
STATE_ROW_COST = 4

#: The row loop's shared counters: [plan claimed, n_tasks + 1 once published, next task, first bad position
#: + 1, next gradient row to prefetch while waiting], only ever read and written by ``fetch_add`` inside the
#: loop (Numba does not see the intrinsic's writes: a plain read there may see a stale value).
SYNC_SLOTS = 5

# The CPU row worker, run once by every iteration of :func:`drive_rows`' parallel loop (a plain compiled C
# function, see RowUpdate.cpu_worker). The first worker to arrive computes the merge plan (claimed with an
# atomic add, so it is always a running thread: no thread ever waits for one that has not started) while
# the others -- often just woken from sleep -- join; once the plan is published they all take tasks. A bad
# index publishes no tasks: nothing is written.
_CPU_ROWS = """
def {name}(sync, plan, indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds, grad, {params}):
    n = indices.shape[0]
    row_len = grad.shape[1]
    line = max(1, CACHE_LINE_BYTES // grad.itemsize)
    if fetch_add(sync, 0, 1) == 0:
        call_cfunc(plan, (indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds,
                          np.int64(STATE_ROW_COST * {n_states}), sync))
    else:
        # meanwhile, pull the gradient into the caches, WAIT_PREFETCH_ROWS rows at a time from a shared
        # counter (no two threads fetch the same rows): the row loop then gathers it from cache
        while fetch_add(sync, 1, 0) == 0:
            ahead = fetch_add(sync, 4, WAIT_PREFETCH_ROWS)
            for k in range(ahead, min(ahead + WAIT_PREFETCH_ROWS, n)):
                for c in range(0, row_len, line):
                    prefetch_read(grad, k, c)
    n_tasks = fetch_add(sync, 1, 0) - 1
    g = np.empty(row_len, grad.dtype)
    while True:
        task = fetch_add(sync, 2, 1)
        if task >= n_tasks:
            break
        first = bounds[task]
        last = bounds[task + 1]
        k_last = starts[last]
        for j in range(first, min(first + PREFETCH_STATE_ROWS, last)):
            r = rows[j]
            for c in range(0, row_len, line):
                {prefetch_states}
        for k in range(starts[first], min(starts[first] + PREFETCH_GRAD_ROWS, k_last)):
            src = order[k]
            for c in range(0, row_len, line):
                prefetch_read(grad, src, c)
        for j in range(first, last):
            if j + PREFETCH_STATE_ROWS < last:
                r = rows[j + PREFETCH_STATE_ROWS]
                for c in range(0, row_len, line):
                    {prefetch_states}
            for k in range(starts[j], starts[j + 1]):
                if k + PREFETCH_GRAD_ROWS < k_last:
                    ahead = order[k + PREFETCH_GRAD_ROWS]
                    for c in range(0, row_len, line):
                        prefetch_read(grad, ahead, c)
                src = order[k]
                if k == starts[j]:
                    for c in range(row_len):
                        g[c] = grad[src, c]
                else:
                    for c in range(row_len):
                        g[c] += grad[src, c]
            r = rows[j]
            for c in range(row_len):
                {targets} = update({targets}, g[c], {scalars})
"""


@numba.njit(parallel=True, cache=True, **JIT_OPTIONS)
def drive_rows(n_workers, worker, args):
    """Call the C function at address ``worker`` (a row worker, :meth:`RowUpdate.cpu_worker`) with ``args``
    once on each of ``n_workers`` iterations of a parallel loop (:func:`~optkernels.kernels._intrinsics.
    call_cfunc`). The row code is then compiled once, as a plain function, outside Numba's parallel-loop
    machinery (which would lower and optimise it again in each function it generates), and this loop is
    compiled once per argument types."""
    for _ in numba.prange(n_workers):
        call_cfunc(worker, args)


@numba.njit(parallel=True, cache=True, **JIT_OPTIONS)
def drive_tasks(n_tasks, worker, args):
    """Call the C function at address ``worker`` with ``(task, *args)`` for every ``task`` in ``0 .. n_tasks
    - 1``, on the threads of a parallel loop (see :func:`task_worker`)."""
    for task in numba.prange(n_tasks):
        call_cfunc(worker, (np.int64(task),) + args)


_task_workers: dict[tuple, tuple[Any, int]] = {}


def _type_key(value: Any) -> Any:
    """What Numba's type of an argument depends on, found faster than :func:`numba.typeof`."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        return value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    return type(value)


def compile_worker(py_func: Callable, signature: Any, cache: bool = True) -> Any:
    """``py_func`` compiled as a C function (``numba.cfunc``) for ``signature`` (returning void), cached on
    disk unless ``cache`` is False (a fresh compile keeps its LLVM IR for :meth:`inspect_llvm`)."""
    return numba.cfunc(signature, cache=cache, **JIT_OPTIONS)(py_func)


def task_worker(py_func: Callable, args: tuple) -> tuple[Any, int]:
    """``(cfunc, its address)``: ``py_func(task, *args)`` (returning nothing) compiled as a C function
    (``numba.cfunc``, cached on disk) for ``int64`` tasks and the Numba types of ``args``, on first use."""
    key = (py_func, *map(_type_key, args))
    found = _task_workers.get(key)
    if found is None:
        signature = numba.types.void(numba.types.int64, *map(numba.typeof, args))
        compiled = compile_worker(py_func, signature)
        found = _task_workers.setdefault(key, (compiled, compiled.address))
    return found


def run_tasks(n_tasks: int, py_func: Callable, args: tuple) -> None:
    """``py_func(task, *args)`` for every task in ``0 .. n_tasks - 1``, on the threads of one parallel loop
    (:func:`drive_tasks`; ``py_func`` compiled by :func:`task_worker`), in
    :func:`~optkernels.kernels._threading.parallel_launch`. The task code is compiled once, outside Numba's
    parallel-loop machinery."""
    worker = task_worker(py_func, args)[1]
    with parallel_launch():
        for_this_process(drive_tasks)(n_tasks, worker, args)


def _plan_tasks(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds, row_cost, sync):
    """Build the merge plan (:func:`~optkernels.sparse._plan.plan_into`) and cut its rows into tasks
    (:func:`fill_balanced_tasks`); publish in ``sync`` the first bad position + 1 (``sync[3]``) and the
    number of tasks + 1 (``sync[1]``, 1 when an index is bad: no tasks)."""
    bad, _kept, n_rows = inline_plan_into(indices, limit, stop_at_bad, order, order_tmp, counts, rows, starts)
    n_tasks = 0
    if bad >= 0:
        fetch_add(sync, 3, bad + 1)
    else:
        n_tasks = inline_fill_balanced_tasks(starts, n_rows, bounds, row_cost)
    fetch_add(sync, 1, n_tasks + 1)


_INT64S = numba.types.int64[::1]


def _readonly(dtype: Any, ndim: int) -> Any:
    return numba.types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C", readonly=True)


def _plan_signature(index_dtype: Any, position_dtype: Any) -> tuple:
    positions = numba.types.Array(numba.from_dtype(np.dtype(position_dtype)), 1, "C")
    return (
        _readonly(index_dtype, 1),
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


_plan_workers: dict[tuple, tuple[Any, int]] = {}


def plan_tasks_worker(index_dtype: Any, position_dtype: Any) -> int:
    """The address of :func:`_plan_tasks` compiled as a C function (``numba.cfunc``, cached on disk) for one
    index and one position dtype: one for every row update and float dtype."""
    key = (index_dtype, position_dtype)
    found = _plan_workers.get(key)
    if found is None:
        signature = numba.types.void(*_plan_signature(index_dtype, position_dtype))
        compiled = numba.cfunc(signature, cache=True, **JIT_OPTIONS)(_plan_tasks)
        found = _plan_workers.setdefault(key, (compiled, compiled.address))
    return found[1]


@numba.njit(cache=True)
def fill_balanced_tasks(starts, n_rows, bounds, row_cost):
    """Cut the distinct rows ``0 .. n_rows - 1`` into at most ``len(bounds) - 1`` runs of about equal cost,
    a run's cost being its gradient rows (from ``starts``) plus ``row_cost`` per distinct row; write the
    boundaries into ``bounds[:n_tasks + 1]`` and return ``n_tasks`` (0 when there are no rows). A Zipf
    batch's first few rows hold half its gradient rows, so equal numbers of rows would not balance."""
    bounds[0] = 0
    if n_rows == 0:
        return 0
    n_tasks = min(bounds.shape[0] - 1, n_rows)
    total = (starts[n_rows] - starts[0]) + row_cost * n_rows
    j = 0
    for t in range(1, n_tasks):
        target = total * t // n_tasks
        while j < n_rows and (starts[j] - starts[0]) + row_cost * j < target:
            j += 1
        bounds[t] = j
    bounds[n_tasks] = n_rows
    return n_tasks


# A copy inlined (as Numba IR) into :func:`_plan_tasks`, with :func:`~._plan.inline_plan_into`.
inline_fill_balanced_tasks = numba.njit(inline="always", **JIT_OPTIONS)(fill_balanced_tasks.py_func)


@numba.njit(cache=True)
def balanced_tasks(starts, n_tasks, row_cost):
    """The boundaries of :func:`fill_balanced_tasks` over all of ``starts``' rows, as a new array."""
    bounds = np.empty(max(1, n_tasks) + 1, np.int64)
    return bounds[: fill_balanced_tasks(starts, starts.shape[0] - 1, bounds, row_cost) + 1]


_CUDA_ROWS = """
def {name}(n, rows, starts, order, grad, row_len, {params}):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    while t < n:
        j = t // row_len
        c = t - j * row_len
        g = grad[order[starts[j]] * row_len + c]
        for k in range(starts[j] + 1, starts[j + 1]):
            g += grad[order[k] * row_len + c]
        i = rows[j] * row_len + c
        {targets} = update({targets}, g, {scalars})
        t += stride
"""


def generate(template: str, name: str, py_func: Callable, namespace: dict, **fields: str) -> Callable:
    """Compile ``template`` (filled with ``name`` and ``fields``) into a function attributed to ``py_func``'s
    source file and module, with ``namespace`` as its globals.

    Numba's on-disk cache is keyed to that file only, so the function's name carries a digest of the filled
    template and of this module's and the intrinsics' source: a changed driver never loads a stale entry."""
    name = f"{name}_{_digest(template.format(name=name, **fields), _driver_sources())}"
    source = template.format(name=name, **fields)
    code = compile(source, inspect.getfile(py_func), "exec")
    exec(code, namespace)
    driver = namespace[name]
    driver.__module__ = py_func.__module__
    driver.__qualname__ = name
    return driver


@functools.cache
def _driver_sources() -> str:
    """This module's and the intrinsics' source text, part of every driver's digest."""
    return "\0".join(inspect.getsource(m) for m in (sys.modules[__name__], _intrinsics))


def worker_count() -> int:
    """How many workers the parallel CPU loops are cut for: the size of Numba's thread pool
    (``NUMBA_NUM_THREADS``), which bounds the thread count that :func:`numba.set_num_threads` may choose.
    The loops hand out their work from a shared counter, so more workers than running threads costs
    nothing; and reading a config value is quick, where :func:`numba.get_num_threads` took about 50 us
    (against 6 us) when called after other work had left the caches cold, as between training steps."""
    return numba.config.NUMBA_NUM_THREADS


def launch_config(n: int) -> tuple[int, int]:
    """(blocks, threads per block) of a grid-stride CUDA launch over ``n`` items."""
    return min(-(-n // CUDA_THREADS_PER_BLOCK), CUDA_MAX_BLOCKS), CUDA_THREADS_PER_BLOCK


class RowUpdate:
    """A per-element update applied to the distinct rows of a merged row-sparse gradient (lazy: other rows
    are not touched), compiled for the CPU and for CUDA from one scalar function (see the module docstring).

    Args:
        math_fn: a ``scalar_math`` function ``f(state_1, ..., state_k, g, scalar_1, ...)`` returning the k new
            states; its parameter named ``g`` separates the states from the scalars.
    """

    def __init__(self, math_fn: Callable):
        self.math = math_fn
        py_func = math_fn.py_func
        params = list(inspect.signature(py_func).parameters)
        split = params.index("g")
        self.states, self.scalars = params[:split], params[split + 1 :]
        self.__name__ = py_func.__name__
        self._workers: dict[tuple, tuple[Any, int]] = {}  # key -> (the cfunc, kept alive; its address)

    def _fields(self) -> dict:
        return dict(params=", ".join(self.states + self.scalars), scalars=", ".join(self.scalars))

    @functools.cached_property
    def cpu_source(self) -> Callable:
        """The Python function of the CPU row worker (:data:`_CPU_ROWS` filled in for this update)."""
        namespace = {
            "np": np,
            "update": self.math,
            "call_cfunc": call_cfunc,
            "fetch_add": fetch_add,
            "prefetch_read": prefetch_read,
            "prefetch_write": prefetch_write,
            "CACHE_LINE_BYTES": CACHE_LINE_BYTES,
            "STATE_ROW_COST": STATE_ROW_COST,
            "PREFETCH_GRAD_ROWS": PREFETCH_GRAD_ROWS,
            "PREFETCH_STATE_ROWS": PREFETCH_STATE_ROWS,
            "WAIT_PREFETCH_ROWS": WAIT_PREFETCH_ROWS,
        }
        targets = ", ".join(f"{s}[r, c]" for s in self.states)
        prefetch_states = "; ".join(f"prefetch_write({s}, r, c)" for s in self.states)
        return generate(
            _CPU_ROWS,
            f"_cpu_rows_{self.__name__}",
            self.math.py_func,
            namespace,
            targets=targets,
            prefetch_states=prefetch_states,
            n_states=len(self.states),
            **self._fields(),
        )

    def worker_signature(self, index_dtype: Any, position_dtype: Any, dtype: Any, scalars: tuple) -> Any:
        """The C signature of :meth:`cpu_worker` for these dtypes and scalars."""
        rows = numba.types.Array(numba.from_dtype(np.dtype(dtype)), 2, "C")
        plan_signature = numba.types.void(*_plan_signature(index_dtype, position_dtype))
        head = (_INT64S, numba.types.int64) + plan_signature.args[:-2]
        return numba.types.void(
            *head, _readonly(dtype, 2), *[rows] * len(self.states), *map(numba.typeof, scalars)
        )

    def cpu_worker(
        self, index_dtype: Any, position_dtype: Any, dtype: Any, scalars: tuple
    ) -> tuple[Any, int]:
        """``(cfunc, its address)``: the CPU row worker for these dtypes and scalars' types, compiled on first
        use (or loaded from Numba's cache) as a C function (``numba.cfunc``): ``worker(sync, plan, indices,
        limit, stop_at_bad, order, order_tmp, counts, rows, starts, bounds, grad, *states, *scalars)`` on 2-D ``(rows,
        row_len)`` C-contiguous views of the gradient and the states (see
        :func:`~optkernels.sparse._plan.plan_into` for the index arguments; ``plan``: the address of
        :func:`plan_tasks_worker`). The first worker to arrive builds the merge plan; each then takes tasks
        until none is left (see :func:`drive_rows`)."""
        key = (index_dtype, position_dtype, dtype, *map(type, scalars))
        worker = self._workers.get(key)
        if worker is None:
            signature = self.worker_signature(index_dtype, position_dtype, dtype, scalars)
            compiled = compile_worker(self.cpu_source, signature)
            worker = self._workers.setdefault(key, (compiled, compiled.address))
        return worker

    @functools.cached_property
    def cuda(self) -> Callable:
        """The CUDA kernel: ``cuda[blocks, threads](n, rows, starts, order, grad, row_len, *states,
        *scalars)`` with ``n = len(rows) * row_len`` (1-D arrays)."""
        cuda = _cuda.module()
        namespace = {"cuda": cuda, "update": self.math}
        return cuda.jit(
            generate(
                _CUDA_ROWS,
                f"_cuda_rows_{self.__name__}",
                self.math.py_func,
                namespace,
                targets=", ".join(f"{s}[i]" for s in self.states),
                **self._fields(),
            )
        )

    def cpu_arguments(
        self, indices: np.ndarray, limit: int, stop_at_bad: bool, arrays: list, scalars: tuple
    ) -> tuple[int, tuple]:
        """``(worker, args)`` of :func:`drive_rows` for the row update of ``arrays`` (the gradient, then the
        states, 2-D C-contiguous ``(rows, row_len)``) over ``indices`` (see
        :func:`~optkernels.sparse._plan.plan_into` for ``limit`` and ``stop_at_bad``): the worker's address
        and its arguments, with new plan buffers and counters (``args[0]``: after the call, ``args[0][3] -
        1`` is the position of the first out-of-range index, or -1)."""
        n = indices.shape[0]
        positions = position_example(n).dtype
        args = (
            np.zeros(SYNC_SLOTS, np.int64),
            plan_tasks_worker(indices.dtype, positions),
            indices,
            limit,
            stop_at_bad,
            np.empty(n, positions),
            np.empty(n, positions),
            np.empty((MAX_PASSES, (1 << RADIX_BITS) + 1), np.int64),
            np.empty(n, np.int64),
            np.empty(n + 1, np.int64),
            np.empty(worker_count() * TASKS_PER_THREAD + 1, np.int64),
            *arrays,
            *scalars,
        )
        return self.cpu_worker(indices.dtype, positions, arrays[0].dtype, scalars)[1], args

    def launch(self, call: Any, *scalars: Any) -> None:
        """Apply the update to the distinct rows of ``call``'s gradient (its state arrays, in order).

        ``call`` is a checked call (``sparse._call.SparseCall``, a floor above this module: only its
        ``device``, ``row_len``, ``plan``, arrays and launch tables are read).

        Raises:
            IndexError: an out-of-range index (unless the call drops them); nothing is written then.
        """
        if call.device == "cpu" and call.row_len:
            worker, args = self.cpu_arguments(
                call.indices, call.num_rows, not call.drop, call.rows_2d(), scalars
            )
            with parallel_launch():
                for_this_process(drive_rows)(worker_count(), worker, args)
            bad = args[0][3] - 1
            if bad >= 0:
                raise call.out_of_range_error(int(bad))
            return
        n_rows = call.plan.rows.shape[0]
        if n_rows == 0 or call.row_len == 0:
            return
        rows, starts, order = call.device_plan()
        n = n_rows * call.row_len
        blocks, threads = launch_config(n)
        self.cuda[blocks, threads](n, rows, starts, order, call.grad, call.row_len, *call.states, *scalars)
