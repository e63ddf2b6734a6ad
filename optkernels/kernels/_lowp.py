"""Low-precision storage: float16 and bfloat16 arrays, float32 math.

The contract, for every kernel: the result is bit-identical to upcasting every array to float32, running the
float32 kernel, and rounding each updated array once to its storage dtype (round to nearest, ties to even;
NaN stays NaN). The element functions are not edited by hand: on the CPU, :func:`fused_element` rewrites
one (from its syntax tree, when the driver is generated) so that each half ``array[i]`` is widened once into
a float32 local and each written one rounded back once; otherwise (stochastic rounding, or an element
function that uses a half array otherwise than as ``array[i]``) the drivers of :mod:`._elementwise` widen
each chunk of every half array into float32 scratch, run the unchanged element function on the scratch and
round the written arrays back once (see :func:`written_params`); on CUDA, one float32 register per array.

Numba has no bfloat16 type and no float16 arithmetic on the CPU, so on the CPU both are seen as their
``uint16`` bits and converted with integer math here (:func:`widen_f16`, :func:`narrow_f16`, ...), written
so that LLVM vectorises them. On CUDA float16 is native; bfloat16 is the same 2-byte layout, seen as uint16.

Stochastic rounding (:func:`stochastic_rounding`): the write-back rounds up with probability equal to the
distance to the lower neighbour, in units of the gap, using a counter-based hash of (seed, counter, array,
element index): a run is reproducible bit for bit whatever the thread count.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import ml_dtypes
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
HALF_DTYPES = (FLOAT16, BFLOAT16)

#: kind codes of a half array's storage
F16, BF16 = "f16", "bf16"

_JIT = dict(error_model="numpy", fastmath=False, inline="always")


def half_kind(dtype: Any) -> str | None:
    """'f16', 'bf16', or None for any other dtype."""
    if dtype == FLOAT16:
        return F16
    if dtype == BFLOAT16:
        return BF16
    return None


# ----------------------------------------------------------------------------------- bit reinterpretation


@intrinsic
def f32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the low 32 bits of the integer ``bits`` (njit only)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        elif bits.bitwidth < 32:
            value = builder.zext(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def f32_bits(typingctx, value):
    """The uint32 bit pattern of the float32 ``value`` (njit only)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


_U32 = np.uint32

# The conversions below are plain Python over uint32 bits and float32 values, compiled for each target with
# its own ``from_bits`` / ``to_bits`` (float32 <-> uint32 reinterpretation): Numba intrinsics on the CPU,
# libdevice on CUDA, NumPy views under the CUDA simulator. No intermediate ever wraps around.


def bf16_to_f32(h):
    """bfloat16 bits -> float32 (exact)."""
    return from_bits(_U32(h) << _U32(16))


def f32_to_bf16(x):
    """float32 -> bfloat16 bits, round to nearest even; NaN -> the quiet NaN 0x7fc0 with x's sign
    (``ml_dtypes``' cast)."""
    b = to_bits(x)
    sign = (b >> _U32(16)) & _U32(0x8000)
    a = b & _U32(0x7FFFFFFF)
    h = (a + _U32(0x7FFF) + ((a >> _U32(16)) & _U32(1))) >> _U32(16)
    if a > _U32(0x7F800000):
        h = _U32(0x7FC0)
    return np.uint16(sign | h)


def f16_to_f32(h):
    """float16 bits -> float32 (exact; subnormals, infinities and NaN payloads included)."""
    em = _U32(h) & _U32(0x7FFF)
    sign = (_U32(h) & _U32(0x8000)) << _U32(16)
    # em << 13 read as float32 is the value times 2**-112 (normal and subnormal alike): scale back exactly.
    bits = to_bits(from_bits(em << _U32(13)) * np.float32(5.192296858534828e33))
    if em >= _U32(0x7C00):
        bits = (em << _U32(13)) | _U32(0x7F800000)
    return from_bits(sign | bits)


def f32_to_f16(x):
    """float32 -> float16 bits, round to nearest even (NumPy's ``astype(float16)``, NaN payloads included)."""
    b = to_bits(x)
    sign = (b >> _U32(16)) & _U32(0x8000)
    a = b & _U32(0x7FFFFFFF)
    if a < _U32(0x38800000):
        # below 2**-14: adding 0.5 rounds (to nearest even) at the float16 subnormal unit 2**-24
        h = to_bits(from_bits(a) + np.float32(0.5)) - _U32(0x3F000000)
    elif a < _U32(0x477FF000):
        h = ((a - _U32(0x38000000)) + _U32(0xFFF) + ((a >> _U32(13)) & _U32(1))) >> _U32(13)
    elif a <= _U32(0x7F800000):
        h = _U32(0x7C00)
    else:
        mant = (a & _U32(0x7FFFFF)) >> _U32(13)
        h = _U32(0x7C00) | (mant if mant > _U32(0) else _U32(1))
    return np.uint16(sign | h)


def f32_to_bf16_stochastic(x, r):
    """float32 -> bfloat16 bits, rounded up (in magnitude) with probability (|x| − lower)/gap; ``r``: 16
    random bits. Infinities and NaN as :func:`f32_to_bf16`."""
    b = to_bits(x)
    sign = (b >> _U32(16)) & _U32(0x8000)
    a = b & _U32(0x7FFFFFFF)
    if a < _U32(0x7F800000):
        h = (a + r) >> _U32(16)
    elif a == _U32(0x7F800000):
        h = _U32(0x7F80)
    else:
        h = _U32(0x7FC0)
    return np.uint16(sign | h)


def f32_to_f16_stochastic(x, r):
    """float32 -> float16 bits with stochastic rounding (``r``: 16 random bits)."""
    b = to_bits(x)
    sign = (b >> _U32(16)) & _U32(0x8000)
    a = b & _U32(0x7FFFFFFF)
    if a < _U32(0x38800000):
        # |x| / 2**-24 < 1024 exactly; round its fraction up with probability = the fraction
        q = from_bits(a) * np.float32(16777216.0)
        h = _U32(q)  # q >= 0: truncating is flooring (and NumPy's floor has no CUDA lowering)
        if np.float32(r) * np.float32(1.52587890625e-05) < q - np.float32(h):
            h = h + _U32(1)
    elif a < _U32(0x47800000):
        h = ((a - _U32(0x38000000)) + (r >> _U32(3))) >> _U32(13)
        if h > _U32(0x7C00):
            h = _U32(0x7C00)
    elif a <= _U32(0x7F800000):
        h = _U32(0x7C00)
    else:
        mant = (a & _U32(0x7FFFFF)) >> _U32(13)
        h = _U32(0x7C00) | (mant if mant > _U32(0) else _U32(1))
    return np.uint16(sign | h)


def random16(seed, counter, array, index):
    """16 random bits from a counter-based hash (splitmix64's finaliser) of four uint64 arguments."""
    z = (
        seed * np.uint64(0x9E3779B97F4A7C15)
        + counter * np.uint64(0xBF58476D1CE4E5B9)
        + array * np.uint64(0x94D049BB133111EB)
        + index
    )
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return _U32(z >> np.uint64(48))


def _random16_python(seed, counter, array, index):
    mask = (1 << 64) - 1
    z = (
        int(seed) * 0x9E3779B97F4A7C15
        + int(counter) * 0xBF58476D1CE4E5B9
        + int(array) * 0x94D049BB133111EB
        + int(index)
    ) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return _U32((z ^ (z >> 31)) >> 48)


_SCALAR_FUNCS = (
    bf16_to_f32,
    f32_to_bf16,
    f16_to_f32,
    f32_to_f16,
    f32_to_bf16_stochastic,
    f32_to_f16_stochastic,
    random16,
)


def _rebind(funcs, namespace: dict, compile_: Callable) -> dict:
    """Copies of ``funcs`` whose global names resolve in ``namespace`` (filled in as they compile)."""
    import types as pytypes

    for f in funcs:
        glb = dict(f.__globals__)
        glb.update(namespace)
        copy = pytypes.FunctionType(f.__code__, glb, f.__name__, f.__defaults__)
        copy.__doc__ = f.__doc__
        namespace[f.__name__] = compile_(copy)
        glb.update(namespace)
    return namespace


# ------------------------------------------------------------------------------- CPU: chunk widen / narrow


def _widen_bf16(src, dst):
    for j in range(np.uint64(dst.size)):
        dst[j] = bf16_to_f32(src[j])


def _widen_f16(src, dst):
    for j in range(np.uint64(dst.size)):
        dst[j] = f16_to_f32(src[j])


def _narrow_bf16(src, dst):
    for j in range(np.uint64(dst.size)):
        dst[j] = f32_to_bf16(src[j])


def _narrow_f16(src, dst):
    for j in range(np.uint64(dst.size)):
        dst[j] = f32_to_f16(src[j])


def _narrow_bf16_sr(src, dst, start, seed, counter, array):
    for j in range(np.uint64(dst.size)):
        dst[j] = f32_to_bf16_stochastic(src[j], random16(seed, counter, array, np.uint64(start) + j))


def _narrow_f16_sr(src, dst, start, seed, counter, array):
    for j in range(np.uint64(dst.size)):
        dst[j] = f32_to_f16_stochastic(src[j], random16(seed, counter, array, np.uint64(start) + j))


_NUMBA_LOOPS = _rebind(
    _SCALAR_FUNCS + (_widen_bf16, _widen_f16, _narrow_bf16, _narrow_f16, _narrow_bf16_sr, _narrow_f16_sr),
    {"from_bits": f32_from_bits, "to_bits": f32_bits},
    numba.njit(**_JIT),
)


# The CPU chunk loops of round to nearest even, as LLVM IR over 32-bit lanes: the same integer math as the
# functions above, but Numba types uint32 arithmetic as 64-bit, which halves the vector width; written
# directly, LLVM vectorises these loops 16 lanes wide (AVX-512) and they cost little next to the update.

_I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()


def _c(value: int) -> ir.Constant:
    return ir.Constant(_I32, value)


def _ir_bf16_to_f32(builder, h):
    return builder.bitcast(builder.shl(builder.zext(h, _I32), _c(16)), _F32)


def _ir_f16_to_f32(builder, h):
    h = builder.zext(h, _I32)
    em = builder.and_(h, _c(0x7FFF))
    sign = builder.shl(builder.and_(h, _c(0x8000)), _c(16))
    shifted = builder.shl(em, _c(13))
    scaled = builder.fmul(builder.bitcast(shifted, _F32), ir.Constant(_F32, 5.192296858534828e33))
    special = builder.or_(shifted, _c(0x7F800000))
    bits = builder.select(builder.icmp_unsigned(">=", em, _c(0x7C00)), special, builder.bitcast(scaled, _I32))
    return builder.bitcast(builder.or_(sign, bits), _F32)


def _ir_f32_to_bf16(builder, x):
    # NaN first becomes the quiet NaN with x's sign and no payload, s|0x7fc00000, which the rounding below
    # turns into s|0x7fc0. Rounding adds 0x7fff, or 0x8000 where the kept last bit (bit 16) is odd (ties
    # to even), then keeps the high 16 bits. Written so that, vectorised, it takes few AVX-512 operations.
    b = builder.bitcast(x, _I32)
    quiet = builder.and_(builder.or_(b, _c(0x00400000)), _c(0xFFC00000))
    b = builder.select(builder.fcmp_unordered("uno", x, x), quiet, b)
    odd = builder.icmp_unsigned("!=", builder.and_(b, _c(0x10000)), _c(0))
    rounded = builder.lshr(builder.add(b, builder.select(odd, _c(0x8000), _c(0x7FFF))), _c(16))
    return builder.trunc(rounded, _I16)


def _ir_f32_to_bf16_keeping_nan(builder, x):
    # as _ir_f32_to_bf16 without its NaN step: a NaN whose low 16 bits are zero (every NaN an element function
    # of KEEPS_NAN_PAYLOAD writes) keeps its sign and high 16 bits, as adding 0x7fff or 0x8000 carries nothing
    b = builder.bitcast(x, _I32)
    odd = builder.icmp_unsigned("!=", builder.and_(b, _c(0x10000)), _c(0))
    rounded = builder.lshr(builder.add(b, builder.select(odd, _c(0x8000), _c(0x7FFF))), _c(16))
    return builder.trunc(rounded, _I16)


def _ir_round_bf16(builder, x):
    # x rounded to bfloat16 and widened back, in its bits: as _ir_f32_to_bf16 without its NaN select. A
    # NaN whose low 16 bits are zero comes back unchanged (adding at most 0x8000 carries nothing into bit
    # 16); any other NaN could come back as a number, so this serves only the pure bfloat16 element
    # functions (see PURE_BF16). x a float32 or a vector of them (per lane: the bfloat16 Adam blocks).
    lanes = x.type.count if isinstance(x.type, ir.VectorType) else None
    bits_type = _I32 if lanes is None else ir.VectorType(_I32, lanes)

    def c(value):
        return _c(value) if lanes is None else ir.Constant(bits_type, [value] * lanes)

    b = builder.bitcast(x, bits_type)
    odd = builder.icmp_unsigned("!=", builder.and_(b, c(0x10000)), c(0))
    rounded = builder.add(b, builder.select(odd, c(0x8000), c(0x7FFF)))
    return builder.bitcast(builder.and_(rounded, c(0xFFFF0000)), x.type)


def _ir_f32_to_f16(builder, x):
    b = builder.bitcast(x, _I32)
    sign = builder.and_(builder.lshr(b, _c(16)), _c(0x8000))
    a = builder.and_(b, _c(0x7FFFFFFF))
    half = builder.fadd(builder.bitcast(a, _F32), ir.Constant(_F32, 0.5))
    sub = builder.sub(builder.bitcast(half, _I32), _c(0x3F000000))
    lsb = builder.and_(builder.lshr(a, _c(13)), _c(1))
    normal = builder.lshr(builder.add(builder.add(builder.sub(a, _c(0x38000000)), _c(0xFFF)), lsb), _c(13))
    mant = builder.lshr(builder.and_(a, _c(0x7FFFFF)), _c(13))
    nan = builder.or_(_c(0x7C00), builder.select(builder.icmp_unsigned(">", mant, _c(0)), mant, _c(1)))
    h = builder.select(builder.icmp_unsigned("<", a, _c(0x38800000)), sub, normal)
    h = builder.select(builder.icmp_unsigned(">=", a, _c(0x477FF000)), _c(0x7C00), h)
    h = builder.select(builder.icmp_unsigned(">", a, _c(0x7F800000)), nan, h)
    return builder.trunc(builder.or_(sign, h), _I16)


def _ir_loop(convert, src_dtype, dst_dtype):
    """An intrinsic ``loop(src, dst)``: ``dst[j] = convert(src[j])`` for j < dst.size (1-D C arrays)."""
    from numba.core import cgutils

    @intrinsic
    def loop(typingctx, src, dst):
        if not (
            isinstance(src, types.Array)
            and isinstance(dst, types.Array)
            and src.dtype == src_dtype
            and dst.dtype == dst_dtype
            and src.ndim == 1
            and dst.ndim == 1
        ):
            return None

        def codegen(context, builder, signature, args):
            s = context.make_array(signature.args[0])(context, builder, args[0])
            d = context.make_array(signature.args[1])(context, builder, args[1])
            n = builder.extract_value(d.shape, 0)
            with cgutils.for_range(builder, n) as index:
                value = builder.load(builder.gep(s.data, [index.index]))
                builder.store(convert(builder, value), builder.gep(d.data, [index.index]))
            return context.get_dummy_value()

        return types.void(src, dst), codegen

    return loop


_loop_widen_bf16 = _ir_loop(_ir_bf16_to_f32, types.uint16, types.float32)
_loop_widen_f16 = _ir_loop(_ir_f16_to_f32, types.uint16, types.float32)
_loop_narrow_bf16 = _ir_loop(_ir_f32_to_bf16, types.float32, types.uint16)
_loop_narrow_f16 = _ir_loop(_ir_f32_to_f16, types.float32, types.uint16)


@numba.njit(**_JIT)
def _fast_widen_bf16(src, dst):
    _loop_widen_bf16(src, dst)


@numba.njit(**_JIT)
def _fast_widen_f16(src, dst):
    _loop_widen_f16(src, dst)


@numba.njit(**_JIT)
def _fast_narrow_bf16(src, dst):
    _loop_narrow_bf16(src, dst)


@numba.njit(**_JIT)
def _fast_narrow_f16(src, dst):
    _loop_narrow_f16(src, dst)


#: The CPU chunk loops by name: ``_widen_<kind>(src_bits, dst_f32)``, ``_narrow_<kind>(src_f32, dst_bits)``,
#: ``_narrow_<kind>_sr(src_f32, dst_bits, start, seed, counter, array)``; also the scalar conversions.
CPU = dict(
    _NUMBA_LOOPS,
    _widen_bf16=_fast_widen_bf16,
    _widen_f16=_fast_widen_f16,
    _narrow_bf16=_fast_narrow_bf16,
    _narrow_f16=_fast_narrow_f16,
)


# ------------------------------------------------------------------------------------- CUDA helpers


def _load_f16(a, i):
    return f16_to_f32(a[i])


def _load_bf16(a, i):
    return bf16_to_f32(a[i])


def _store_f16(a, i, x):
    a[i] = f32_to_f16(x)


def _store_bf16(a, i, x):
    a[i] = f32_to_bf16(x)


def _store_f16_sr(a, i, x, r):
    a[i] = f32_to_f16_stochastic(x, r)


def _store_bf16_sr(a, i, x, r):
    a[i] = f32_to_bf16_stochastic(x, r)


_CUDA_FUNCS = (_load_f16, _load_bf16, _store_f16, _store_bf16, _store_f16_sr, _store_bf16_sr)


def _sim_from_bits(u):
    return np.array([u], np.uint32).view(np.float32)[0]


def _sim_to_bits(x):
    return np.array([x], np.float32).view(np.uint32)[0]


def cuda_helpers(cuda: Any) -> dict:
    """Device functions, by name: ``_load_<kind>(a, i)`` -> float32, ``_store_<kind>(a, i, x)``,
    ``_store_<kind>_sr(a, i, x, r)`` and ``random16`` (half arrays are seen as their uint16 bits)."""
    from . import _cuda

    if _cuda.simulator_enabled():
        space = _rebind(
            _SCALAR_FUNCS + _CUDA_FUNCS, {"from_bits": _sim_from_bits, "to_bits": _sim_to_bits}, lambda f: f
        )
        space["random16"] = _random16_python
        return space
    from numba.cuda import libdevice

    def from_bits(u):
        return libdevice.int_as_float(np.int32(u))

    def to_bits(x):
        return np.uint32(libdevice.float_as_int(x))

    device = cuda.jit(device=True)
    space = {"from_bits": device(from_bits), "to_bits": device(to_bits)}
    return _rebind(_SCALAR_FUNCS + _CUDA_FUNCS, space, device)


# ------------------------------------------------------------------------------ which arrays are written


def written_params(py_func: Callable) -> frozenset:
    """The parameter names that ``py_func`` assigns an element of (``name[...] = ...``, ``+=`` too)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(py_func)))
    names = set()
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        )
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
                    names.add(sub.value.id)
    return frozenset(names)


# ------------------------------------------------------------------------------------ stochastic rounding

_SR: contextvars.ContextVar = contextvars.ContextVar("optkernels_stochastic_rounding", default=None)


class _Stream:
    __slots__ = ("seed", "counter")

    def __init__(self, seed: int, counter: int):
        self.seed = seed
        self.counter = counter

    def take(self) -> tuple[np.uint64, np.uint64]:
        """(seed, counter) for one launch; the counter moves on by one."""
        counter = self.counter
        self.counter += 1
        return np.uint64(self.seed), np.uint64(counter)


@contextlib.contextmanager
def stochastic_rounding(seed: int = 0, counter: int = 0) -> Iterator[None]:
    """Context manager: kernels called inside it round their float16/bfloat16 write-back stochastically.

    An updated value ``x`` between its two storage-dtype neighbours ``lo < x < hi`` becomes ``hi`` with
    probability ``(x − lo)/(hi − lo)`` (16 random bits per element), so the rounded value is unbiased:
    ``E[round(x)] = x``. The random bits are a counter-based hash of ``(seed, counter, array position in the
    call, element index)``, where ``counter`` starts at ``counter`` and moves on by one per kernel launch in
    the context: a run is reproducible bit for bit whatever the thread count. Float32 and float64 arrays,
    and values already representable, are unaffected. Per thread (a ``contextvars`` variable).

    Args:
        seed: any integer in [0, 2**64).
        counter: the first launch's counter (for example the training step times the launches per step).
    """
    for name, value in (("seed", seed), ("counter", counter)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**64:
            raise ValueError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    token = _SR.set(_Stream(int(seed), int(counter)))
    try:
        yield
    finally:
        _SR.reset(token)


def stochastic_stream() -> Any:
    """The active stochastic-rounding stream of this thread, or None."""
    return _SR.get()


def _one(convert, src_type, dst_type):
    """An intrinsic converting one value with ``convert`` (the IR of the loops above)."""

    @intrinsic
    def one(typingctx, x):
        if x != src_type:
            return None

        def codegen(context, builder, signature, args):
            return convert(builder, args[0])

        return dst_type(src_type), codegen

    return one


#: One-value conversions (CPU, njit only), for the fused element functions of :func:`fused_element`.
ONE = {
    "_f32": np.float32,
    "_load_bf16": _one(_ir_bf16_to_f32, types.uint16, types.float32),
    "_load_f16": _one(_ir_f16_to_f32, types.uint16, types.float32),
    "_store_bf16": _one(_ir_f32_to_bf16, types.float32, types.uint16),
    "_store_f16": _one(_ir_f32_to_f16, types.float32, types.uint16),
    "_store_bf16_keeping_nan": _one(_ir_f32_to_bf16_keeping_nan, types.float32, types.uint16),
    "_like_bf16": np.uint16(0),
    "_like_f16": np.int16(0),
    "_like_bf16_pure": np.int8(0),
    "_round_bf16_pure": _one(_ir_round_bf16, types.float32, types.float32),
}


# not inlined at Numba's IR level (numba-cuda cannot patch the inlined IR): LLVM inlines these calls
_OVERLOAD = dict(error_model="numpy", fastmath=False)

#: The Numba types of the markers standing for a half array (see :func:`rounded_as`): bfloat16, float16,
#: and bfloat16 in an element function whose arrays are all bfloat16 (:data:`PURE_BF16`).
HALF_MARKERS = (types.uint16, types.int16, types.int8)

#: The marker type of a bfloat16 array in a call whose arrays are all bfloat16. There every NaN an element
#: function meets has its low 16 bits zero: a loaded value's are, the NaN that x86 and LLVM generate
#: (0x7FC00000 or 0xFFC00000) has them zero, and an operation on a NaN returns one of its operands' NaN
#: (quieted, payload kept); a NaN scalar is passed as the default NaN (``_elementwise._launch_half``). So
#: :func:`rounded_as` rounds without a NaN select there (a NaN comes back unchanged; the stores still write
#: the quiet NaN of its sign), which leaves the vector unit a third less work per rounding.
PURE_BF16 = types.int8


def rounded_as(x: Any, like: Any) -> Any:
    """``x`` rounded as torch's CPU operations store a result in ``like``'s dtype: where ``like`` stands for
    a float16/bfloat16 array (in a fused element function, see :func:`fused_element`), ``x`` (float32) is
    rounded to that dtype (to nearest, ties to even) and widened back; anywhere else (``like`` a float32 or
    float64 array, a scalar, None; every Python and CUDA call) ``x`` unchanged, at no cost.

    Parameters
    ----------
    x : float
        The value of one element of an operation's result, computed in float32 ("opmath").
    like : array or marker
        The array whose dtype the result is stored in.
    """
    return x


@overload(rounded_as, jit_options=_OVERLOAD)
def _rounded_as_compiled(x, like):
    if like == PURE_BF16:
        round_pure = ONE["_round_bf16_pure"]
        return lambda x, like: round_pure(x)
    if like in HALF_MARKERS:
        kind = BF16 if like == types.uint16 else F16
        load, store = ONE[f"_load_{kind}"], ONE[f"_store_{kind}"]
        return lambda x, like: load(store(x))
    return lambda x, like: x


#: What a half array's name becomes where a fused element function passes the array itself (to
#: :func:`rounded_as`): a constant whose type says the storage (uint16 for bfloat16, int16 for float16).
_LIKE = {BF16: "_like_bf16", F16: "_like_f16"}


#: The element functions (Python functions) whose fused bfloat16 writes keep a NaN's sign and payload (the
#: high 16 bits of the float32 NaN) instead of writing the quiet NaN of its sign: those that choose the NaN
#: bits they write (torch's, see ``_torch_nan.torch_nan``). Every NaN they write must have its low 16 bits
#: zero (a bfloat16 NaN read, or one chosen by ``torch_nan``): the store rounds without a NaN step.
KEEPS_NAN_PAYLOAD: set = set()


class _Fuse(ast.NodeTransformer):
    """Rewrite an element function for half arrays: ``p[i]`` reads and writes become a float32 local
    ``_v_p`` loaded once at the start and rounded back (stored) before every return."""

    def __init__(
        self, half: dict, index: str, written: frozenset, keep_nan: bool = False, pure: bool = False
    ):
        self.half, self.index, self.written = half, index, written
        self.suffix = {BF16: "_keeping_nan" if keep_nan else "", F16: ""}
        self.like = dict(_LIKE, **({BF16: "_like_bf16_pure"} if pure else {}))

    def _is_half_item(self, node) -> bool:
        return (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.half
        )

    def _stores(self) -> list:
        return [
            ast.parse(f"{p}[{self.index}] = _store_{kind}{self.suffix[kind]}(_v_{p})").body[0]
            for p, kind in self.half.items()
            if p in self.written
        ]

    def visit_Name(self, node):
        if node.id in self.half and isinstance(node.ctx, ast.Load):  # the array passed as ``like``
            return ast.copy_location(ast.Name(self.like[self.half[node.id]], ast.Load()), node)
        return node

    def visit_Subscript(self, node):
        if self._is_half_item(node):
            return ast.copy_location(ast.Name(f"_v_{node.value.id}", ast.Load()), node)
        return self.generic_visit(node)

    def _assign(self, node, target, value):
        # as a store into a float32 array would: the value is rounded to float32 (read back as such)
        local = ast.Name(f"_v_{target.value.id}", ast.Store())
        call = ast.Call(ast.Name("_f32", ast.Load()), [value], [])
        return ast.copy_location(ast.Assign([local], call), node)

    def visit_Assign(self, node):
        if len(node.targets) == 1 and self._is_half_item(node.targets[0]):
            return self._assign(node, node.targets[0], self.visit(node.value))
        return self.generic_visit(node)

    def visit_AugAssign(self, node):
        if self._is_half_item(node.target):
            old = ast.Name(f"_v_{node.target.value.id}", ast.Load())
            return self._assign(node, node.target, ast.BinOp(old, node.op, self.visit(node.value)))
        return self.generic_visit(node)

    def visit_Return(self, node):
        return [*self._stores(), self.generic_visit(node)]


def fused_element(py_func: Callable, kinds: tuple) -> tuple[str, str] | None:
    """The source of ``py_func`` rewritten for the half arrays of ``kinds`` (see :class:`_Fuse`), or None
    when the function uses a half array other than as ``array[index]`` (its first parameter)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(py_func)))
    func = tree.body[0]
    params = [a.arg for a in func.args.args]
    index = params[0]
    half = {p: kind for p, kind in zip(params[1:], kinds) if kind in (F16, BF16)}
    parents = {id(child): node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id in half and not isinstance(node.ctx, ast.Param):
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and node in parent.args:  # passed as ``like`` (rounded_as)
                continue
            if not (
                isinstance(parent, ast.Subscript)
                and parent.value is node
                and isinstance(parent.slice, ast.Name)
                and parent.slice.id == index
            ):
                return None
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) > 1
            and any(
                isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in half
                for t in node.targets
            )
        ):
            return None
    pure = all(kind in (None, BF16) for kind in kinds)  # no float32 array: see PURE_BF16
    fuse = _Fuse(half, index, written_params(py_func), py_func in KEEPS_NAN_PAYLOAD, pure)
    func.decorator_list = []
    func.name = f"_fused_{py_func.__name__}_{'_'.join(k or 's' for k in kinds)}"
    body = [fuse.visit(stmt) for stmt in func.body]
    flat = []
    for stmt in body:
        flat.extend(stmt if isinstance(stmt, list) else [stmt])
    loads = [ast.parse(f"_v_{p} = _load_{kind}({p}[{index}])").body[0] for p, kind in half.items()]
    tail = [] if flat and isinstance(flat[-1], ast.Return) else fuse._stores()
    func.body = loads + flat + tail
    return func.name, ast.unparse(ast.fix_missing_locations(tree))
