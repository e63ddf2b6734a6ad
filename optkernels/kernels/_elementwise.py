"""Write a per-element update once; run it as a parallel CPU loop or as a CUDA kernel.

An element function has the form ``f(i, array_1, ..., array_k, scalar_1, ..., scalar_j)`` and updates
element ``i`` of its (flat, 1-D) arrays in place. :func:`elementwise` turns it into an
:class:`Elementwise` whose two targets are compiled on first use from that one definition:

* CPU: the loop ``for i in range(start, stop): f(i, ...)`` over each thread's slice of ``0 .. n - 1``,
  compiled as a C chunk worker and launched on Numba's threads without a parallel loop (:mod:`._chunks`:
  no parfor is compiled per kernel); ``cache=True``, ``error_model="numpy"`` (the Python error model's
  zero-division checks stop vectorisation), no fastmath. Each element is independent, so the result does
  not depend on the thread count. (:attr:`Elementwise.cpu`, the same loop as a ``prange`` parallel loop,
  remains for subclasses with their own CPU template.)
* CUDA: a grid-stride kernel calling ``f`` compiled as a device function (through :mod:`._cuda`).
* Multi-tensor CPU (:meth:`Elementwise.launch_many`): one chunked launch over the chunks of many tensors,
  whose arrays are given as tables of addresses (:mod:`._multi_tensor`); each element is computed by the
  same call of ``f`` as in the single-tensor loop, so the bits are the same as one launch per tensor.

The drivers are generated from a template whose code object is attributed to the element function's
own source file: Numba's on-disk cache is keyed to that file, so editing the math invalidates the cache.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from . import _chunks, _cuda
from ._threading import for_this_process, parallel_allowed, parallel_launch, thread_mask

_JIT_OPTIONS = dict(error_model="numpy", fastmath=False)

#: A multi-tensor launch of fewer elements runs on the calling thread: there a parallel region's fork and
#: join cost more than a second core saves (the same bound as ``torch_family.SERIAL_BELOW``; larger lists
#: gain from every core on an idle machine, bench/results).
SERIAL_BELOW = 1 << 15

#: How many float32 elements of :data:`SERIAL_BELOW`'s measure one element of a split fused half loop
#: (:data:`_CPU_FUSED_SPLIT`, torch's rules on float16/bfloat16 tensors) weighs: rounding after every operation
#: makes such an element several times the work of a float32 Adam element, so a second core pays off on
#: fewer of them.
SPLIT_ELEMENT_WEIGHT = 4

#: Elements of a thread's part from which a prefetching launch runs in blocks and prefetches
#: (:func:`._chunks.entry`'s ``prefetch``, :data:`_MANY_PREFETCHING_PARTS`; the value is that of
#: ``_chunks._PREFETCHING_PARTS``): below it the arrays may come from the caches, where the blocks cost time
#: and the prefetches gain none.
PREFETCH_PART = 1 << 20

_CPU_LOOP = """
def {name}(n, {args}):
    for i in prange(n):
        element(i, {args})
"""

# Each CUDA thread takes CUDA_ELEMENTS_PER_THREAD elements a block-width apart (a warp's accesses stay
# contiguous), in a grid of ceil(n / (threads · 4)) blocks: no grid-stride loop around them (it ran slower;
# bench/results/gpu/ has the figures). The literal 4 in the templates is CUDA_ELEMENTS_PER_THREAD.
_CUDA_LOOP = """
def {name}(n, {args}):
    _step = cuda.blockDim.x
    _first = cuda.blockIdx.x * _step * 4 + cuda.threadIdx.x
    for _k in range(4):
        i = _first + _k * _step
        if i < n:
            element(i, {args})
"""

_CPU_SUMSQ = """
def {name}(n, chunk, sums0, sums1, {args}):
    for c in prange(sums0.shape[0]):
        start = c * chunk
        stop = start + chunk
        if n < stop:  # min(): the builtin would be compiled as a function of its own
            stop = n
        s0 = 0.0
        s1 = 0.0
        for i in range(start, stop):
            x0, x1 = element(i, {args})
            s0 += float(x0 * x0)  # the square in the values' dtype, added in float64 (the simulator too)
            s1 += float(x1 * x1)
        sums0[c] = s0
        sums1[c] = s1
"""

_CUDA_SUMSQ = """
def {name}(n, chunk, sums0, sums1, {args}):
    c = cuda.grid(1)
    stride = cuda.gridsize(1)
    while c < sums0.shape[0]:
        start = c * chunk
        stop = min(start + chunk, n)
        s0 = 0.0
        s1 = 0.0
        for i in range(start, stop):
            x0, x1 = element(i, {args})
            s0 += float(x0 * x0)  # the square in the values' dtype, added in float64 (the simulator too)
            s1 += float(x1 * x1)
        sums0[c] = s0
        sums1[c] = s1
        c += stride
"""

SUM_CHUNK = 8192
CUDA_THREADS_PER_BLOCK = 256
CUDA_MAX_BLOCKS = 65535
#: Elements each thread of an element-wise CUDA kernel updates (``_CUDA_LOOP``, ``_CUDA_HALF``).
CUDA_ELEMENTS_PER_THREAD = 4
#: The largest grid (blocks) of an element-wise CUDA kernel: CUDA's limit in x.
CUDA_MAX_GRID = 2**31 - 1


def _generate(template: str, prefix: str, py_func: Callable, namespace: dict) -> Callable:
    """Build a driver around ``namespace['element']`` from ``template``, attributed to py_func's file."""
    return _chunks.generate(template, f"_{prefix}_{py_func.__name__}", py_func, namespace)


class Elementwise:
    """A per-element update compiled for the CPU and for CUDA from one Python definition."""

    cpu_template = _CPU_LOOP
    cuda_template = _CUDA_LOOP
    #: Whether the CPU float16/bfloat16 loop is compiled for the values of the call's bool scalars (one loop
    #: per combination used, each without the branches those flags turn off): for element functions whose
    #: flags guard costly per-element work that LLVM would otherwise compute and discard.
    constant_flags = False
    #: Whether the chunked CPU launch runs the body of :attr:`cpu_template`'s parallel loop as a function of
    #: its index (its arguments are then the template's: ``chunked(parallel, iterations, *cpu_args)``),
    #: rather than the element function itself.
    chunk_rows = False
    #: Whether the chunked CPU launches vectorise with 512-bit vectors where the processor has them
    #: (:func:`._chunks.entry`'s ``wide``), for element functions with enough arithmetic per element that
    #: the narrower vectors' extra instructions cost time (the same bits: each lane computes alike).
    wide_vectors = False
    #: Whether the chunked CPU launch prefetches the arrays ahead of its loop (:func:`._chunks.entry`'s
    #: ``prefetch``), for element functions with enough arithmetic per element (a division, a square root)
    #: that the loop's own loads, waiting behind that arithmetic, leave memory idle (the same bits).
    prefetch = False
    #: Whether launches whose thread's part holds :data:`PREFETCH_PART` elements or more run a prefetching
    #: loop (:attr:`chunked_prefetching`; a whole multi-tensor list without a prologue:
    #: :meth:`many_chunked` with ``prefetch``), compiled on the first such launch, smaller launches keeping
    #: the plain one: for element functions whose large launches leave memory idle behind their arithmetic
    #: (the same bits).
    prefetch_large = False
    #: Whether a float16/bfloat16 launch that runs the fused loop (float32 math on the widened elements, one
    #: pass over memory: :func:`_fused_entry`) and gives each thread :data:`PREFETCH_PART` elements or more
    #: runs that loop's prefetching form (:func:`._chunks.entry`'s ``prefetch``), compiled on its first such
    #: launch, smaller launches keeping the plain one: for element functions whose large half launches leave
    #: memory idle behind their arithmetic and conversions (the same bits).
    prefetch_large_half = False
    #: ``(name, function, names)`` or None: in the split fused half loop (:data:`_CPU_FUSED_SPLIT`), each
    #: part first calls ``function(part, name, *names)`` (of the arguments so named) and passes the element
    #: function its result as the argument ``name``: a scalar made per part, on the part's thread (the
    #: bfloat16 Adam loops' tables of denominators: ``torch_rules.part_denominators``).
    part_scalar: tuple | None = None
    #: A compiled function or None: in the paired split loop (:data:`_CPU_FUSED_PAIRED_BLOCKS`) it is called
    #: as ``pair_blocks(i, pairs, *arguments)`` before the pair loop and updates the first pairs of the
    #: ``pairs`` from element ``i`` by means of its own, returning how many (the bfloat16 Adam loop's
    #: blocks: ``_bf16_adam_block.adam_pair_blocks``).
    pair_blocks: Callable | None = None

    def __init__(self, py_func: Callable):
        self.py_func = py_func
        self.__name__ = py_func.__name__
        self.__doc__ = py_func.__doc__
        #: Whether :meth:`launch` runs the chunked CPU launch (:mod:`._chunks`): the plain loop
        #: ``for i in range(n): f(i, ...)``, not a subclass's own driver.
        self.chunked_cpu = type(self)._cpu_source is _BASE_SOURCE and (
            type(self).cpu_template is _CPU_LOOP or self.chunk_rows
        )
        #: Whether :meth:`launch_many` runs the chunked launch (:meth:`many_chunked`), not the parallel loop
        #: of :meth:`many` (a subclass's own multi-tensor driver keeps its loop).
        self.chunked_many = self.chunked_cpu and type(self).many is Elementwise.many

    def _cpu_source(self) -> Callable:
        element = numba.njit(inline="always", **_JIT_OPTIONS)(self.py_func)
        return _generate(self.cpu_template, "cpu", self.py_func, {"prange": numba.prange, "element": element})

    @functools.cached_property
    def cpu(self) -> Callable:
        """The compiled, cached, parallel CPU loop: ``cpu(n, *arrays, *scalars)``."""
        return numba.njit(parallel=True, cache=True, **_JIT_OPTIONS)(self._cpu_source())

    def cpu_uncached(self) -> Callable:
        """A fresh, uncached compilation of the CPU loop (its assembly can be inspected)."""
        return numba.njit(parallel=True, cache=False, **_JIT_OPTIONS)(self._cpu_source())

    @functools.cached_property
    def chunked(self) -> Callable:
        """The chunked CPU launch (:mod:`._chunks`): ``chunked(parallel, n, *arrays, *scalars)``, compiled
        per argument types on first use (a cached entry and a C chunk worker, no parallel loop)."""
        if not self.chunk_rows:
            return _chunks.entry(self.py_func, wide=self.wide_vectors, prefetch=self.prefetch)
        name = f"_rows_{self.py_func.__name__}"
        params = ", ".join(list(inspect.signature(self.py_func).parameters)[1:])
        name, source = _as_row_function(name, self.cpu_template.format(name=name, args=params))
        element = numba.njit(inline="always", **_JIT_OPTIONS)(self.py_func)
        function = _chunks.define(name, source, self.py_func, {"element": element, "int64": np.int64})
        return _chunks.entry(function, salt=source)

    @functools.cached_property
    def chunked_prefetching(self) -> Callable:
        """:attr:`chunked` with the prefetching part loop (:func:`._chunks.entry`'s ``prefetch``), which
        :meth:`launch` runs where :attr:`prefetch_large` is set and a thread's part is large."""
        return _chunks.entry(self.py_func, wide=self.wide_vectors, prefetch=True)

    @functools.cached_property
    def cuda(self) -> Callable:
        """The CUDA kernel: ``cuda[blocks, threads](n, *arrays, *scalars)``."""
        cuda = _cuda.module()
        element = cuda.jit(device=True)(self.py_func)
        return _cuda.kernel(
            _generate(self.cuda_template, "cuda", self.py_func, {"cuda": cuda, "element": element})
        )

    def launch(self, device: str, n: int, *args: Any, stream: Any = None) -> None:
        """Run the update over ``n`` elements on ``device`` ('cpu' or 'cuda').

        With float16 or bfloat16 arrays among ``args`` (float32 scalars), the float32 math runs on widened
        copies of each chunk and every written half array is rounded once (see :mod:`._lowp`).
        ``stream``: a CUDA stream to queue the kernel on (CUDA only; None: the default stream)."""
        if n == 0:
            return
        kinds = _half_kinds(args)
        if kinds is not None:
            _launch_half(self, device, n, kinds, args, stream)
            return
        if device == "cpu":
            with parallel_launch():
                if self.chunked_cpu:
                    parallel = parallel_allowed()
                    if self.prefetch_large and _large_parts(n, parallel) and not self.chunk_rows:
                        self.chunked_prefetching(parallel, n, *args)
                    else:
                        self.chunked(parallel, n, *args)
                else:
                    for_this_process(self.cpu)(n, *args)
            return
        _cuda_launch(self.cuda, n, stream)(n, *_run_time_ints(args))

    def prepared_cuda(self, n: int, *args: Any, stream: Any = None) -> Callable[[], None]:
        """A callable that runs ``launch('cuda', n, *args, stream=stream)`` each time it is called, the
        arguments typed and the kernel found once (:func:`._cuda.prepared_launch`): for the same update on
        the same device buffers again and again (a pipeline's chunks). Half-precision arrays take the
        plain launch."""
        if n == 0:
            return lambda: None
        if _half_kinds(args) is not None:
            return lambda: self.launch("cuda", n, *args, stream=stream)
        blocks = _cuda_blocks(n)
        return _cuda.prepared_launch(
            self.cuda,
            blocks,
            CUDA_THREADS_PER_BLOCK,
            0 if stream is None else stream,
            (n, *_run_time_ints(args)),
        )

    def many(self, n_arrays: int, prologue: Elementwise | None = None) -> Callable:
        """The compiled, cached multi-tensor CPU loop for ``n_arrays`` array arguments:
        ``many(n_arrays)(chunks, addresses, like, *scalars)``; with a ``prologue``:
        ``many(n_arrays, prologue)(chunks, addresses, like, workspace, *prologue_scalars, *scalars)``
        (see :meth:`launch_many` and :mod:`._multi_tensor`)."""
        drivers = self.__dict__.setdefault("_many_drivers", {})
        key = (n_arrays, prologue)
        driver = drivers.get(key)
        if driver is None:
            driver = drivers[key] = _many_driver(self.py_func, n_arrays, prologue and prologue.py_func, True)
        return driver

    def many_chunked(
        self, n_arrays: int, prologue: Elementwise | None = None, prefetch: bool = False
    ) -> Callable:
        """The multi-tensor loop as a chunked launch (:mod:`._chunks`, one index per row of the chunk
        table): ``many_chunked(n_arrays)(parallel, rows, chunks, addresses, like, *scalars)``, with a
        ``prologue`` ``(parallel, rows, chunks, addresses, like, workspace, *prologue_scalars, *scalars)``.
        Each thread runs an equal block of rows, as the parallel loop of :meth:`many` does. ``prefetch``
        (without a prologue): the entry whose parts of :data:`PREFETCH_PART` elements or more run their rows
        in blocks, prefetching ahead within the tensor and the part (:data:`_MANY_PREFETCHING_PARTS`; the
        same bits), a second entry, compiled on its first call."""
        drivers = self.__dict__.setdefault("_many_chunked", {})
        key = (n_arrays, prologue, prefetch)
        driver = drivers.get(key)
        if driver is None:
            driver = drivers[key] = _many_entry(
                self.py_func, n_arrays, prologue and prologue.py_func, True, self.wide_vectors, prefetch
            )
        return driver

    def many_guarded(self, n_arrays: int, guard: _chunks.GuardedEntry) -> Callable:
        """:meth:`many_chunked` (without a prologue) run only where ``guard.prelude`` passes, its scalars
        rounded from host values in the same call (``guard.lead`` is 3: the loop's chunks, addresses and
        ``like``): ``many_guarded(n_arrays, guard)(parallel, rows, *checked, *host, chunks, addresses,
        like)`` (see :class:`._chunks.GuardedEntry`)."""
        drivers = self.__dict__.setdefault("_many_guarded", {})
        key = (n_arrays, guard)
        driver = drivers.get(key)
        if driver is None:
            function, source = _many_function(self.py_func, n_arrays, None, True)
            driver = drivers[key] = _chunks.entry(
                function, salt=source, views=True, guard=guard, wide=self.wide_vectors
            )
        return driver

    def guarded_launcher(self, tensors: Any, guard: _chunks.GuardedEntry) -> Callable[[tuple, tuple], int]:
        """``launch(checked, host) -> int``: :meth:`launch_many` over the whole of ``tensors`` (no prologue)
        in one compiled call (:meth:`many_guarded`) that first runs ``guard.prelude(checked, chunks,
        addresses, like)`` (it may fill rows of ``tensors.addresses``), launches only where that returns -1,
        with the scalars ``guard.rounding(host, like)``, and returns the prelude's value (-1: launched).
        Everything but ``checked`` and ``host`` is looked up once, here. Element functions whose
        multi-tensor loop is a subclass's own, or an empty list: it returns -3, nothing run."""
        if not self.chunked_many or not tensors.total:
            return lambda checked, host: -3
        driver = self.many_guarded(tensors.addresses.shape[0], guard)
        # the plain chunk table: its rows are claimed by the threads (no balanced table needed)
        chunks, addresses, like = tensors.chunks, tensors.addresses, tensors.like
        rows, serial = chunks.shape[0], tensors.total < SERIAL_BELOW

        def launch(checked: tuple, host: tuple) -> int:
            with parallel_launch():  # a small list runs on the calling thread, as _SerialBelow runs it
                return driver(
                    not serial and parallel_allowed(), rows, *checked, *host, chunks, addresses, like
                )

        return launch

    def many_uncached(self, n_arrays: int, prologue: Elementwise | None = None) -> Callable:
        """A fresh, uncached compilation of the multi-tensor loop (its assembly can be inspected)."""
        return _many_driver(self.py_func, n_arrays, prologue and prologue.py_func, False)

    def launch_many(
        self,
        device: str,
        tensors: Any,
        *scalars: Any,
        chunks: Any = None,
        prologue: Elementwise | None = None,
        prologue_scalars: tuple = (),
    ) -> None:
        """Run the update over every tensor of ``tensors`` (a :class:`._multi_tensor.TensorList` whose
        address table has one row per array argument, in the element function's order) in one parallel CPU
        loop, with the same scalars for all; ``chunks``: a subset of its chunk table (default: all of it, in
        the list's balanced table for the launch's thread count).

        The element function is called for element ``i`` of tensor ``t`` exactly as :meth:`launch` calls it
        for that tensor alone, so the results are the same bits as one :meth:`launch` per tensor. CPU only
        (``device`` must be 'cpu'); the addresses must be those of live, C-contiguous arrays of the list's
        dtype and sizes (nothing is checked here).

        ``prologue``: an element function ``prologue(i, out, param, raw, *prologue_scalars)`` (for example
        the optimizers' decay and loss-scale step ``axpy_scal``) that computes the gradient: for each chunk
        it writes ``out[i]`` from the element function's first array (the parameter, before its update)
        and the array of the last address row (the raw gradient) into a per-thread buffer of the chunk's
        size, then the element function runs over the chunk with that buffer as its last array (the
        gradient). The same bits as ``prologue.launch`` into a buffer of the tensor's size followed by
        ``launch``, without a second pass over memory.
        """
        if device != "cpu":
            raise ValueError(
                f"{self.__name__}: the multi-tensor loop runs on the CPU only, got device {device!r}"
            )
        if (tensors.chunks if chunks is None else chunks).shape[0] == 0:
            return
        n_arrays = tensors.addresses.shape[0]
        with parallel_launch(), _SerialBelow(tensors.total) as threads:
            # the whole list: its rows in one block of equal elements per thread
            table = chunks if chunks is not None else tensors.balanced(threads)
            head = (table, tensors.addresses, tensors.like)
            if prologue is not None:
                head += (tensors.workspace(), *prologue_scalars)
            if self.chunked_many:
                prefetch = (
                    self.prefetch_large
                    and prologue is None
                    and chunks is None
                    and tensors.total // threads >= PREFETCH_PART
                )
                entry = self.many_chunked(n_arrays, prologue, prefetch)
                entry(parallel_allowed(), table.shape[0], *head, *scalars)
            else:
                for_this_process(self.many(n_arrays, prologue))(*head, *scalars)


_BASE_SOURCE = Elementwise._cpu_source


def _large_parts(n: int, parallel: bool) -> bool:
    """Whether a chunked launch over ``n`` elements gives each thread :data:`PREFETCH_PART` elements or more
    (one part on the calling thread where not ``parallel``; inside :func:`parallel_launch`)."""
    if n < PREFETCH_PART:
        return False
    return n // (thread_mask()[0]() if parallel else 1) >= PREFETCH_PART


class _SerialBelow:
    """Inside :func:`parallel_launch`: a parallel loop over fewer than :data:`SERIAL_BELOW` elements runs on
    the calling thread (this thread's Numba thread count set to 1, restored after), where a parallel
    region's fork and join would cost more than the loop."""

    __slots__ = ("n", "threads")

    def __init__(self, n: int):
        self.n = n
        self.threads = 1

    def __enter__(self) -> int:
        """The number of threads the loop runs on: 1 below :data:`SERIAL_BELOW`, else the calling thread's."""
        get_threads, set_threads = thread_mask()
        threads = get_threads()
        if self.n < SERIAL_BELOW and threads > 1:
            set_threads(1)
            self.threads = threads
            return 1
        return threads

    def __exit__(self, *exc: object) -> None:
        if self.threads > 1:
            thread_mask()[1](self.threads)


class ChunkedSumsOfSquares(Elementwise):
    """A per-element update that also returns two values whose squares are summed over the array.

    The element function returns ``(x0, x1)``; :meth:`launch` returns ``(sum x0², sum x1²)`` as Python
    floats. Each square is rounded to the values' dtype (``x0 * x0``: float32 for float32 values, on every
    target), and the squares are accumulated in float64 over fixed chunks of :data:`SUM_CHUNK` elements
    (one chunk per loop iteration, so the grouping never depends on the thread count), then the chunk sums
    are added with ``math.fsum``: the result is the same bits with any number of threads, every run.
    """

    cpu_template = _CPU_SUMSQ
    cuda_template = _CUDA_SUMSQ
    chunk_rows = True

    def many(self, n_arrays: int, prologue: Any = None) -> Callable:
        raise NotImplementedError(f"{self.__name__}: sums of squares have no multi-tensor loop")

    many_uncached = many_chunked = many

    def launch(self, device: str, n: int, *args: Any) -> tuple[float, float]:
        if _half_kinds(args) is not None:  # callers widen half arrays first (see _upcast.via_float32)
            raise TypeError(f"{self.__name__}: float16/bfloat16 arrays need float32 copies here")
        chunks = -(-n // SUM_CHUNK)
        if chunks == 0:
            return 0.0, 0.0
        if device == "cpu":
            sums0, sums1 = np.empty(chunks), np.empty(chunks)
            with parallel_launch():
                if self.chunked_cpu:
                    self.chunked(parallel_allowed(), chunks, n, SUM_CHUNK, sums0, sums1, *args)
                else:
                    for_this_process(self.cpu)(n, SUM_CHUNK, sums0, sums1, *args)
        else:
            cuda = _cuda.module()
            d0, d1 = cuda.device_array(chunks), cuda.device_array(chunks)
            blocks = min(-(-chunks // CUDA_THREADS_PER_BLOCK), CUDA_MAX_BLOCKS)
            self.cuda[blocks, CUDA_THREADS_PER_BLOCK](n, SUM_CHUNK, d0, d1, *args)
            sums0, sums1 = d0.copy_to_host(), d1.copy_to_host()
        return math.fsum(sums0), math.fsum(sums1)


def elementwise(py_func: Callable) -> Elementwise:
    """Decorator: mark ``py_func(i, *arrays, *scalars)`` as a per-element update for both targets."""
    return Elementwise(py_func)


def chunked_sums_of_squares(py_func: Callable) -> ChunkedSumsOfSquares:
    """Decorator: like :func:`elementwise`, for an element function returning two values to be squared and
    summed over the array (see :class:`ChunkedSumsOfSquares`)."""
    return ChunkedSumsOfSquares(py_func)


# ------------------------------------------------------------------------- shared scalar math (appended)

#: An exact zero for :func:`scalar_math` functions. It is a float32, so it unifies with float32 and float64
#: results alike without promoting float32 arithmetic to float64 (a literal ``0`` or ``0.0`` would).
ZERO = np.float32(0)


def scalar_math(py_func: Callable) -> Any:  # a Numba dispatcher (with .py_func)
    """Decorator: a pure scalar update ``f(state_1, ..., state_k, g, scalar_1, ...) -> new states`` that
    several kernels share (a dense element function and the row loop of a sparse op), so that one formula,
    with one order of operations, serves all of them.

    Compiled with ``numba.njit(inline="always")`` (``error_model="numpy"``, no fastmath) and inlined into
    every CPU loop that calls it. Called from a CUDA kernel or device function, numba-cuda compiles the same
    Python function as a device function (``cuda.jit(device=True)``, with the same options) on first use;
    under the CUDA simulator it runs as the compiled CPU function. Like an element function it must keep its
    arithmetic in the arguments' dtype: literals such as ``0`` or ``1.0`` promote float32 to float64 (use
    :data:`ZERO`, or pass constants in as arguments).
    """
    return numba.njit(inline="always", **_JIT_OPTIONS)(py_func)


# ------------------------------------------------------------------ multi-tensor CPU loop (appended)

# The drivers' own names start with an underscore, so that they cannot clash with an element function's
# parameter names. Chunk bounds are cast to uint64 for the element loop: an unsigned index needs no
# negative-index wraparound, which would stop LLVM from vectorising the loop.

_CPU_MANY = """
def {name}(_chunks, _addresses, _like{scalars}):
    for _c in prange(_chunks.shape[0]):
        _t = _chunks[_c, 0]
        _n = _chunks[_c, 3]
{views}
        for i in range(uint64(_chunks[_c, 1]), uint64(_chunks[_c, 2])):
            element(i, {args})
"""

# With a prologue: per chunk, ``prologue(i, g, array_0, raw_gradient, *prologue_scalars)`` first writes the
# chunk's gradient into a per-thread row of ``_workspace`` (hot in cache), then the element function reads
# it as its last array argument. ``g`` is a view whose element i is row element i - start (its base address
# lies before the row; only indices start..stop-1 are used).
_CPU_MANY_PROLOGUE = """
def {name}(_chunks, _addresses, _like, _workspace{prologue_scalars}{scalars}):
    _width = _workspace.shape[1]
    _base = _workspace.ctypes.data
    _itemsize = _like.itemsize
    for _c in prange(_chunks.shape[0]):
        _t = _chunks[_c, 0]
        _n = _chunks[_c, 3]
{views}
        _raw = carray(address_as_pointer(_addresses[{raw_row}, _t], _like), _n)
        _row = get_thread_id() * _width - _chunks[_c, 1]
        {gradient} = carray(address_as_pointer(_base + _row * _itemsize, _like), _n)
        for i in range(uint64(_chunks[_c, 1]), uint64(_chunks[_c, 2])):
            prologue(i, {gradient}, {first}, _raw{prologue_args})
        for i in range(uint64(_chunks[_c, 1]), uint64(_chunks[_c, 2])):
            element(i, {args})
"""

_CPU_MANY_VIEW = "        {array} = carray(address_as_pointer(_addresses[{row}, _t], _like), _n)"

# One row of the multi-tensor loop (:data:`_CPU_MANY`'s body) in blocks of 64 elements where ``_limit`` > 0,
# the lines of its arrays' elements 1024 ahead prefetched before each block whose prefetches stay below
# ``_limit`` (an element bound within the tensor: the part's next row's end, or the row's own); with
# ``_limit`` 0, one block: the plain row. One loop nest: one vectorised copy of the element loop (the block loop of
# ``_chunks._PREFETCHING_PARTS``: ``_chunks.PREFETCHING_BLOCKS``).
_CPU_MANY_PREFETCHING_ROW = """
def {name}(_c, _limit, _chunks, _addresses, _like{scalars}):
    _t = _chunks[_c, 0]
    _n = _chunks[_c, 3]
{views}
    _lo = _chunks[_c, 1]
    _hi = _chunks[_c, 2]
    _step = max(_hi - _lo, 1)
    _ahead = _lo
    if _limit > 0:
        _step = 64
        _ahead = _limit - 1024 - 64
""" + _chunks.prefetching_blocks(4)

# The part loop of the prefetching multi-tensor entry (``_chunks.entry``'s ``part_loop``): a part (a thread's
# block of rows) of PREFETCH_PART (1048576) elements or more runs each row with the prefetch bound ``_limit``:
# the end of the part's next row where that row continues the same tensor, else the row's own end, so that
# no prefetch reaches into another tensor's rows or past the part (lines another thread writes); a smaller
# part runs its rows plain (``_limit`` 0).
_MANY_PREFETCHING_PARTS = """
def {name}(_first, _count, _n, _parts, {args}):
    for _p in range(_first, _first + _count):
        _start = _p * _n // _parts
        _stop = (_p + 1) * _n // _parts
        _size = 0
        for _c in range(_start, _stop):
            _size += _chunks[_c, 2] - _chunks[_c, 1]
        for _c in range(_start, _stop):
            _limit = 0
            if _size >= 1048576:
                _limit = _chunks[_c, 2]
                if _c + 1 < _stop and _chunks[_c + 1, 0] == _chunks[_c, 0] and _chunks[_c + 1, 1] == _limit:
                    _limit = _chunks[_c + 1, 2]
            row(_c, _limit, {args})
"""


def _split_params(py_func: Callable, n_arrays: int) -> tuple[list, list]:
    params = list(inspect.signature(py_func).parameters)[1:]
    if not 1 <= n_arrays <= len(params):
        raise ValueError(
            f"{py_func.__name__} takes {len(params)} arguments after the index; "
            f"n_arrays={n_arrays} is out of range"
        )
    return params[:n_arrays], params[n_arrays:]


def _digest(*texts: str) -> str:
    return hashlib.sha1("\0".join(texts).encode()).hexdigest()[:8]


def _as_row_function(name: str, source: str) -> tuple[str, str]:
    """``(name, source)`` of the function of one index of the parallel loop of the driver ``name`` (its
    ``source``: a filled-in template whose body is setup lines and one ``for v in prange(...)`` loop): the
    driver's parameters after the index ``v`` (an int64, as in the loop), the setup, then the loop's body;
    for the chunked launch, which calls it for every index."""
    lines = source.split("\n")
    k = next(j for j, line in enumerate(lines) if " in prange(" in line)
    index = lines[k].split()[1]
    head = [line.replace(f"def {name}(", f"def {name}_row({index}, ", 1) for line in lines[:k]]
    body = [f"    {index} = int64({index})"] + [line[4:] for line in lines[k + 1 :]]
    return f"{name}_row", "\n".join(head + body)


def _many_source(py_func: Callable, n_arrays: int, prologue: Callable | None) -> tuple[str, str]:
    """The multi-tensor driver's name and source for an element function with ``n_arrays`` array
    arguments (and a prologue element function, or None). The name carries a digest of the templates
    and of the prologue's source, so a changed template or prologue never loads a stale on-disk cache
    entry (the cache is keyed to the element function's file only)."""
    arrays, scalars = _split_params(py_func, n_arrays)
    views = "\n".join(_CPU_MANY_VIEW.format(array=a, row=j) for j, a in enumerate(arrays))
    args = ", ".join(arrays + scalars)
    if prologue is None:
        name = f"_many{n_arrays}_{py_func.__name__}_{_digest(_CPU_MANY, _CPU_MANY_VIEW)}"
        return name, _CPU_MANY.format(
            name=name, scalars="".join(", " + s for s in scalars), views=views, args=args
        )
    if n_arrays < 2:
        raise ValueError(f"{py_func.__name__}: a prologue needs the parameter and the gradient arrays")
    _, prologue_scalars = _split_params(prologue, 3)
    prologue_scalars = [f"_p_{s}" for s in prologue_scalars]  # cannot clash with the element's names
    digest = _digest(_CPU_MANY_PROLOGUE, _CPU_MANY_VIEW, inspect.getsource(prologue))
    name = f"_many{n_arrays}_{py_func.__name__}_after_{prologue.__name__}_{digest}"
    views = "\n".join(views.split("\n")[:-1])  # the gradient is the prologue's output
    source = _CPU_MANY_PROLOGUE.format(
        name=name,
        prologue_scalars="".join(", " + s for s in prologue_scalars),
        scalars="".join(", " + s for s in scalars),
        views=views,
        raw_row=n_arrays - 1,
        gradient=arrays[-1],
        first=arrays[0],
        prologue_args="".join(", " + s for s in prologue_scalars),
        args=args,
    )
    return name, source


def _many_function(py_func: Callable, n_arrays: int, prologue: Callable | None, row: bool) -> tuple:
    """``(function, source)``: the multi-tensor driver's Python function, or (``row``) that of one row."""
    from ._pointers import address_as_pointer

    name, source = _many_source(py_func, n_arrays, prologue)
    if row:
        name, source = _as_row_function(name, source)
    namespace = {
        "prange": numba.prange,
        "carray": numba.carray,
        "uint64": np.uint64,
        "int64": np.int64,
        "get_thread_id": numba.get_thread_id,
        "address_as_pointer": address_as_pointer,
        "element": numba.njit(inline="always", **_JIT_OPTIONS)(py_func),
    }
    if prologue is not None:
        namespace["prologue"] = numba.njit(inline="always", **_JIT_OPTIONS)(prologue)
    return _chunks.define(name, source, py_func, namespace), source


def _many_entry(
    py_func: Callable,
    n_arrays: int,
    prologue: Callable | None,
    cache: bool,
    wide: bool = False,
    prefetch: bool = False,
) -> Callable:
    """The chunked entry of the multi-tensor loop (:meth:`Elementwise.many_chunked`; ``cache``: False for
    a fresh compile whose code can be inspected; ``wide``: :attr:`Elementwise.wide_vectors`; ``prefetch``:
    its parts of :data:`PREFETCH_PART` elements or more prefetch, :data:`_MANY_PREFETCHING_PARTS`; not with a
    prologue). Its rows make views of addresses (``views``)."""
    function, source = _many_function(py_func, n_arrays, prologue, True)
    if not prefetch:
        return _chunks.entry(function, salt=source, cache=cache, views=True, wide=wide)
    if prologue is not None:
        raise ValueError(f"{py_func.__name__}: a multi-tensor loop with a prologue does not prefetch")
    row, row_source = _many_prefetching_row(py_func, n_arrays)
    return _chunks.entry(
        function,
        salt=source + row_source,
        cache=cache,
        views=True,
        wide=wide,
        part_loop=(_MANY_PREFETCHING_PARTS, {"row": row}),
    )


def _many_prefetching_row(py_func: Callable, n_arrays: int) -> tuple[Callable, str]:
    """``(row, source)``: :data:`_CPU_MANY_PREFETCHING_ROW` for ``py_func`` with ``n_arrays`` arrays, to be
    inlined into the prefetching part loop."""
    from ._pointers import address_as_pointer

    arrays, scalars = _split_params(py_func, n_arrays)
    name = f"_many{n_arrays}_{py_func.__name__}_prefetching_row"
    views = "\n".join(_CPU_MANY_VIEW.format(array=a, row=j)[4:] for j, a in enumerate(arrays))
    source = _CPU_MANY_PREFETCHING_ROW.format(
        name=name,
        scalars="".join(", " + s for s in scalars),
        views=views,
        arrays=", ".join(arrays),
        args=", ".join(arrays + scalars),
    )
    namespace = {
        "carray": numba.carray,
        "uint64": np.uint64,
        "address_as_pointer": address_as_pointer,
        "prefetch_ahead": _chunks.prefetch_ahead,
        "element": numba.njit(inline="always", **_JIT_OPTIONS)(py_func),
    }
    row = _chunks.define(name, source, py_func, namespace)
    return numba.njit(inline="always", **_JIT_OPTIONS)(row), source


def _many_driver(py_func: Callable, n_arrays: int, prologue: Callable | None, cache: bool) -> Callable:
    driver, _ = _many_function(py_func, n_arrays, prologue, False)
    return numba.njit(parallel=True, cache=cache, **_JIT_OPTIONS)(driver)


# -------------------------------------------------------- low-precision drivers (appended; see _lowp)

#: Elements per chunk of the CPU low-precision loop (the chunk's float32 scratch stays in L1/L2 cache).
HALF_CHUNK = 512

# The chunk's work is its own (not inlined) function: inside a prange body Numba's parfor lowering keeps the
# scratch loops from vectorising.
_CPU_HALF = """
def {name}_chunk(_start, _count, _scratch, {args}{sr}):
{widen}
    for _j in range(uint64(_count)):
        element(_j, {scratch_args})
{narrow}

{name}_chunk = njit(**options)({name}_chunk)

def {name}(n, _workspace, {args}{sr}):
    for _c in prange((n + {chunk} - 1) // {chunk}):
        _start = _c * {chunk}
        {name}_chunk(_start, min({chunk}, n - _start), _workspace[get_thread_id()], {args}{sr})
"""

_CUDA_HALF = """
def {name}(n, {args}{sr}):
{scratch}
    _step = cuda.blockDim.x
    _first = cuda.blockIdx.x * _step * 4 + cuda.threadIdx.x
    for _k in range(4):
        i = _first + _k * _step
        if i < n:
{load}
            element(0, {scratch_args})
{store}
"""


_PLAIN_SCALARS = frozenset((bool, int, float, np.float32, np.float64, np.bool_))
_FLOAT_SCALARS = frozenset((float, np.float32, np.float64))


def _half_kinds(args: tuple) -> tuple | None:
    """Per argument: 'f16'/'bf16'/'f32'/'f64' for an array, None for a scalar; None if no half array."""
    ndarray = np.ndarray
    for a in args:
        if type(a) is ndarray:
            if a.itemsize == 2 and a.dtype.kind in "fV":
                break
        elif type(a) in _PLAIN_SCALARS:
            continue
        else:
            dt = getattr(a, "dtype", None)
            if dt is not None and dt.itemsize == 2 and dt.kind in "fV" and getattr(a, "ndim", 0) >= 1:
                break
    else:
        return None
    kinds = []
    for a in args:
        if type(a) not in _PLAIN_SCALARS and getattr(a, "ndim", 0) >= 1:
            dtype = a.dtype
            kind = _KIND_OF.get(dtype)
            if kind is None:
                kind = _KIND_OF[dtype] = _kind_of(dtype)
            kinds.append(kind)
        else:
            kinds.append(None)
    return tuple(kinds)


def _kind_of(dtype: Any) -> str:
    """'f16'/'bf16' for a half dtype, else the dtype's name with 'float' shortened to 'f' ('f32')."""
    return _lowp_module().half_kind(dtype) or np.dtype(dtype).name.replace("float", "f")


#: dtype -> :func:`_kind_of`, filled in as dtypes are seen.
_KIND_OF: dict = {}


def _half_source(target: str, py_func: Callable, kinds: tuple, sr: bool) -> tuple[str, str]:
    from . import _lowp

    params = list(inspect.signature(py_func).parameters)[1:]
    written = _lowp.written_params(py_func)
    arrays = [(k, p, kind) for k, (p, kind) in enumerate(zip(params, kinds)) if kind is not None]
    half = {"f16", "bf16"}
    scratch_args = ", ".join(f"_s_{p}" if kind is not None else p for p, kind in zip(params, kinds))
    sr_args = ", _seed, _counter" if sr else ""
    tag = "_".join(kind or "s" for kind in kinds)
    digest = _digest(_CPU_HALF, _CUDA_HALF, inspect.getsource(_lowp), str(HALF_CHUNK))
    name = f"_half_{target}_{py_func.__name__}_{tag}{'_sr' if sr else ''}_{digest}"
    if target == "cpu":
        widen, narrow = [], []
        slot = 0
        for k, p, kind in arrays:
            if kind in half:
                widen.append(f"    _s_{p} = _scratch[{slot * HALF_CHUNK}:{slot * HALF_CHUNK} + _count]")
                slot += 1
                widen.append(f"    _widen_{kind}({p}[_start:_start + _count], _s_{p})")
                if p in written:
                    view = f"{p}[_start:_start + _count]"
                    call = (
                        f"_narrow_{kind}_sr(_s_{p}, {view}, _start, _seed, _counter, uint64({k}))"
                        if sr
                        else f"_narrow_{kind}(_s_{p}, {view})"
                    )
                    narrow.append("    " + call)
            else:
                widen.append(f"    _s_{p} = {p}[_start:_start + _count]")
        source = _CPU_HALF.format(
            name=name,
            args=", ".join(params),
            sr=sr_args,
            chunk=HALF_CHUNK,
            widen="\n".join(widen),
            scratch_args=scratch_args,
            narrow="\n".join(narrow) or "    pass",
        )
        return name, source
    scratch, load, store = [], [], []
    for k, p, kind in arrays:
        scratch.append(f"    _s_{p} = cuda.local.array(1, float32)")
        if kind in half:
            load.append(f"            _s_{p}[0] = _load_{kind}({p}, i)")
            if p in written:
                store.append(
                    f"            _store_{kind}_sr({p}, i, _s_{p}[0], "
                    f"random16(_seed, _counter, uint64({k}), uint64(i)))"
                    if sr
                    else f"            _store_{kind}({p}, i, _s_{p}[0])"
                )
        else:
            load.append(f"            _s_{p}[0] = {p}[i]")
            if p in written:
                store.append(f"            {p}[i] = _s_{p}[0]")
    source = _CUDA_HALF.format(
        name=name,
        args=", ".join(params),
        sr=sr_args,
        scratch="\n".join(scratch),
        load="\n".join(load),
        scratch_args=scratch_args,
        store="\n".join(store) or "            pass",
    )
    return name, source


def _half_driver(ew: Elementwise, target: str, kinds: tuple, sr: bool, flags: tuple = ()) -> Callable:
    drivers = ew.__dict__.setdefault("_half_drivers", {})
    key = (target, kinds, sr, flags)
    driver = drivers.get(key)
    if driver is not None:
        return driver
    from . import _lowp

    if target == "cpu" and not sr:
        split = _fused_split_driver(ew.py_func, kinds, flags, part=ew.part_scalar, blocks=ew.pair_blocks)
        if split is not None:
            drivers[key] = split
            drivers[("split", *key)] = True
            return split
        fused = _fused_entry(ew.py_func, kinds, flags)
        if fused is not None:
            drivers[key] = fused
            drivers[("fused", *key)] = True
            return fused
    name, source = _half_source(target, ew.py_func, kinds, sr)
    if target == "cpu":
        namespace = {
            "prange": numba.prange,
            "np": np,
            "uint64": np.uint64,
            "njit": numba.njit,
            "get_thread_id": numba.get_thread_id,
            "options": dict(cache=True, **_JIT_OPTIONS),
            "element": numba.njit(inline="always", **_JIT_OPTIONS)(ew.py_func),
        }
        namespace.update({k: v for k, v in _lowp.CPU.items() if k.startswith(("_widen", "_narrow"))})
    else:
        cuda = _cuda.module()
        namespace = {
            "cuda": cuda,
            "float32": np.float32,
            "uint64": np.uint64,
            "element": cuda.jit(device=True)(ew.py_func),
        }
        namespace.update(_lowp_cuda_helpers(cuda))
    exec(compile(source, inspect.getfile(ew.py_func), "exec"), namespace)
    function = namespace[name]
    function.__module__ = ew.py_func.__module__
    function.__qualname__ = name
    if target == "cpu":
        driver = numba.njit(parallel=True, cache=True, **_JIT_OPTIONS)(function)
    else:
        driver = _cuda.kernel(function)
    drivers[key] = driver
    return driver


_CPU_FUSED = """
def {name}(n, _workspace, {args}):
    for _i in prange(n):
        element(_i, {call_args})
"""


def _fused_parts(py_func: Callable, kinds: tuple, flags: tuple) -> tuple | None:
    """``(namespace, element_name, element_source, params, call_args)``: ``py_func`` rewritten to widen its
    half arrays' elements into float32 locals and round the written ones back once (see
    ``_lowp.fused_element``), defined in ``namespace``, its loop parameters and the arguments its loop passes
    it (``flags`` as constants); None where it cannot be fused."""
    from . import _lowp

    fused = _lowp.fused_element(py_func, kinds)
    if fused is None:
        return None
    element_name, element_source = fused
    namespace = dict(py_func.__globals__)
    namespace.update(_lowp.ONE)
    exec(compile(element_source, inspect.getfile(py_func), "exec"), namespace)
    params = list(inspect.signature(py_func).parameters)[1:]
    call_args = list(params)
    for position, value in flags:
        call_args[position] = repr(bool(value))
    return namespace, element_name, element_source, params, call_args


def _fused_element(py_func: Callable, kinds: tuple, flags: tuple = ()) -> tuple | None:
    """``(element, call_args, digest)``: the rewrite of :func:`_fused_parts`, the arguments its loop passes
    it and a digest of its source; None where it cannot be fused."""
    parts = _fused_parts(py_func, kinds, flags)
    if parts is None:
        return None
    namespace, element_name, element_source, _, call_args = parts
    digest = _digest(_CPU_FUSED, element_source, inspect.getsource(_lowp_module()), ", ".join(call_args))
    return namespace[element_name], call_args, digest


#: Whether the split fused loop of an all-bfloat16 call runs its vector body on pairs of elements, one 32-bit
#: word per array (:mod:`._bf16_pairs`, the same bits); tests set False to compile the one-element loop.
PAIRED = True


def _fused_split_driver(
    py_func: Callable,
    kinds: tuple,
    flags: tuple = (),
    cache: bool = True,
    part: tuple | None = None,
    blocks: Callable | None = None,
) -> Callable | None:
    """The fused loop split around torch's scalar tails (:data:`_CPU_FUSED_SPLIT`) where the rewritten
    element function tests them (``_torch_tail.tail_variants``); None otherwise. A chunked entry, called as
    ``driver(parallel, parts, n, parts, *arguments)``: ``n`` elements in ``parts`` equal parts (one per
    thread of the calling thread's count). ``cache``: False for a fresh compile (:func:`._chunks.entry`);
    ``part``, ``blocks``: the element function's :attr:`Elementwise.part_scalar` and
    :attr:`Elementwise.pair_blocks`."""
    parts = _fused_parts(py_func, kinds, flags)
    if parts is None:
        return None
    namespace, _, element_source, params, call_args = parts
    split = _torch_tail_module().tail_variants(
        element_source, next(iter(inspect.signature(py_func).parameters))
    )
    if split is None:
        return None
    paired = PAIRED and all(kind in (None, "bf16") for kind in kinds)
    return _split_driver(py_func, namespace, split, params, call_args, cache, paired, part, blocks)


def _fused_function(py_func: Callable, kinds: tuple, flags: tuple, template: str, tag: str) -> tuple | None:
    """``(function, salt)``: ``template`` (a loop or a chunk function) around :func:`_fused_element`'s
    rewrite of ``py_func``, and the text its compiled names depend on; None where it cannot be fused."""
    fused = _fused_element(py_func, kinds, flags)
    if fused is None:
        return None
    element, call_args, digest = fused
    params = list(inspect.signature(py_func).parameters)[1:]
    name = f"{element.__name__}{tag}_{digest}"
    source = template.format(name=name, args=", ".join(params), call_args=", ".join(call_args))
    namespace = {"prange": numba.prange, "element": numba.njit(inline="always", **_JIT_OPTIONS)(element)}
    return _chunks.define(name, source, py_func, namespace), source + digest


def _fused_driver(py_func: Callable, kinds: tuple, flags: tuple = ()) -> Callable | None:
    """The CPU loop over ``py_func`` rewritten to widen its half arrays' elements into float32 locals and
    round the written ones back once (see ``_lowp.fused_element``): one pass over memory, no scratch. None
    when the element function indexes a half array otherwise than by its own index. ``flags``: ``(position,
    value)`` of bool scalars (among the arguments after the index) that the loop passes as constants (the
    arguments themselves are still taken, and ignored)."""
    fused = _fused_function(py_func, kinds, flags, _CPU_FUSED, "_loop")
    return None if fused is None else numba.njit(parallel=True, cache=True, **_JIT_OPTIONS)(fused[0])


_FUSED_CHUNK = """
def {name}(_i, {args}):
    element(_i, {call_args})
"""


def _fused_entry(
    py_func: Callable, kinds: tuple, flags: tuple = (), prefetch: bool = False
) -> Callable | None:
    """As :func:`_fused_driver`, as a chunked launch (:func:`._chunks.entry`): ``entry(parallel, n,
    *arguments)``; ``prefetch``: its prefetching form (a part of :data:`PREFETCH_PART` elements or more runs
    in blocks, the arrays prefetched ahead: ``_chunks.entry``'s ``prefetch``; each element the same call)."""
    fused = _fused_function(py_func, kinds, flags, _FUSED_CHUNK, "")
    return None if fused is None else _chunks.entry(fused[0], salt=fused[1], prefetch=prefetch)


def _prefetching_fused_entry(ew: Elementwise, kinds: tuple, flags: tuple) -> Callable:
    """The prefetching form of ``ew``'s fused half loop for ``kinds`` and ``flags`` (:func:`_fused_entry`
    with ``prefetch``), kept with its drivers; compiled on first use (the first large launch)."""
    drivers = ew.__dict__.setdefault("_half_drivers", {})
    key = ("prefetching", "cpu", kinds, False, flags)
    entry = drivers.get(key)
    if entry is None:
        entry = drivers[key] = _fused_entry(ew.py_func, kinds, flags, prefetch=True)
    return entry


# The fused loop of an element function that tests torch's scalar tail (``_torch_tail.torch_tail``), as a
# chunked launch (:mod:`._chunks`, no parfor) whose element is one part: the elements are cut into one equal
# part per thread (bounds on multiples of :data:`SPLIT_ALIGN`), each part is split where torch's tails begin
# and end, the body variant of the element function runs over the rest and the tail variant over the tails
# (``_torch_tail.tail_variants``), so the vector loop carries no per-element test (and, with an unsigned
# index, no test for a negative one). The tails (at most 2 × vector width − 1 elements per torch thread)
# run in a function of their own, called rather than inlined a second time. Where the element function
# sets Elementwise.part_scalar, each part first makes its own value of that argument ({prologue}), which
# its body, pairs and tails are given.
_CPU_FUSED_SPLIT = """
def {name}_tail(_lo, _hi, {args}):
    for _j in range(uint64(_lo), uint64(_hi)):
        tail(_j, {tail_call_args})

{name}_tail = njit(**options)({name}_tail)

def {name}(_part, _size, _shares, {args}):
{prologue}    _i = min(_size, (_part * _size // _shares + {align} - 1) // {align} * {align})
    _hi = min(_size, ((_part + 1) * _size // _shares + {align} - 1) // {align} * {align})
    while _i < _hi:
        _end = _hi
        _in_tail = _i >= {tail_from}
        if not _in_tail:
            _chunk_end = {tail_from}
            _tail_start = {tail_from}
            if {chunk_tail} > 0:
                _chunk_end = (_i // {chunk} + 1) * {chunk}
                _tail_start = _chunk_end - {chunk_tail}
            _in_tail = _i >= _tail_start
            _end = min(_hi, _tail_start, {tail_from}) if not _in_tail else min(_hi, _chunk_end)
        if _in_tail:
            {name}_tail(_i, _end, {tail_args})
        else:
            for _j in range(uint64(_i), uint64(_end)):
                body(_j, {call_args})
        _i = _end
"""

# The split loop of an all-bfloat16 call: its vector body runs the paired element function (``_bf16_pairs``)
# over pairs of elements from an even index, the body variant (one call site: compiled once) over a first
# odd and a last lone element.
_CPU_FUSED_PAIRED = _CPU_FUSED_SPLIT.replace(
    """            for _j in range(uint64(_i), uint64(_end)):
                body(_j, {call_args})
""",
    """            _j = uint64(_i)
            _stop = uint64(_end)
            _first = _j & uint64(1)
            _last = (_stop - _j - _first) & uint64(1)
            for _l in range(_first + _last):
                body(_j if _l < _first else _stop - uint64(1), {call_args})
            for _k in range((_stop - _j - _first) // uint64(2)):
                pair(_j + _first + uint64(2) * _k, {call_args})
""",
)

# The paired split loop of an element function with :attr:`Elementwise.pair_blocks`: that function first
# updates the pairs it takes in blocks (returning how many, from the first), the pair loop the others.
_CPU_FUSED_PAIRED_BLOCKS = _CPU_FUSED_PAIRED.replace(
    """            for _k in range((_stop - _j - _first) // uint64(2)):
""",
    """            _pairs = (_stop - _j - _first) // uint64(2)
            _done = uint64(pair_blocks(_j + _first, _pairs, {call_args}))
            for _k in range(_done, _pairs):
""",
)

#: The split loop's parts begin and end on multiples of this many elements (whole cache lines of a half
#: array: no two threads store into one line).
SPLIT_ALIGN = 64


#: Whether a paired loop prefers 512-bit vectors (:func:`._chunks.entry`'s ``wide``): its widest values are
#: 32 bits, so on a processor tuned for 256-bit vectors it would otherwise take 8 pairs a vector, where the
#: one-element loop takes 16 elements (its 16-bit loads set its width).
WIDE_PAIRS = True


def _split_driver(
    py_func: Callable,
    namespace: dict,
    split: tuple,
    params: list,
    call_args: list,
    cache: bool = True,
    paired: bool = False,
    part: tuple | None = None,
    blocks: Callable | None = None,
) -> Callable:
    """The chunked entry of ``py_func``'s fused CPU loop over its body and tail variants (see
    :data:`_CPU_FUSED_SPLIT`): ``entry(parallel, parts, n, parts, *arguments)``. ``split`` is
    ``_torch_tail.tail_variants``' result, ``namespace`` the element function's globals.

    The part function is simplified before it is linked (``_chunks.entry(views=True)``): the element
    function's helpers are calls until then, and a loop holding a call is not vectorised. ``paired``: an
    all-bfloat16 call, whose body runs on pairs where :func:`._bf16_pairs.paired_source` can rewrite it;
    ``part``: :attr:`Elementwise.part_scalar` (each part's own value of one argument), or None;
    ``blocks``: :attr:`Elementwise.pair_blocks` (a paired loop only), or None."""
    body_source, tail_source, (tail_from, chunk, chunk_tail) = split
    prologue, tail_args, tail_call_args = "", list(params), ", ".join(call_args)
    if part is not None:
        scalar, _, names = part
        prologue = f"    _part_{scalar} = part_scalar(_part, {scalar}, {', '.join(names)})\n"
        call_args = [f"_part_{scalar}" if a == scalar else a for a in call_args]
        tail_args = [f"_part_{scalar}" if a == scalar else a for a in tail_args]
    filename = inspect.getfile(py_func)
    for source in (body_source, tail_source):
        exec(compile(source, filename, "exec"), namespace)
    body_name = body_source.split("(", 1)[0].split()[-1]
    tail_name = tail_source.split("(", 1)[0].split()[-1]
    template, pair_source = _CPU_FUSED_SPLIT, ""
    if paired:
        from . import _bf16_pairs

        pair = _bf16_pairs.paired_source(body_source, next(iter(inspect.signature(py_func).parameters)))
        if pair is not None:
            pair_name, pair_source = pair
            namespace.update(_bf16_pairs.NAMES)
            exec(compile(pair_source, filename, "exec"), namespace)
            template = _CPU_FUSED_PAIRED if blocks is None else _CPU_FUSED_PAIRED_BLOCKS
            pair_source += inspect.getsource(_bf16_pairs)
            if blocks is not None:
                pair_source += inspect.getsource(inspect.getmodule(blocks))
    digest = _digest(
        template,
        body_source,
        tail_source,
        pair_source,
        inspect.getsource(_lowp_module()),
        ", ".join(call_args),
        str(SPLIT_ALIGN),
        prologue,
    )
    name = f"{body_name[: -len('_body')]}_split_{digest}"
    source = template.format(
        name=name,
        align=SPLIT_ALIGN,
        args=", ".join(params),
        call_args=", ".join(call_args),
        tail_from=tail_from,
        chunk=chunk,
        chunk_tail=chunk_tail,
        prologue=prologue,
        tail_args=", ".join(tail_args),
        tail_call_args=tail_call_args,
    )
    loop_namespace = {
        "__name__": py_func.__module__,
        "uint64": np.uint64,
        "njit": numba.njit,
        "options": dict(cache=True, **_JIT_OPTIONS),
        "body": numba.njit(inline="always", **_JIT_OPTIONS)(namespace[body_name]),
        "tail": numba.njit(inline="always", **_JIT_OPTIONS)(namespace[tail_name]),
    }
    if pair_source:
        loop_namespace["pair"] = numba.njit(inline="always", **_JIT_OPTIONS)(namespace[pair_name])
        loop_namespace["pair_blocks"] = blocks
    if part is not None:
        loop_namespace["part_scalar"] = part[1]
    function = _chunks.define(name, source, py_func, loop_namespace)
    return _chunks.entry(
        function, salt=source, cache=cache, views=True, wide=WIDE_PAIRS and bool(pair_source)
    )


def _torch_tail_module() -> Any:
    from . import _torch_tail

    return _torch_tail


@functools.cache
def _lowp_cuda_helpers(cuda: Any) -> dict:
    from . import _lowp

    return _lowp.cuda_helpers(cuda)


_WORKSPACES = threading.local()


def _workspace(n_half: int) -> np.ndarray:
    """Per-thread float32 scratch rows (one per Numba thread) of ``n_half`` chunks, kept per Python thread."""
    shape = (numba.config.NUMBA_NUM_THREADS, max(n_half, 1) * HALF_CHUNK)
    cached = getattr(_WORKSPACES, "array", None)
    if cached is None or cached.shape[0] != shape[0] or cached.shape[1] < shape[1]:
        cached = _WORKSPACES.array = np.empty(shape, np.float32)
    return cached


def _run_time_ints(args: tuple) -> tuple:
    """``args`` with each compile-time int (a type with ``compile_time_int``, such as
    :class:`~optkernels.kernels.torch_rules.SqrtKernel`, which the CPU loops compile as a constant) as a
    plain int: a CUDA kernel takes it as a value (its target knows no such type)."""
    return tuple(int(a) if getattr(type(a), "compile_time_int", False) else a for a in args)


def _cuda_blocks(n: int) -> int:
    """The grid of an element-wise CUDA kernel over ``n`` elements (``CUDA_ELEMENTS_PER_THREAD`` each)."""
    blocks = -(-n // (CUDA_THREADS_PER_BLOCK * CUDA_ELEMENTS_PER_THREAD))
    if blocks > CUDA_MAX_GRID:
        raise ValueError(f"{n} elements are more than one CUDA launch covers here")
    return blocks


def _cuda_launch(kernel: Any, n: int, stream: Any) -> Any:
    """``kernel`` configured for ``n`` elements, on ``stream`` if one is given."""
    blocks = _cuda_blocks(n)
    if stream is None:
        return kernel[blocks, CUDA_THREADS_PER_BLOCK]
    return kernel[blocks, CUDA_THREADS_PER_BLOCK, stream]


def _launch_half(ew: Elementwise, device: str, n: int, kinds: tuple, args: tuple, stream: Any = None) -> None:
    """Run ``ew`` over arrays some of which are float16/bfloat16 (seen as their uint16 bits)."""
    rounding = _lowp_module().stochastic_stream()
    flags = ()
    if ew.constant_flags and device == "cpu":  # Python bools only (a NumPy bool stays an argument)
        flags = tuple((k, a) for k, a in enumerate(args) if a is True or a is False)
    driver, half, scalars, workspace = _half_plan(ew, device, kinds, rounding is not None, flags)
    views = list(args)
    for k in half:
        views[k] = args[k].view(_UINT16)
    for k in scalars:  # all-bfloat16 call: a NaN scalar as the default NaN (see _lowp.PURE_BF16)
        a = args[k]
        if type(a) in _FLOAT_SCALARS and a != a:
            views[k] = type(a)(np.nan)
    extra = rounding.take() if rounding is not None else ()
    if device == "cpu":
        if workspace is _NO_WORKSPACE or workspace is _SPLIT_WORKSPACE:
            large = (ew, kinds, flags) if workspace is _NO_WORKSPACE and ew.prefetch_large_half else None
            _launch_chunked(driver, workspace, n, views, large)
            return
        with parallel_launch(), _SerialBelow(n):
            if workspace is None:
                workspace = _workspace(len(half))
            for_this_process(driver)(n, workspace, *views, *extra)
        return
    _cuda_launch(driver, n, stream)(n, *_run_time_ints(tuple(views)), *extra)


class HalfLauncher:
    """Repeated CPU launches of ``ew`` (see :meth:`Elementwise.launch`) over arguments like ``args``: the same
    array kinds, scalar types and bool values, the float16/bfloat16 arrays given as their ``uint16`` views.
    What :meth:`Elementwise.launch` works out at every call (the kinds, the constant flags, the driver) is
    worked out once, here; the same bits.

    Parameters
    ----------
    ew : Elementwise
        The element function.
    args : tuple
        Example arguments (arrays with their half dtypes, and scalars), as :meth:`Elementwise.launch` takes.
    """

    __slots__ = (
        "flags",
        "_driver",
        "_nan_scalars",
        "_workspace",
        "_n_half",
        "_chunked",
        "_large",
        "_entries",
    )

    def __init__(self, ew: Elementwise, args: tuple):
        kinds = _half_kinds(args)
        if kinds is None:
            raise TypeError(f"{ew.__name__}: a half launcher needs float16/bfloat16 arrays")
        flags = ()
        if ew.constant_flags:
            flags = tuple((k, a) for k, a in enumerate(args) if a is True or a is False)
        self.flags = flags
        self._driver, half, scalars, self._workspace = _half_plan(ew, "cpu", kinds, False, flags)
        self._n_half = len(half)
        self._chunked = self._workspace is _NO_WORKSPACE or self._workspace is _SPLIT_WORKSPACE
        self._nan_scalars = tuple(k for k in scalars if type(args[k]) in _FLOAT_SCALARS)
        fused = self._workspace is _NO_WORKSPACE and ew.prefetch_large_half
        self._large = (ew, kinds, flags) if fused else None  # see _launch_chunked
        self._entries: dict = {}  # key -> the driver overload's entry point (see by_key)

    def fits(self, args: tuple) -> bool:
        """Whether ``args`` has the bool values this launcher's loop was compiled for."""
        for k, value in self.flags:
            if args[k] is not value:
                return False
        return True

    def __call__(self, n: int, *args: Any) -> bool:
        """Launch over ``n`` elements (half arrays as ``uint16`` views); False (nothing done) where a
        stochastic-rounding context is active, which :meth:`Elementwise.launch` serves."""
        if _lowp_module().stochastic_stream() is not None:
            return False
        if n == 0:
            return True
        args = self._default_nans(args)
        if self._chunked:
            _launch_chunked(self._driver, self._workspace, n, args, self._large)
            return True
        with parallel_launch(), _SerialBelow(n):
            workspace = self._workspace if self._workspace is not None else _workspace(self._n_half)
            for_this_process(self._driver)(n, workspace, *args)
        return True

    def serial(self, n: int, *args: Any) -> bool:
        """As calling the launcher (the same bits), on the calling thread alone: for a launch too small to
        share out (a chunked launch only)."""
        if not self._chunked:
            raise TypeError("only a chunked half launcher runs serially")
        if _lowp_module().stochastic_stream() is not None:
            return False
        if n == 0:
            return True
        args = self._default_nans(args)
        if self._workspace is _SPLIT_WORKSPACE:
            self._driver(False, 1, n, 1, *args)
        else:
            self._driver(False, n, *args)
        return True

    def by_key(self, key: Any, n: int, *args: Any, serial: bool = False) -> bool:
        """As calling the launcher (:meth:`serial` where ``serial``; the same compiled code, the same bits),
        where the caller guarantees that every call with an equal ``key`` passes arguments of the same Numba
        types (the same array kinds, scalar types, SqrtKernel kernels): the chunked driver's overload for
        them is found on the first call with ``key`` (a launch through Numba's dispatcher), and later calls
        run its compiled entry point without the dispatcher's typing of every argument."""
        entry = self._entries.get(key)
        if entry is None or entry is _NO_ENTRY:
            done = self.serial(n, *args) if serial else self(n, *args)
            if done and n and entry is None:
                self._entries[key] = self._overload_entry(n, args)
            return done
        if _lowp_module().stochastic_stream() is not None:
            return False
        if n == 0:
            return True
        args = self._default_nans(args)
        if not serial:
            _launch_chunked(entry, self._workspace, n, args, self._large)
        elif self._workspace is _SPLIT_WORKSPACE:
            entry(False, 1, n, 1, *args)
        else:
            entry(False, n, *args)
        return True

    def entry_of(self, key: Any) -> Any:
        """The compiled entry point that :meth:`by_key` runs for ``key``, or None (none found yet, or the
        key's launches go through the dispatcher): for :meth:`run_entry`."""
        entry = self._entries.get(key)
        return None if entry is _NO_ENTRY else entry

    def run_entry(self, entry: Any, n: int, args: tuple) -> None:
        """:meth:`by_key`'s launch over ``n`` elements (not serial) through ``entry``, :meth:`entry_of` of
        the key of ``args``, for a caller that has checked what :meth:`by_key` checks first: no
        stochastic-rounding context is active (the same compiled code, the same bits)."""
        if n:
            _launch_chunked(entry, self._workspace, n, self._default_nans(args), self._large)

    def _overload_entry(self, n: int, args: tuple) -> Any:
        """The entry point of the chunked driver's overload for exactly the Numba types of a launch with
        ``args`` (one the dispatcher has compiled), or :data:`_NO_ENTRY` where there is none."""
        if not self._chunked or len(self._entries) >= 8:
            return _NO_ENTRY
        driver = self._driver
        head = (False, 1, n, 1) if self._workspace is _SPLIT_WORKSPACE else (False, n)
        signature = tuple(driver.typeof_pyval(a) for a in (*head, *self._default_nans(args)))
        overload = driver.overloads.get(signature)
        return _NO_ENTRY if overload is None else overload.entry_point

    def _default_nans(self, args: tuple) -> tuple:
        """``args`` with a NaN scalar as the default NaN, in an all-bfloat16 call (see ``_launch_half``)."""
        for k in self._nan_scalars:
            a = args[k]
            if a != a:
                args = args[:k] + (type(a)(np.nan),) + args[k + 1 :]
        return args


def _half_plan(ew: Elementwise, device: str, kinds: tuple, sr: bool, flags: tuple = ()) -> tuple:
    """``(driver, positions of the half arrays, positions of the scalars, workspace)`` of a launch with
    arrays of ``kinds`` and the constant ``flags``: the scalars' positions only in an all-bfloat16 call (a
    NaN scalar is passed as the default NaN there); the workspace is :data:`_NO_WORKSPACE` where the driver is
    the fused loop's chunked launch (called as ``driver(parallel, n, *arguments)``), :data:`_SPLIT_WORKSPACE`
    where it is the split fused loop's (``driver(parallel, parts, n, parts, *arguments)``), None where it is
    the scratch loop (it takes :func:`_workspace`). Kept with the drivers, per kinds and flags."""
    drivers = ew.__dict__.setdefault("_half_drivers", {})
    key = ("plan", device, kinds, sr, flags)
    plan = drivers.get(key)
    if plan is None:
        if "f64" in kinds:
            raise TypeError(f"{ew.__name__}: float64 arrays cannot be mixed with float16/bfloat16 arrays")
        driver = _half_driver(ew, device, kinds, sr, flags)
        fused = drivers.get(("fused", device, kinds, sr, flags), False)
        split = drivers.get(("split", device, kinds, sr, flags), False)
        half = tuple(k for k, kind in enumerate(kinds) if kind in _HALF_KINDS)
        pure = all(kind in (None, "bf16") for kind in kinds)
        scalars = tuple(k for k, kind in enumerate(kinds) if kind is None) if pure else ()
        workspace = _NO_WORKSPACE if fused else _SPLIT_WORKSPACE if split else None
        plan = drivers[key] = (driver, half, scalars, workspace)
    return plan


def _launch_chunked(
    driver: Callable, workspace: np.ndarray, n: int, args: Any, large: tuple | None = None
) -> None:
    """Launch a fused half loop's chunked entry over ``n`` elements: ``driver(parallel, n, *args)``, or for
    a split loop (``workspace`` :data:`_SPLIT_WORKSPACE`) ``driver(parallel, parts, n, parts, *args)`` with
    one part per thread of the calling thread's count. Below :data:`SERIAL_BELOW` float32 elements' worth
    (an element of the split loop weighs :data:`SPLIT_ELEMENT_WEIGHT`) the entry runs on the calling
    thread, as :class:`_SerialBelow` runs a parallel loop, without changing the thread count. ``large``:
    ``(ew, kinds, flags)`` of a fused loop whose element function sets
    :attr:`Elementwise.prefetch_large_half`: where a thread's part holds :data:`PREFETCH_PART` elements or
    more, its prefetching form runs instead (:func:`_prefetching_fused_entry`)."""
    split = workspace is _SPLIT_WORKSPACE
    with parallel_launch():
        parallel = n * (SPLIT_ELEMENT_WEIGHT if split else 1) >= SERIAL_BELOW and parallel_allowed()
        if not split:
            if large is not None and _large_parts(n, parallel):
                driver = _prefetching_fused_entry(*large)
            driver(parallel, n, *args)
            return
        parts = thread_mask()[0]() if parallel else 1
        driver(parallel, parts, n, parts, *args)


#: The workspace of a fused launch: a placeholder marking it (a chunked launch, which takes none).
_NO_WORKSPACE = np.empty((1, HALF_CHUNK), np.float32)
#: The workspace of a split fused loop: a placeholder marking it (its entry takes its part count instead).
_SPLIT_WORKSPACE = np.empty((1, HALF_CHUNK), np.float32)
_UINT16 = np.dtype(np.uint16)
#: :meth:`HalfLauncher.by_key`'s mark of a key whose launches go through the dispatcher.
_NO_ENTRY = object()
_HALF_KINDS = ("f16", "bf16")
_LOWP: list = []


def _lowp_module() -> Any:
    """The :mod:`._lowp` module, imported on first use (not at import: it builds its Numba functions)."""
    if not _LOWP:
        from . import _lowp

        _LOWP.append(_lowp)
    return _LOWP[0]
