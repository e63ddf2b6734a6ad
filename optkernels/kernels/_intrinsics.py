"""CPU instructions that Numba does not expose, as Numba intrinsics:

* :func:`prefetch_read` / :func:`prefetch_write`: a software prefetch (LLVM's ``llvm.prefetch``; on x86
  ``prefetcht0`` / ``prefetchw``) of the cache line holding ``a[i, j]`` of a 2-D array
  (:func:`prefetch_address`: of a raw address). It never faults and never changes a value: it only asks the
  memory system to start loading the line, so that a loop over scattered rows (or objects reached through
  pointers) overlaps their cache misses instead of waiting for each in turn. :func:`prefetch_read_far`
  (x86 ``prefetcht1``) loads the line into the caches below the first only, for lines needed further ahead;
  :func:`prefetch_write_item` prefetches the line of ``a[i]`` of a 1-D array for writing.
* :func:`fetch_add`: an atomic ``a[i] += value`` on an int64 array that returns the old value (LLVM's
  ``atomicrmw add``). The sparse row loops hand out their tasks with it: a thread that is late (woken from
  sleep, or sharing its core with another program) simply takes fewer tasks. Which thread runs a task never
  changes what the task computes, so results stay the same bits. Numba's analysis does not see this write:
  read such a counter with ``fetch_add(a, i, 0)`` too (a plain read after a parallel loop may see the value
  from before it).
* :func:`call_cfunc`: call a C function compiled by ``numba.cfunc`` through its address (``.address``, an
  integer argument), so that a small parallel loop can run large compiled code without Numba lowering and
  optimising that code again inside the loop (and with no per-call typing of a function object).
* :func:`fma`: ``a*b + c`` rounded once (LLVM's ``llvm.fma``), for element functions that reproduce
  torch's CPU rounding, whose vector loops fuse multiply-adds. Compiled code (CPU and CUDA) calls the
  intrinsic; from Python (the CUDA simulator's element functions) it is computed exactly and rounded once.
  On x86-64 with FMA3 (Haswell and later) and on ARM64 it is one instruction; where the target has none,
  LLVM calls libm's ``fma``, which is correctly rounded too: the same bits, slower.
* :func:`rsqrt_estimate`, :func:`rsqrt14`: the x86 ``rsqrtss`` (about 12 bits, its bits set by the
  processor) and AVX-512 ``vrsqrt14ss``/``vrsqrt14sd`` (14 bits) estimates of ``1/√x`` for a float32 (and
  a float64 for ``vrsqrt14sd``), the first step of MKL's sqrt kernels that torch's CPU ``sqrt`` runs
  (:mod:`optkernels.kernels.torch_rules`). Where the instruction is missing (ARM64, CUDA, no AVX-512) they
  are ``1/√x`` rounded.
* :func:`sqrt_special` and :func:`quotient_special`: IEEE ``sqrt``'s and IEEE division's results for the
  float32 inputs outside a computed kernel's path (zeros, infinities, NaN, negatives), by one AVX-512
  ``vfixupimmps`` per vector (by the input's class), a select elsewhere.
* :func:`byte_permutes` and :func:`lookup_block`: AVX-512 VBMI's byte permute ``vpermi2b`` as a table
  lookup: 256 float32 values, kept as four planes of their bytes (:func:`byte_planes`), are looked up for
  256 byte indices with 32 register permutes instead of 256 loads (a vector gather). The kernels call it
  only where :func:`byte_permutes` is true (an x86 target with AVX-512 VBMI, decided when compiling) and
  otherwise loop over the table (the same bits: both are the table's values times one float32).
* :func:`scalar_lookups`: ``data[k] ← table[data[k]]`` over a run of 32-bit words, one scalar load per
  word. A vector gather fetches about one element per cycle on some processors (AMD Zen 4), while their
  load ports take three scalar loads a cycle; LLVM would turn a plain loop of such loads back into
  gathers, so on x86-64 each table load is an inline-assembly ``mov``.
* :func:`register_search`, :func:`search_block`, :func:`search_dynamic_block`,
  :func:`search_dynamic_nonnegative` and :func:`search_dynamic_finite`: the nearest code of 256 values ``s/top`` without table loads per
  value. ``search_block``: a binary search of 8 steps over 255
  integer thresholds held in AVX-512 registers (``vpermd``/``vpermt2d`` pick each step's candidates), for
  any ascending table. ``search_dynamic_block``: for bitsandbytes' dynamic maps, a start from the value's
  decade (register permutes of per-binade tables) and one threshold looked up by ``vpermi2b`` byte
  permutes (``search_dynamic_nonnegative``: the same for values known to be in ``[+0, top]``, and
  ``search_dynamic_finite`` for finite values in ``[-top, top]``, with less work). Used only where :func:`register_search` (AVX-512F; the dynamic ones also :func:`byte_permutes`)
  is true, decided when compiling.
"""

from __future__ import annotations

import functools
import math
import platform
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

#: Bytes per cache line assumed by the prefetching loops (x86-64 and most ARM64 cores).
CACHE_LINE_BYTES = 64

_I32 = ir.IntType(32)


def _prefetch_pointer(builder: Any, pointer: Any, write: int, locality: int = 3) -> None:
    """Emit ``llvm.prefetch`` of the line at ``pointer`` (any pointer type)."""
    if getattr(pointer.type, "is_opaque", False):
        name = "llvm.prefetch.p0"
    else:  # LLVM with typed pointers
        pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        name = "llvm.prefetch.p0i8"
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [pointer.type, _I32, _I32, _I32]), name
    )
    # (address, read 0 / write 1, locality: 3 = keep in all cache levels, 2 = not in the first, data cache 1)
    builder.call(function, [pointer, _I32(write), _I32(locality), _I32(1)])


def _prefetch_codegen(write: int, locality: int = 3):
    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        indices = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], signature.args[1:])]
        pointer = cgutils.get_item_pointer(context, builder, array_type, array, indices, wraparound=False)
        _prefetch_pointer(builder, pointer, write, locality)
        return context.get_dummy_value()

    return codegen


def _check_2d(array, i, j):
    if not (
        isinstance(array, types.Array)
        and array.ndim == 2
        and isinstance(i, types.Integer)
        and isinstance(j, types.Integer)
    ):
        raise TypingError("prefetch takes a 2-D array and two integer indices")


@intrinsic
def prefetch_read(typingctx, array, i, j):
    """Prefetch the cache line of ``array[i, j]`` (2-D array) for reading; no effect on values."""
    _check_2d(array, i, j)
    return types.void(array, i, j), _prefetch_codegen(0)


@intrinsic
def prefetch_read_far(typingctx, array, i, j):
    """Prefetch the cache line of ``array[i, j]`` (2-D array) for reading into the caches below the first
    (x86 ``prefetcht1``: no first-level miss buffer held while it is fetched); no effect on values."""
    _check_2d(array, i, j)
    return types.void(array, i, j), _prefetch_codegen(0, 2)


@intrinsic
def prefetch_write(typingctx, array, i, j):
    """Prefetch the cache line of ``array[i, j]`` (2-D array) for writing; no effect on values."""
    _check_2d(array, i, j)
    return types.void(array, i, j), _prefetch_codegen(1)


@intrinsic
def prefetch_write_item(typingctx, array, i):
    """Prefetch the cache line of ``array[i]`` (1-D array) for writing; no effect on values."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(i, types.Integer)):
        raise TypingError("prefetch_write_item takes a 1-D array and an integer index")
    return types.void(array, i), _prefetch_codegen(1)


@intrinsic
def prefetch_address(typingctx, address):
    """Prefetch the cache line holding byte ``address`` (an integer) for reading; never faults (an address
    that maps nothing is ignored), no effect on values."""
    if not isinstance(address, types.Integer):
        raise TypingError("prefetch_address takes an integer address")

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        _prefetch_pointer(builder, pointer, 0)
        return context.get_dummy_value()

    return types.void(address), codegen


@intrinsic
def fetch_add(typingctx, array, i, value):
    """Atomically ``array[i] += value`` (1-D int64 array) and return the value before the addition."""
    if not (
        isinstance(array, types.Array)
        and array.ndim == 1
        and array.dtype == types.int64
        and isinstance(i, types.Integer)
        and isinstance(value, types.Integer)
    ):
        raise TypingError("fetch_add takes a 1-D int64 array, an integer index and an integer value")

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        data = context.make_array(array_type)(context, builder, args[0])
        i = context.cast(builder, args[1], signature.args[1], types.intp)
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, [i], wraparound=False)
        addend = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", pointer, addend, "seq_cst")

    return types.int64(array, i, value), codegen


@intrinsic
def call_cfunc(typingctx, address, args):
    """Call the ``numba.cfunc`` whose ``.address`` is ``address`` (an integer) with the values of the tuple
    ``args``; it returns nothing. The function must have been compiled for ``void(*types of args)`` (the C
    signature of a cfunc: each argument as Numba's value of its type, an array as its structure, which is
    the same whatever its layout flags); nothing checks that at run time."""
    if not (isinstance(address, types.Integer) and isinstance(args, types.BaseTuple)):
        raise TypingError("call_cfunc takes an integer address and a tuple of arguments")

    def codegen(context, builder, signature, llargs):
        arg_types = signature.args[1].types
        function_type = ir.FunctionType(ir.VoidType(), [context.get_value_type(t) for t in arg_types])
        function = builder.inttoptr(llargs[0], function_type.as_pointer())
        builder.call(function, cgutils.unpack_tuple(builder, llargs[1], len(arg_types)))
        return context.get_dummy_value()

    return types.void(address, args), codegen


@intrinsic
def _llvm_fma(typingctx, a, b, c):
    """``llvm.fma`` of three floats of one type (float32 or float64)."""
    if not (isinstance(a, types.Float) and a == b == c):
        raise TypingError(f"fma takes three floats of one type, got ({a}, {b}, {c})")

    def codegen(context, builder, signature, args):
        llvm_type = context.get_value_type(signature.return_type)
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(llvm_type, [llvm_type] * 3),
            f"llvm.fma.{llvm_type.intrinsic_name}",
        )
        return builder.call(function, list(args))

    return a(a, b, c), codegen


def fma(a: float, b: float, c: float) -> Any:
    """``a*b + c`` rounded once (IEEE 754 ``fusedMultiplyAdd``, round to nearest even); ``a``, ``b``, ``c``
    floats of one type (float32 or float64), the result of that type.

    In compiled code (Numba CPU and CUDA) this is LLVM's ``llvm.fma``. Called from Python (the CUDA
    simulator runs element functions as Python, where a compiled helper's float32 result comes back as a
    Python float) it is computed exactly with fractions and rounded once: to float32 if any argument is a
    NumPy float32, else to float64; returned as a NumPy scalar of that type.
    """
    dtype = np.float32 if any(isinstance(x, np.float32) for x in (a, b, c)) else np.float64
    with np.errstate(all="ignore"):
        return _fma_exact(a, b, c, dtype)


def _fma_exact(a: float, b: float, c: float, dtype: type) -> Any:
    if not all(math.isfinite(x) for x in (a, b, c)):
        return dtype(np.float64(a) * np.float64(b) + np.float64(c))
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if exact == 0:  # the sign of an exact zero: a*b and c are exact opposites, float64 arithmetic gets it
        return dtype(np.float64(a) * np.float64(b) + np.float64(c))
    try:
        nearest = dtype(float(exact))  # float() of a Fraction is correctly rounded to float64
    except OverflowError:
        return dtype(math.copysign(math.inf, exact))
    if dtype is np.float64 or not math.isfinite(nearest):
        return nearest
    # float64 then float32 may round twice: take the float32 neighbour nearest the exact value (even on a tie)
    candidates = (
        nearest,
        np.nextafter(nearest, np.float32(math.inf)),
        np.nextafter(nearest, np.float32(-math.inf)),
    )
    return min(
        (x for x in candidates if math.isfinite(x)),
        key=lambda x: (abs(Fraction(float(x)) - exact), int(x.view(np.uint32)) & 1),
    )


@overload(fma, jit_options=dict(inline="always", error_model="numpy", fastmath=False))
def _fma_compiled(a, b, c):
    if isinstance(a, types.Float) and a == b == c:
        return lambda a, b, c: _llvm_fma(a, b, c)
    raise TypingError(f"fma takes three floats of one type, got ({a}, {b}, {c})")


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _avx512() -> bool:
    from llvmlite import binding

    return _X86 and "+avx512f" in binding.get_host_cpu_features().flatten()


def _reciprocal_sqrt(builder: Any, value: Any) -> Any:
    llvm_type = value.type
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(llvm_type, [llvm_type]), f"llvm.sqrt.{llvm_type.intrinsic_name}"
    )
    return builder.fdiv(ir.Constant(llvm_type, 1.0), builder.call(function, [value]))


#: The packed forms of the scalar estimates, per float type: ``(lanes, intrinsic, AVX-512 masked form)``.
#: The loop vectoriser maps a call of the scalar function to them (:func:`_estimate_function`).
_PACKED = {
    "llvm.x86.sse.rsqrt.ss": ((4, "llvm.x86.sse.rsqrt.ps", False), (8, "llvm.x86.avx.rsqrt.ps.256", False)),
    "llvm.x86.avx512.rsqrt14.ss": (
        (4, "llvm.x86.avx512.rsqrt14.ps.128", True),
        (8, "llvm.x86.avx512.rsqrt14.ps.256", True),
        (16, "llvm.x86.avx512.rsqrt14.ps.512", True),
    ),
    "llvm.x86.avx512.rsqrt14.sd": (
        (2, "llvm.x86.avx512.rsqrt14.pd.128", True),
        (4, "llvm.x86.avx512.rsqrt14.pd.256", True),
        (8, "llvm.x86.avx512.rsqrt14.pd.512", True),
    ),
}


def _packed_available(name: str, lanes: int, element: Any) -> bool:
    """Whether the target compiled for has the packed intrinsic ``name`` of ``lanes`` elements."""
    features = _target_features().split(",")
    bits = (
        lanes * element.width
        if isinstance(element, ir.IntType)
        else lanes * (32 if element == ir.FloatType() else 64)
    )
    if "avx512" in name:
        return "+avx512f" in features and (bits == 512 or "+avx512vl" in features)
    return bits == 128 or "+avx" in features


def _estimate_call(builder: Any, name: str, value: Any) -> Any:
    """The x86 estimate ``name`` (scalar or packed) of ``value`` (a float, or a vector of them)."""
    if isinstance(value.type, ir.VectorType):
        vector, lanes = value.type, value.type.count
    else:
        vector = ir.VectorType(value.type, 128 // (32 if value.type == ir.FloatType() else 64))
        lanes = 1
    packed = value if lanes > 1 else builder.insert_element(ir.Constant(vector, None), value, _I32(0))
    scalar = name.endswith((".ss", ".sd"))
    masked = "avx512" in name
    operands = [packed] * (2 if scalar and masked else 1)
    types_ = [vector] * len(operands)
    if masked:  # (a, [b,] passthru, mask): all lanes
        operands.append(packed)
        types_.append(vector)
        mask = ir.IntType(max(8, vector.count))
        operands.append(mask(-1))
        types_.append(mask)
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, types_), name)
    result = builder.call(function, operands)
    return result if lanes > 1 else builder.extract_element(result, _I32(0))


def _keep(module: Any, functions: list) -> None:
    """Add ``functions`` to ``module``'s ``llvm.compiler.used``: the vector variants are unused until the
    vectoriser runs, and would be removed as dead code before it (LLVM keeps its own variants so)."""
    used = module.globals.get("llvm.compiler.used")
    if used is None:
        used = ir.GlobalVariable(module, ir.ArrayType(functions[0].type, 0), "llvm.compiler.used")
        used.linkage = "appending"
        used.section = "llvm.metadata"
        used.initializer = ir.Constant(used.value_type, [])
    values = list(used.initializer.constant) + list(functions)
    used.value_type = ir.ArrayType(functions[0].type, len(values))
    used.initializer = ir.Constant(used.value_type, values)


def _estimate_function(module: Any, name: str, llvm_type: Any) -> Any:
    """The function ``float f(float)`` (in ``module``) computing the scalar estimate ``name``, with its
    packed forms as vector variants the loop vectoriser substitutes for it (LLVM's
    ``vector-function-abi-variant``): a loop calling it vectorises, each lane computed by the packed
    instruction, which gives each lane the scalar instruction's bits. It is kept out of line
    (``noinline``) until the vectoriser has seen the call; the packed forms are inlined after it."""
    scalar_name = ESTIMATE_PREFIX + name.split("x86.")[1].replace(".", "_")
    return _with_vector_variants(
        module,
        scalar_name,
        llvm_type,
        1,
        _PACKED[name],
        lambda builder, packed, _, args: _estimate_call(builder, packed, args[0]),
        lambda builder, args: _estimate_call(builder, name, args[0]),
    )


def _with_vector_variants(
    module: Any,
    scalar_name: str,
    element: Any,
    arity: int,
    packed_forms: tuple,
    vector_body: Callable,
    scalar_body: Callable,
) -> Any:
    """The function ``scalar_name`` of ``arity`` ``element`` arguments in ``module`` (made once, kept out of
    line), returning ``scalar_body(builder, arguments)``, with a vector variant per ``(lanes, intrinsic,
    flag)`` of ``packed_forms`` that the target has: ``vector_body(builder, intrinsic, flag, arguments)``
    on vectors of ``lanes``, inlined wherever the loop vectoriser substitutes it (LLVM's
    ``vector-function-abi-variant``)."""
    function = module.globals.get(scalar_name)
    if function is not None:
        return function
    variants: list = []
    kept: list = []
    for lanes, packed, flag in packed_forms:
        if not _packed_available(packed, lanes, element):
            continue
        vector = ir.VectorType(element, lanes)
        vector_function = ir.Function(
            module, ir.FunctionType(vector, [vector] * arity), f"{scalar_name}_v{lanes}"
        )
        vector_function.linkage = "linkonce_odr"
        for attribute in ("nounwind", "memory(none)", "alwaysinline"):
            set.add(vector_function.attributes, attribute)
        block = ir.IRBuilder(vector_function.append_basic_block())
        block.ret(vector_body(block, packed, flag, list(vector_function.args)))
        variants.append(f"_ZGV_LLVM_N{lanes}{'v' * arity}_{scalar_name}({vector_function.name})")
        kept.append(vector_function)
    function = ir.Function(module, ir.FunctionType(element, [element] * arity), scalar_name)
    function.linkage = "linkonce_odr"
    for attribute in ("nounwind", "memory(none)", "noinline", "willreturn"):
        set.add(function.attributes, attribute)
    if variants:
        set.add(function.attributes, '"vector-function-abi-variant"="' + ",".join(variants) + '"')
        _keep(module, kept)
    block = ir.IRBuilder(function.append_basic_block())
    block.ret(scalar_body(block, list(function.args)))
    return function


#: Prefix of the functions :func:`_estimate_function` defines (their vector variants end in ``_v<lanes>``).
ESTIMATE_PREFIX = "optkernels."


def inline_vector_variants(codegen: Any, module: Any) -> None:
    """Inline, in the optimised LLVM ``module`` (llvmlite binding), the calls of the estimates' vector
    variants that the loop vectoriser made (it runs after the inliner, so each packed estimate would stay a
    call, around which every live vector register is spilled): one always-inline pass, where any is used.
    ``codegen``: the Numba CPU codegen that optimised the module (its target machine)."""
    from llvmlite import binding

    if not any(
        f.name.startswith(ESTIMATE_PREFIX) and f.name.rsplit("_", 1)[-1][:1] == "v" and not f.is_declaration
        for f in module.functions
    ):
        return
    builder = codegen._pass_builder(opt=0, loop_vectorize=False, slp_vectorize=False)
    manager = binding.ModulePassManager()
    manager.add_always_inliner_pass()
    manager.run(module, builder)


def _estimate_intrinsic(names: dict, available: Callable[[], bool]) -> Any:
    """An intrinsic calling the x86 scalar estimate ``names[type]`` (per float type; a type without one gets
    ``1/sqrt``) through :func:`_estimate_function` (so that loops calling it vectorise), ``1/sqrt`` where
    unavailable."""

    def typer(typingctx, x):
        if not isinstance(x, types.Float):
            raise TypingError(f"a reciprocal square root estimate takes a float, got {x}")

        def codegen(context, builder, signature, args):
            from numba.core.cpu import CPUContext

            (value,) = args
            name = names.get(signature.args[0])
            if name is None or not isinstance(context, CPUContext) or not available():
                return _reciprocal_sqrt(builder, value)
            return builder.call(_estimate_function(builder.module, name, value.type), [value])

        return x(x), codegen

    typer.__name__ = names[types.float32].replace(".", "_")
    return intrinsic(typer)


_rsqrt_estimate = _estimate_intrinsic({types.float32: "llvm.x86.sse.rsqrt.ss"}, lambda: _X86)
# vrsqrt14ss/sd(a, b, passthru, mask): lane 0 is rsqrt14(b[0])
_rsqrt14 = _estimate_intrinsic(
    {types.float32: "llvm.x86.avx512.rsqrt14.ss", types.float64: "llvm.x86.avx512.rsqrt14.sd"}, _avx512
)


def rsqrt_estimate(x: float) -> Any:
    """The processor's estimate of ``1/√x`` for a float32 ``x`` (x86 ``rsqrtss``, relative error below
    1.5·2⁻¹²; the exact bits differ between processor makers); ``1/√x`` rounded for a float64 ``x`` and on
    other targets. Called from Python, it runs the compiled CPU version (a NumPy scalar of ``x``'s type)."""
    if isinstance(x, np.float32):
        return np.float32(_rsqrt_estimate_cpu(x))
    return np.float64(_rsqrt_estimate_cpu(np.float64(x)))


def rsqrt14(x: float) -> Any:
    """AVX-512's ``vrsqrt14ss`` (float32 ``x``) or ``vrsqrt14sd`` (float64 ``x``) estimate of ``1/√x``
    (relative error below 2⁻¹⁴); ``1/√x`` rounded on targets without AVX-512. From Python: as
    :func:`rsqrt_estimate`."""
    if isinstance(x, np.float32):
        return np.float32(_rsqrt14_cpu(x))
    return np.float64(_rsqrt14_cpu(np.float64(x)))


@overload(rsqrt_estimate, jit_options=dict(inline="always", error_model="numpy", fastmath=False))
def _rsqrt_estimate_compiled(x):
    if isinstance(x, types.Float):
        return lambda x: _rsqrt_estimate(x)
    raise TypingError(f"rsqrt_estimate takes a float, got {x}")


@overload(rsqrt14, jit_options=dict(inline="always", error_model="numpy", fastmath=False))
def _rsqrt14_compiled(x):
    if isinstance(x, types.Float):
        return lambda x: _rsqrt14(x)
    raise TypingError(f"rsqrt14 takes a float, got {x}")


@numba.njit(cache=True)
def _rsqrt_estimate_cpu(x):
    return _rsqrt_estimate(x)


@numba.njit(cache=True)
def _rsqrt14_cpu(x):
    return _rsqrt14(x)


#: ``vfixupimmps``'s response per class of its input (4 bits each, class 0 first: quiet NaN, signalling NaN,
#: ±0, +1, −∞, +∞, negative, positive) for :func:`sqrt_special`: the NaN quieted (2), ±0 and +∞ passed (1),
#: −∞ and negatives the default NaN (3), +1 and positives the computed root kept (0).
_SQRT_FIXUP_TABLE = 0x03130122
#: The same for :func:`quotient_special`: the NaN quieted (2), ±0 and ±∞ passed (1), every finite nonzero
#: value's computed quotient kept (0).
_QUOTIENT_FIXUP_TABLE = 0x00110122
_FIXUP_SCALAR = "llvm.x86.avx512.mask.fixupimm.ss"
#: ``(lanes, intrinsic, takes a rounding operand)`` of the packed forms of :data:`_FIXUP_SCALAR`.
_FIXUP_PACKED = (
    (4, "llvm.x86.avx512.mask.fixupimm.ps.128", False),
    (8, "llvm.x86.avx512.mask.fixupimm.ps.256", False),
    (16, "llvm.x86.avx512.mask.fixupimm.ps.512", True),
)


def _fixup_call(builder: Any, name: str, value: Any, x: Any, rounding: bool, table: int) -> Any:
    """``vfixupimm`` (intrinsic ``name``, on vectors) of ``value`` by the class of each lane of ``x``, with
    the response ``table``, every lane, no fault reported."""
    vector = value.type
    ints = ir.VectorType(_I32, vector.count)
    mask = ir.IntType(max(8, vector.count))
    operands = [value, x, ir.Constant(ints, [table] * vector.count), _I32(0), mask(-1)]
    if rounding:
        operands.append(_I32(4))  # the current rounding direction
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vector, [o.type for o in operands]), name
    )
    return builder.call(function, operands)


def _fixup_function(module: Any, name: str, table: int) -> Any:
    """The function ``float f(float value, float x)`` (in ``module``, named ``optkernels.<name>``) fixing
    ``value`` up by the class of ``x`` with the response ``table`` by the scalar ``vfixupimmss``, with its
    packed forms as vector variants (as :func:`_estimate_function`)."""

    def scalar_body(builder: Any, args: list) -> Any:
        vector = ir.VectorType(ir.FloatType(), 4)
        value, x = (builder.insert_element(ir.Constant(vector, None), a, _I32(0)) for a in args)
        return builder.extract_element(_fixup_call(builder, _FIXUP_SCALAR, value, x, True, table), _I32(0))

    return _with_vector_variants(
        module,
        ESTIMATE_PREFIX + name,
        ir.FloatType(),
        2,
        _FIXUP_PACKED,
        lambda builder, packed, rounding, args: _fixup_call(
            builder, packed, args[0], args[1], rounding, table
        ),
        scalar_body,
    )


def _sqrt_special_select(builder: Any, root: Any, x: Any) -> Any:
    """:func:`sqrt_special` without ``vfixupimm``: ``root`` where it is not NaN, else ``x`` for ``x ≥ 0``
    and ``(x − x)·∞`` otherwise (a NaN ``x`` quieted, the default NaN for a negative one)."""
    zero, infinity = ir.Constant(x.type, 0.0), ir.Constant(x.type, math.inf)
    outside = builder.select(
        builder.fcmp_ordered(">=", x, zero), x, builder.fmul(builder.fsub(x, x), infinity)
    )
    return builder.select(builder.fcmp_ordered("ord", root, root), root, outside)


def _avx512_here(context: Any) -> bool:
    """Whether code compiled now by ``context`` is CPU code for a processor with AVX-512."""
    from numba.core.cpu import CPUContext

    return isinstance(context, CPUContext) and _avx512()


@intrinsic
def _sqrt_special(typingctx, root, x):
    if not (root == x == types.float32):
        raise TypingError(f"sqrt_special takes two float32, got ({root}, {x})")

    def codegen(context, builder, signature, args):
        if _avx512_here(context):
            function = _fixup_function(builder.module, "avx512_fixupimm_sqrt_ss", _SQRT_FIXUP_TABLE)
            return builder.call(function, list(args))
        return _sqrt_special_select(builder, *args)

    return root(root, x), codegen


def sqrt_special(root: Any, x: Any) -> Any:
    """IEEE ``sqrt``'s result for the float32 ``x`` outside a root kernel's path (``x`` ≤ 0, +∞, NaN), the
    kernel's result ``root`` elsewhere, for a kernel whose ``root`` is NaN exactly outside its path:
    ``root`` where ``x`` is positive and finite, ``x`` for ±0 and +∞, ``x`` quieted for a NaN (its sign and payload kept) and the
    processor's default NaN for a negative ``x``. With AVX-512, one ``vfixupimmps`` per vector (by the class
    of ``x``; the loop vectoriser maps the scalar ``vfixupimmss`` to it); elsewhere a select on ``root``
    being NaN. From Python: that select."""
    if root == root:
        return root
    return x if x >= 0 else (x - x) * np.float32(np.inf)


@overload(sqrt_special, jit_options=dict(inline="always", error_model="numpy", fastmath=False))
def _sqrt_special_compiled(root, x):
    if root == x == types.float32:
        return lambda root, x: _sqrt_special(root, x)
    raise TypingError(f"sqrt_special takes two float32, got ({root}, {x})")


def quotient_special_value(context: Any, builder: Any, quotient: Any, x: Any, multiplier: Any) -> Any:
    """:func:`quotient_special` in a codegen (``context`` compiling, ``builder`` emitting): ``quotient``
    where ``x`` (float32, as ``quotient``) is finite and nonzero, else ``x·multiplier`` (``multiplier``
    positive and finite: ``x`` itself for ±0 and ±∞, a NaN quieted) by one ``vfixupimm`` where the target
    has AVX-512 (it gives ``x``, or ``x`` quieted, without the product), else by a select."""
    if _avx512_here(context):
        function = _fixup_function(builder.module, "avx512_fixupimm_quotient_ss", _QUOTIENT_FIXUP_TABLE)
        return builder.call(function, [quotient, x])
    return _quotient_special_select(builder, quotient, x, multiplier)


def _quotient_special_select(builder: Any, quotient: Any, x: Any, multiplier: Any) -> Any:
    """:func:`quotient_special` without ``vfixupimm``: ``quotient`` where ``x`` is finite and nonzero, else
    ``x·multiplier``."""
    infinity = ir.Constant(x.type, math.inf)
    regular = builder.and_(
        builder.fcmp_ordered("!=", x, ir.Constant(x.type, 0.0)),
        builder.fcmp_ordered("<", _fabs(builder, x), infinity),
    )
    return builder.select(regular, quotient, builder.fmul(x, multiplier))


def _fabs(builder: Any, x: Any) -> Any:
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(x.type, [x.type]), f"llvm.fabs.{x.type.intrinsic_name}"
    )
    return builder.call(function, [x])


@intrinsic
def _quotient_special(typingctx, quotient, x, multiplier):
    if not (quotient == x == multiplier == types.float32):
        raise TypingError(f"quotient_special takes three float32, got ({quotient}, {x}, {multiplier})")

    def codegen(context, builder, signature, args):
        return quotient_special_value(context, builder, *args)

    return quotient(quotient, x, multiplier), codegen


def quotient_special(quotient: Any, x: Any, multiplier: Any) -> Any:
    """IEEE ``x/c``'s result for a float32 ``x`` that is ±0, ±∞ or NaN, divided by a positive finite
    ``c`` (``x`` itself, a NaN quieted with its sign and payload kept), ``quotient`` for every finite nonzero
    ``x``: for a division computed in steps that are exact only for finite nonzero dividends.
    ``multiplier``: any positive finite float32 (such as ``1/c``): the special result is ``x·multiplier``
    (which is ``x``, or ``x`` quieted). With AVX-512, one ``vfixupimmps`` per vector (by the class of
    ``x``); elsewhere a select. From Python: that select."""
    if x != 0 and math.isfinite(x):
        return quotient
    return x * multiplier


@overload(quotient_special, jit_options=dict(inline="always", error_model="numpy", fastmath=False))
def _quotient_special_compiled(quotient, x, multiplier):
    if quotient == x == multiplier == types.float32:
        return lambda quotient, x, multiplier: _quotient_special(quotient, x, multiplier)
    raise TypingError(f"quotient_special takes three float32, got ({quotient}, {x}, {multiplier})")


#: Allow :func:`lookup_block` where the compiling target has AVX-512 VBMI (tests set False to compile the
#: portable loop; the decision is taken when a function is compiled).
BYTE_PERMUTES = True
#: Values per :func:`lookup_block` call, and per permute of byte indices (one 512-bit register).
LOOKUP_BLOCK = 256
_CHUNK = 64


def _target_features() -> str:
    from llvmlite import binding

    features = numba.config.CPU_FEATURES
    return features if features is not None else binding.get_host_cpu_features().flatten()


def target_cpu_name() -> str:
    """LLVM's name of the processor Numba compiles for: ``NUMBA_CPU_NAME`` or the host's."""
    from llvmlite import binding

    return numba.config.CPU_NAME or binding.get_host_cpu_name()


def zen_target(cpu_name: str | None = None) -> bool:
    """Whether the processor compiled for (``cpu_name``, by default :func:`target_cpu_name`) is one of AMD's
    Zen cores (LLVM's ``znver*``): a fast divider and slow gathers, where Intel's cores have the opposite,
    which some loops choose between (the same bits either way)."""
    return (cpu_name if cpu_name is not None else target_cpu_name()).startswith("znver")


def _byte_permutes_here(context: Any) -> bool:
    """Whether code compiled now by ``context`` may use ``vpermi2b`` (see :data:`BYTE_PERMUTES`)."""
    from numba.core.cpu import CPUContext

    if not (BYTE_PERMUTES and _X86 and isinstance(context, CPUContext)):
        return False
    features = _target_features().split(",")
    return "+avx512vbmi" in features and "+avx512bw" in features


@intrinsic
def byte_permutes(typingctx):
    """Whether :func:`lookup_block` permutes registers in the function being compiled (a constant: the
    branch it guards is folded away)."""

    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(1), int(_byte_permutes_here(context)))

    return types.boolean(), codegen


def _element_pointer(context: Any, builder: Any, array_type: Any, array: Any, index: Any, index_type: Any):
    data = context.make_array(array_type)(context, builder, array)
    i = context.cast(builder, index, index_type, types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, data, [i], wraparound=False)


def _vector_at(builder: Any, pointer: Any, offset: int, vector: Any) -> Any:
    """``pointer + offset`` (elements) as a pointer to ``vector``."""
    moved = builder.gep(pointer, [ir.IntType(64)(offset)])
    return builder.bitcast(moved, vector.as_pointer())


def _mask(values: list) -> Any:
    return ir.Constant(ir.VectorType(_I32, len(values)), values)


def _unpack_mask(first: int, lane: int) -> Any:
    """The shuffle of two vectors of 4 lanes of ``lane`` elements taking, per lane, elements ``first`` ..
    ``first + lane/2 − 1`` of both alternately (x86 ``punpckl``/``punpckh``)."""
    half = lane // 2
    return _mask(
        [
            x
            for k in range(4)
            for i in range(first, first + half)
            for x in (lane * k + i, 4 * lane + lane * k + i)
        ]
    )


#: The order of 64 codes that in-lane unpacks of their looked-up bytes leave in element order: position
#: 16·lane + 4·q + i holds code 16·q + 4·lane + i (its own inverse).
_UNPACK_ORDER = [16 * q + 4 * lane + i for lane in range(4) for q in range(4) for i in range(4)]


def _pack_bytes(builder: Any, words: list) -> Any:
    """The 64 bytes of 4 registers of 16 int32 values, each in [0, 255], by two ``vpackusdw`` and one
    ``vpackuswb`` (in-lane, unsigned saturation: exact for such values): position 16·lane + 4·q + i holds
    value i + 4·lane of register q, i.e. :data:`_UNPACK_ORDER` of their 64 values in element order."""
    ints, shorts = ir.VectorType(_I32, 16), ir.VectorType(ir.IntType(16), 32)
    bytes64 = ir.VectorType(ir.IntType(8), _CHUNK)
    dwords = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(shorts, [ints, ints]), "llvm.x86.avx512.packusdw.512"
    )
    halves = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(bytes64, [shorts, shorts]), "llvm.x86.avx512.packuswb.512"
    )
    low, high = (builder.call(dwords, [words[2 * h], words[2 * h + 1]]) for h in range(2))
    return builder.call(halves, [low, high])


def _plane_lookup(builder: Any, quarters: list, codes: Any, vector: Any, ordered: bool = False) -> list:
    """The 4 registers of 16 32-bit values (type ``vector``) ``table[codes[16q .. 16q + 15]]``, q < 4, for 64
    byte ``codes``: ``quarters[b][q]`` holds byte b (little-endian) of entries 64q .. 64q + 63 of the
    256-entry table. Two ``vpermi2b`` and a select per byte plane, then in-lane unpacks. ``ordered``: the
    codes come in the unpacks' order already (:data:`_UNPACK_ORDER`; as :func:`_pack_bytes` leaves them)."""
    byte = ir.IntType(8)
    bytes64 = ir.VectorType(byte, _CHUNK)
    permute = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(bytes64, [bytes64] * 3), "llvm.x86.avx512.vpermi2var.qi.512"
    )
    # The bytes of the 4 planes become 32-bit values by in-lane unpacks (bytes, then 16-bit pairs), which
    # leave value k of register q holding element 16·lane + 4·q + i (k = 4·lane + i); the codes are put in
    # that order first (_UNPACK_ORDER, unless they come so), so that register q holds elements 16q .. 16q + 15
    # in order.
    bytes_low, bytes_high = _unpack_mask(0, 16), _unpack_mask(8, 16)
    words = [_unpack_mask(0, 8), _unpack_mask(4, 8)]
    zero = ir.Constant(bytes64, [0] * _CHUNK)
    if not ordered:
        codes = builder.shuffle_vector(codes, ir.Constant(bytes64, None), _mask(_UNPACK_ORDER))
    upper = builder.icmp_signed("<", codes, zero)  # index bit 7: entries 128 .. 255
    planes_out = []
    for b in range(4):
        low = builder.call(permute, [quarters[b][0], codes, quarters[b][1]])  # index bits 0-6
        high = builder.call(permute, [quarters[b][2], codes, quarters[b][3]])
        planes_out.append(builder.select(upper, high, low))
    pairs = [
        builder.bitcast(
            builder.shuffle_vector(planes_out[b], planes_out[b + 1], half),
            ir.VectorType(ir.IntType(16), 32),
        )
        for half in (bytes_low, bytes_high)
        for b in (0, 2)
    ]  # bytes 0-1 and 2-3 of elements 0-7 of each lane, then of 8-15
    return [
        builder.bitcast(
            builder.shuffle_vector(pairs[2 * (q // 2)], pairs[2 * (q // 2) + 1], words[q % 2]), vector
        )
        for q in range(4)
    ]


def _lookup_codegen(context, builder, signature, args):
    out_type, out_base_type, index_type, first_type, planes_type, plane_base_type, _ = signature.args
    if not _byte_permutes_here(context):  # never reached: callers test byte_permutes() first
        return context.get_dummy_value()
    out_base, first, plane_base, scale = args[1], args[3], args[5], args[6]
    out = _element_pointer(context, builder, out_type, args[0], out_base, out_base_type)
    index = _element_pointer(context, builder, index_type, args[2], first, first_type)
    planes = _element_pointer(context, builder, planes_type, args[4], plane_base, plane_base_type)
    byte, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
    bytes64 = ir.VectorType(byte, _CHUNK)
    # plane b, quarter q: byte b of table entries 64q .. 64q + 63
    quarters = [
        [builder.load(_vector_at(builder, planes, 256 * b + _CHUNK * q, bytes64), align=1) for q in range(4)]
        for b in range(4)
    ]
    floats16 = ir.VectorType(f32, 16)
    splat = builder.insert_element(ir.Constant(floats16, None), scale, i32(0))
    splat = builder.shuffle_vector(splat, splat, _mask([0] * 16))
    for chunk in range(0, LOOKUP_BLOCK, _CHUNK):
        codes = builder.load(_vector_at(builder, index, chunk, bytes64), align=1)
        for q, value in enumerate(_plane_lookup(builder, quarters, codes, floats16)):
            builder.store(
                builder.fmul(value, splat), _vector_at(builder, out, chunk + 16 * q, floats16), align=4
            )
    return context.get_dummy_value()


@intrinsic
def lookup_block(typingctx, out, out_base, index, first, planes, plane_base, scale):
    """``out[out_base + k] = table[index[first + k]]·scale`` for k < :data:`LOOKUP_BLOCK` (256), the float32
    ``table`` given as its :func:`byte_planes` at ``planes[plane_base:plane_base + 1024]``: ``out`` a
    float32 array, ``index`` and ``planes`` uint8 arrays (1-D, contiguous), ``scale`` a float32. Register
    permutes (``vpermi2b``); only where :func:`byte_permutes` is true (elsewhere it does nothing). Indices
    are not checked."""
    arrays = (out, index, planes)
    if not (
        all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in arrays)
        and out.dtype == types.float32
        and index.dtype == planes.dtype == types.uint8
        and all(isinstance(i, types.Integer) for i in (out_base, first, plane_base))
        and scale == types.float32
    ):
        raise TypingError(
            "lookup_block takes (float32 array, int, uint8 array, int, uint8 array, int, float32)"
        )
    return types.void(out, out_base, index, first, planes, plane_base, scale), _lookup_codegen


def byte_planes(table: np.ndarray) -> np.ndarray:
    """The 1024 bytes :func:`lookup_block` reads for a float32 table of 256 values: byte ``b`` (little-endian
    order) of entry ``c`` at ``256·b + c``."""
    values = np.ascontiguousarray(table, np.float32)
    if values.shape != (LOOKUP_BLOCK,):
        raise ValueError(f"table must have {LOOKUP_BLOCK} values, got shape {values.shape}")
    return np.ascontiguousarray(values.astype("<f4").view(np.uint8).reshape(LOOKUP_BLOCK, 4).T).reshape(-1)


def _scalar_lookups_codegen(context, builder, signature, args):
    from llvmlite import binding
    from numba.core.cpu import CPUContext

    data_type, base_type, count_type, table_type = signature.args
    data = _element_pointer(context, builder, data_type, args[0], args[1], base_type)
    table = _element_pointer(context, builder, table_type, args[3], ir.IntType(64)(0), types.intp)
    i64 = ir.IntType(64)
    words = builder.bitcast(data, _I32.as_pointer())
    entries = builder.bitcast(table, _I32.as_pointer())
    count = context.cast(builder, args[2], count_type, types.intp)
    opaque = _X86 and isinstance(context, CPUContext)
    if opaque:
        binding.initialize_native_asmparser()  # inline assembly needs it (idempotent)
        load = ir.FunctionType(_I32, [entries.type, i64])
    with cgutils.for_range(builder, count) as loop:
        word = builder.gep(words, [loop.index])
        index = builder.zext(builder.load(word, align=4), i64)
        if opaque:  # a load LLVM cannot turn into a gather
            value = builder.asm(load, "movl ($1,$2,4), $0", "=r,r,r", [entries, index], False)
        else:
            value = builder.load(builder.gep(entries, [index]), align=4)
        builder.store(value, word, align=4)
    return context.get_dummy_value()


@intrinsic
def scalar_lookups(typingctx, data, base, count, table):
    """``data[base + k] ← table[data[base + k]]`` for k < ``count``, on the 32-bit words of ``data`` (a
    float32 array holding indices as their bits, or a uint32 array) and ``table`` (uint32, 1-D,
    contiguous): one scalar load per word (inline assembly on x86-64, so that it is never vectorised into
    a gather; a plain load elsewhere). Indices are not checked."""
    if not (
        all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in (data, table))
        and data.dtype in (types.float32, types.uint32)
        and table.dtype == types.uint32
        and isinstance(base, types.Integer)
        and isinstance(count, types.Integer)
    ):
        raise TypingError("scalar_lookups takes (float32 or uint32 array, int, int, uint32 array)")
    return types.void(data, base, count, table), _scalar_lookups_codegen


#: Allow :func:`search_block` where the compiling target has AVX-512F (tests set False to compile the
#: portable loops; the decision is taken when a function is compiled).
REGISTER_SEARCH = True
#: 32-bit words of a :func:`search_block` table: the candidates of its 8 steps, in 19 registers of 16.
SEARCH_WORDS = 304
# (first register, registers) of the candidates of step 2^s, s = 7 .. 0
_SEARCH_STEPS = ((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (7, 4), (11, 8))


def _register_search_here(context: Any) -> bool:
    """Whether code compiled now by ``context`` may use :func:`search_block` (see :data:`REGISTER_SEARCH`)."""
    from numba.core.cpu import CPUContext

    if not (REGISTER_SEARCH and _X86 and isinstance(context, CPUContext)):
        return False
    return "+avx512f" in _target_features().split(",")


@intrinsic
def register_search(typingctx):
    """Whether :func:`search_block` searches in registers in the function being compiled (a constant: the
    branch it guards is folded away)."""

    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(1), int(_register_search_here(context)))

    return types.boolean(), codegen


def search_candidates(thresholds: np.ndarray) -> np.ndarray:
    """The :data:`SEARCH_WORDS` int32 words :func:`search_block` reads for 255 ascending int32
    ``thresholds``: per step ``2^s`` (s = 7 .. 0) the candidates ``thresholds[j·2^(s+1) + 2^s − 1]`` for
    ``j < 2^(7−s)``, each step's in whole registers of 16 (the first one's repeated, the short ones padded)."""
    t = np.asarray(thresholds, np.int32)
    if t.shape != (255,):
        raise ValueError(f"thresholds must have 255 values, got shape {t.shape}")
    words = np.zeros(SEARCH_WORDS, np.int32)
    for s, (register, _) in zip(range(7, -1, -1), _SEARCH_STEPS):
        candidates = t[(1 << s) - 1 :: 1 << (s + 1)]
        if s == 7:
            candidates = np.repeat(candidates, 16)
        words[16 * register : 16 * register + candidates.size] = candidates
    return words


def _flag(context: Any, builder: Any, value: Any, value_type: Any) -> Any:
    """A boolean argument as an LLVM ``i1``."""
    flag = context.cast(builder, value, value_type, types.boolean)
    if flag.type != ir.IntType(1):
        flag = builder.icmp_unsigned("!=", flag, ir.Constant(flag.type, 0))
    return flag


def _search_key(builder: Any, x: Any, nan_low: Any) -> tuple:
    """``(bits, key)`` of 16 float32 ``x``: the key is the bits as signed integers with a negative value's
    magnitude bits flipped (the float order), a NaN's the lowest where ``nan_low``."""
    ints = ir.VectorType(_I32, 16)
    bits = builder.bitcast(x, ints)
    sign = builder.ashr(bits, ir.Constant(ints, [31] * 16))
    key = builder.xor(bits, builder.and_(sign, ir.Constant(ints, [0x7FFFFFFF] * 16)))
    nan_key = builder.select(builder.fcmp_unordered("uno", x, x), ir.Constant(ints, [-(2**31)] * 16), key)
    return bits, builder.select(nan_low, nan_key, key)


# One step of the search: k1 = key > candidate; prefix = 2·prefix + 1 there, 2·prefix elsewhere (one
# masked subtraction of -1: LLVM would rebuild the select from the mask as a vector and shift it).
_STEP_ASM = "vpcmpgtd $2, $1, %k1\n\tvpaddd $3, $3, $0\n\tvpsubd $4, $0, $0 {%k1}"


def _search_codegen(context, builder, signature, args):
    from llvmlite import binding

    out_type, out_base_type, values_type, base_type, _, table_type, table_base_type, _ = signature.args
    if not _register_search_here(context):  # never reached: callers test register_search() first
        return context.get_dummy_value()
    out = _element_pointer(context, builder, out_type, args[0], args[1], out_base_type)
    values = _element_pointer(context, builder, values_type, args[2], args[3], base_type)
    table = _element_pointer(context, builder, table_type, args[5], args[6], table_base_type)
    top = args[4]
    nan_low = _flag(context, builder, args[7], signature.args[7])
    i32, f32 = ir.IntType(32), ir.FloatType()
    ints, floats = ir.VectorType(i32, 16), ir.VectorType(f32, 16)
    table = builder.bitcast(table, i32.as_pointer())
    registers = [builder.load(_vector_at(builder, table, 16 * r, ints), align=4) for r in range(19)]
    permute = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ints, [ints, ints]), "llvm.x86.avx512.permvar.si.512"
    )
    permute2 = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ints, [ints, ints, ints]), "llvm.x86.avx512.vpermi2var.d.512"
    )

    def splat(value):
        return ir.Constant(ints, [value] * 16)

    tops = builder.insert_element(ir.Constant(floats, None), top, i32(0))
    tops = builder.shuffle_vector(tops, tops, _mask([0] * 16))
    byte16 = ir.VectorType(ir.IntType(8), 16)
    ones = splat(-1)
    binding.initialize_native_asmparser()  # inline assembly needs it (idempotent)
    step_type = ir.FunctionType(ints, [ints] * 4)
    for chunk in range(0, LOOKUP_BLOCK, 16):
        x = builder.fdiv(builder.load(_vector_at(builder, values, chunk, floats), align=4), tops)
        _, key = _search_key(builder, x, nan_low)
        # prefix: the code's bits decided so far (2·prefix + 1 where the key is above the candidate), which
        # is also the index of the next step's candidate in its registers
        prefix = builder.asm(
            step_type, _STEP_ASM, "=&v,v,v,v,v,~{k1}", [key, registers[0], splat(0), ones], False
        )
        for register, count in _SEARCH_STEPS[1:]:
            if count == 1:
                candidate = builder.call(permute, [registers[register], prefix])
            else:
                pairs = [
                    builder.call(
                        permute2, [registers[register + 2 * k], prefix, registers[register + 2 * k + 1]]
                    )
                    for k in range(count // 2)
                ]
                while len(pairs) > 1:  # the prefix's bits 5 (and 6) pick among pairs of registers
                    bit = builder.icmp_unsigned(
                        "!=", builder.and_(prefix, splat(32 * len(pairs) // 2)), splat(0)
                    )
                    pairs = [
                        builder.select(bit, pairs[k + len(pairs) // 2], pairs[k])
                        for k in range(len(pairs) // 2)
                    ]
                candidate = pairs[0]
            prefix = builder.asm(
                step_type, _STEP_ASM, "=&v,v,v,v,v,~{k1}", [key, candidate, prefix, ones], False
            )
        builder.store(builder.trunc(prefix, byte16), _vector_at(builder, out, chunk, byte16), align=1)
    return context.get_dummy_value()


@intrinsic
def search_block(typingctx, out, out_base, values, base, top, table, table_base, nan_low):
    """``out[out_base + k]`` = the number of thresholds ``t_i`` (255 ascending int32) below ``key(x)``,
    ``x = values[base + k] / top``, for k < :data:`LOOKUP_BLOCK` (256): ``key`` the float32's bits as a
    signed integer, a negative value's magnitude bits flipped (so that keys order as the floats, -0.0 just
    below +0.0, NaNs beyond the infinities by their sign); with ``nan_low`` true a NaN's key is the lowest
    (its count 0). A binary search of 8 steps held in registers, each step's candidates picked by
    permutes (``vpermd``, ``vpermt2d``) from the table's :func:`search_candidates` at
    ``table[table_base:table_base + 304]``: no table loads per element. ``out`` uint8, ``values`` float32,
    ``table`` int32 (1-D, contiguous), ``top`` a float32; only where :func:`register_search` is true
    (elsewhere it does nothing)."""
    return _search_signature(
        "search_block", out, out_base, values, base, top, table, table_base, nan_low
    ), _search_codegen


#: Where a :func:`search_dynamic_block` table keeps its decade lines (``dlo``, ``bnd`` per binade, then
#: ``A``, ``D``, ``C``, ``M`` per decade and the mirror) and its thresholds' byte planes, in 32-bit
#: words from the table's start.
DYNAMIC_LINES, DYNAMIC_PLANES = 320, 512
# The decade one above where |x| >= the binade's decade start: one masked subtraction of -1 (LLVM would
# widen the compare's mask to a vector and subtract it).
_ABOVE_ASM = "vcmpps $$29, $2, $1, %k1\n\tvpsubd $4, $0, $0 {%k1}"


def _dynamic_codegen(context, builder, signature, args, nonnegative=False, finite=False):
    from llvmlite import binding

    out_type, out_base_type, values_type, base_type, _, table_type, table_base_type, _ = signature.args
    if not (_register_search_here(context) and _byte_permutes_here(context)):  # callers test first
        return context.get_dummy_value()
    out = _element_pointer(context, builder, out_type, args[0], args[1], out_base_type)
    values = _element_pointer(context, builder, values_type, args[2], args[3], base_type)
    table = _element_pointer(context, builder, table_type, args[5], args[6], table_base_type)
    top = args[4]
    nan_low = _flag(context, builder, args[7], signature.args[7])
    i8, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
    ints, floats = ir.VectorType(i32, 16), ir.VectorType(f32, 16)
    bytes64 = ir.VectorType(i8, _CHUNK)
    words = builder.bitcast(table, i32.as_pointer())
    keys = builder.bitcast(values, i32.as_pointer())

    def load(offset, vector):
        return builder.load(
            _vector_at(builder, builder.bitcast(words, vector.element.as_pointer()), offset, vector), align=4
        )

    def splat(value, vector=ints):
        return ir.Constant(vector, [value] * 16)

    def function(name, *operands):
        return cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(operands[0], list(operands)), name
        )

    lines = DYNAMIC_LINES
    dlo = [load(lines + 16 * k, ints) for k in range(2)]
    bnd = [load(lines + 32 + 16 * k, floats) for k in range(2)]
    slope, offset, lowest, highest = (load(lines + 64 + 16 * k, floats) for k in range(4))
    mirror = builder.load(builder.gep(words, [ir.IntType(64)(lines + 128)]), align=4)
    mirror = builder.shuffle_vector(
        builder.insert_element(ir.Constant(ints, None), mirror, i32(0)),
        ir.Constant(ints, None),
        _mask([0] * 16),
    )
    permute2_i = function("llvm.x86.avx512.vpermi2var.d.512", ints, ints, ints)
    permute2_f = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(floats, [floats, ints, floats]), "llvm.x86.avx512.vpermi2var.ps.512"
    )
    permute_f = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(floats, [floats, ints]), "llvm.x86.avx512.permvar.sf.512"
    )
    planes = builder.bitcast(builder.gep(words, [ir.IntType(64)(DYNAMIC_PLANES)]), i8.as_pointer())
    tops = builder.insert_element(ir.Constant(floats, None), top, i32(0))
    tops = builder.shuffle_vector(tops, tops, _mask([0] * 16))
    infinity = splat(math.inf, floats)
    ones = splat(-1)
    above_type = ir.FunctionType(ints, [floats, floats, ints, ints])
    fma = function("llvm.fma.v16f32", floats, floats, floats)
    binding.initialize_native_asmparser()  # inline assembly needs it (idempotent)
    starts, group = [], []  # the starts of each 64 values, packed in registers (not stored and reloaded)
    for chunk in range(0, LOOKUP_BLOCK, 16):
        x = builder.fdiv(builder.load(_vector_at(builder, values, chunk, floats), align=4), tops)
        low, high = splat(100 << 23), splat(127 << 23)
        if nonnegative:  # x in [+0, 1]: its bits are its key, no NaN, no sign, binade <= 127
            key = magnitude = builder.bitcast(x, ints)
            a = x
        else:
            bits, key = _search_key(builder, x, nan_low)
            a = builder.bitcast(builder.and_(bits, splat(0x7FFFFFFF)), floats)
            if not finite:  # else |x| <= 1: no NaN, binade <= 127
                a = builder.select(builder.fcmp_ordered("<", a, infinity), a, infinity)  # NaN as inf
            magnitude = builder.bitcast(a, ints)
            if not finite:
                magnitude = builder.select(builder.icmp_signed("<", magnitude, high), magnitude, high)
        builder.store(key, _vector_at(builder, keys, chunk, ints), align=4)
        magnitude = builder.select(builder.icmp_signed(">", magnitude, low), magnitude, low)
        binade = builder.lshr(magnitude, splat(23))  # 100 .. 127: its low 5 bits index the binade tables
        decade = builder.call(permute2_i, [dlo[0], binade, dlo[1]])
        bound = builder.call(permute2_f, [bnd[0], binade, bnd[1]])
        decade = builder.asm(above_type, _ABOVE_ASM, "=v,v,v,0,v,~{k1}", [a, bound, decade, ones], False)
        line = [builder.call(permute_f, [words, decade]) for words in (slope, offset)]
        u = builder.call(fma, [a, *line])
        if not (finite or nonnegative):  # else a <= 1: C − 1 < u < M + 1, whose truncation is the clamp's
            c = builder.call(permute_f, [lowest, decade])
            u = builder.select(builder.fcmp_ordered(">", u, c), u, c)
            m = builder.call(permute_f, [highest, decade])
            u = builder.select(builder.fcmp_ordered("<", u, m), u, m)
        j = builder.fptosi(u, ints)
        if not nonnegative:
            mirrored = builder.sub(mirror, j)
            mirrored = builder.select(builder.icmp_signed(">", mirrored, splat(0)), mirrored, splat(0))
            j = builder.select(builder.icmp_signed("<", key, splat(0)), mirrored, j)
        group.append(j)  # a code's index, in [0, 255]: the saturating packs keep it
        if len(group) == 4:
            starts.append(_pack_bytes(builder, group))
            group = []
    quarters = [  # loaded here, after the first pass: its registers are free by now
        [builder.load(_vector_at(builder, planes, 256 * b + _CHUNK * q, bytes64), align=1) for q in range(4)]
        for b in range(4)
    ]
    for chunk in range(0, LOOKUP_BLOCK, _CHUNK):
        packed = starts[chunk // _CHUNK]
        start = builder.shuffle_vector(packed, ir.Constant(bytes64, None), _mask(_UNPACK_ORDER))
        found = _plane_lookup(builder, quarters, packed, ints, ordered=True)
        up = [
            builder.icmp_signed(
                ">", builder.load(_vector_at(builder, keys, chunk + 16 * q, ints), align=4), found[q]
            )
            for q in range(4)
        ]
        halves = [builder.shuffle_vector(up[2 * h], up[2 * h + 1], _mask(list(range(32)))) for h in range(2)]
        up = builder.shuffle_vector(halves[0], halves[1], _mask(list(range(64))))
        builder.store(
            builder.add(start, builder.zext(up, bytes64)), _vector_at(builder, out, chunk, bytes64), align=1
        )
    return context.get_dummy_value()


@intrinsic
def search_dynamic_block(typingctx, out, out_base, values, base, top, table, table_base, nan_low):
    """:func:`search_block`'s result for a table of piecewise-linear decades (bitsandbytes' dynamic maps)
    from its ``table`` words (``.quantization.register_search_tables``): per value, the decade of
    ``|x|`` (its binade's decade, one more at or above the decade start inside the binade: permutes of
    the binade tables) and that decade's line (``j = clamp(a·A + D, C, M)`` truncated, as
    :func:`.quantization.dynamic_lower`) give a start ``j`` with ``j <= count <= j + 1`` (mirrored
    for negative keys), then one threshold ``t_j`` looked up by byte permutes (``vpermi2b``) settles it.
    Writes the keys over ``values[base:base + 256]``. Only where :func:`register_search` and
    :func:`byte_permutes` are true (elsewhere it does nothing)."""
    return _search_signature(
        "search_dynamic_block", out, out_base, values, base, top, table, table_base, nan_low
    ), _dynamic_codegen


@intrinsic
def search_dynamic_nonnegative(typingctx, out, out_base, values, base, top, table, table_base, nan_low):
    """:func:`search_dynamic_block` where every value is known to be ``+0 <= s <= top`` (no NaN, no sign
    bit) and ``top`` finite and > 0, so that ``x = s/top`` lies in ``[+0, 1]``: its bits are its key and no
    mirror, NaN, clamp above 1 or clamp of the decade's line is needed (``C − 1 < a·A + D < M + 1`` for
    every such x, checked on every float32 of [-1, 1]: truncation gives the clamp's index; fewer
    instructions, the same codes). The caller proves that
    promise; a value breaking it gets an unspecified code."""
    return _search_signature(
        "search_dynamic_nonnegative", out, out_base, values, base, top, table, table_base, nan_low
    ), functools.partial(_dynamic_codegen, nonnegative=True)


@intrinsic
def search_dynamic_finite(typingctx, out, out_base, values, base, top, table, table_base, nan_low):
    """:func:`search_dynamic_block` where every value is known to be finite with ``|s| <= top`` and ``top``
    finite and > 0, so that ``x = s/top`` lies in ``[-1, 1]``: no NaN to take as infinity, no clamp of
    the binade above 1 and none of the decade's line (as :func:`search_dynamic_nonnegative`; fewer
    instructions, the same codes). The caller proves that promise; a value
    breaking it gets an unspecified code."""
    return _search_signature(
        "search_dynamic_finite", out, out_base, values, base, top, table, table_base, nan_low
    ), functools.partial(_dynamic_codegen, finite=True)


def _search_signature(name, out, out_base, values, base, top, table, table_base, nan_low):
    """The typing of :func:`search_block` and :func:`search_dynamic_block` (the same arguments):
    their signature, or TypingError naming ``name``."""
    arrays = (out, values, table)
    if not (
        all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in arrays)
        and out.dtype == types.uint8
        and values.dtype == types.float32
        and table.dtype == types.int32
        and all(isinstance(i, types.Integer) for i in (out_base, base, table_base))
        and top == types.float32
        and isinstance(nan_low, types.Boolean)
    ):
        raise TypingError(
            f"{name} takes (uint8 array, int, float32 array, int, float32, int32 array, int, bool)"
        )
    return types.void(out, out_base, values, base, top, table, table_base, nan_low)
