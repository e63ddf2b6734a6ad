"""Element functions of ``torch.optim``'s update rules that round as torch's CPU single-tensor path does.

Each function computes, per element, the sequence of tensor operations of torch's ``_single_tensor_<name>``
(``foreach=False``), with each operation rounded as torch's CPU kernels round it
(``../shared/spec/MODERN.md`` §0.2, confirmed bit for bit on data):

* ``x.add(y, alpha=a)`` is ``fma(y, a, x)``; ``x.addcmul_(y, z, value=v)`` is ``fma(v·y, z, x)``;
* ``x.lerp_(y, w)`` is ``fma(w, y − x, x)`` when ``|w| < 0.5``, else ``fma(w − 1, y − x, y)``;
* ``x.addcdiv_(y, z, value=v)`` is ``x + (v·y)/z`` and ``x.mul_(c)`` is ``x·c``: each operation rounded;
* ``sqrt`` is :func:`torch_sqrt`: IEEE ``sqrt``, or (the ``mkl`` scalar) one of the MKL kernels that torch's
  CPU ``sqrt`` runs on some CPUs (``docs/guide/torch_bits.rst``): where torch runs another, sqrt is the
  only difference.

The fused steps call :func:`optkernels.kernels._intrinsics.fma` explicitly (no ``fastmath``, so LLVM fuses
nothing else). Scalars arrive already converted to the arrays' dtype, as torch converts a Python scalar
before an element-wise op; host-side values (bias corrections, step sizes) are computed by the caller in
Python float64, in torch's order. The gradient pre-step (``maximize``, L2 weight decay) and AdamW's
decoupled decay are part of each element function: one pass over memory, torch's rounding.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numba
import numpy as np
from numba import prange, types
from numba.core.errors import TypingError
from numba.extending import (
    NativeValue,
    models,
    overload,
    register_jitable,
    register_model,
    typeof_impl,
    unbox,
)

from ._bf16_adam_block import adam_pair_blocks
from ._checks import check_arrays, check_range
from ._constant_quotient import QUOTIENT_DIVISOR_RANGE, divide_by_reciprocal
from ._denominator_table import (
    HEADER_WORDS,
    KEY,
    ROW_WORDS,
    DenominatorTable,
    DenominatorTableType,
    PartTables,
    PartTablesType,
    as_address,
    denominator_at,
    float_bits,
    table_at,
)
from ._divide import divide_by_constant
from ._elementwise import _JIT_OPTIONS, elementwise, scalar_math
from ._ieee import nan_max
from ._intrinsics import fma, rsqrt14, rsqrt_estimate, sqrt_special
from ._lowp import HALF_MARKERS, KEEPS_NAN_PAYLOAD, PURE_BF16, rounded_as
from ._mkl_h8 import branching_h8_root
from ._mkl_sqrt64 import (
    mkl_avx2_sqrt64,
    mkl_avx512_sqrt64,
    mkl_avx512_sqrt64_selected,
    mkl_avx_sqrt64,
)
from ._mkl_z0 import branching_z0_root
from ._pointers import address_as_pointer
from ._torch_nan import torch_max_nan, torch_nan
from ._torch_tail import NO_TAIL, torch_tail
from ._torch_tail import torch_tail_scalars as torch_tail_scalars  # optkernels.torch's import
from .adam import Scalar

__all__ = ["torch_adamax", "torch_rms_prop"]

# The scalar steps shared by several element functions: calls in compiled code (CPU and CUDA; LLVM inlines
# them), plain Python under the CUDA simulator, so that float32 stays float32 there (a compiled helper called
# from Python would return a Python float, and fma needs operands of one type). Not inline="always":
# numba-cuda's inlining of such an overload drops a value assigned in a branch (torch_grad's weight decay
# came out missing on a GPU) and rejects a return inside a branch.
_scalar_helper = register_jitable


@register_jitable  # a call, not inlined in Numba's IR (numba-cuda's inliner fails on it); LLVM inlines it
def torch_add_alpha(x, y, alpha, like, tail):
    """torch's CPU ``x.add(y, alpha=α)``: ``fma(y, α, x)``. For a half ``like`` (see
    :func:`~optkernels.kernels._lowp.rounded_as`) ``α`` is first rounded to the half dtype, then
    ``fma(y, α, x)`` in the vector body and ``x + round(y·α)`` in the scalar ``tail``, rounded (``tail``
    is never true for a float32/float64 ``like``)."""
    stored_alpha = rounded_as(alpha, like)
    out = rounded_as(fma(y, stored_alpha, x), like)
    if tail:  # (one return: numba-cuda's inliner takes no early return on a constant condition)
        out = rounded_as(x + rounded_as(y * stored_alpha, like), like)
    return out


@_scalar_helper
def torch_grad(g, p, negate, coupled, weight_decay, like, tail):
    """torch's gradient pre-step: ``g ← −g`` (maximize), then ``g ← fma(p, wd, g)`` (``grad.add(param,
    alpha=wd)``, only where torch applies it: ``weight_decay != 0``; :func:`torch_add_alpha`)."""
    if negate:
        g = -g
    if coupled:
        g = torch_add_alpha(g, p, weight_decay, like, tail)
    return g


@_scalar_helper
def torch_lerp(x, y, w, w_minus_one, small, like):
    """torch's CPU ``x.lerp_(y, w)``: ``fma(w, y − x, x)`` if ``small`` (``|w| < 0.5``, decided on the
    host), else ``fma(w − 1, y − x, y)``; ``w_minus_one`` is ``w − 1`` in the arrays' dtype (float32 for a
    half ``like``, whose result is rounded)."""
    d = y - x
    if small:
        return rounded_as(fma(w, d, x), like)
    return rounded_as(fma(w_minus_one, d, y), like)


#: ``mkl`` values of :func:`torch_sqrt`: IEEE sqrt; MKL's AVX-path (``H8``/``EX``) and AVX-512 (``Z0``)
#: float32 kernels; MKL's AVX-path, AVX2 (``L9``) and AVX-512 float64 kernels.
IEEE_SQRT, MKL_AVX_SQRT, MKL_AVX512_SQRT = 0, 1, 2
MKL_AVX_SQRT64, MKL_AVX2_SQRT64, MKL_AVX512_SQRT64 = 3, 4, 5

#: The ``mkl`` kernels of each dtype (:func:`mkl_flag`).
MKL_SQRT_KERNELS = {
    np.dtype(np.float32): (MKL_AVX_SQRT, MKL_AVX512_SQRT),
    np.dtype(np.float64): (MKL_AVX_SQRT64, MKL_AVX2_SQRT64, MKL_AVX512_SQRT64),
}

_FLT_MIN = np.float32(2.0**-126)
_HALF = np.float32(0.5)
_FLT_INF = np.float32(np.inf)
_FLT_ZERO = np.float32(0)
_R_LARGE = np.float32(2.0**39)
_X_UP = np.float32(2.0**78)
_H_DOWN = np.float32(2.0**-78)


class SqrtKernel(int):
    """One of the ``mkl`` kernel numbers of :func:`torch_sqrt` (:func:`mkl_flag` makes them), whose value
    compiled code takes as a constant (Numba types it as :class:`SqrtKernelType` of that value): a loop
    over it holds that kernel alone, without a run-time switch, and vectorises. In Python (the CUDA
    simulator) it is the int."""

    __slots__ = ()
    #: A CUDA launch passes it as a plain int (:func:`optkernels.kernels._elementwise._run_time_ints`).
    compile_time_int = True

    @property
    def _numba_type_(self) -> SqrtKernelType:
        """Numba's type of this value, which Numba's dispatcher reads from a value it cannot type by itself
        before it would call ``typeof`` in Python (a Python call per launch of a kernel given a SqrtKernel);
        the same type as :func:`_typeof_sqrt_kernel`'s, made once per kernel number."""
        kernel = int(self)
        found = _SQRT_KERNEL_TYPES.get(kernel)
        if found is None:
            found = _SQRT_KERNEL_TYPES[kernel] = SqrtKernelType(kernel)
        return found


class SqrtKernelType(types.Dummy):
    """Numba's type of a :class:`SqrtKernel`: the kernel number is part of the type."""

    def __init__(self, kernel: int):
        self.kernel = int(kernel)
        super().__init__(f"SqrtKernel({self.kernel})")


#: The Numba type of each kernel number met (:attr:`SqrtKernel._numba_type_`).
_SQRT_KERNEL_TYPES: dict[int, SqrtKernelType] = {}


@typeof_impl.register(SqrtKernel)
def _typeof_sqrt_kernel(value: SqrtKernel, context: Any) -> SqrtKernelType:
    return value._numba_type_


register_model(SqrtKernelType)(models.OpaqueModel)


@unbox(SqrtKernelType)
def _unbox_sqrt_kernel(typ: SqrtKernelType, obj: Any, c: Any) -> NativeValue:
    return NativeValue(c.context.get_dummy_value())


@_scalar_helper
def torch_sqrt(x, mkl):
    """torch's CPU ``sqrt`` of ``x``: IEEE ``sqrt`` where ``mkl`` is None, else one of MKL's kernels for
    ``x``'s dtype, every operation rounded as MKL rounds it. Both choices are compile-time ones for a
    :class:`SqrtKernel` ``mkl`` (what :func:`mkl_flag` gives): such a loop has no other branch, and
    vectorises (the estimates' packed forms, :func:`~optkernels.kernels._intrinsics.rsqrt14`); a plain int
    ``mkl`` is switched on at run time.

    * ``MKL_AVX_SQRT`` (``H8``/``EX``, the AVX path MKL gives AMD processors, among others):
      ``r = rsqrtss(x)``, ``s = x·r``, ``h = r/2``, ``t = 1/2 − s·h``, ``s' = s + s·t``, ``h' = h + h·t``,
      result ``s' + (x − s'·s')·h'``, no FMA; normal positive inputs only (IEEE ``sqrt`` for the rest, as
      MKL's special path gives);
    * ``MKL_AVX512_SQRT`` (``Z0``, AVX-512, Intel processors): ``r = vrsqrt14ss(x)``, ``s = x·r``,
      ``h = r/2``, result ``fma(fma(−s, s, x), h, s)``, scaled by powers of two where ``r > 2³⁹`` (tiny and
      subnormal ``x``); zeros, infinities, NaN and negative inputs as IEEE ``sqrt``;
    * ``MKL_AVX_SQRT64``, ``MKL_AVX2_SQRT64``, ``MKL_AVX512_SQRT64`` (float64 ``H8``/``EX``, ``L9``,
      ``Z0``): :mod:`optkernels.kernels._mkl_sqrt64`.
    """
    if mkl is None:
        return math.sqrt(x)
    return _mkl_root(x, mkl)


@_scalar_helper
def _mkl_root_switched(x, mkl):
    """:func:`torch_sqrt`'s MKL kernel ``mkl``, chosen at run time."""
    if mkl >= MKL_AVX_SQRT64:
        return _mkl_sqrt64(x, mkl)
    return _mkl_sqrt(x, mkl)


def _mkl_root(x: Any, mkl: Any) -> Any:
    """MKL's kernel ``mkl`` of ``x`` (compiled: chosen when compiling, for a :class:`SqrtKernel`)."""
    return _mkl_root_switched(x, mkl)


@overload(_mkl_root, jit_options=dict(error_model="numpy", fastmath=False))
def _mkl_root_compiled(x, mkl):
    if not isinstance(mkl, SqrtKernelType):
        return lambda x, mkl: _mkl_root_switched(x, mkl)
    kernel = mkl.kernel
    if x == types.float32 and kernel == MKL_AVX_SQRT:
        return lambda x, mkl: _mkl_avx_sqrt32(x)
    if x == types.float32 and kernel == MKL_AVX512_SQRT:
        return lambda x, mkl: _mkl_avx512_sqrt32(x)
    if x == types.float64 and kernel == MKL_AVX_SQRT64:
        return lambda x, mkl: mkl_avx_sqrt64(x)
    if x == types.float64 and kernel == MKL_AVX2_SQRT64:
        return lambda x, mkl: mkl_avx2_sqrt64(x)
    if x == types.float64 and kernel == MKL_AVX512_SQRT64:
        return lambda x, mkl: mkl_avx512_sqrt64_selected(x)
    return lambda x, mkl: _mkl_root_switched(x, np.int64(kernel))


def _mkl_sqrt64_python(x, mkl):  # the float64 overload: Numba wants the typing signature's names, unannotated
    x = np.float64(x)
    if mkl == MKL_AVX_SQRT64:
        return mkl_avx_sqrt64(x)
    if mkl == MKL_AVX2_SQRT64:
        return mkl_avx2_sqrt64(x)
    return mkl_avx512_sqrt64(x)


def _mkl_sqrt64(x: Any, mkl: int) -> Any:
    """MKL's float64 kernel ``mkl`` of the float64 ``x``; compiled for a float32 ``x`` (a branch not taken:
    the ``mkl`` scalar is per dtype), ``x`` itself, so that the float32 loops keep float32 values."""
    return _mkl_sqrt64_python(x, mkl)


@overload(_mkl_sqrt64, jit_options=dict(error_model="numpy", fastmath=False))
def _mkl_sqrt64_compiled(x, mkl):
    if x == types.float64:
        return _mkl_sqrt64_python
    return lambda x, mkl: x


def torch_sqrt_as(x: float, mkl: Any, like: Any) -> Any:
    """torch's CPU ``sqrt`` of an element of ``like``: :func:`torch_sqrt`; for a half ``like``, IEEE
    ``sqrt`` of the float32 value, rounded (torch's half ``sqrt`` converts to float32 and never runs MKL)."""
    return torch_sqrt(x, mkl)


@overload(torch_sqrt_as, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_sqrt_as_compiled(x, mkl, like):
    if like in HALF_MARKERS:
        return lambda x, mkl, like: rounded_as(math.sqrt(x), like)
    return lambda x, mkl, like: torch_sqrt(x, mkl)


@_scalar_helper
def _h8_root(x):
    """MKL's float32 ``H8``/``EX`` operations on a float32 ``x`` of its path: ``r = rsqrtss(x)``, ``s = x·r``,
    ``h = r/2``, ``t = 1/2 − s·h``, ``s' = s + s·t``, ``h' = h + h·t``, ``s' + (x − s'·s')·h'``."""
    r = rsqrt_estimate(x)
    s = x * r
    h = r * _HALF
    t = _HALF - s * h
    s = s + s * t
    h = h + h * t
    return s + (x - s * s) * h


@_scalar_helper
def _mkl_avx_sqrt32_selected(x):
    """MKL's float32 ``H8``/``EX`` (:func:`torch_sqrt`) of a float32 ``x`` in compiled code, without
    branches: every input takes the kernel's operations, and the ones outside its path take IEEE ``sqrt``
    by a select (the same bits as :func:`_mkl_sqrt`'s branches)."""
    mkl = _h8_root(x)
    ieee = math.sqrt(x)  # computed for every x: a call in a branch would stop the vectoriser
    return mkl if x >= _FLT_MIN and x < _FLT_INF else ieee


#: MKL's float32 ``H8`` in compiled code: with AVX-512, the kernel's result fixed up by the input's class and
#: IEEE ``sqrt`` only in vectors holding a subnormal (:mod:`optkernels.kernels._mkl_h8`); elsewhere
#: :func:`_mkl_avx_sqrt32_selected`. The same bits.
_mkl_avx_sqrt32 = branching_h8_root(_mkl_avx_sqrt32_selected)


@_scalar_helper
def _mkl_avx512_sqrt32_selected(x):
    """MKL's float32 ``Z0`` (:func:`torch_sqrt`), without branches (as :func:`_mkl_avx_sqrt32`): one
    ``fma(fma(−s_k, s_k, x_k), h_k, s)`` whose operands are the scaled path's where ``r > 2³⁹``
    (``x_k = x·2⁷⁸``, ``s_k = s·2³⁹``, ``h_k = h·2⁻⁷⁸``) and the plain path's elsewhere: each factor a power
    of two (exact), so the bits of both paths, at one masked multiplication per operand instead of a
    second result and a select; the inputs outside the kernel's path by
    :func:`~optkernels.kernels._intrinsics.sqrt_special` (one ``vfixupimmps`` per vector), IEEE ``sqrt``'s
    bits without a root."""
    r = rsqrt14(x)
    h = r * _HALF
    s = r * x
    large = r > _R_LARGE
    # the scaled path's operands where r > 2^39, else the plain path's: exact power-of-two factors, one
    # masked multiplication each (the last addend is s on both paths)
    xs = x * _X_UP if large else x
    ss = s * _R_LARGE if large else s
    hs = h * _H_DOWN if large else h
    mkl = fma(fma(-ss, ss, xs), hs, s)
    # NaN exactly outside the path (x ≤ 0, +∞, NaN: s = r·x is NaN there), finite on it
    return sqrt_special(mkl, x)


#: MKL's float32 ``Z0`` in compiled code: with AVX-512 (where Z0 runs), the scaled path behind a branch per
#: vector (:mod:`optkernels.kernels._mkl_z0`); elsewhere :func:`_mkl_avx512_sqrt32_selected`. The same bits.
_mkl_avx512_sqrt32 = branching_z0_root(_mkl_avx512_sqrt32_selected)


@_scalar_helper
def _mkl_sqrt(x, mkl):
    """MKL's float32 kernel ``mkl`` of ``x`` with a branch per path: the run-time switch, and the Python of
    the CUDA simulator (which computes no path it does not take)."""
    if mkl == MKL_AVX_SQRT and x >= _FLT_MIN and x < _FLT_INF:
        return _h8_root(
            np.float32(x)
        )  # float32 by contract (a Python float holding one, under the simulator)
    if mkl == MKL_AVX512_SQRT and x > _FLT_ZERO and x < _FLT_INF:
        x = np.float32(x)
        r = rsqrt14(x)
        h = r * _HALF
        s = r * x
        if r > _R_LARGE:
            scaled = s * _R_LARGE
            return fma(fma(-scaled, scaled, x * _X_UP), h * _H_DOWN, s)
        return fma(fma(-s, s, x), h, s)
    return math.sqrt(x)


# ------------------------------------------------------------------------------------------- Adam, AdamW


def divide_root_by_constant(s: Any, c: Any, inv_c: Any) -> Any:
    """``s / c`` rounded once in ``s``'s dtype, for ``s`` a square root (or ±0, ±∞, NaN). ``inv_c`` None: a
    division. Else ``s`` and ``c`` are float32 with ``c`` in
    :data:`~optkernels.kernels._constant_quotient.QUOTIENT_DIVISOR_RANGE` and ``inv_c`` is the float64
    ``1/c`` correctly rounded, and the result has the division's bits without one:

    * in Python (the CUDA simulator) and CUDA code, :func:`~optkernels.kernels._divide.divide_by_constant`'s
      float64 product (exact for every ``s``);
    * in CPU code, :func:`~optkernels.kernels._constant_quotient.divide_by_reciprocal`'s float32 steps (a
      multiplication, three ``fma``, one ``vfixupimmps``) for ``s`` ±0, ±∞, NaN or in
      :data:`~optkernels.kernels._constant_quotient.QUOTIENT_DIVIDEND_RANGE`: every square root of a
      float32, which is what the Adam loops divide."""
    return divide_by_constant(s, c, inv_c)


@overload(divide_root_by_constant, jit_options=dict(error_model="numpy", fastmath=False))
def _divide_root_by_constant_compiled(s, c, inv_c):
    if inv_c is None or isinstance(inv_c, types.NoneType):
        return lambda s, c, inv_c: s / c
    if s == c == types.float32 and inv_c == types.float64:
        return lambda s, c, inv_c: divide_by_reciprocal(s, c, inv_c)
    return lambda s, c, inv_c: divide_by_constant(s, c, inv_c)


def torch_div_scalar(s: Any, c: Any, inv_c: Any, like: Any) -> Any:
    """torch's CPU ``t / c`` of an element ``s`` of ``like`` by the Python scalar ``c``: :func:`divide_root_by_constant`;
    for a half ``like``, the float32 quotient (torch divides its float32 value by ``c`` converted to
    float32), rounded by the caller: for a bfloat16 ``like`` and a float32 ``inv_c``, ``s·inv_c`` (the
    multiplier of :func:`bf16_bc2_multiplier`, which gives the quotient's bfloat16 rounding for every
    bfloat16 ``s``)."""
    return divide_root_by_constant(s, c, inv_c)


@overload(torch_div_scalar, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_div_scalar_compiled(s, c, inv_c, like):
    if like in (types.uint16, types.int8) and inv_c == types.float32:  # bfloat16: see bf16_bc2_multiplier
        return lambda s, c, inv_c, like: s * inv_c
    if like in HALF_MARKERS:
        return lambda s, c, inv_c, like: s / c
    return lambda s, c, inv_c, like: divide_root_by_constant(s, c, inv_c)


#: Steps per block of :func:`bf16_bc2_multiplier`'s checks, and the blocks kept.
_MULTIPLIER_BLOCK, _MULTIPLIER_BLOCKS = 512, 64
_MULTIPLIERS: dict = {}
#: The 128 significands of the positive normal bfloat16 numbers in [1, 2).
_BF16_SIGNIFICANDS = np.arange(128, 256, dtype=np.float32) / np.float32(128)


def bf16_bc2_multiplier(beta2: float, step: int) -> Any:
    """``y = float32(1/c)`` for Adam's ``c = bias_correction2**0.5`` (float32, as :func:`adam_step_scalars`
    computes it for step ``step`` from 1) where ``bfloat16(float32(r·y)) = bfloat16(float32(r/c))`` for every
    bfloat16 ``r ≥ 0`` (the element function's root: torch divides it by ``c`` in float32 and rounds the
    quotient to bfloat16); where some ``r`` differs, the nearest float32 within 4 units in the last place of
    ``y`` that gives every ``r``'s bits, or None where none does (the kernel then divides).

    The product and the quotient are rounded alike at every scale: ``0 < c ≤ 1`` and ``y ≤ 1/√(1 − β2)``, and
    a root (``√`` of a bfloat16) is 0, +∞, NaN (each the same either way) or in ``[2⁻⁷⁵, 2⁶⁴]``, where both
    results are normal float32 and their bfloat16 roundings scale with ``r``. So the 128 significands of
    ``[1, 2)`` decide for every ``r``; they are checked for blocks of steps at a time (remembered), each ``c``
    computed in Python as the step's. ``y`` is ``float32`` of the correctly rounded float64 ``1/c``: ``1/c``
    lies at least 2⁻⁴⁹ (relative) from every float32 midpoint, so that is ``1/c`` rounded once to float32."""
    key = (float(beta2), step // _MULTIPLIER_BLOCK)
    table = _MULTIPLIERS.get(key)
    if table is None:
        if len(_MULTIPLIERS) >= _MULTIPLIER_BLOCKS:
            _MULTIPLIERS.clear()
        table = _MULTIPLIERS[key] = _bc2_multipliers(key[0], key[1] * _MULTIPLIER_BLOCK)
    y = table[step % _MULTIPLIER_BLOCK]
    return y if y > 0 else None


def _bc2_multipliers(beta2: float, first: int) -> np.ndarray:
    """:func:`bf16_bc2_multiplier` of steps ``first`` .. ``first + _MULTIPLIER_BLOCK − 1``, 0 for None."""
    steps = range(first, first + _MULTIPLIER_BLOCK)
    c = np.array([(1 - beta2 ** float(t)) ** 0.5 for t in steps]).astype(np.float32)  # rounded once
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        y = (1.0 / c.astype(np.float64)).astype(np.float32)
        divided = _BF16_SIGNIFICANDS[:, None] / c
        multiplied = _BF16_SIGNIFICANDS[:, None] * y
    same = (c > 0) & (c <= 1) & np.isfinite(y)
    same &= np.all(_bf16_rounded(divided) == _bf16_rounded(multiplied), axis=0)
    for k in np.flatnonzero(
        ~same & (c > 0) & (c <= 1) & np.isfinite(y)
    ):  # rare: the nearest other multiplier
        expected = _bf16_rounded(divided[:, k])
        for other in _neighbours(y[k]):
            if np.array_equal(_bf16_rounded(_BF16_SIGNIFICANDS * other), expected):
                y[k], same[k] = other, True
                break
    return np.where(same, y, np.float32(0))


def _neighbours(y: np.float32) -> list:
    """The float32 numbers 1 to 4 units in the last place from ``y``, nearest first."""
    out, low, high = [], y, y
    for _ in range(4):
        low, high = np.nextafter(low, np.float32(0)), np.nextafter(high, np.float32(np.inf))
        out += [low, high]
    return out


def _bf16_rounded(x: np.ndarray) -> np.ndarray:
    """The bfloat16 bits (in uint32) nearest each positive finite float32 of ``x`` (ties to even)."""
    bits = x.view(np.uint32)
    return (bits + ((bits >> 16) & 1) + 0x7FFF) >> 16


def adam_half_step_scalars(group: tuple, step: int) -> tuple:
    """:func:`adam_step_scalars` for a float16/bfloat16 launch: the float64 ``1/bias_correction2**0.5``
    replaced by :func:`bf16_bc2_multiplier`'s float32 multiplier where there is one (bfloat16 elements are
    then multiplied, float16 ones still divided)."""
    scalars = adam_step_scalars(group, step)
    y = bf16_bc2_multiplier(group[2], step) if group[3] else None
    if y is None:
        return scalars
    k = len(group[4]) + 1  # after the head and bias_correction2**0.5
    return (*scalars[:k], y, *scalars[k + 1 :])


#: Steps per block of :func:`adam_half_step_block` (the multipliers' blocks: one block of each).
HALF_STEP_BLOCK = _MULTIPLIER_BLOCK


def adam_half_step_block(group: tuple, step: int) -> tuple[int, list, list, list]:
    """``(first, bc2_sqrt, inv_bc2_sqrt, bias_correction1)``: what :func:`adam_half_step_scalars` computes
    per step from the betas alone, for the :data:`HALF_STEP_BLOCK` steps from ``first`` (the block holding
    ``step``; from step 1), each a list indexed by ``step − first``: ``bias_correction2**0.5`` and its
    multiplier (the same values and types as that function's: Python float arithmetic per step, as there,
    and one float32 rounding), and the Python float ``1 − β1^t`` that the step's ``−lr/bias_correction1``
    divides (:func:`adam_half_block_scalars`: ``lr`` may change every step). ``group``:
    :func:`adam_group_scalars`' tuple, of which only the dtype and betas are read. Raises what a step of
    the block would raise in that function (hyper-parameters outside torch's ranges: an
    ``ArithmeticError``, or a ``TypeError`` for a complex root), where that step may be a later one."""
    convert, beta1, beta2, single = group[:4]
    first = max(1, step // HALF_STEP_BLOCK * HALF_STEP_BLOCK)
    steps = [float(t) for t in range(first, (first // HALF_STEP_BLOCK + 1) * HALF_STEP_BLOCK)]
    dtype = np.dtype(convert)
    bc2 = list(np.array([(1 - beta2**t) ** 0.5 for t in steps], np.float64).astype(dtype))
    bias1 = [1 - beta1**t for t in steps]
    low, high = QUOTIENT_DIVISOR_RANGE
    inv = [1.0 / float(c) if single and low <= c <= high else None for c in bc2]
    if single:
        for k, t in enumerate(range(first, first + len(steps))):
            y = bf16_bc2_multiplier(beta2, t)
            if y is not None:
                inv[k] = y
    return first, bc2, inv, bias1


def adam_half_block_scalars(group: tuple, block: tuple, step: int) -> tuple:
    """``adam_half_step_scalars(group, step)[:-3]`` (the scalars without torch's tails) from ``block``,
    :func:`adam_half_step_block`'s of a group with ``group``'s dtype and betas, for a block holding
    ``step`` (``−lr/bias_correction1`` divided here, as that function divides it)."""
    k = step - block[0]
    return (*group[4], block[1][k], block[2][k], group[5], group[0](group[6] / block[3][k]), group[7][0])


@_scalar_helper
def torch_adam_moments(m, v, g, w1, w1_minus_one, small1, beta2, one_minus_beta2, like):
    """``m.lerp_(g, 1 − β1)`` and ``v.mul_(β2).addcmul_(g, g, value=1 − β2)`` (each op rounded to a half
    ``like``'s dtype)."""
    v = rounded_as(v * beta2, like)
    return torch_lerp(m, g, w1, w1_minus_one, small1, like), rounded_as(fma(one_minus_beta2 * g, g, v), like)


def torch_adam_denom(v: Any, bc2_sqrt: Any, inv_bc2_sqrt: Any, eps: Any, mkl: Any, like: Any) -> Any:
    """``denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)`` (each op rounded to a half ``like``'s dtype,
    ``eps`` first too: torch casts an added scalar): :func:`torch_sqrt_as`, then
    :func:`torch_adam_denom_of_root`. In an all-bfloat16 loop given a
    :class:`~._denominator_table.DenominatorTable` as ``mkl`` (whose bfloat16 sqrt does not use it), the
    table's entry for ``v``: :func:`adam_denominator_table` computed it so."""
    return torch_adam_denom_of_root(torch_sqrt_as(v, mkl, like), bc2_sqrt, inv_bc2_sqrt, eps, like)


@overload(torch_adam_denom, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_adam_denom_compiled(v, bc2_sqrt, inv_bc2_sqrt, eps, mkl, like):
    if isinstance(mkl, DenominatorTableType):
        if like != PURE_BF16:
            raise TypingError("a DenominatorTable serves all-bfloat16 loops only")
        return lambda v, bc2_sqrt, inv_bc2_sqrt, eps, mkl, like: denominator_at(mkl, v)

    def computed(v, bc2_sqrt, inv_bc2_sqrt, eps, mkl, like):
        return torch_adam_denom_of_root(torch_sqrt_as(v, mkl, like), bc2_sqrt, inv_bc2_sqrt, eps, like)

    return computed


@_scalar_helper
def torch_adam_denom_of_root(root, bc2_sqrt, inv_bc2_sqrt, eps, like):
    """``(root / bias_correction2_sqrt).add_(eps)``, each op rounded to a half ``like``'s dtype (``eps``
    first too), the division by :func:`torch_div_scalar`."""
    quotient = torch_div_scalar(root, bc2_sqrt, inv_bc2_sqrt, like)
    return torch_add_eps(rounded_as(quotient, like), eps, like)


@_scalar_helper
def torch_adam_param(p, m, v, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl, like):
    """``p.addcdiv_(m, denom, value=−step_size)`` with :func:`torch_adam_denom`'s ``denom`` (rounded to a
    half ``like``'s dtype)."""
    denom = torch_adam_denom(v, bc2_sqrt, inv_bc2_sqrt, eps, mkl, like)
    return rounded_as(p + neg_step_size * m / denom, like)


@elementwise
def _torch_adam_roots(i, root, v, tail_from, chunk, chunk_tail):
    """``root[i]``: :func:`torch_sqrt_as` of ``v[i]`` (bfloat16 arrays: the roots of every ``v``, the same
    for every step). The tail scalars (none is ever given) only make its half launch the split loop, whose
    body is vectorised (and paired)."""
    _unused = torch_tail(i, tail_from, chunk, chunk_tail, root)
    root[i] = torch_sqrt_as(v[i], None, root)


@elementwise
def _torch_adam_denoms(i, denom, root, bc2_sqrt, inv_bc2_sqrt, eps, tail_from, chunk, chunk_tail):
    """``denom[i]``: :func:`torch_adam_denom_of_root` of ``root[i]`` (bfloat16 arrays: with
    :func:`_torch_adam_roots`' roots, :func:`torch_adam_denom` of every ``v``: the table's entries)."""
    _unused = torch_tail(i, tail_from, chunk, chunk_tail, denom)
    denom[i] = torch_adam_denom_of_root(root[i], bc2_sqrt, inv_bc2_sqrt, eps, denom)


#: ``"roots"``: the roots of every bfloat16 bit pattern ``v`` (:func:`_torch_adam_roots`, in the order of the
#: patterns' bits: :func:`adam_denominator_table`'s inputs) and the launcher of :func:`_torch_adam_denoms`,
#: one tuple, made on first use (by the first of several threads to publish it: ``setdefault``).
_BF16_ROOTS: dict = {}
#: The entries of the negative ``v`` (sign bit set: −0, negatives, −∞, NaN with the sign bit), by ``eps``
#: (its value and sign: :func:`_table_key`'s last two):
#: they do not depend on the step (``√−0 = −0``, whose quotient is −0, plus ``eps``; every other root is a
#: NaN, which the quotient and the sum carry), so a table of a known ``eps`` computes only its other half.
_NEGATIVE_HALVES: dict = {}
#: :func:`_torch_adam_denoms`' tail scalars: no element in torch's tails (65536 < 2**30: int32).
_NO_TABLE_TAIL = (np.int32(65536), np.int32(65536), np.int32(0))
#: Tables kept, by :func:`_table_key` (bias_correction2**0.5, its multiplier, eps): a step whose constants repeat (late in
#: training ``bias_correction2**0.5`` is 1.0 in float32) reuses its table.
_DENOMINATOR_TABLES: dict = {}


def _table_key(bc2_sqrt: Any, inv_bc2_sqrt: Any, eps: Any) -> tuple:
    """What a table's entries depend on: the three scalars' values, the quotient's kind and ``eps``'s sign
    (``−0 + eps`` is −0 for ``eps = −0.0``, +0 for ``0.0``)."""
    eps = float(eps)
    return (
        float(bc2_sqrt),
        None if inv_bc2_sqrt is None else (type(inv_bc2_sqrt), float(inv_bc2_sqrt)),
        eps,
        math.copysign(1.0, eps),
    )


def _fill_denominators(buffer: np.ndarray, stop: int, bc2_sqrt: Any, inv_bc2_sqrt: Any, eps: Any) -> None:
    """Entries ``0 .. stop − 1`` of the table in ``buffer`` (entry k at ``buffer[1 + k]``) computed: a launch
    of :func:`_torch_adam_denoms` over the roots (made on first use, by the first of several threads to
    publish them: ``setdefault``)."""
    roots, launcher = _bf16_roots()
    key = (type(bc2_sqrt), type(inv_bc2_sqrt), type(eps))  # (the arrays: 1-D contiguous uint16, always)
    if not launcher.by_key(  # on this thread: a few microseconds, not worth waking another one
        key,
        stop,
        buffer[1 : 1 + stop],
        roots[:stop],
        bc2_sqrt,
        inv_bc2_sqrt,
        eps,
        *_NO_TABLE_TAIL,
        serial=True,
    ):
        raise RuntimeError("a denominator table is not built inside stochastic_rounding()")


def adam_denominator_table(bc2_sqrt: Any, inv_bc2_sqrt: Any, eps: Any) -> DenominatorTable:
    """A :class:`~._denominator_table.DenominatorTable` of :func:`torch_adam_denom` in an all-bfloat16 loop
    (the three scalars as a bfloat16 Adam launch takes them: :func:`adam_half_step_scalars`), every entry
    computed by the same element code as the loop's (a fused all-bfloat16 launch over the 65536 patterns;
    its bfloat16 stores keep a NaN's bits, as the loop's value): the loop given it as its ``mkl`` scalar
    reads the bits it would compute. A new table (its own memory, never written again: any thread may read
    it), of which the last two are kept. Not inside :func:`~optkernels.kernels.stochastic_rounding` (whose
    launches round otherwise). :class:`PartTablesBuffer` holds an owner's tables that launches fill themselves."""
    key = _table_key(bc2_sqrt, inv_bc2_sqrt, eps)
    table = _DENOMINATOR_TABLES.get(key)
    if table is None:
        buffer = np.empty(65537, np.uint16)
        buffer[0] = 0  # (read with entry 0, unused)
        negative = _NEGATIVE_HALVES.get(key[2:])
        _fill_denominators(buffer, 32768 if negative is not None else 65536, bc2_sqrt, inv_bc2_sqrt, eps)
        if negative is None:
            if len(_NEGATIVE_HALVES) >= 4:
                _NEGATIVE_HALVES.clear()
            negative = _NEGATIVE_HALVES[key[2:]] = buffer[32769:].copy()
        buffer[32769:] = negative
        table = DenominatorTable(buffer)
        if len(_DENOMINATOR_TABLES) >= 2:
            try:  # the oldest, unless another thread has just removed it (a table in use stays alive)
                _DENOMINATOR_TABLES.pop(next(iter(_DENOMINATOR_TABLES)), None)
            except (StopIteration, RuntimeError):  # emptied, or changed between iter() and next()
                pass
        _DENOMINATOR_TABLES[key] = table
    return table


#: The most parts a launch has: Numba's thread count.
_MOST = numba.config.NUMBA_NUM_THREADS


class PartTablesBuffer:
    """One owner's :class:`~._denominator_table.PartTables` (:func:`part_tables`, made on first use), lent to
    one launch at a time: a step takes it with :meth:`take` and gives it back with :meth:`release` once its
    launch has filled and read it; while one thread holds it, :meth:`take` in another returns None (that
    step then takes a table of its own from :func:`adam_denominator_table`): no two launches fill the same
    rows at once."""

    __slots__ = ("tables", "_lock")

    def __init__(self) -> None:
        self.tables: PartTables | None = None
        self._lock = threading.Lock()

    def take(self, parts: int | None = None) -> PartTables | None:
        """The tables, with a row for each of a launch's ``parts`` (default: Numba's thread count, the most
        a launch has), held by the calling thread until :meth:`release`; None (nothing held) where another
        thread holds them. Tables with fewer rows are replaced by new ones (filled again by the parts)."""
        if not self._lock.acquire(blocking=False):
            return None
        tables, wanted = self.tables, parts if parts is not None else _MOST
        if tables is None or tables.rows < wanted:
            try:
                tables = self.tables = part_tables(wanted)
            except BaseException:
                self._lock.release()
                raise
        return tables

    def release(self) -> None:
        """Give the tables back after the launch that read them (the calling thread took them)."""
        self._lock.release()


def _bf16_roots() -> tuple:
    """``(roots, launcher)``: :data:`_BF16_ROOTS`' roots (uint16 bits) and :func:`_torch_adam_denoms`'
    launcher, made on first use (by the first of several threads to publish them: ``setdefault``)."""
    found = _BF16_ROOTS.get("roots")
    if found is None:
        from ._elementwise import HalfLauncher
        from ._lowp import BFLOAT16

        patterns = np.arange(65536, dtype=np.uint16).view(BFLOAT16)
        roots = np.empty(65536, BFLOAT16)
        HalfLauncher(_torch_adam_roots, (roots, patterns, *_NO_TABLE_TAIL))(
            65536, roots.view(np.uint16), patterns.view(np.uint16), *_NO_TABLE_TAIL
        )
        scalars = (np.float32(1), np.float32(1), np.float32(0))
        example = (roots, roots, *scalars, *_NO_TABLE_TAIL)
        made = (roots.view(np.uint16), HalfLauncher(_torch_adam_denoms, example))
        found = _BF16_ROOTS.setdefault("roots", made)
    return found


def part_tables(rows: int | None = None) -> PartTables:
    """New :class:`~._denominator_table.PartTables` of ``rows`` rows (default: one per Numba thread, the most
    parts a launch has; a launch must have at most ``rows`` parts), unfilled:
    given as a bfloat16 Adam launch's ``mkl`` scalar (see :func:`part_denominators`), each part of the
    launch fills its own row's table where the step's constants differ from its last ones. Its memory
    is written by the launches given it: one launch at a time."""
    return PartTables(rows if rows is not None else _MOST, _bf16_roots()[0])


def part_denominators(part: int, mkl: Any, bc2_sqrt: Any, inv_bc2_sqrt: Any, eps: Any) -> Any:
    """A part's ``mkl`` scalar in a split loop of :func:`_torch_adam` or :func:`_torch_adam_amsgrad`
    (compiled code, at the start of each part): ``mkl`` itself, or for a
    :class:`~._denominator_table.PartTables`, the table of row ``part``, first filled (by the calling
    thread) where it was not filled for these three scalars: each entry ``k`` computed by
    :func:`_torch_adam_denoms`' element code from the root of pattern ``k``, as
    :func:`adam_denominator_table` computes it (the same entries), the negative half (``v`` with its sign
    bit set: it depends on ``eps`` alone) only where ``eps`` changed."""
    return mkl


_INT64_LIKE = np.empty(0, np.int64)
_UINT16_LIKE = np.empty(0, np.uint16)
#: :func:`part_denominators`' ``FILLED`` mark of a table by the type of its ``inv_bc2_sqrt``.
_QUOTIENT_KIND = {types.float32: 2, types.float64: 3}
#: Bytes from a row's start to its table's entry 0.
_ENTRY0 = 2 * (HEADER_WORDS + 1)
#: The fill's element function (:func:`_torch_adam_denoms`' fused all-bfloat16 element), made on first use.
_PART_FILL: list = []


def _part_fill() -> Any:
    """The compiled call that fills entries ``0 .. stop − 1`` of a part's table on the calling thread:
    ``fill(entries, roots, stop, bc2_sqrt, inv_bc2_sqrt, eps)``, the loop of :func:`_torch_adam_denoms`'
    all-bfloat16 launch (:func:`adam_denominator_table`'s, vectorised and paired), run as one part."""
    if not _PART_FILL:
        driver = _bf16_roots()[1]._driver  # the split loop's chunked entry: (parallel, parts, n, parts, ...)
        tail_from, chunk, chunk_tail = _NO_TABLE_TAIL

        @numba.njit(error_model="numpy", fastmath=False)
        def fill(entries, roots, stop, bc2_sqrt, inv_bc2_sqrt, eps):
            driver(
                False, 1, stop, 1, entries, roots, bc2_sqrt, inv_bc2_sqrt, eps, tail_from, chunk, chunk_tail
            )

        _PART_FILL.append(fill)
    return _PART_FILL[0]


@overload(part_denominators, jit_options=dict(error_model="numpy", fastmath=False))
def _part_denominators_compiled(part, mkl, bc2_sqrt, inv_bc2_sqrt, eps):
    if not isinstance(mkl, PartTablesType):
        return lambda part, mkl, bc2_sqrt, inv_bc2_sqrt, eps: mkl
    kind = _QUOTIENT_KIND.get(inv_bc2_sqrt, 1)
    fill = _part_fill()
    row_bytes = 2 * ROW_WORDS
    filled, bc2, inv, eps_key, negative = KEY["FILLED"], KEY["BC2"], KEY["INV"], KEY["EPS"], KEY["NEGATIVE"]
    roots_at, rows = KEY["ROOTS"], KEY["ROWS"]

    def filled_table(part, mkl, bc2_sqrt, inv_bc2_sqrt, eps):
        first = as_address(mkl)
        count = numba.carray(address_as_pointer(first, _INT64_LIKE), HEADER_WORDS // 4)[rows]
        row = first + (np.int64(part) % count) * row_bytes
        header = numba.carray(address_as_pointer(row, _INT64_LIKE), HEADER_WORDS // 4)
        b, q, e = float_bits(bc2_sqrt), float_bits(inv_bc2_sqrt), float_bits(eps)
        if not (header[filled] == kind and header[bc2] == b and header[inv] == q and header[eps_key] == e):
            stop = 32768 if header[negative] == 1 and header[eps_key] == e else 65536
            header[filled] = 0
            entries = numba.carray(address_as_pointer(row + _ENTRY0, _UINT16_LIKE), 65536)
            roots = numba.carray(address_as_pointer(header[roots_at], _UINT16_LIKE), 65536)
            fill(entries, roots, stop, bc2_sqrt, inv_bc2_sqrt, eps)
            header[bc2], header[inv], header[eps_key], header[negative] = b, q, e, 1
            header[filled] = kind
        return table_at(row + _ENTRY0)

    return filled_table


@elementwise
def _torch_adam(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    grad,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w1,
    w1_minus_one,
    small1,
    beta2,
    one_minus_beta2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    if decoupled:
        p = rounded_as(p * decay, var)
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    m, v = torch_adam_moments(
        exp_avg[i], exp_avg_sq[i], g, w1, w1_minus_one, small1, beta2, one_minus_beta2, var
    )
    exp_avg[i] = torch_nan(m, var, tail)
    exp_avg_sq[i] = torch_nan(v, var, tail)
    var[i] = torch_nan(
        torch_adam_param(p, m, v, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl, var), var, tail
    )


@elementwise
def _torch_adam_amsgrad(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    grad,
    negate,
    coupled,
    weight_decay,
    decoupled,
    decay,
    w1,
    w1_minus_one,
    small1,
    beta2,
    one_minus_beta2,
    bc2_sqrt,
    inv_bc2_sqrt,
    eps,
    neg_step_size,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    if decoupled:
        p = rounded_as(p * decay, var)
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    m, v = torch_adam_moments(
        exp_avg[i], exp_avg_sq[i], g, w1, w1_minus_one, small1, beta2, one_minus_beta2, var
    )
    v_max = nan_max(max_exp_avg_sq[i], v)
    exp_avg[i] = torch_nan(m, var, tail)
    exp_avg_sq[i] = torch_nan(v, var, tail)
    max_exp_avg_sq[i] = torch_max_nan(v_max, var, tail)
    var[i] = torch_nan(
        torch_adam_param(p, m, v_max, bc2_sqrt, inv_bc2_sqrt, eps, neg_step_size, mkl, var), var, tail
    )


#: Each part of the bfloat16 Adam loops fills and reads its own table where the launch's ``mkl`` is a
#: :class:`~._denominator_table.PartTables`.
_PART_TABLES = ("mkl", part_denominators, ("bc2_sqrt", "inv_bc2_sqrt", "eps"))
_torch_adam.part_scalar = _PART_TABLES
_torch_adam.pair_blocks = adam_pair_blocks
_torch_adam_amsgrad.part_scalar = _PART_TABLES


# ------------------------------------------------------------------------------------------------ Adamax


@elementwise
def _torch_adamax(
    i,
    var,
    exp_avg,
    exp_inf,
    grad,
    negate,
    coupled,
    weight_decay,
    w1,
    w1_minus_one,
    small1,
    beta2,
    eps,
    neg_clr,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    m = torch_lerp(exp_avg[i], g, w1, w1_minus_one, small1, var)
    # torch.maximum(exp_inf.mul_(β2), grad.abs().add_(eps)): the added scalar is cast to the dtype first
    u = nan_max(rounded_as(exp_inf[i] * beta2, var), rounded_as(abs(g) + rounded_as(eps, var), var))
    exp_avg[i] = torch_nan(m, var, tail)
    exp_inf[i] = torch_max_nan(u, var, tail)
    var[i] = torch_nan(rounded_as(p + neg_clr * m / u, var), var, tail)


# ----------------------------------------------------------------------------------------------- Adagrad


@elementwise
def _torch_adagrad(
    i, var, state_sum, grad, negate, coupled, weight_decay, eps, neg_clr, mkl, tail_from, chunk, chunk_tail
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    s = rounded_as(fma(g, g, state_sum[i]), var)
    state_sum[i] = torch_nan(s, var, tail)
    var[i] = torch_nan(
        rounded_as(p + neg_clr * g / torch_add_eps(torch_sqrt_as(s, mkl, var), eps, var), var), var, tail
    )


# ----------------------------------------------------------------------------------------------- RMSprop


@_scalar_helper
def torch_square_avg(square_avg, g, alpha, one_minus_alpha, like):
    """``square_avg.mul_(α).addcmul_(g, g, value=1 − α)`` (each op rounded to a half ``like``'s dtype)."""
    return rounded_as(fma(one_minus_alpha * g, g, rounded_as(square_avg * alpha, like)), like)


@_scalar_helper
def torch_add_eps(x, eps, like):
    """``x.add_(eps)``: ``x + eps``; for a half ``like``, ``eps`` is first cast to the half dtype (as torch
    casts an added scalar) and the sum rounded."""
    return rounded_as(x + rounded_as(eps, like), like)


@elementwise
def _torch_rms_prop(
    i,
    var,
    square_avg,
    grad,
    negate,
    coupled,
    weight_decay,
    alpha,
    one_minus_alpha,
    oma_minus_one,
    small,
    eps,
    momentum,
    neg_lr,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    sa = torch_square_avg(square_avg[i], g, alpha, one_minus_alpha, var)
    square_avg[i] = torch_nan(sa, var, tail)
    var[i] = torch_nan(
        rounded_as(p + neg_lr * g / torch_add_eps(torch_sqrt_as(sa, mkl, var), eps, var), var), var, tail
    )


@elementwise
def _torch_rms_prop_momentum(
    i,
    var,
    square_avg,
    momentum_buffer,
    grad,
    negate,
    coupled,
    weight_decay,
    alpha,
    one_minus_alpha,
    oma_minus_one,
    small,
    eps,
    momentum,
    neg_lr,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    sa = torch_square_avg(square_avg[i], g, alpha, one_minus_alpha, var)
    square_avg[i] = torch_nan(sa, var, tail)
    avg = torch_add_eps(torch_sqrt_as(sa, mkl, var), eps, var)
    buf = rounded_as(rounded_as(momentum_buffer[i] * momentum, var) + g / avg, var)
    momentum_buffer[i] = torch_nan(buf, var, tail)
    var[i] = torch_nan(torch_add_alpha(p, buf, neg_lr, var, tail), var, tail)


@elementwise
def _torch_centered_rms_prop(
    i,
    var,
    square_avg,
    grad_avg,
    grad,
    negate,
    coupled,
    weight_decay,
    alpha,
    one_minus_alpha,
    oma_minus_one,
    small,
    eps,
    momentum,
    neg_lr,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    sa = torch_square_avg(square_avg[i], g, alpha, one_minus_alpha, var)
    ga = torch_lerp(grad_avg[i], g, one_minus_alpha, oma_minus_one, small, var)
    square_avg[i] = torch_nan(sa, var, tail)
    grad_avg[i] = torch_nan(ga, var, tail)
    # square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(eps)
    avg = torch_add_eps(torch_sqrt_as(rounded_as(fma(-ga, ga, sa), var), mkl, var), eps, var)
    var[i] = torch_nan(rounded_as(p + neg_lr * g / avg, var), var, tail)


@elementwise
def _torch_centered_rms_prop_momentum(
    i,
    var,
    square_avg,
    grad_avg,
    momentum_buffer,
    grad,
    negate,
    coupled,
    weight_decay,
    alpha,
    one_minus_alpha,
    oma_minus_one,
    small,
    eps,
    momentum,
    neg_lr,
    mkl,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    sa = torch_square_avg(square_avg[i], g, alpha, one_minus_alpha, var)
    ga = torch_lerp(grad_avg[i], g, one_minus_alpha, oma_minus_one, small, var)
    square_avg[i] = torch_nan(sa, var, tail)
    grad_avg[i] = torch_nan(ga, var, tail)
    # square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(eps)
    avg = torch_add_eps(torch_sqrt_as(rounded_as(fma(-ga, ga, sa), var), mkl, var), eps, var)
    buf = rounded_as(rounded_as(momentum_buffer[i] * momentum, var) + g / avg, var)
    momentum_buffer[i] = torch_nan(buf, var, tail)
    var[i] = torch_nan(torch_add_alpha(p, buf, neg_lr, var, tail), var, tail)


# --------------------------------------------------------------------------------------------------- SGD


@elementwise
def _torch_sgd(i, var, grad, negate, coupled, weight_decay, neg_lr, tail_from, chunk, chunk_tail):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    var[i] = torch_nan(torch_add_alpha(p, g, neg_lr, var, tail), var, tail)


@elementwise
def _torch_sgd_momentum(
    i,
    var,
    momentum_buffer,
    grad,
    negate,
    coupled,
    weight_decay,
    first,
    momentum,
    one_minus_dampening,
    nesterov,
    neg_lr,
    tail_from,
    chunk,
    chunk_tail,
):
    p = var[i]
    tail = torch_tail(i, tail_from, chunk, chunk_tail, var)
    g = torch_grad(grad[i], p, negate, coupled, weight_decay, var, tail)
    if first:
        buf = g
    else:
        buf = torch_add_alpha(
            rounded_as(momentum_buffer[i] * momentum, var), g, one_minus_dampening, var, tail
        )
    # a clone of the gradient on the first step: its bits, unless an operation (not a negation in torch's
    # vector loop, which flips the sign bit) made it
    momentum_buffer[i] = torch_nan(buf, var, tail) if not first or coupled or (negate and tail) else buf
    if nesterov:
        g = torch_add_alpha(g, buf, momentum, var, tail)
    else:
        g = buf
    var[i] = torch_nan(torch_add_alpha(p, g, neg_lr, var, tail), var, tail)


# -------------------------------------------------------------------------------------------- SparseAdam


@scalar_math
def torch_sparse_adam_math(w, m, v, g, one_minus_beta1, one_minus_beta2, eps, neg_step_size, mkl):
    """One element of torch's ``sparse_adam`` (a coalesced gradient's value ``g``): the new ``(w, m, v)``."""
    m = m + (g - m) * one_minus_beta1  # exp_avg.add_(sparse((g − m)·(1 − β1)))
    v = v + (g * g - v) * one_minus_beta2  # exp_avg_sq.add_(sparse((g² − v)·(1 − β2)))
    return w + neg_step_size * (m / (torch_sqrt(v, mkl) + eps)), m, v


@elementwise
def _torch_sparse_adam(
    i,
    var,
    exp_avg,
    exp_avg_sq,
    values,
    rows,
    width,
    one_minus_beta1,
    one_minus_beta2,
    eps,
    neg_step_size,
    mkl,
):
    # element i of a coalesced row-sparse gradient (unique rows): row rows[i // width], column i % width
    j = rows[i // width] * width + i % width
    var[j], exp_avg[j], exp_avg_sq[j] = torch_sparse_adam_math(
        var[j],
        exp_avg[j],
        exp_avg_sq[j],
        values[i],
        one_minus_beta1,
        one_minus_beta2,
        eps,
        neg_step_size,
        mkl,
    )


def _sparse_adam_rows(var, exp_avg, exp_avg_sq, values, rows, width, b1, b2, eps, neg_step_size, mkl):
    for r in prange(rows.shape[0]):
        w = var[rows[r] * width : (rows[r] + 1) * width]
        m = exp_avg[rows[r] * width : (rows[r] + 1) * width]
        v = exp_avg_sq[rows[r] * width : (rows[r] + 1) * width]
        g = values[r * width : (r + 1) * width]
        for c in range(width):
            w[c], m[c], v[c] = torch_sparse_adam_math(w[c], m[c], v[c], g[c], b1, b2, eps, neg_step_size, mkl)


#: ``_torch_sparse_adam`` over whole rows (``rows``: the coalesced gradient's unique rows, ``values`` their
#: ``width`` elements each, flat): serial, and parallel over rows. The same bits as the element function (each
#: element is independent), without its division per element.
torch_sparse_adam_rows = numba.njit(cache=True, **_JIT_OPTIONS)(_sparse_adam_rows)
torch_sparse_adam_rows_parallel = numba.njit(cache=True, parallel=True, **_JIT_OPTIONS)(_sparse_adam_rows)


@elementwise
def _torch_sparse_adagrad(i, var, state_sum, values, rows, width, eps, neg_clr, mkl, fused):
    # element i of a coalesced row-sparse gradient (unique rows), as _torch_sparse_adam
    j = rows[i // width] * width + i % width
    g = values[i]
    s = state_sum[j] + g * g  # state_sum.add_(sparse(g.pow(2)))
    state_sum[j] = s
    u = g / (torch_sqrt(s, mkl) + eps)
    # param.add_(sparse(g/std), alpha=−clr): a fused multiply-add, but for a gradient of one scalar value
    # (dense_dim 0, one element), where torch rounds the product first (``fused`` False)
    var[j] = fma(u, neg_clr, var[j]) if fused else var[j] + neg_clr * u


@elementwise
def _torch_sqrt(i, out, x, mkl):
    out[i] = torch_sqrt(x[i], mkl)


def torch_sqrt_array(x: np.ndarray, mkl: int) -> np.ndarray:
    """:func:`torch_sqrt` of every element of the float32 or float64 NumPy array ``x``, a new array (to tell
    which sqrt torch computes on this machine: see :mod:`optkernels.torch`)."""
    x = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(x)
    _torch_sqrt.launch("cpu", x.size, out, x, mkl_flag(x.dtype, mkl))
    return out


# ------------------------------------------------------------------------------ host-side scalars (float64)
# ``lr`` is a Python float, or a NumPy scalar where torch's lr is a Tensor: torch's host arithmetic on it
# then runs in the tensor's dtype, and so does NumPy's on the scalar (a Python float operand is rounded to it).


#: The element functions whose last scalars are :data:`NO_TAIL` (see :func:`torch_tail_scalars`).
TAKES_TAIL: set = set()


def lerp_weight(dtype: np.dtype, weight: float) -> tuple:
    """``(w, w − 1, |w| < 0.5)`` of torch's ``lerp_`` with the Python float ``weight``: ``w`` converted to
    ``dtype``, ``w − 1`` computed in ``dtype`` (the scalars of :func:`torch_lerp`)."""
    w = dtype.type(weight)
    return w, w - dtype.type(1), bool(abs(float(w)) < 0.5)


def mkl_flag(dtype: np.dtype, mkl_sqrt: int) -> Any:
    """The ``mkl`` scalar of the element functions (:func:`torch_sqrt`): ``mkl_sqrt`` (which MKL kernel
    torch's ``sqrt`` is) as a :class:`SqrtKernel` (compiled as a constant) where it is one of ``dtype``'s
    (:data:`MKL_SQRT_KERNELS`); None (IEEE ``sqrt``) otherwise."""
    return SqrtKernel(mkl_sqrt) if mkl_sqrt in MKL_SQRT_KERNELS.get(np.dtype(dtype), ()) else None


def grad_prestep(dtype: np.dtype, maximize: bool, weight_decay: float) -> tuple:
    """``(negate, coupled, weight_decay)``: the scalars of :func:`torch_grad` for a group."""
    return bool(maximize), weight_decay != 0, dtype.type(weight_decay)


def adam_scalars(dtype: np.dtype, step: int, *hyper: Any, **named: Any) -> tuple:
    """The scalars of ``_torch_adam``/``_torch_adam_amsgrad`` for step ``step`` (from 1), as
    ``_single_tensor_adam`` computes them in Python floats: ``1 − lr·wd``, ``bias_correction2**0.5``,
    ``−lr/bias_correction1``; for float32, the float64 ``1/bias_correction2**0.5`` that
    :func:`divide_root_by_constant` divides by. ``hyper``/``named``: :func:`adam_group_scalars`'s arguments
    after ``dtype`` (``lr, beta1, beta2, eps, weight_decay, decoupled, maximize, mkl_sqrt``); the same as
    ``adam_step_scalars(adam_group_scalars(dtype, ...), step)``."""
    return adam_step_scalars(adam_group_scalars(dtype, *hyper, **named), step)


def adam_group_scalars(
    dtype: np.dtype,
    lr: Any,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    maximize: bool,
    mkl_sqrt: int = IEEE_SQRT,
) -> tuple:
    """The part of :func:`adam_scalars` that does not depend on the step, for :func:`adam_step_scalars`: an
    opaque tuple, computed once per group and its hyper-parameters (torch's ``lr``, ``betas``, ``eps``,
    ``weight_decay``; ``decoupled``: AdamW's decay; ``maximize``; ``mkl_sqrt``: see :func:`mkl_flag`)."""
    coupled = weight_decay != 0 and not decoupled
    head = (
        bool(maximize),
        coupled,
        dtype.type(weight_decay),
        weight_decay != 0 and decoupled,
        dtype.type(1 - lr * weight_decay),
        *lerp_weight(dtype, 1 - beta1),
        dtype.type(beta2),
        dtype.type(1 - beta2),
    )
    last = (mkl_flag(dtype, mkl_sqrt), *NO_TAIL)
    return dtype.type, beta1, beta2, dtype == np.float32, head, dtype.type(eps), -lr, last


def adam_step_scalars(group: tuple, step: int) -> tuple:
    """:func:`adam_scalars` for step ``step`` (from 1) from ``group``, :func:`adam_group_scalars`'s tuple
    (torch's host arithmetic: ``bias_correction2**0.5`` and ``−lr/bias_correction1``)."""
    convert, beta1, beta2, single, head, eps, neg_lr, last = group
    t = float(step)
    bc2_sqrt = convert((1 - beta2**t) ** 0.5)
    low, high = QUOTIENT_DIVISOR_RANGE  # (always, for torch's 0 ≤ β2 < 1; else a division)
    inv = 1.0 / float(bc2_sqrt) if single and low <= bc2_sqrt <= high else None
    return (*head, bc2_sqrt, inv, eps, convert(neg_lr / (1 - beta1**t)), *last)


def adamax_scalars(
    dtype: np.dtype,
    step: int,
    lr: Any,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> tuple:
    """The scalars of ``_torch_adamax`` for step ``step``: ``−lr/(1 − β1^t)`` and the rest converted."""
    return (
        *grad_prestep(dtype, maximize, weight_decay),
        *lerp_weight(dtype, 1 - beta1),
        dtype.type(beta2),
        dtype.type(eps),
        dtype.type(-(lr / (1 - beta1 ** float(step)))),
        *NO_TAIL,
    )


def adagrad_scalars(
    dtype: np.dtype,
    step: int,
    lr: Any,
    lr_decay: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
    mkl_sqrt: int = IEEE_SQRT,
) -> tuple:
    """The scalars of ``_torch_adagrad``: ``clr = lr/(1 + (t − 1)·lr_decay)``, passed as ``−clr``."""
    clr = lr / (1 + (float(step) - 1) * lr_decay)
    return (
        *grad_prestep(dtype, maximize, weight_decay),
        dtype.type(eps),
        dtype.type(-clr),
        mkl_flag(dtype, mkl_sqrt),
        *NO_TAIL,
    )


def rms_prop_scalars(
    dtype: np.dtype,
    lr: Any,
    alpha: float,
    eps: float,
    weight_decay: float,
    momentum: float,
    maximize: bool,
    mkl_sqrt: int = IEEE_SQRT,
) -> tuple:
    """The scalars shared by the four RMSprop element functions."""
    return (
        *grad_prestep(dtype, maximize, weight_decay),
        dtype.type(alpha),
        *lerp_weight(dtype, 1 - alpha),
        dtype.type(eps),
        dtype.type(momentum),
        dtype.type(-lr),
        mkl_flag(dtype, mkl_sqrt),
        *NO_TAIL,
    )


def sgd_scalars(
    dtype: np.dtype,
    first: bool,
    lr: Any,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
    maximize: bool,
) -> tuple:
    """The scalars of ``_torch_sgd`` (``momentum == 0``) or ``_torch_sgd_momentum`` (``first``: the
    buffer's first step, where torch clones the gradient into it)."""
    pre = grad_prestep(dtype, maximize, weight_decay)
    if momentum == 0:
        return (*pre, dtype.type(-lr), *NO_TAIL)
    return (
        *pre,
        bool(first),
        dtype.type(momentum),
        dtype.type(1 - dampening),
        bool(nesterov),
        dtype.type(-lr),
        *NO_TAIL,
    )


def sparse_adam_scalars(
    dtype: np.dtype, step: int, lr: Any, beta1: float, beta2: float, eps: float, mkl_sqrt: int = IEEE_SQRT
) -> tuple:
    """The scalars of ``_torch_sparse_adam`` (after ``rows`` and ``width``): ``step_size = lr·√(1 − β2^t)/(1 −
    β1^t)`` as torch's ``sparse_adam`` computes it (``math.sqrt``, integer ``step``), passed as
    ``−step_size``."""
    step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    return (
        dtype.type(1 - beta1),
        dtype.type(1 - beta2),
        dtype.type(eps),
        dtype.type(-step_size),
        mkl_flag(dtype, mkl_sqrt),
    )


def rms_prop_kernel(centered: bool, momentum: bool) -> Any:
    """The element function of torch's RMSprop for the given flags (arrays: var, square_avg[, grad_avg]
    [, momentum_buffer], grad; scalars: :func:`rms_prop_scalars`)."""
    return (
        (_torch_rms_prop, _torch_rms_prop_momentum),
        (_torch_centered_rms_prop, _torch_centered_rms_prop_momentum),
    )[centered][momentum]


# ------------------------------------------------------------------------------------ public entry points


def torch_rms_prop(
    var: Any,
    square_avg: Any,
    grad: Any,
    lr: Scalar,
    alpha: Scalar,
    epsilon: Scalar,
    *,
    momentum: Scalar = 0.0,
    momentum_buffer: Any = None,
    grad_avg: Any = None,
) -> tuple[Any, ...]:
    r"""torch.optim.RMSprop's update in place (one tensor, no maximize or weight decay), rounded as torch's
    CPU single-tensor path::

        square_avg ← fma((1 − α)·g, g, α·square_avg)
        grad_avg   ← lerp(grad_avg, g, 1 − α)                               (centered: grad_avg given)
        avg        = √fma(−grad_avg, grad_avg, square_avg) + ε  (centered)   or   √square_avg + ε
        buf        ← μ·buf + g/avg;   var ← fma(buf, −lr, var)               (momentum_buffer given)
        var        ← var + (−lr·g)/avg                                        (otherwise)

    MindSpore's ``apply_rms_prop`` differs: its epsilon is inside the square root and its learning rate
    multiplies the gradient before the momentum buffer.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        square_avg: running average of g², updated in place.
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        alpha: smoothing constant, in [0, 1].
        epsilon: added to the root, >= 0.
        momentum: momentum factor (used with ``momentum_buffer``).
        momentum_buffer: momentum buffer, updated in place, or None for torch's momentum = 0 rule.
        grad_avg: running average of g (centered RMSprop), updated in place, or None.

    Returns:
        The updated arrays, in the order var, square_avg[, grad_avg][, momentum_buffer].

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    states = {"var": var, "square_avg": square_avg}
    if grad_avg is not None:
        states["grad_avg"] = grad_avg
    if momentum_buffer is not None:
        states["momentum_buffer"] = momentum_buffer
    batch = check_arrays(states, {"grad": grad})
    lr_, a, eps = batch.scalar("lr", lr), batch.scalar("alpha", alpha), batch.scalar("epsilon", epsilon)
    batch.scalar("momentum", momentum)  # checked as the other scalars are
    check_range("lr", lr_, 0.0)
    check_range("alpha", a, 0.0, 1.0)
    check_range("epsilon", eps, 0.0)
    scalars = rms_prop_scalars(
        batch.dtype, float(lr), float(alpha), float(epsilon), 0.0, float(momentum), False
    )
    kernel = rms_prop_kernel(grad_avg is not None, momentum_buffer is not None)
    kernel.launch(batch.device, batch.size, *batch.flat, *scalars)
    return tuple(states.values())


def torch_adamax(
    var: Any,
    exp_avg: Any,
    exp_inf: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    step: int,
) -> tuple[Any, Any, Any]:
    r"""torch.optim.Adamax's update in place (one tensor, no maximize or weight decay), rounded as torch's
    CPU single-tensor path::

        exp_avg ← lerp(exp_avg, g, 1 − β1)
        exp_inf ← max(β2·exp_inf, |g| + ε)
        var     ← var + (−lr/(1 − β1^step)·exp_avg)/exp_inf

    MindSpore's ``apply_ada_max`` differs: its epsilon is added to ``v`` after the max, not inside it.

    Args:
        var, exp_avg, exp_inf: parameter and slots, updated in place (same shape and dtype).
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        beta1, beta2: decays, in [0, 1).
        epsilon: >= 0.
        step: this step's number, from 1.

    Returns:
        ``(var, exp_avg, exp_inf)``.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`; ``step < 1`` is a ValueError.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    batch = check_arrays({"var": var, "exp_avg": exp_avg, "exp_inf": exp_inf}, {"grad": grad})
    lr_, b1, b2 = batch.scalar("lr", lr), batch.scalar("beta1", beta1), batch.scalar("beta2", beta2)
    eps = batch.scalar("epsilon", epsilon)
    check_range("lr", lr_, 0.0)
    check_range("beta1", b1, 0.0, 1.0, high_open=True)
    check_range("beta2", b2, 0.0, 1.0, high_open=True)
    check_range("epsilon", eps, 0.0)
    scalars = adamax_scalars(
        batch.dtype, step, float(lr), float(beta1), float(beta2), float(epsilon), 0.0, False
    )
    _torch_adamax.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, exp_avg, exp_inf


TAKES_TAIL.update(
    (
        _torch_sgd,
        _torch_sgd_momentum,
        _torch_adam,
        _torch_adam_amsgrad,
        _torch_adamax,
        _torch_adagrad,
        _torch_rms_prop,
        _torch_rms_prop_momentum,
        _torch_centered_rms_prop,
        _torch_centered_rms_prop_momentum,
    )
)
KEEPS_NAN_PAYLOAD.update(f.py_func for f in TAKES_TAIL)  # their writes pass through torch_nan
KEEPS_NAN_PAYLOAD.update((_torch_adam_roots.py_func, _torch_adam_denoms.py_func))  # the loop's NaN bits
for _kernel in TAKES_TAIL:  # their flags guard the half tail's rounding and whole update terms
    _kernel.constant_flags = True
# Adam's root (MKL's Z0 above all) and division make its loop arithmetic-bound below memory speed
for _kernel in (_torch_adam, _torch_adam_amsgrad):
    _kernel.wide_vectors = True
# their large lists keep memory busy only with their loads prefetched ahead of that arithmetic
for _kernel in (_torch_adam, _torch_adam_amsgrad):
    _kernel.prefetch_large = True
