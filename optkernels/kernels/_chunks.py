"""The CPU launch of an element loop: one compiled entry per kernel, run on Numba's threads without a parfor.

A kernel's CPU launch is one cached ``numba.njit`` function, the **entry**, typed by the call's arguments
(``entry(parallel, n, *arguments)``, releasing the GIL). Its machine code holds three functions, optimised
and emitted together, once:

* the **part loop** ``parts(first, count, n, parts, *arguments)``: for each part ``p`` of ``first .. first
  + count - 1``, ``for i in range(p·n // parts, (p + 1)·n // parts): element(i, *arguments)`` (an unsigned
  index, as in Numba's own parallel loop, so the loop vectorises). It is compiled with ``noalias`` array
  arguments (as Numba compiles the body of a parallel loop), so that LLVM may load one array before it
  stores another;
* the **worker**, a C function with the signature of a parallel kernel of Numba's threading layer,
  ``worker(args, dims, steps, data)``: ``data`` points at the packed call ``(n, parts, *arguments)``; it
  calls the part loop for parts ``args[0] .. args[0] + dims[0] - 1``;
* the entry itself, which packs the call on its stack and hands the worker to the threading layer's
  ``numba_parallel_for`` (the function Numba's parallel loops call) with one part per thread of the calling
  thread's count; with one thread, or in a process where the layer cannot run
  (:func:`._threading.for_this_process`), it calls the worker itself over the whole range.

So no parallel loop is compiled per kernel: Numba's parfor passes, which type and lower the loop body again
as a gufunc and optimise it once more in each of its wrappers, never run; and the part loop, compiled as a
subroutine of the entry, is linked into the entry's module before it is optimised (not finalised on its
own as Numba's ``compile_subroutine`` would). A part loop that makes arrays of its own (the multi-tensor
rows' views of addresses, ``entry(..., views=True)``) is first given a light optimisation of its own
(:func:`_simplify`), without which it is not vectorised. Each element is computed by the same call of the element
function as in any other loop, so the bits do not depend on the thread count or on how the range is cut.

A guarded entry (:class:`GuardedEntry`) hands its indices out instead of cutting the range: part 0 takes
them one by one from the front, the other parts from the back, each index claimed by an atomic add on one
word (front count in its low 32 bits, back count in its high 32), until the two meet. A thread that starts
late (woken from sleep, or sharing its core) then takes fewer indices, and the calling thread starts at
once on the front, where the indices' data was last touched in a training step.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numba
import numpy as np
from llvmlite import binding, ir
from numba import types
from numba.core import cgutils, compiler
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._intrinsics import CACHE_LINE_BYTES, _prefetch_pointer, fetch_add, inline_vector_variants, zen_target

_JIT_OPTIONS = dict(error_model="numpy", fastmath=False)

_ENTRY = """
def {name}(_parallel, _count, {args}):
    run_chunks(_parallel, _count, {args})
"""

# An entry whose launch runs only where a compiled check of its leading arguments, the prelude, returns -1
# (what it returns otherwise is returned, nothing launched); the element function's scalars are then rounded
# from host values in the same call (see GuardedEntry).
_GUARDED_ENTRY = """
def {name}(_parallel, _count, {checked}, {host}, {lead}):
    _found = prelude(({checked},), {lead})
    if _found != -1:
        return _found
    {scalars}, = rounding(({host},), {like})
    run_chunks(_parallel, _count, zeros(1, int64), {args})
    return -1
"""

# The parts of a worker call, each an element loop over its slice of 0 .. n - 1.
_PARTS = """
def {name}(_first, _count, _n, _parts, {args}):
    for _p in range(_first, _first + _count):
        _start = _p * _n // _parts
        _stop = (_p + 1) * _n // _parts
        for i in range(uint64(_start), uint64(_stop)):
            element(i, {args})
"""

# The block loop of the prefetching loops (this one's parts and ``_elementwise``'s multi-tensor rows): the
# elements ``_lo`` .. ``_hi`` - 1 in blocks of ``_step``, every array's lines of the elements 1024 ahead
# prefetched before each block that starts below ``_ahead`` (the caller sets the three; ``_step`` the whole
# range and ``_ahead`` ``_lo``: the plain loop); ``{arrays}`` the prefetched arrays, ``{args}`` the
# element's arguments. Unindented: :func:`prefetching_blocks` places it.
PREFETCHING_BLOCKS = """\
for _block in range(_lo, _hi, _step):
    if _block < _ahead:
        prefetch_ahead(_block + 1024, {arrays})
    for i in range(uint64(_block), uint64(min(_block + _step, _hi))):
        element(i, {args})
"""


def prefetching_blocks(indent: int) -> str:
    """:data:`PREFETCHING_BLOCKS` indented by ``indent`` spaces, for a template's loop body."""
    return "".join(" " * indent + line for line in PREFETCHING_BLOCKS.splitlines(keepends=True))


# The parts of a worker call as :data:`_PARTS`; a part of 2**20 elements or more runs in blocks of 64, every
# array argument's lines of the elements 1024 ahead prefetched before each block that has 1024 more of the
# part after it (``entry(prefetch=True)``): no prefetch reaches past the part, into lines that another
# thread writes. A smaller part, whose arrays the caches may hold (there the blocks cost time, the
# prefetches gain none), runs as one block: the plain loop. One loop nest, the element loop's trip count
# unknown to LLVM: it vectorises one copy of that loop (a constant 64 had it unroll eight, and a separate
# plain loop made a ninth: double the compile time).
_PREFETCHING_PARTS = """
def {name}(_first, _count, _n, _parts, {args}):
    for _p in range(_first, _first + _count):
        _lo = _p * _n // _parts
        _hi = (_p + 1) * _n // _parts
        _step = max(_hi - _lo, 1)
        _ahead = _lo
        if _step >= 1048576:
            _step = 64
            _ahead = _hi - 1024 - 64
""" + prefetching_blocks(8).replace("{arrays}", "{args}")

# The parts of a guarded entry's worker call: indices claimed from both ends of 0 .. n - 1 (see the module
# docstring; ``_claims``: one int64 word, zero at the launch).
_CLAIMED_PARTS = """
def {name}(_first, _count, _n, _parts, _claims, {args}):
    for _p in range(_first, _first + _count):
        _add = 1 if _p == 0 else 1 << 32
        while True:
            _k = fetch_add(_claims, 0, _add)
            _front = _k & 0xFFFFFFFF
            _back = _k >> 32
            if _front + _back >= _n:
                break
            element(_front if _p == 0 else _n - 1 - _back, {args})
"""

_BYTE_P = ir.IntType(8).as_pointer()
_INTP = ir.IntType(64)
#: Numba's parallel kernel: ``void(char **args, intp *dims, intp *steps, void *data)``.
_WORKER_TYPE = ir.FunctionType(
    ir.VoidType(), [_BYTE_P.as_pointer(), _INTP.as_pointer(), _INTP.as_pointer(), _BYTE_P]
)


def _digest(*texts: str) -> str:
    return hashlib.sha1("\0".join(texts).encode()).hexdigest()[:12]


@functools.cache
def _module_source() -> str:
    return inspect.getsource(sys.modules[__name__])


def _params(py_func: Callable) -> list[str]:
    return list(inspect.signature(py_func).parameters)[1:]


def define(name: str, source: str, py_func: Callable, namespace: dict) -> Callable:
    """The function ``name`` defined by ``source``, run in ``namespace`` and attributed to ``py_func``'s file
    and module (Numba's on-disk cache is keyed to that file, so editing the math refreshes it)."""
    exec(compile(source, inspect.getfile(py_func), "exec"), namespace)
    function = namespace[name]
    function.__module__ = py_func.__module__
    function.__qualname__ = name
    return function


def generate(template: str, name: str, py_func: Callable, namespace: dict) -> Callable:
    """``template`` filled in for ``py_func``'s parameters, defined by :func:`define`."""
    return define(name, template.format(name=name, args=", ".join(_params(py_func))), py_func, namespace)


class _LinkedUnoptimised:
    """A compiled library that its user links at its own finalisation (Numba's ``add_linking_library``) but
    that is not finalised first: Numba optimises and emits every linked library by itself before linking it
    (a second optimisation of the same code); this one's functions are only linked, ``linkonce_odr`` as
    Numba links a shared subroutine, and optimised once, in their user's module."""

    def __init__(self, library: Any):
        self._reload_init = library._reload_init
        self._module = library._final_module  # function-level passes done, module-level passes not
        for function in self._module.functions:
            if not function.is_declaration and function.linkage == binding.Linkage.external:
                function.linkage = binding.Linkage.linkonce_odr

    def _get_module_for_linking(self) -> Any:
        return self._module


def _simplify(codegen: Any, library: Any) -> None:
    """Inline the callees of ``library``'s functions (its linked libraries linked into its module) and prune
    its reference counts, by the light (``-O1``) module pipeline and Numba's reference-count pruning.

    For a part loop over arrays made inside the loop (views of addresses, without a memory-info pointer),
    the view's reference-count calls become calls on a null pointer only once the array constructor is
    inlined; the entry's own optimisation inlines it only in its full pipeline and prunes the calls after
    it, so they are still in the loop when the loop vectoriser runs, and it leaves the loop scalar."""
    module = library._final_module
    for linked in library._linking_libraries:
        module.link_in(linked._get_module_for_linking(), preserve=True)
    manager, builder = codegen._module_pass_manager(opt=1, loop_vectorize=False, slp_vectorize=False)
    manager.run(module, builder)


def _inline_after_optimising(library: Any) -> None:
    """Have ``library`` (the entry's) inline the packed estimates' calls that the loop vectoriser leaves
    after its optimisation (:func:`._intrinsics.inline_vector_variants`)."""
    if getattr(library, "_inlines_variants", False):
        return
    optimise = library._optimize_final_module

    def optimise_and_inline() -> None:
        optimise()
        inline_vector_variants(library.codegen, library._final_module)

    library._optimize_final_module = optimise_and_inline
    library._inlines_variants = True


def _prefer_wide_vectors(library: Any) -> None:
    """Have every function that ``library`` gets (as LLVM IR) prefer 512-bit vectors (LLVM's
    ``prefer-vector-width``): on processors with AVX-512 whose tuning prefers 256-bit vectors (Intel's
    server cores), the loop vectoriser then takes 16 float32 lanes, not 8; elsewhere it changes nothing.
    Each lane computes the element function as any other lane or the scalar tail does: the same bits."""
    add = library.add_ir_module

    def add_preferring_wide(module: Any) -> None:
        for function in module.functions:
            if not function.is_declaration:
                set.add(function.attributes, '"prefer-vector-width"="512"')
        add(module)

    library.add_ir_module = add_preferring_wide


def _compile_parts(context: Any, parts: Callable, signature: Any, simplify: bool, wide: bool = False) -> Any:
    """Compile ``parts`` for ``signature`` with ``noalias`` array arguments, to be linked into the library
    being built (``context.active_code_library``, the entry's) and optimised there, once, with the entry
    (see :class:`_LinkedUnoptimised`); ``simplify``: first inline its callees and prune its reference
    counts (:func:`_simplify`); ``wide``: vectorise with 512-bit vectors where the target has them
    (:func:`_prefer_wide_vectors`). Returns the compile result (its ``fndesc`` is what to call)."""
    flags = compiler.Flags()
    flags.noalias = True
    flags.nrt = True
    flags.error_model = "numpy"
    flags.no_compile = flags.no_cpython_wrapper = flags.no_cfunc_wrapper = True
    library = context.codegen().create_library(parts.__name__)
    if wide:
        _prefer_wide_vectors(library)
    result = compiler.compile_internal(
        context.typing_context, context, library, parts, signature.args, signature.return_type, flags, {}
    )
    if simplify:
        _simplify(context.codegen(), library)
    target = context.active_code_library
    _inline_after_optimising(target)
    # linked first, then what it calls (Numba's runtime, helpers compiled apart): a linkonce_odr function is
    # only taken from a library linked after its first use
    target._linking_libraries.append(_LinkedUnoptimised(library))
    for linked in library._linking_libraries:
        target.add_linking_library(linked)
    return result


def _define_worker(context: Any, module: Any, parts: Any, signature: Any, packed: types.Tuple) -> Any:
    """The worker (see the module docstring) in ``module``: it loads the ``packed`` call from ``data`` and
    calls the compiled part loop ``parts`` (a compile result of ``signature``) for its parts."""
    worker = ir.Function(
        module, _WORKER_TYPE, name=module.get_unique_name(f"{parts.fndesc.mangled_name}.worker")
    )
    worker.linkage = "internal"
    builder = ir.IRBuilder(worker.append_basic_block())
    args, dims, _, data = worker.args
    first = builder.ptrtoint(builder.load(args), _INTP)
    count = builder.load(dims)
    value = builder.load(builder.bitcast(data, context.get_value_type(packed).as_pointer()))
    members = [builder.extract_value(value, k) for k in range(len(packed))]
    context.call_internal_no_propagate(builder, parts.fndesc, signature, [first, count, *members])
    builder.ret_void()
    return worker


def _part_arguments(builder: Any, first: Any, count: Any) -> tuple:
    """``(args, dims, steps)`` of a worker call over parts ``first .. first + count - 1``, as the threading
    layer's ``parallel_for`` builds them (it advances ``args[0]`` by ``steps[0]`` per part)."""
    args = cgutils.alloca_once(builder, _BYTE_P)
    builder.store(builder.inttoptr(first, _BYTE_P), args)
    dims = cgutils.alloca_once(builder, _INTP)
    builder.store(count, dims)
    steps = cgutils.alloca_once(builder, _INTP)
    builder.store(_INTP(1), steps)
    return args, dims, steps


#: Whether :func:`prefetch_ahead` prefetches in code compiled for AMD's Zen cores
#: (:func:`._intrinsics.zen_target`): there the hardware prefetchers keep the prefetching loops at the
#: memory's speed by themselves, and the software prefetches cost 0-15% at 1e8 elements
#: (bench/results/target-notes.md). Decided when a loop is compiled.
PREFETCH_ON_ZEN = False


@intrinsic
def prefetch_ahead(typingctx, index, *args):
    """Prefetch, for each 1-D array among ``args``, the cache lines of its elements ``index .. index + 63``
    (read, into every cache level); other arguments are skipped. A prefetch never faults (lines past an
    array's end are harmless) and changes no value. Nothing in code compiled for AMD's Zen cores (see
    :data:`PREFETCH_ON_ZEN`)."""
    if not isinstance(index, types.Integer):
        raise TypingError("prefetch_ahead takes an integer index")
    arg_types = tuple(args)

    def codegen(context, builder, signature, llargs):
        if not PREFETCH_ON_ZEN and zen_target():
            return context.get_dummy_value()
        first, values = llargs
        first = context.cast(builder, first, signature.args[0], types.intp)
        items = cgutils.unpack_tuple(builder, values, len(arg_types))
        for array_type, value in zip(arg_types, items):
            if not (isinstance(array_type, types.Array) and array_type.ndim == 1):
                continue
            array = context.make_array(array_type)(context, builder, value)
            size = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
            start = builder.add(builder.ptrtoint(array.data, _INTP), builder.mul(first, _INTP(size)))
            for offset in range(0, 64 * size, CACHE_LINE_BYTES):  # integer arithmetic: no out-of-bounds GEP
                _prefetch_pointer(builder, builder.inttoptr(builder.add(start, _INTP(offset)), _BYTE_P), 0)
        return context.get_dummy_value()

    return types.void(index, types.StarArgTuple.from_types(args)), codegen


def _runner(parts: Callable, simplify: bool, wide: bool = False) -> Any:
    """The intrinsic ``run_chunks(parallel, n, args)`` of an entry whose part loop is ``parts`` (see the
    module docstring; ``simplify``, ``wide``: see :func:`_compile_parts`)."""

    @intrinsic
    def run_chunks(typingctx, parallel, n, *args):
        arg_types = tuple(args)
        packed = types.Tuple((types.int64, types.int64, *arg_types))

        def codegen(context, builder, signature, llargs):
            parts_signature = types.void(types.int64, types.int64, *packed.types)
            compiled = _compile_parts(context, parts, parts_signature, simplify, wide)
            mod = builder.module
            worker = _define_worker(context, mod, compiled, parts_signature, packed)
            is_parallel, count, values = llargs
            items = cgutils.unpack_tuple(builder, values, len(arg_types))
            count = context.cast(builder, count, signature.args[1], types.int64)
            num_threads = builder.call(
                cgutils.get_or_insert_function(mod, ir.FunctionType(_INTP, []), "get_num_threads"), []
            )
            is_parallel = context.cast(builder, is_parallel, signature.args[0], types.boolean)
            use_pool = builder.and_(is_parallel, builder.icmp_signed(">", num_threads, _INTP(1)))
            n_parts = builder.select(use_pool, num_threads, _INTP(1))
            slot = cgutils.alloca_once(builder, context.get_value_type(packed))
            builder.store(context.make_tuple(builder, packed, [count, n_parts, *items]), slot)
            data = builder.bitcast(slot, _BYTE_P)
            with builder.if_else(use_pool) as (pool, alone):
                with pool:
                    parallel_for = cgutils.get_or_insert_function(
                        mod, ir.FunctionType(ir.VoidType(), [_BYTE_P] * 5 + [_INTP] * 3), "numba_parallel_for"
                    )
                    # (kernel, args, dims, steps, data, inner dimensions, array arguments, threads)
                    arrays = [
                        builder.bitcast(a, _BYTE_P) for a in _part_arguments(builder, _INTP(0), n_parts)
                    ]
                    fn = builder.bitcast(worker, _BYTE_P)
                    builder.call(parallel_for, [fn, *arrays, data, _INTP(0), _INTP(1), n_parts])
                with alone:
                    builder.call(worker, [*_part_arguments(builder, _INTP(0), _INTP(1)), data])
            return context.get_dummy_value()

        return types.void(parallel, n, types.StarArgTuple.from_types(args)), codegen

    return run_chunks


class GuardedEntry(NamedTuple):
    """How :func:`entry` makes a guarded entry: ``entry(parallel, n, *checked, *host, *lead)`` (``checked``,
    ``host`` values of those counts; ``lead``: the first ``lead`` arguments of ``py_func``, the rest being
    its scalars) runs ``found = prelude(checked, *lead)`` (a Numba function returning an int; it may fill
    arrays among ``lead``) and returns ``found`` where it is not -1, nothing launched; else it launches
    over ``(*lead, *rounding(host, lead[-1]))`` and returns -1. ``rounding`` (a Numba function) makes the
    scalars from host values (such as float64 values rounded once to the dtype of the array ``lead[-1]``),
    so that a step's Python side passes plain floats. Its indices are claimed from both ends (see the
    module docstring)."""

    prelude: Any
    checked: int
    rounding: Any
    host: int
    lead: int


def entry(
    py_func: Callable,
    salt: str = "",
    cache: bool = True,
    views: bool = False,
    guard: GuardedEntry | None = None,
    wide: bool = False,
    prefetch: bool = False,
    part_loop: tuple[str, dict] | None = None,
) -> Any:
    """The entry of ``py_func``'s chunked CPU launch: ``entry(parallel, n, *arguments)`` runs
    ``py_func(i, *arguments)`` for ``i`` in ``0 .. n - 1`` (a Numba dispatcher, compiled per argument types
    on first use; ``parallel``: False to run on the calling thread only).

    ``salt``: the text of whatever generated ``py_func`` (a template), part of the compiled function's name
    so that a changed generator never loads a stale cache entry. ``cache``: False for a fresh compile kept in
    memory only (whose assembly, part loop included, ``inspect_asm`` shows). ``views``: True where
    ``py_func`` makes arrays of its own (views of addresses): its part loop is then simplified before it is
    linked (:func:`_simplify`, a little more compile time), else that loop stays scalar.

    ``guard``: a :class:`GuardedEntry`; the entry then checks its arguments and rounds its scalars before it
    launches, and returns an int. Such an entry holds the GIL (a prelude may read Python objects); the
    prelude's and the rounding's sources are part of the name.

    ``wide``: the part loop prefers 512-bit vectors (:func:`_prefer_wide_vectors`); part of the name.

    ``prefetch``: the part loop runs a part of 2**20 elements or more in blocks of 64 elements and prefetches
    the array arguments' elements 1024 ahead of each block, within its part (:data:`_PREFETCHING_PARTS`,
    :func:`prefetch_ahead`; one loop nest, one vectorised copy of the element loop), for element functions
    whose arithmetic per element is enough that the loop's own loads start too late to keep memory busy;
    not with ``guard``; part of the name.

    ``part_loop``: ``(template, names)``, a part loop of the caller's in place of :data:`_PARTS` (filled in
    as it is: ``{name}``, ``{args}``; ``names``: what it calls besides ``element``, ``uint64`` and
    :func:`prefetch_ahead`), such as the multi-tensor rows' prefetching loop; not with ``guard`` or
    ``prefetch``; the template is part of the name, the sources of what it calls belong in ``salt``."""
    element = numba.njit(inline="always", **_JIT_OPTIONS)(py_func)
    params = _params(py_func)
    namespace: dict[str, Any] = {}
    parts_template = _PREFETCHING_PARTS if prefetch else _PARTS
    part_names: dict[str, Any] = {}
    if guard is not None and (prefetch or part_loop is not None):
        raise ValueError("a guarded entry claims its indices one by one: it does not prefetch")
    if part_loop is not None:
        if prefetch:
            raise ValueError("a part loop of the caller's replaces the prefetching part loop")
        parts_template, part_names = part_loop
    if guard is None:
        template = _ENTRY
    else:
        parts_template = _CLAIMED_PARTS
        template = _GUARDED_ENTRY.format(
            name="{name}",
            checked=", ".join(f"_g{k}" for k in range(guard.checked)),
            host=", ".join(f"_h{k}" for k in range(guard.host)),
            lead=", ".join(params[: guard.lead]),
            like=params[guard.lead - 1],
            scalars=", ".join(params[guard.lead :]),
            args="{args}",
        )
        salt += inspect.getsource(guard.prelude.py_func) + inspect.getsource(guard.rounding.py_func)
        namespace = {
            "prelude": guard.prelude,
            "rounding": guard.rounding,
            "zeros": np.zeros,
            "int64": np.int64,
        }
    name = f"_chunked_{py_func.__name__}_{_digest(template, parts_template, _module_source(), salt, str(views), 'wide' * wide)}"
    parts = generate(
        parts_template,
        f"{name}_parts",
        py_func,
        {
            "uint64": np.uint64,
            "element": element,
            "fetch_add": fetch_add,
            "prefetch_ahead": prefetch_ahead,
            **part_names,
        },
    )
    function = generate(template, name, py_func, {"run_chunks": _runner(parts, views, wide), **namespace})
    return numba.njit(cache=cache, nogil=guard is None, no_cfunc_wrapper=True, **_JIT_OPTIONS)(function)
