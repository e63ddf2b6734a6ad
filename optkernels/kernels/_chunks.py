"""The CPU launch of an element loop: one chunk worker per kernel, run on Numba's threads without a parfor.

A kernel's CPU launch compiles two small functions, each optimised and emitted once:

* the **chunk worker**, a C function (``numba.cfunc``, cached on disk) with the signature of a parallel
  kernel of Numba's threading layer, ``worker(args, dims, steps, data)``: ``data`` points at the packed
  call ``(n, parts, *arguments)``; the worker runs parts ``args[0] .. args[0] + dims[0] - 1`` of ``parts``
  equal slices of ``0 .. n - 1``, each as ``for i in range(start, stop): element(i, *arguments)`` (an
  unsigned index, as in Numba's own parallel loop, so the loop vectorises).
* the **entry**, a plain ``numba.njit`` function (cached, releasing the GIL) typed by the call's arguments:
  it packs them on its stack and hands the worker to the threading layer's ``parallel_for`` (the function
  Numba's parallel loops call), with one part per thread of the calling thread's count; with one thread, or
  in a process where the layer cannot run (:func:`._threading.for_this_process`), it calls the worker
  itself over the whole range.

So no parallel loop is compiled per kernel: Numba's parfor passes, which type and lower the loop body again
as a gufunc and optimise it once more in each of its wrappers, never run. The entry refers to its worker by
a symbol name derived from the kernel and the argument types; the worker is compiled (or loaded) and the
symbol registered when the entry is typed, and again before a cached entry is loaded (Numba's
``reload_init`` hook of the entry's compile result). Each element is computed by the same call of the element
function as in any other loop, so the bits do not depend on the thread count or on how the range is cut.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import binding, ir
from numba import types
from numba.core import cgutils, compiler
from numba.extending import intrinsic

_JIT_OPTIONS = dict(error_model="numpy", fastmath=False)

_ENTRY = """
def {name}(_parallel, _count, {args}):
    run_chunks(_parallel, _count, {args})
"""

_WORKER = """
def {name}(_args, _dims, _steps, _data):
    _n, _parts, {args} = load_packed(_data)
    _first = _args[0]
    for _p in range(_first, _first + _dims[0]):
        _start = _p * _n // _parts
        _stop = (_p + 1) * _n // _parts
        run_loop(_start, _stop, {args})
"""

# The element loop of a part, compiled inside the worker with ``noalias`` array arguments (as Numba compiles
# the body of a parallel loop), so that LLVM may reorder one array's loads before another's stores.
_LOOP = """
def {name}(_start, _stop, {args}):
    for i in range(uint64(_start), uint64(_stop)):
        element(i, {args})
"""

#: The C signature of a worker: Numba's parallel kernel ``void(char **args, intp *dims, intp *steps, void
#: *data)`` (``args`` seen as integers: its one entry is the first part's number).
WORKER_SIGNATURE = types.void(
    types.CPointer(types.intp), types.CPointer(types.intp), types.CPointer(types.intp), types.voidptr
)

_BYTE_P = ir.IntType(8).as_pointer()
_INTP = ir.IntType(64)

#: (module, function name) -> (the function, its salt) of every entry made in this process: how a cached
#: entry finds its worker again.
_FUNCTIONS: dict[tuple[str, str], tuple[Callable, str]] = {}
#: symbol name -> the worker's cfunc (kept alive: its code must not be freed while the symbol is in use).
_WORKERS: dict[str, Any] = {}


def _digest(*texts: str) -> str:
    return hashlib.sha1("\0".join(texts).encode()).hexdigest()[:12]


@functools.cache
def _module_source() -> str:
    return inspect.getsource(sys.modules[__name__])


def _params(py_func: Callable) -> list[str]:
    return list(inspect.signature(py_func).parameters)[1:]


def _key(py_func: Callable) -> tuple[str, str]:
    return py_func.__module__, py_func.__qualname__


def symbol_name(py_func: Callable, arg_types: tuple, salt: str = "") -> str:
    """The symbol of the worker of ``py_func`` for arguments of ``arg_types`` (a Numba type per argument);
    ``salt``: the text of whatever generated ``py_func`` (see :func:`entry`)."""
    module, name = _key(py_func)
    return f"optkernels_chunks_{name}_{_digest(module, name, _module_source(), salt, str(arg_types))}"


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


def _loop_runner(loop: Callable) -> Any:
    """An intrinsic ``run_loop(start, stop, *arguments)`` calling ``loop`` compiled as a subroutine whose
    array arguments are ``noalias``, inlined into the worker (``alwaysinline``).

    The inlining is what makes the worker's code the same in every process. The subroutine is compiled
    into a library of its own, which Numba finalises into the process's JIT at once, and the worker's
    module gets a weak (``linkonce_odr``) copy of it. A call left in the worker names that copy's symbol,
    and the JIT resolves a weak symbol to a definition it already holds. In the process that compiles
    the worker, that is the separate library's copy, which is optimised once and, for a multi-tensor
    row loop, not vectorised. Loaded from the cache it is the worker's own copy, optimised twice over
    and vectorised. Inlined, no such call is left."""

    @intrinsic
    def run_loop(typingctx, start, stop, *args):
        signature = types.void(types.int64, types.int64, *args)

        def codegen(context, builder, sig, llargs):
            flags = compiler.Flags()
            flags.noalias = True
            flags.nrt = True
            flags.error_model = "numpy"
            flags.forceinline = True
            result = context.compile_subroutine(builder, loop, signature, flags=flags, caching=False)
            values = cgutils.unpack_tuple(builder, llargs[2], len(args))
            first, last = (context.cast(builder, v, t, types.int64) for v, t in zip(llargs[:2], sig.args[:2]))
            context.call_internal(builder, result.fndesc, signature, [first, last, *values])
            return context.get_dummy_value()

        return types.void(start, stop, types.StarArgTuple.from_types(args)), codegen

    return run_loop


@functools.cache
def _loader(packed: types.Tuple) -> Any:
    """An intrinsic ``load_packed(data)`` reading a ``packed`` tuple from the address ``data``."""

    @intrinsic
    def load_packed(typingctx, data):
        def codegen(context, builder, signature, args):
            pointer = builder.bitcast(args[0], context.get_value_type(packed).as_pointer())
            value = builder.load(pointer)
            # the arrays as borrowed views, without their memory-info pointers: Numba takes the value of an
            # intrinsic as a new reference, and would release each array once per thread on return
            for k, member in enumerate(packed.types):
                if isinstance(member, types.Array):
                    array = context.make_array(member)(context, builder, builder.extract_value(value, k))
                    array.meminfo = cgutils.get_null_value(array.meminfo.type)
                    array.parent = cgutils.get_null_value(array.parent.type)
                    value = builder.insert_value(value, array._getvalue(), k)
            return value

        return packed(data), codegen

    return load_packed


def compile_worker(py_func: Callable, arg_types: tuple, cache: bool = True, salt: str = "") -> Any:
    """The chunk worker of ``py_func`` for arguments of ``arg_types``, compiled as a C function (cached on
    disk unless ``cache`` is False: a fresh compile keeps its assembly for ``inspect_asm``)."""
    packed = types.Tuple((types.int64, types.int64, *arg_types))
    name = f"_chunks_{py_func.__name__}_{symbol_name(py_func, arg_types, salt)[-12:]}"
    element = numba.njit(inline="always", **_JIT_OPTIONS)(py_func)
    loop = generate(_LOOP, f"{name}_loop", py_func, {"uint64": np.uint64, "element": element})
    namespace = {"load_packed": _loader(packed), "run_loop": _loop_runner(loop)}
    function = generate(_WORKER, name, py_func, namespace)
    return numba.cfunc(WORKER_SIGNATURE, cache=cache, **_JIT_OPTIONS)(function)


def ensure_worker(py_func: Callable, arg_types: tuple, salt: str = "") -> str:
    """Compile (or load) the worker of ``py_func`` for ``arg_types`` and register its symbol; return the
    symbol name. Called with Numba's compiler lock held (typing, or loading a cached entry)."""
    symbol = symbol_name(py_func, arg_types, salt)
    if symbol not in _WORKERS:
        worker = compile_worker(py_func, arg_types, salt=salt)
        binding.add_symbol(symbol, worker.address)
        _WORKERS[symbol] = worker
    return symbol


def reload_worker(module: str, name: str, arg_types: tuple) -> None:
    """Before a cached entry is loaded: register its worker (Numba runs this from the entry's
    ``reload_init``; ``module`` and ``name`` are those of the function :func:`entry` was made for, which
    exists in this process since its entry is being called)."""
    py_func, salt = _FUNCTIONS[(module, name)]
    ensure_worker(py_func, arg_types, salt)


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


def _runner(py_func: Callable, salt: str) -> Any:
    """The intrinsic ``run_chunks(parallel, n, args)`` of ``py_func``'s entry (see the module docstring)."""
    module, name = _key(py_func)

    @intrinsic
    def run_chunks(typingctx, parallel, n, *args):
        arg_types = tuple(args)
        symbol = ensure_worker(py_func, arg_types, salt)
        packed = types.Tuple((types.int64, types.int64, *arg_types))

        def codegen(context, builder, signature, llargs):
            context.active_code_library._reload_init.add(
                functools.partial(reload_worker, module, name, arg_types)
            )
            is_parallel, count, values = llargs
            items = cgutils.unpack_tuple(builder, values, len(arg_types))
            count = context.cast(builder, count, signature.args[1], types.int64)
            mod = builder.module
            worker = cgutils.get_or_insert_function(
                mod,
                ir.FunctionType(
                    ir.VoidType(), [_BYTE_P.as_pointer(), _INTP.as_pointer(), _INTP.as_pointer(), _BYTE_P]
                ),
                symbol,
            )
            num_threads = builder.call(
                cgutils.get_or_insert_function(mod, ir.FunctionType(_INTP, []), "get_num_threads"), []
            )
            is_parallel = context.cast(builder, is_parallel, signature.args[0], types.boolean)
            use_pool = builder.and_(is_parallel, builder.icmp_signed(">", num_threads, _INTP(1)))
            parts = builder.select(use_pool, num_threads, _INTP(1))
            slot = cgutils.alloca_once(builder, context.get_value_type(packed))
            builder.store(context.make_tuple(builder, packed, [count, parts, *items]), slot)
            data = builder.bitcast(slot, _BYTE_P)
            with builder.if_else(use_pool) as (pool, alone):
                with pool:
                    parallel_for = cgutils.get_or_insert_function(
                        mod, ir.FunctionType(ir.VoidType(), [_BYTE_P] * 5 + [_INTP] * 3), "numba_parallel_for"
                    )
                    # (kernel, args, dims, steps, data, inner dimensions, array arguments, threads)
                    arrays = [builder.bitcast(a, _BYTE_P) for a in _part_arguments(builder, _INTP(0), parts)]
                    fn = builder.bitcast(worker, _BYTE_P)
                    builder.call(parallel_for, [fn, *arrays, data, _INTP(0), _INTP(1), parts])
                with alone:
                    builder.call(worker, [*_part_arguments(builder, _INTP(0), _INTP(1)), data])
            return context.get_dummy_value()

        return types.void(parallel, n, types.StarArgTuple.from_types(args)), codegen

    return run_chunks


def entry(py_func: Callable, salt: str = "") -> Any:
    """The cached entry of ``py_func``'s chunked CPU launch: ``entry(parallel, n, *arguments)`` runs
    ``py_func(i, *arguments)`` for ``i`` in ``0 .. n - 1`` (a Numba dispatcher; ``parallel``: False to run
    on the calling thread only). ``salt``: the text of whatever generated ``py_func`` (a template), part of
    the compiled functions' names so that a changed generator never loads a stale cache entry."""
    _FUNCTIONS.setdefault(_key(py_func), (py_func, salt))
    name = f"_chunked_{py_func.__name__}_{_digest(_ENTRY, _WORKER, _module_source(), salt)}"
    function = generate(_ENTRY, name, py_func, {"run_chunks": _runner(py_func, salt)})
    return numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True, **_JIT_OPTIONS)(function)
