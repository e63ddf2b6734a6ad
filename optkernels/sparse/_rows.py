"""Row loops of the sparse ops: the drivers that apply a per-element update to every distinct row of a merged
row-sparse gradient, on the CPU and on CUDA.

A row update is a :func:`~optkernels.kernels._elementwise.scalar_math` function
``f(state_1, ..., state_k, g, scalar_1, ...) -> (state_1, ..., state_k)`` (the same functions the dense
kernels call, where the math is the same). :class:`RowUpdate` generates its two drivers from that one
definition, with each distinct row's summed gradient computed on the fly:

* CPU: one launch per call on Numba's threads, each running the update's row worker once: a packed C worker
  (:mod:`~optkernels.kernels._workers`: a ``numba.cfunc`` launched from Python, so no parallel loop is
  compiled), compiled once per update and dtypes as a plain function. The first worker to arrive builds the
  merge plan by calling the plan worker (:func:`~optkernels.sparse._plan.plan_worker`, compiled once for
  every update: range check, stable radix sort of the positions) with its own arguments, while the others
  wake up and stream the gradient into the caches; the distinct rows are cut into runs of decreasing cost
  (:func:`~optkernels.sparse._plan.fill_balanced_tasks`),
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

from ..kernels import _cuda, _intrinsics, _workers
from ..kernels._elementwise import CUDA_MAX_BLOCKS, CUDA_THREADS_PER_BLOCK, _digest
from ..kernels._intrinsics import CACHE_LINE_BYTES, call_cfunc, fetch_add, prefetch_read, prefetch_write
from ..kernels._workers import PackedWorker, array_fields, loader
from . import _row_sums
from ._plan import (
    PLAN_ARGS,
    PlanSpace,
    plan_types,
    plan_worker,
    position_example,
    readonly_array,
    reused_plan_space,
)

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

#: How many gradient rows and distinct rows ahead the whole-row loop (:mod:`._whole_rows`) also prefetches
#: into the second-level cache only (``prefetch_read_far``): such a prefetch holds no first-level miss
#: buffer, of which a core has a few dozen, so many more rows' misses are in flight; the near prefetches
#: above then find their lines there.
FAR_GRAD_ROWS = 128
FAR_STATE_ROWS = 16

#: While the first thread builds the merge plan, the others prefetch the gradient (the whole array, in its
#: order: a stream the memory system serves faster than the scattered gathers of the row loop), this many
#: rows per turn between looks at whether the plan is ready.
WAIT_PREFETCH_ROWS = 8

#: The cost of a task (to balance the tasks) counts each gradient row once and each distinct row this many
#: times per state array (a state row is read and written).
STATE_ROW_COST = 4

# The CPU row worker: every thread of the launch runs it once (a packed worker, see RowUpdate.cpu_worker).
# The first worker to arrive computes the merge plan (claimed with an atomic add, so it is always a running
# thread: no thread ever waits for one that has not started) by calling the plan worker with this call's own
# packed arguments (they open with the plan's), while the others -- often just woken from sleep -- join;
# once the plan is published they all take tasks. A bad index publishes no tasks: nothing is written.
_CPU_ROWS = """
def {name}(_args, _dims, _steps, _data):
    {plan_args}, plan, scratch, grad, {params}, = load_packed(_data)
    n = indices.shape[0]
    row_len = grad.shape[1]
    line = CACHE_LINE_BYTES // grad.itemsize
    if fetch_add(sync, 0, 1) == 0:
        call_cfunc(plan, (_args, _dims, _steps, _data))
    else:
        # meanwhile, pull the gradient into the caches, WAIT_PREFETCH_ROWS rows at a time from a shared
        # counter (no two threads fetch the same rows): the row loop then gathers it from cache
        while fetch_add(sync, 1, 0) == 0:
            ahead = fetch_add(sync, 4, WAIT_PREFETCH_ROWS)
            for k in range(ahead, smaller(ahead + WAIT_PREFETCH_ROWS, n)):
                for c in range(0, row_len, line):
                    prefetch_read(grad, k, c)
    n_tasks = fetch_add(sync, 1, 0) - 1
    g = scratch[fetch_add(sync, 7, 1)]  # this worker's row of the gradient sums
    while True:
        task = fetch_add(sync, 2, 1)
        if task >= n_tasks:
            break
        first = bounds[task]
        last = bounds[task + 1]
        k_last = starts[last]
        for j in range(first, smaller(first + PREFETCH_STATE_ROWS, last)):
            r = rows[j]
            for c in range(0, row_len, line):
                {prefetch_states}
        for k in range(starts[first], smaller(starts[first] + PREFETCH_GRAD_ROWS, k_last)):
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


@numba.njit(inline="always", **JIT_OPTIONS)
def smaller(a, b):
    """The smaller of two integers (inlined: ``min`` compiles a function of its own on first use)."""
    return a if a < b else b


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
    """This module's, the intrinsics' (the package's and :mod:`._row_sums`') and the packed workers' source
    text, part of every driver's digest."""
    return "\0".join(inspect.getsource(m) for m in (sys.modules[__name__], _intrinsics, _row_sums, _workers))


def worker_count() -> int:
    """How many workers the parallel CPU loops are cut for: the size of Numba's thread pool
    (``NUMBA_NUM_THREADS``), which bounds the thread count that :func:`numba.set_num_threads` may choose.
    The loops hand out their work from a shared counter, so more workers than running threads costs
    nothing; and reading a config value is quick, where :func:`numba.get_num_threads` took about 50 us
    (against 6 us) when called after other work had left the caches cold, as between training steps."""
    return numba.config.NUMBA_NUM_THREADS


def row_loop_arguments(
    indices: np.ndarray, limit: int, stop_at_bad: bool, n_states: int, grad: np.ndarray, scratch_rows: int = 1
) -> tuple[tuple, np.dtype, PlanSpace]:
    """``(head, positions, space)``: the arguments every CPU row worker's opens with, for ``indices`` (see
    :func:`~optkernels.sparse._plan._plan_tasks` for ``limit`` and ``stop_at_bad``) and the 2-D gradient
    ``grad`` of an update of ``n_states`` states: :data:`~optkernels.sparse._plan.PLAN_ARGS` (new buffers,
    counters at zero, :data:`TASKS_PER_THREAD` tasks a worker), the plan worker's address and the
    workers' scratch rows (``scratch_rows`` each, of ``grad``'s row length and dtype); the positions' dtype;
    the plan's memory (which the caller keeps until the launch is over: ``head`` holds only addresses into
    it) and counters (``space.sync``, see :data:`~optkernels.sparse._plan.SYNC_SLOTS`)."""
    workers = worker_count()
    n_scratch = workers * scratch_rows
    row_len, itemsize = grad.shape[1], grad.itemsize
    n = indices.shape[0]
    space = reused_plan_space(n, workers * TASKS_PER_THREAD, n_scratch * row_len * itemsize)
    key = (space.extra, n_scratch, row_len, itemsize, indices.dtype, n < 2**31)
    fixed = _FIXED_ARGUMENTS.get(key)
    if fixed is None:
        if len(_FIXED_ARGUMENTS) >= 64:
            _FIXED_ARGUMENTS.clear()
        positions = position_example(n).dtype
        scratch = array_fields(space.extra, (n_scratch, row_len), itemsize)
        fixed = _FIXED_ARGUMENTS[key] = (positions, plan_worker(indices.dtype, positions).address, scratch)
    positions, plan, scratch = fixed
    head = (*space.args(indices, limit, stop_at_bad, STATE_ROW_COST * n_states), plan, scratch)
    return head, positions, space


#: The positions' dtype, the plan worker's address and the scratch rows' fields of
#: :func:`row_loop_arguments`, which depend only on their key (the scratch's address and shape, the
#: item size, the index dtype, the positions' size): a launch finds them in one look-up, where making
#: them cost more with cold caches (between training steps). A stale entry (its memory since freed) is
#: still right for a new workspace at the same address.
_FIXED_ARGUMENTS: dict[tuple, tuple] = {}


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
        self._workers: dict[tuple, PackedWorker] = {}

    def _fields(self) -> dict:
        return dict(params=", ".join(self.states + self.scalars), scalars=", ".join(self.scalars))

    def cpu_source(self, arg_types: tuple) -> Callable:
        """The Python function of the CPU row worker for packed arguments of ``arg_types``
        (:data:`_CPU_ROWS` filled in for this update)."""
        namespace = {
            "np": np,
            "update": self.math,
            "load_packed": loader(arg_types),
            "smaller": smaller,
            "call_cfunc": call_cfunc,
            "fetch_add": fetch_add,
            "prefetch_read": prefetch_read,
            "prefetch_write": prefetch_write,
            "CACHE_LINE_BYTES": CACHE_LINE_BYTES,
            "PREFETCH_GRAD_ROWS": PREFETCH_GRAD_ROWS,
            "PREFETCH_STATE_ROWS": PREFETCH_STATE_ROWS,
            "WAIT_PREFETCH_ROWS": WAIT_PREFETCH_ROWS,
        }
        targets = ", ".join(f"{s}[r, c]" for s in self.states)
        prefetch_states = "; ".join(f"prefetch_write({s}, r, c)" for s in self.states)
        return generate(
            _CPU_ROWS,
            f"_cpu_rows_{self.__name__}_{_digest(str(arg_types))}",
            self.math.py_func,
            namespace,
            plan_args=PLAN_ARGS,
            targets=targets,
            prefetch_states=prefetch_states,
            **self._fields(),
        )

    def worker_types(self, index_dtype: Any, position_dtype: Any, dtype: Any, scalars: tuple) -> tuple:
        """The Numba types of the row worker's packed arguments for these dtypes and scalars:
        :data:`~optkernels.sparse._plan.PLAN_ARGS`, the plan worker's address, the workers' scratch rows
        (one per thread), the gradient, the states, the scalars."""
        rows = numba.types.Array(numba.from_dtype(np.dtype(dtype)), 2, "C")
        return (
            *plan_types(index_dtype, position_dtype),
            numba.types.int64,
            rows,
            readonly_array(dtype, 2),
            *[rows] * len(self.states),
            *map(numba.typeof, scalars),
        )

    def cpu_worker(
        self, index_dtype: Any, position_dtype: Any, dtype: Any, scalars: tuple, cache: bool = True
    ) -> PackedWorker:
        """The CPU row worker for these dtypes and scalars' types (a packed worker, compiled on first use
        or loaded from Numba's cache; ``cache=False``: a fresh compile, not kept): its packed arguments are
        :meth:`cpu_arguments`' (2-D ``(rows, row_len)`` C-contiguous views of the gradient and the states).
        Every thread of a launch runs it once: the first to arrive builds the merge plan, each then takes
        tasks until none is left."""
        key = (index_dtype, position_dtype, dtype, *map(type, scalars))
        worker = self._workers.get(key) if cache else None
        if worker is None:
            arg_types = self.worker_types(index_dtype, position_dtype, dtype, scalars)
            worker = PackedWorker(self.cpu_source(arg_types), arg_types, cache)
            if cache:
                worker = self._workers.setdefault(key, worker)
        return worker

    @functools.cached_property
    def cuda(self) -> Callable:
        """The CUDA kernel: ``cuda[blocks, threads](n, rows, starts, order, grad, row_len, *states,
        *scalars)`` with ``n = len(rows) * row_len`` (1-D arrays)."""
        cuda = _cuda.module()
        namespace = {"cuda": cuda, "update": self.math}
        return _cuda.kernel(
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
    ) -> tuple[PackedWorker, tuple, PlanSpace]:
        """``(worker, args, space)`` of the row update of ``arrays`` (the gradient, then the states, 2-D
        C-contiguous ``(rows, row_len)``) over ``indices`` (see :func:`row_loop_arguments`): after the
        launch, ``space.sync[3] - 1`` is the position of the first out-of-range index, or -1."""
        head, positions, space = row_loop_arguments(indices, limit, stop_at_bad, len(self.states), arrays[0])
        worker = self.cpu_worker(indices.dtype, positions, arrays[0].dtype, scalars)
        return worker, (*head, *arrays, *scalars), space

    def launch(self, call: Any, *scalars: Any) -> None:
        """Apply the update to the distinct rows of ``call``'s gradient (its state arrays, in order).

        ``call`` is a checked call (``sparse._call.SparseCall``, a floor above this module: only its
        ``device``, ``row_len``, ``plan``, arrays and launch tables are read).

        Raises:
            IndexError: an out-of-range index (unless the call drops them); nothing is written then.
        """
        if call.device == "cpu" and call.row_len:
            worker, args, space = self.cpu_arguments(
                call.indices, call.num_rows, not call.drop, call.rows_2d(), scalars
            )
            worker.launch(None, args)
            bad = space.sync.item(3) - 1
            if bad >= 0:
                raise call.out_of_range_error(bad)
            return
        n_rows = call.plan.rows.shape[0]
        if n_rows == 0 or call.row_len == 0:
            return
        rows, starts, order = call.device_plan()
        n = n_rows * call.row_len
        blocks, threads = launch_config(n)
        self.cuda[blocks, threads](n, rows, starts, order, call.grad, call.row_len, *call.states, *scalars)
