"""C workers launched on Numba's threads straight from Python: no entry or parallel loop compiled per kernel.

A *packed worker* is a C function (``numba.cfunc``, cached on disk) with the signature of a parallel kernel
of Numba's threading layer, ``worker(args, dims, steps, data)`` (:data:`WORKER_SIGNATURE`):

* ``data`` points at the call's arguments packed as one Numba tuple, which the worker reads with the
  intrinsic of :func:`loader` (its arrays borrowed: the caller keeps them alive);
* it runs parts ``args[0] - 1 .. args[0] - 1 + dims[0] - 1`` of the call's parts (``args[0]`` is one more
  than the first part's number: GNU OpenMP's layer passes a null base pointer on unchanged).

:meth:`PackedWorker.launch` packs the arguments in Python (:mod:`struct`, each array as Numba's array
structure with null memory-info and parent pointers, given as a NumPy array or as its :class:`Fields`) and
hands the worker to the threading layer's ``parallel_for`` (the C function every Numba parallel loop
calls) through ctypes, which releases the GIL; with one part, one thread, or in a process forked from GNU
OpenMP (:func:`._threading.parallel_allowed`) it calls the worker on the calling thread. The launch itself compiles nothing, so a kernel's first call compiles its
worker only, and one launcher serves every worker and argument type. Under ``workqueue`` launches hold the
package's launch lock (:func:`._threading.parallel_launch`).
"""

from __future__ import annotations

import ast
import ctypes
import functools
import inspect
import struct
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from . import _chunks
from ._address import data_address
from ._threading import parallel_allowed, parallel_launch, thread_mask

#: The C signature of a worker: Numba's parallel kernel ``void(char **args, intp *dims, intp *steps, void
#: *data)`` (``args`` seen as integers: its one entry is the first part's number).
WORKER_SIGNATURE = types.void(
    types.CPointer(types.intp), types.CPointer(types.intp), types.CPointer(types.intp), types.voidptr
)


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


_JIT_OPTIONS = dict(error_model="numpy", fastmath=False)

#: :mod:`struct` codes of the scalar types a packed worker takes (native sizes and alignment, as LLVM lays
#: out Numba's tuple of their values: a boolean is one byte).
_SCALAR_CODES = {
    types.boolean: "?",
    types.int8: "b",
    types.uint8: "B",
    types.int16: "h",
    types.uint16: "H",
    types.int32: "i",
    types.uint32: "I",
    types.int64: "q",
    types.uint64: "Q",
    types.float32: "f",
    types.float64: "d",
}

_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_WORKER_CALL = ctypes.CFUNCTYPE(None, _SIZE_P, _SIZE_P, _SIZE_P, ctypes.c_char_p)
_PARALLEL_FOR = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    _SIZE_P,
    _SIZE_P,
    _SIZE_P,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_size_t,
    ctypes.c_int,
)
#: ``args`` and ``steps`` of every launch: part numbers from 1 (see the module docstring), one apart.
_ONE = (ctypes.c_size_t * 1)(1)
#: ``dims`` of launches of up to 256 parts (read only by the threading layer: shared by every launch).
_DIMS = [(ctypes.c_size_t * 1)(parts) for parts in range(257)]


def type_key(value: Any) -> Any:
    """What Numba's type of an argument depends on, found faster than :func:`numba.typeof`."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        return value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    return type(value)


class Fields(tuple):
    """A packed array argument given by the fields of its Numba structure (see :func:`array_fields`)."""


def array_fields(address: int, shape: tuple, itemsize: int) -> Fields:
    """The packed fields of a C-contiguous array of ``shape`` whose items of ``itemsize`` bytes start at
    ``address`` (memory the caller keeps alive: a view computed without making a NumPy view)."""
    strides = []
    step = itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return Fields((0, 0, step // itemsize, itemsize, address, *shape, *reversed(strides)))


def _code(t: Any) -> str:
    if isinstance(t, types.Array):
        # (meminfo, parent, nitems, itemsize, data, shape..., strides...)
        return "PPnnP" + "n" * (2 * t.ndim)
    code = _SCALAR_CODES.get(t)
    if code is None:
        raise TypeError(f"a packed worker takes arrays, booleans, integers and floats, not {t}")
    return code


def loader(arg_types: tuple) -> Any:
    """The intrinsic ``load_packed(data)`` returning the tuple of ``arg_types`` packed at ``data``."""
    return _loader(types.Tuple(arg_types))


class PackedWorker:
    """A packed worker compiled for one tuple of argument types, and its launch.

    Args:
        function: the Python function ``f(args, dims, steps, data)`` (see the module docstring).
        arg_types: the Numba types of the packed arguments, in order.
        cache: cache the compiled worker on disk (False: a fresh compile, whose LLVM IR and assembly can be
            inspected through :attr:`cfunc`).
    """

    def __init__(self, function: Callable, arg_types: tuple, cache: bool = True):
        self.arg_types = tuple(arg_types)
        self.struct = struct.Struct("@" + "".join(map(_code, self.arg_types)))
        context = cpu_target.target_context
        value_type = context.get_value_type(types.Tuple(self.arg_types))
        size, align = context.get_abi_sizeof(value_type), context.get_abi_alignment(value_type)
        if -(-self.struct.size // align) * align != size:  # C and LLVM layouts differ here: never launch
            raise RuntimeError(f"packed arguments take {self.struct.size} bytes, the worker reads {size}")
        self.cfunc = numba.cfunc(WORKER_SIGNATURE, cache=cache, **_JIT_OPTIONS)(function)
        self.address = self.cfunc.address
        self._call = _WORKER_CALL(self.address)
        self._pack = _packer(self.arg_types, self.struct.pack)

    def pack(self, args: tuple) -> bytes:
        """``args`` (of :attr:`arg_types`: an array as a NumPy array or its :class:`Fields`) as the worker
        reads them; the arrays' memory must outlive its run."""
        return self._pack(args)

    def launch(self, parts: int | None, args: tuple) -> None:
        """Run the worker over ``parts`` parts (None: one per thread of the calling thread's Numba thread
        count) with ``args``, on Numba's threads (see the module docstring)."""
        self.launch_packed(parts, self._pack(args))

    def launch_packed(self, parts: int | None, data: Any) -> None:
        """:meth:`launch` of arguments packed already: :meth:`pack`'s bytes, or a ctypes character array
        holding them (which a caller may keep, and rewrite between launches)."""
        with parallel_launch():
            threads = thread_mask()[0]() if parallel_allowed() else 1
            if parts is None:
                parts = threads
            if parts <= 0:
                return
            dims = _DIMS[parts] if parts < len(_DIMS) else (ctypes.c_size_t * 1)(parts)
            if parts > 1 and threads > 1:
                _parallel_for()(self.address, _ONE, dims, _ONE, data, 0, 1, threads)
            else:
                self._call(_ONE, dims, _ONE, data)


def _packer(arg_types: tuple, pack: Callable) -> Callable:
    """``pack`` (a :class:`struct.Struct`'s) of the values of ``arg_types``' arguments, unrolled for their
    types: launches pack their arguments from Python on every call, where a loop testing each argument's
    type cost a good part of a small call's time."""
    names = [f"a{k}" for k in range(len(arg_types))]
    items = [
        f"*({a} if type({a}) is Fields else (0, 0, {a}.size, {a}.itemsize, address({a}), *{a}.shape, *{a}.strides))"
        if isinstance(t, types.Array)
        else a
        for a, t in zip(names, arg_types)
    ]
    source = f"def pack_args(args):\n    {', '.join(names)}, = args\n    return pack({', '.join(items)})\n"
    namespace: dict[str, Any] = {"pack": pack, "Fields": Fields, "address": data_address}
    exec(source, namespace)
    return namespace["pack_args"]


@functools.cache
def _parallel_for() -> Any:
    """The threading layer's ``parallel_for`` (Numba registers its address once the layer is launched,
    which :func:`._threading.parallel_launch` has done)."""
    from llvmlite import binding

    return _PARALLEL_FOR(binding.address_of_symbol("numba_parallel_for"))


_EACH_PART = """
def {name}(_args, _dims, _steps, _data):
    {unpack} = load_packed(_data)
    _first = _args[0] - 1
    for {part} in range(_first, _first + _dims[0]):
{body}
"""

_ONCE = """
def {name}(_args, _dims, _steps, _data):
    {unpack} = load_packed(_data)
{body}
"""


@functools.cache
def _module_source() -> str:
    return inspect.getsource(sys.modules[__name__]) + inspect.getsource(_chunks)


def _body(py_func: Callable, each_part: bool) -> str:
    """The statements of ``py_func`` (its docstring left out), dedented to the left margin."""
    source = textwrap.dedent(inspect.getsource(py_func))
    function = ast.parse(source).body[0]
    if not isinstance(function, ast.FunctionDef):
        raise TypeError(f"{py_func.__name__} must be a plain function")
    statements = function.body
    if isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]  # the docstring
    if each_part and any(isinstance(node, ast.Return) for node in ast.walk(function)):
        raise ValueError(f"{py_func.__name__} runs inside the worker's loop over parts: it cannot return")
    lines = source.splitlines()[statements[0].lineno - 1 : function.end_lineno]
    return textwrap.dedent("\n".join(lines))


def packed(
    py_func: Callable, arg_types: tuple, each_part: bool = True, salt: str = "", cache: bool = True
) -> PackedWorker:
    """The packed worker of ``py_func`` for arguments of ``arg_types``: with ``each_part``, the body of
    ``py_func(part, *args)`` for each of its parts (a body without ``return``); otherwise the body of
    ``py_func(*args)`` once per call, whatever its parts. The worker is one function: ``py_func``'s
    statements under the worker's own first lines (where a call, or ``inline="always"``, which copies the
    callee's Numba IR, would cost a second compile), with ``py_func``'s module globals. ``salt``: text on
    which ``py_func`` depends beyond its own file. The worker's name carries a digest of the template, the
    types, this module's source and ``salt``, so that a changed generator never loads a stale cache entry
    (Numba's cache is keyed to ``py_func``'s file)."""
    params = list(inspect.signature(py_func).parameters)
    template = _EACH_PART if each_part else _ONCE
    unpacked = params[1:] if each_part else params
    body = textwrap.indent(_body(py_func, each_part), " " * (8 if each_part else 4))
    digest = _chunks._digest(template, _module_source(), salt, str(arg_types))
    name = f"_packed_{py_func.__name__}_{digest}"
    source = template.format(name=name, unpack=", ".join(unpacked) + ",", part=params[0], body=body)
    namespace = dict(py_func.__globals__, load_packed=loader(arg_types))
    return PackedWorker(_chunks.define(name, source, py_func, namespace), arg_types, cache)


_part_workers: dict[tuple, PackedWorker] = {}


def run_parts(parts: int, py_func: Callable, args: tuple) -> None:
    """``py_func(part, *args)`` for every ``part`` in ``0 .. parts - 1`` on Numba's threads, each part on one
    thread (a packed worker compiled by :func:`packed` on first use per argument types)."""
    key = (py_func, *map(type_key, args))
    worker = _part_workers.get(key)
    if worker is None:
        worker = _part_workers.setdefault(key, packed(py_func, tuple(map(numba.typeof, args))))
    worker.launch(parts, args)
