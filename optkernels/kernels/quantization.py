"""8-bit blockwise quantization with bitsandbytes' dynamic map (LOWBIT.md §1-2), CPU and CUDA.

A quantized tensor is ``(codes: uint8, absmax: float32[blocks], code: float32[256])``: elements in flat
row-major order cut into blocks of ``blocksize``; element ``i`` stands for ``code[codes[i]]·absmax[i //
blocksize]``. The search of the nearest code (:func:`nearest_code`) is shared with the 8-bit optimizer
kernels (:mod:`.blockwise_optim`).
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import types
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from . import _cuda
from ._checks import HALF_DTYPES, _array_facts, _flatten, plain_array
from ._elementwise import _JIT_OPTIONS, Elementwise, _generate
from ._intrinsics import (
    DYNAMIC_LINES,
    DYNAMIC_PLANES,
    LOOKUP_BLOCK,
    SEARCH_WORDS,
    byte_permutes,
    byte_planes,
    fma,
    lookup_block,
    search_candidates,
)
from ._lowp import f32_bits
from ._threading import for_this_process, parallel_launch

_F32 = np.float32
HALF = np.float32(0.5)
ONE = np.float32(1.0)
ZERO_F = np.float32(0.0)
NEG_MAX = np.float32(-3.4028234663852886e38)  # -FLT_MAX: where bitsandbytes' absmax reductions start
CUDA_BLOCKSIZES = (64, 128, 256, 512, 1024, 2048, 4096)


def _linspace_f32(n: int) -> np.ndarray:
    """``torch.linspace(0.1, 1, n, dtype=float32)`` on the CPU: the first half counted from the start, the
    second from the end, each term one fused multiply-add (exact in float64, rounded once)."""
    start, end = _F32(0.1), _F32(1.0)
    step = np.float64(_F32(_F32(end - start) / _F32(n - 1)))
    k = np.arange(n, dtype=np.float64)
    return np.where(k < n // 2, np.float64(start) + step * k, np.float64(end) - step * (n - 1 - k)).astype(
        _F32
    )


@functools.lru_cache(maxsize=2)
def _dynamic_map(signed: bool) -> np.ndarray:
    values = [np.array([0.0, 1.0], _F32)]
    for i in range(7):
        bounds = _linspace_f32((2**i if signed else 2 ** (i + 1)) + 1)
        positive = _F32(10.0 ** (i - 6)) * ((bounds[:-1] + bounds[1:]) / _F32(2))
        values += [positive, -positive] if signed else [positive]
    table = np.sort(np.concatenate(values)).astype(_F32)
    table.flags.writeable = False
    return table


def dynamic_map(signed: bool = True) -> np.ndarray:
    r"""bitsandbytes' dynamic quantization map ``create_dynamic_map(signed, 7, 8)``, bit for bit.

    Per decade :math:`i = 0..6` the midpoints of :math:`2^i` (signed) or :math:`2^{i+1}` (unsigned) equal
    intervals of ``[0.1, 1]`` (float32 ``torch.linspace``), scaled by :math:`10^{i-6}`; the signed map
    mirrors them; ``0`` and ``1`` are added; 256 float32 values sorted ascending. The signed map is
    bitsandbytes' ``qmap1`` (name ``"dynamic"``), the unsigned one its ``qmap2`` (``"udynamic"``).

    Parameters
    ----------
    signed : bool
        The signed map (default) or the unsigned one.

    Returns
    -------
    numpy.ndarray
        A new float32 array of 256 values.
    """
    if not isinstance(signed, (bool, np.bool_)):
        raise TypeError(f"signed must be a bool, got {type(signed).__name__}")
    return _dynamic_map(bool(signed)).copy()


def table_math(
    py_func: Callable | None = None, *, device: Callable | None = None, inline: bool = True
) -> Callable:
    """Decorator: a helper taking arrays (a code table) shared by CPU loops and CUDA kernels. Compiled with
    ``numba.njit(inline="always")`` for the CPU; a :class:`BlockElementwise` kernel gets a CUDA device
    function of the same Python function instead (the CUDA simulator cannot pass its arrays to an njit
    function), or of ``device`` where given (a twin giving the same results by other means).

    ``inline=False``: compiled once as a function of its own (that LLVM may still inline), for a long helper
    called from several places: Numba's own inlining copies the helper's IR into every caller, and the
    compile time of the kernel that holds the copies grows by minutes."""
    if py_func is None:
        return functools.partial(table_math, device=device, inline=inline)
    dispatcher = numba.njit(**({"inline": "always"} if inline else {}), **_JIT_OPTIONS)(py_func)
    dispatcher.table_math = True
    dispatcher.device_py_func = device if device is not None else py_func
    return dispatcher


@functools.cache
def _device_version(func: Callable) -> Callable:
    """``func`` with every :func:`table_math` helper it calls replaced by a CUDA device function."""
    cuda = _cuda.module()
    names = dict(func.__globals__)
    for name in func.__code__.co_names:
        helper: Any = names.get(name)  # None: an attribute or builtin name, not a global
        if getattr(helper, "table_math", False):
            names[name] = cuda.jit(device=True)(_device_version(helper.device_py_func))
    return types.FunctionType(func.__code__, names, func.__name__, func.__defaults__, func.__closure__)


class BlockElementwise(Elementwise):
    """An :class:`Elementwise` whose element function may call :func:`table_math` helpers (see there)."""

    @functools.cached_property
    def cuda(self) -> Callable:
        cuda = _cuda.module()
        element = cuda.jit(device=True)(_device_version(self.py_func))
        return _cuda.kernel(
            _generate(self.cuda_template, "cuda", self.py_func, {"cuda": cuda, "element": element})
        )


def block_elementwise(py_func: Callable) -> BlockElementwise:
    """Decorator: :func:`._elementwise.elementwise` for element functions calling :func:`table_math`."""
    return BlockElementwise(py_func)


SCRATCH = 1024
"""float32 elements of the per-iteration scratch of a :class:`ScratchBlockElementwise` (4 x 256)."""

_CPU_SCRATCH_LOOP = """
def {name}(n, {args}, _workspace):
    for i in prange(n):
        element({leading}i, {args}, _workspace, get_thread_id() * SCRATCH)
"""

_CUDA_SCRATCH_LOOP = """
def {name}(n, {args}):
    scratch = cuda.local.array(SCRATCH, float32)
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < n:
        element(i, {args}, scratch, 0)
        i += stride
"""


def _generate_scratch(
    template: str, prefix: str, py_func: Callable, namespace: dict, leading: tuple = ()
) -> Callable:
    """As ``_elementwise._generate``, for an element function whose last two parameters are the scratch
    array and the offset of its own part, which the driver provides; ``leading``: constants the CPU
    template passes before the index."""
    params = list(inspect.signature(py_func).parameters)[1:-2]
    name = f"_{prefix}_{py_func.__name__}"
    constants = "".join(f"{value!r}, " for value in leading)
    source = template.format(name=name, args=", ".join(params), leading=constants)
    namespace.update(SCRATCH=SCRATCH, np=np, float32=numba.float32, get_thread_id=numba.get_thread_id)
    exec(compile(source, inspect.getfile(py_func), "exec"), namespace)
    driver = namespace[name]
    driver.__module__ = py_func.__module__
    driver.__qualname__ = name
    return driver


_WORKSPACES = threading.local()


def _workspace() -> np.ndarray:
    """:data:`SCRATCH` float32 elements per Numba thread, in one flat array kept per Python thread (the
    CPU loop's scratch is this argument and an offset: with an allocation inside the loop, or a row view,
    the compiler does not vectorise the loops that use it)."""
    shape = (numba.config.NUMBA_NUM_THREADS * SCRATCH,)
    cached = getattr(_WORKSPACES, "array", None)
    if cached is None or cached.shape != shape:
        cached = _WORKSPACES.array = np.empty(shape, np.float32)
    return cached


class ScratchBlockElementwise(BlockElementwise):
    """A :class:`BlockElementwise` whose element function takes, as its last two arguments, a float32
    scratch array and the offset of its :data:`SCRATCH` elements there: the per-thread workspace on the
    CPU, a thread-local array (offset 0) on CUDA.

    ``cpu_call``: ``(function, leading)`` where the element function only calls ``function(*leading, i,
    ...)`` with the same further arguments (``leading`` constants): the CPU loop then inlines that call
    itself, one level of Numba's IR inlining less (each level copies and re-runs passes over the whole
    inlined body: seconds of a first call's compile time for a large element)."""

    def __init__(self, py_func: Callable, cpu_call: tuple[Callable, tuple] | None = None):
        super().__init__(py_func)
        self.cpu_call = cpu_call

    def launch(self, device: str, n: int, *args: Any, stream: Any = None) -> None:
        if device != "cpu" or n == 0:
            super().launch(device, n, *args, stream=stream)
            return
        with parallel_launch():
            for_this_process(self.cpu)(n, *args, _workspace())

    def _cpu_source(self) -> Callable:
        function, leading = self.cpu_call if self.cpu_call is not None else (self.py_func, ())
        function = getattr(function, "py_func", function)
        element = numba.njit(inline="always", **_JIT_OPTIONS)(function)
        return _generate_scratch(
            _CPU_SCRATCH_LOOP, "cpu", self.py_func, {"prange": numba.prange, "element": element}, leading
        )

    @functools.cached_property
    def cuda(self) -> Callable:
        cuda = _cuda.module()
        element = cuda.jit(device=True)(_device_version(self.py_func))
        return _cuda.kernel(
            _generate_scratch(_CUDA_SCRATCH_LOOP, "cuda", self.py_func, {"cuda": cuda, "element": element})
        )

    def many(self, n_arrays: int, prologue: Any = None) -> Callable:
        raise NotImplementedError(f"{self.__name__}: no multi-tensor loop")

    many_uncached = many


def scratch_block_elementwise(
    py_func: Callable, cpu_call: tuple[Callable, tuple] | None = None
) -> ScratchBlockElementwise:
    """Decorator: a :class:`ScratchBlockElementwise` (``cpu_call``: see there)."""
    return ScratchBlockElementwise(py_func, cpu_call)


GRID = 65536
"""Cells of each of the two uniform grids that start the CUDA nearest-code search (:func:`search_tables`)."""
GRID_SCALE = np.float32(GRID // 2)
FINE = np.float32(2.0**-7)
"""Values with ``|x| < FINE`` use the fine grid over ``[-FINE, FINE]`` (the maps are dense near 0)."""
FINE_SCALE = np.float32(GRID // 2 * 2**7)
STEPS = 2
"""Midpoint steps after the grid's lower bound: enough for bitsandbytes' maps (checked per table)."""
KEY_SHIFT = 16
"""The CPU search's bucket of a float32 ``x`` is ``bits(x) >> KEY_SHIFT``: sign, exponent and the top 7
bits of the mantissa (buckets at most 2^-7 wide relative to their values, finer than the dynamic maps'
spacing; the table, 24 KiB, stays in the L1 cache)."""
KEY_LOW = np.uint32(103 << 23)
"""Bits of 2^-24: smaller magnitudes share the first bucket of their sign (the CPU table's clamp)."""
KEY_HIGH = np.uint32(127 << 23)
"""Bits of 1.0: larger magnitudes (infinities, and NaN taken as -inf) share the last bucket of their
sign."""
SIDE = ((int(KEY_HIGH) - int(KEY_LOW)) >> KEY_SHIFT) + 1
"""Buckets per sign of the CPU table (positive first)."""
LOW_MASK = np.uint32((1 << KEY_SHIFT) - 1)
NO_MID = 1 << KEY_SHIFT
"""The position of "no midpoint in this bucket" (above every position of a float32 in it)."""
CODE_SHIFT = KEY_SHIFT + 1
"""A CPU table entry is ``code << CODE_SHIFT | position`` (positions up to :data:`NO_MID`)."""
NEG_INF = np.float32(-np.inf)
SIGNED_DYNAMIC, UNSIGNED_DYNAMIC = 1, 2
"""Kinds of table (:func:`map_kind`) searched by :func:`nearest_dynamic`: the maps of :func:`dynamic_map`."""


def _decade_lines(signed: bool) -> tuple[tuple, ...]:
    """Per decade i = 0..6 of :func:`dynamic_map` (``n = 2^i`` signed, ``2^(i+1)`` unsigned values, code k
    of the decade at ``10^(i-7)·(1 + 9(k + 1/2)/n)``, index ``z + n − 1 + k − e`` with zero at ``z`` = 127 or
    0 and ``e`` = 0 or 1): ``(A, D, C, M)`` such that ``a·A + D`` is ``C + k + 1`` at code k of the decade,
    C the index of the decade's code ``k = −1`` (the previous decade's last) and ``M = C + n`` the index
    of its last code, float32 (``D = C − (n/9 − 1/2)`` rounded once)."""
    e, z = (0, 127) if signed else (1, 0)
    lines = []
    for i in range(7):
        n = 2 ** (i + e)
        c = z - e + n - 1
        lines.append((10.0 ** (6 - i) * n / 0.9, c - (n / 9 - 0.5), c, c + n))
    return tuple(tuple(np.float32(v) for v in line) for line in lines)


SIGNED_LINES, UNSIGNED_LINES = _decade_lines(True), _decade_lines(False)
DECADES = tuple(np.float32(10.0 ** (d - 7)) for d in range(1, 7))
"""The float32 powers 10^-6 .. 10^-1 where decades 1 .. 6 start (a decade's place need not be exact)."""


def _search_flag(steps: int, bound: int) -> np.ndarray:
    return np.array([1 if steps <= bound else 0], np.uint8)  # 0: the start cannot bound the walk


def _build_search_tables(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mids = ((code[:-1] + code[1:]) * HALF).astype(np.float32)
    wide = mids.astype(np.float64)
    k = np.arange(GRID, dtype=np.float64)
    starts, walk = [], 0
    for half_width in (1.0, float(FINE)):
        cell = 2.0 * half_width / GRID
        below = -half_width + cell * (np.maximum(k, 1) - 1)  # the start of the cell before cell k
        above = -half_width + cell * np.minimum(k + 2, GRID)  # the end of the cell after it
        start = np.searchsorted(wide, below, side="left")  # midpoints below: <= the nearest code
        steps = np.searchsorted(wide, above, side="right") - start  # >= the steps any value can need
        if half_width == 1.0:  # values with |x| < FINE use the fine grid
            steps = steps[(below <= -float(FINE) + cell) | (above >= float(FINE) - cell)]
        walk = max(walk, int(steps.max()))
        starts.append(start.astype(np.uint8))
    kind = np.zeros(1, np.uint8)  # CUDA: the grid search for every table
    return np.append(mids, np.float32(np.nan)), np.concatenate(starts + [kind, _search_flag(walk, STEPS)])


def _bucket_ends(sign: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest float64 value of CPU bucket ``j`` of a sign (the first and last bucket of
    each sign take every magnitude below :data:`KEY_LOW` and above :data:`KEY_HIGH`)."""
    low = np.where(j == 0, 0, int(KEY_LOW) + (j << KEY_SHIFT))
    high = np.where(j == SIDE - 1, 0x7F800000, int(KEY_LOW) + (j << KEY_SHIFT) + int(LOW_MASK))
    ends = [np.asarray(m, np.uint32).view(np.float32).astype(np.float64) for m in (low, high)]
    return (np.where(sign, -ends[1], ends[0]), np.where(sign, -ends[0], ends[1]))


def _build_key_table(mids: np.ndarray, kind: int = 0, negatives: int = -1) -> np.ndarray:
    """The CPU start table of :func:`nearest_code`: per bucket (:data:`SIDE` per sign, positive first)
    ``c << CODE_SHIFT | t``: ``c`` the number of midpoints below every value of the bucket, ``t`` the
    threshold of the step to ``c + 1`` on the position of ``x`` in the bucket (low :data:`KEY_SHIFT` bits
    of the float32, mirrored for negative values): the midpoint's position ``+ 1``, or its position where
    ``c`` is odd (a tie goes to the even index); :data:`NO_MID` ``+ 1`` where no midpoint is in the bucket.
    With ``negatives >= 0`` (the table's first ``negatives`` entries have the sign bit, no other has), the
    entries give the codes after bitsandbytes' state-1 sign fix instead (:func:`nearest_code_fixed`).
    Then 1 if those entries are exact for every float32 of every bucket (NaN by its sign, as the sign fix
    turns it), else 0 (always 0 without ``negatives``); then the table's ``kind`` (:func:`map_kind`); last,
    1 if the plain search is exact (at most one midpoint in each bucket, none in the clamped first and
    last, no zero midpoint), else 0."""
    keys = np.arange(2 * SIDE)
    sign, j = keys >= SIDE, keys % SIDE
    smallest, largest = _bucket_ends(sign, j)
    wide = mids[:-1].astype(np.float64)
    start = np.searchsorted(wide, smallest, side="left")
    steps = np.searchsorted(wide, largest, side="right") - start
    mid_bits = mids[np.minimum(start, 254)].view(np.uint32)
    position = (mid_bits & LOW_MASK) ^ np.where(sign, LOW_MASK, 0)
    one = steps == 1
    ok = (steps <= 1) & ~(one & ((j == 0) | (j == SIDE - 1) | ((mid_bits & 0x7FFFFFFF) == 0)))
    threshold = np.where(one, position.astype(np.int64) + 1 - (start & 1), NO_MID + 1)
    baked = False
    if negatives >= 1:
        # x has the sign of the state s (s/absmax, absmax finite and > 0); the result r is c or c + 1.
        # Negative side: r >= negatives moves down one (r - 1); r = c or c + 1 = negatives both give c.
        fix_low = sign & (start >= negatives)
        merge = sign & one & (start == negatives - 1)
        start = np.where(fix_low, start - 1, start)
        threshold = np.where(merge | (sign & ~one), NO_MID + 1, threshold)
        # positive side: no fix anywhere (every code >= negatives); NaN: +NaN takes the last positive bucket
        # (code 255: 0 moved down with wrap-around), -NaN the last negative one (code 0, not moved)
        positive_ok = bool((start[~sign] >= negatives).all())
        nan_ok = start[SIDE - 1] == 255 and not one[SIDE - 1] and start[2 * SIDE - 1] == 0
        baked = positive_ok and nan_ok and bool((start >= 0).all())
    entries = (start.astype(np.int64) << CODE_SHIFT) | threshold
    flags = [1 if baked and ok.all() else 0, kind, 1 if ok.all() else 0]
    return np.concatenate([entries.astype(np.uint32), np.array(flags, np.uint32)])


def _map_kind(code_bytes: bytes) -> int:
    """:data:`SIGNED_DYNAMIC` or :data:`UNSIGNED_DYNAMIC` where the table is that dynamic map, else 0."""
    for kind, signed in ((SIGNED_DYNAMIC, True), (UNSIGNED_DYNAMIC, False)):
        if code_bytes == _dynamic_map(signed).tobytes():
            return kind
    return 0


@functools.lru_cache(maxsize=16)
def _host_search_tables(code_bytes: bytes, sign_fix: bool = False) -> tuple[np.ndarray, np.ndarray]:
    mids, _ = _build_search_tables(np.frombuffer(code_bytes, np.float32))
    negatives = _sign_split(code_bytes) if sign_fix else -1
    return mids, _build_key_table(mids, _map_kind(code_bytes), negatives)


@functools.lru_cache(maxsize=16)
def _device_search_tables(code_bytes: bytes) -> tuple[Any, Any]:
    cuda = _cuda.module()
    return tuple(cuda.to_device(t) for t in _build_search_tables(np.frombuffer(code_bytes, np.float32)))


def search_tables(code: Any, device: str, sign_fix: bool = False) -> tuple[Any, Any]:
    """``(mids, start)`` of the table ``code`` for :func:`nearest_code` on ``device`` (cached per table):
    ``mids[c] = RN32((code[c] + code[c+1])·0.5)`` (NaN at 255) and the start table of the search, a lower
    bound of the nearest code per bucket of values. On the CPU (uint32, :func:`_build_key_table`) per bucket
    of the float32 ``x``'s bits, with the position of the midpoint inside the bucket; on CUDA (uint8) per
    cell k of the coarse grid over [-1, 1], then of the fine grid over [-2^-7, 2^-7] (the midpoints below
    the start of cell k − 1). On the CPU with ``sign_fix``, the entries give the codes after bitsandbytes'
    state-1 sign fix, for :func:`nearest_code_fixed`, and the table then says whether they are exact
    (:func:`sign_fix_baked`). Then the table's kind (:func:`map_kind`; on CUDA always 0). Last, 1 if the
    CPU table encodes every bucket, or :data:`STEPS` (CUDA) midpoint steps from the start always reach the
    answer (true of bitsandbytes' maps), else 0."""
    host = np.ascontiguousarray(code if isinstance(code, np.ndarray) else _cuda.to_host(code), np.float32)
    key = host.tobytes()
    return _host_search_tables(key, bool(sign_fix)) if device == "cpu" else _device_search_tables(key)


@functools.lru_cache(maxsize=16)
def _host_planes(code_bytes: bytes) -> np.ndarray:
    planes = byte_planes(np.frombuffer(code_bytes, np.float32))
    planes.flags.writeable = False
    return planes


def table_planes(*codes: Any) -> np.ndarray:
    """The :func:`._intrinsics.byte_planes` of each float32 table of 256 values in ``codes`` (NumPy arrays,
    or CUDA ones copied back), one after the other (1024 bytes each), for :func:`table_lookup` on the CPU
    (cached per table)."""
    tables = [
        np.ascontiguousarray(c if isinstance(c, np.ndarray) else _cuda.to_host(c), np.float32) for c in codes
    ]
    return np.concatenate([_host_planes(t.tobytes()) for t in tables])


def _table_lookup_loop(out, out_base, index, first, table, planes, plane_base, scale):
    for k in range(LOOKUP_BLOCK):
        out[out_base + k] = table[index[first + k]] * scale


@table_math(device=_table_lookup_loop)
def table_lookup(out, out_base, index, first, table, planes, plane_base, scale):
    """``out[out_base + k] = table[index[first + k]]·scale`` for k < 256 (float32 ``table`` of 256 values,
    uint8 ``index``): register permutes of the table's :func:`table_planes` at ``planes[plane_base:]``
    where the CPU has AVX-512 VBMI (:func:`._intrinsics.lookup_block`), else a loop over ``table`` (a
    vector gather); the same bits."""
    if byte_permutes():
        lookup_block(out, out_base, index, first, planes, plane_base, scale)
    else:
        for k in range(LOOKUP_BLOCK):
            out[np.uint64(out_base + k)] = table[index[np.uint64(first + k)]] * scale


@functools.lru_cache(maxsize=16)
def _sign_split(code_bytes: bytes) -> int:
    signs = np.frombuffer(code_bytes, np.uint32) >> 31
    negatives = int(signs.sum())
    return negatives if (signs[:negatives] == 1).all() else -1


def sign_split(code: Any) -> int:
    """The number of leading entries of the table ``code`` with the sign bit set, where no later entry has
    it (true of an ascending table without -0.0 after +0.0); else -1 (cached per table)."""
    host = np.ascontiguousarray(code if isinstance(code, np.ndarray) else _cuda.to_host(code), np.float32)
    return _sign_split(host.tobytes())


REGISTER_WORDS = 768
"""int32 words of one table for :func:`._intrinsics.search_block` (:func:`register_search_tables`): its
:data:`._intrinsics.SEARCH_WORDS` candidates, then 1 if they are exact (else 0), then 1 if NaN must be
taken as the lowest key (no sign fix), then 1 if :func:`._intrinsics.search_dynamic_block` serves the
table (a dynamic map), padding, its decade lines at :data:`._intrinsics.DYNAMIC_LINES` and its thresholds'
byte planes at :data:`._intrinsics.DYNAMIC_PLANES`."""
SEARCH_FLAG = SEARCH_WORDS
"""The word of a :func:`register_search_tables` table saying whether it is exact."""


def _keys(x: np.ndarray) -> np.ndarray:
    """``search_block``'s int64 keys of float32 values: the bits as a signed integer, a negative value's
    magnitude bits flipped (the float order, -0.0 just below +0.0, NaNs beyond the infinities)."""
    bits = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _from_keys(keys: np.ndarray) -> np.ndarray:
    k = np.asarray(keys, np.int64)
    return np.where(k < 0, k ^ 0x7FFFFFFF, k).astype(np.int32).view(np.float32)


def _nearest_host(x: np.ndarray, code: np.ndarray) -> np.ndarray:
    """The nearest code of each float32 ``x`` (ties to the even index, NaN → 0), from the midpoints."""
    mids = ((code[:-1] + code[1:]) * HALF).astype(np.float32)
    below = np.searchsorted(mids, x, side="left")  # midpoints < x
    tie = (below < 255) & (x == mids[np.minimum(below, 254)]) & (below % 2 == 1)
    return np.where(x != x, 0, below + tie).astype(np.int64)


@functools.lru_cache(maxsize=16)
def _host_register_tables(code_bytes: bytes, sign_fix: bool) -> np.ndarray:
    code = np.frombuffer(code_bytes, np.float32)
    words = np.zeros(REGISTER_WORDS, np.int32)
    with np.errstate(invalid="ignore"):
        mids = ((code[:-1] + code[1:]) * HALF).astype(np.float32)
    if not (np.diff(mids) >= 0).all() or np.isnan(mids).any():
        return words  # not exact: the flag stays 0
    # Breakpoints: every key where the result may change (at and beside each midpoint's keys, both
    # zeros, the infinities, the NaNs); the result is constant from one breakpoint to the next.
    edges = np.concatenate([_keys(mids), _keys(-np.abs(mids)), _keys(np.abs(mids))])
    special = _keys(np.array([0.0, -0.0, np.inf, -np.inf], np.float32))
    ends = np.array([-(2**31), 2**31 - 1], np.int64)
    points = np.concatenate([edges - 1, edges, edges + 1, special - 1, special, special + 1, ends])
    points = np.unique(np.clip(points, -(2**31), 2**31 - 1))
    x = _from_keys(points)
    result = _nearest_host(x, code)
    if sign_fix:
        fix = np.signbit(code[result]) != np.signbit(x)
        result = np.where(fix, np.where(x > 0, result + 1, result - 1), result) % 256
    else:  # a NaN is taken as the lowest key (its result 0); others must be monotone
        keep = x == x
        points, result = points[keep], result[keep]
    if not (np.diff(result) >= 0).all():
        return words
    # threshold k: the largest key whose result is <= k (the key before the first one above k)
    first_above = np.searchsorted(result, np.arange(255), side="right")
    thresholds = np.where(
        first_above < points.size, points[np.minimum(first_above, points.size - 1)] - 1, 2**31 - 1
    )
    words[:SEARCH_FLAG] = search_candidates(thresholds.astype(np.int32))
    words[SEARCH_FLAG] = 1
    words[SEARCH_FLAG + 1] = 0 if sign_fix else 1
    kind = _map_kind(code_bytes)
    if kind:
        words[SEARCH_FLAG + 2] = 1
        words[DYNAMIC_LINES : DYNAMIC_LINES + 129] = _decade_words(kind == SIGNED_DYNAMIC)
        padded = np.append(thresholds.astype(np.int32), np.int32(2**31 - 1))
        words[DYNAMIC_PLANES:] = byte_planes(padded.view(np.float32)).view(np.int32)
    words.flags.writeable = False
    return words


def _decade_words(signed: bool) -> np.ndarray:
    """The words of :func:`._intrinsics.search_dynamic_block`'s decade lines: per binade index ``e & 31``
    (``e`` = 100 .. 127, the biased exponent of ``|x|`` clamped) the decades below the binade and the start
    of the decade inside it (NaN if none); per decade :func:`_decade_lines`' ``A, D, C, M`` (float32 bits);
    then the mirror ``253`` (a negative key's start is ``max(253 − j, 0)``; -1 for the unsigned map)."""
    words = np.zeros(129, np.int32)
    below = np.zeros(32, np.int32)
    start = np.full(32, np.nan, np.float32)
    decade_binades = [int(d.view(np.uint32)) >> 23 for d in DECADES]
    for e in range(100, 128):
        below[e & 31] = sum(b < e for b in decade_binades)
        inside = [d for d, b in zip(DECADES, decade_binades) if b == e]
        if inside:
            start[e & 31] = inside[0]
    lines = SIGNED_LINES if signed else UNSIGNED_LINES
    words[:32], words[32:64] = below, start.view(np.int32)
    for k in range(4):
        values = np.array([line[k] for line in lines], np.float32)
        words[64 + 16 * k : 64 + 16 * k + 7] = values.view(np.int32)
    words[128] = 253 if signed else -1
    return words


def register_search_tables(code: Any, sign_fix: bool = False) -> np.ndarray:
    """The :data:`REGISTER_WORDS` int32 words of the table ``code`` for :func:`._intrinsics.search_block`
    (cached per table): the thresholds of the nearest-code search (ties to the even index) as keys, with
    bitsandbytes' state-1 sign fix folded in where ``sign_fix`` (exact for ``x = s/absmax``, ``absmax``
    finite and > 0); the flag word after the candidates is 0 where the search cannot be exact (a table
    whose results are not monotone in the key)."""
    host = np.ascontiguousarray(code if isinstance(code, np.ndarray) else _cuda.to_host(code), np.float32)
    return _host_register_tables(host.tobytes(), bool(sign_fix))


@functools.lru_cache(maxsize=16)
def _step_register_tables(signed_bytes: bytes, unsigned_bytes: bytes) -> np.ndarray:
    tables = np.concatenate(
        [_host_register_tables(signed_bytes, True), _host_register_tables(unsigned_bytes, False)]
    )
    tables.flags.writeable = False
    return tables


def step_register_tables(qmap1: Any, qmap2: Any) -> np.ndarray:
    """The :func:`register_search_tables` of an 8-bit step's maps, one after the other (cached): state 1's
    map with the sign fix at 0, state 2's without at :data:`REGISTER_WORDS`."""
    hosts = [
        np.ascontiguousarray(q if isinstance(q, np.ndarray) else _cuda.to_host(q), np.float32)
        for q in (qmap1, qmap2)
    ]
    return _step_register_tables(hosts[0].tobytes(), hosts[1].tobytes())


@table_math
def registers_dynamic(keys, key_base):
    """Whether :func:`._intrinsics.search_dynamic_block` serves the :func:`register_search_tables` at
    ``keys[key_base:]`` (a dynamic map)."""
    return keys[key_base + SEARCH_FLAG + 2] == 1


@table_math
def registers_unsigned_dynamic(keys, key_base):
    """Whether the :func:`register_search_tables` at ``keys[key_base:]`` are those of the unsigned dynamic
    map (every entry >= +0; its mirror word is -1)."""
    return registers_dynamic(keys, key_base) and keys[key_base + DYNAMIC_LINES + 128] == -1


@table_math
def registers_exact(keys, key_base):
    """Whether the :func:`register_search_tables` at ``keys[key_base:]`` search exactly (their flag)."""
    return keys[key_base + SEARCH_FLAG] == 1


def _sign_bit_copysign(x):
    return math.copysign(1.0, x) < 0.0


@table_math(device=_sign_bit_copysign)
def sign_bit(x):
    """Whether the float32 ``x`` has its sign bit set (-0.0 and negative NaNs included)."""
    return (f32_bits(x) >> 31) == 1


def _nearest_code_grid(x, mids, start):
    """CUDA twin of :func:`nearest_code` (same result): a grid cell gives a lower bound of the answer, then
    two midpoint steps without branches reach it."""
    if x != x:
        return 0
    fine = abs(x) < FINE
    f = (x + FINE) * FINE_SCALE if fine else (x + ONE) * GRID_SCALE
    k = min(max(int(max(f, ZERO_F)), 0), GRID - 1)
    c = int(start[k + GRID if fine else k])
    m = mids[c]
    c += int(x > m) | (int(x == m) & (c & 1))
    m = mids[c]
    c += int(x > m) | (int(x == m) & (c & 1))
    return c


@table_math(device=_nearest_code_grid)
def nearest_code(x, mids, start):
    """Index of the entry nearest to the float32 ``x`` of the ascending 256-entry table whose
    :func:`search_tables` are ``(mids, start)``, where :func:`fast_search` holds: ties (``x`` exactly on a
    midpoint) go to the even index; below the first midpoint (and NaN) → 0, above the last → 255
    (bitsandbytes' CUDA ``dQuantize`` / ``quantize_2D``).

    One lookup: the bucket of ``x``'s bits (sign, exponent, 7 mantissa bits; magnitudes clamped to
    [2^-24, 1]) gives the answer's lower bound ``c`` and the threshold of the step to ``c + 1`` (the
    midpoint's position in the bucket, the tie rule included), which the low bits of ``x`` are compared
    with (:func:`bucket_key`, :func:`bucket_code`; NaN taken as -inf). No branch, indices unsigned: the
    loops calling it are vectorised."""
    x = x if x == x else NEG_INF  # NaN → code 0, as -inf
    return bucket_code(x, start[np.uint16(bucket_key(x))])


@table_math
def bucket_key(x):
    """The bucket of the float32 ``x`` in a CPU start table (:func:`search_tables`): sign, exponent and 7
    mantissa bits of ``x``'s magnitude clamped to [2^-24, 1] (NaN's bits: the last bucket of their
    sign). In 32-bit integers: Numba widens integer arithmetic to 64 bits, so every result is cast back."""
    u32, i32 = np.uint32, np.int32
    bits = f32_bits(x)
    magnitude = u32(bits & u32(0x7FFFFFFF))
    magnitude = magnitude if magnitude > KEY_LOW else KEY_LOW
    magnitude = magnitude if magnitude < KEY_HIGH else KEY_HIGH
    negative = u32(i32(bits) >> i32(31))  # all ones for a negative x
    return u32(u32(u32(magnitude - KEY_LOW) >> u32(KEY_SHIFT)) + u32(negative & u32(SIDE)))


@table_math
def bucket_code(x, entry):
    """The code of the float32 ``x`` from ``entry``, the start table's entry of its :func:`bucket_key`:
    the entry's code, plus one where the low bits of ``x`` (mirrored for a negative ``x``) reach the
    entry's threshold."""
    u32, i32 = np.uint32, np.int32
    bits = f32_bits(x)
    negative = u32(i32(bits) >> i32(31))
    c = i32(entry >> u32(CODE_SHIFT))
    threshold = i32(entry & u32(NO_MID | LOW_MASK))
    low = i32(u32(bits & LOW_MASK) ^ u32(negative & LOW_MASK))
    return i32(c + i32(low >= threshold))


def _no_code(x, start):
    return 0


@table_math(device=_no_code)
def nearest_code_fixed(x, start):
    """:func:`nearest_code` followed by bitsandbytes' state-1 sign fix (``.blockwise_optim._sign_fixed``),
    for ``x = s/absmax`` with a finite ``absmax > 0`` (so that ``x`` has the sign of ``s``, NaN's
    included), from a start table of ``search_tables(code, "cpu", sign_fix=True)`` where
    :func:`sign_fix_baked` holds: the fix is in its entries, and NaN needs no test (its bits fall in the
    last bucket of its sign). CPU only (never called on CUDA, where :func:`sign_fix_baked` is false)."""
    return bucket_code(x, start[np.uint16(bucket_key(x))])


def _never(start):
    return False


@table_math(device=_never)
def sign_fix_baked(start):
    """Whether the CPU start table ``start`` holds the sign-fixed codes of :func:`nearest_code_fixed`
    (false on CUDA)."""
    return start[start.shape[0] - 3] == 1


@table_math
def nearest_code_slow(x, mids):
    """:func:`nearest_code` of any ascending table: 8 steps of binary search over the 255 midpoints."""
    if x != x:
        return 0
    c = 0
    for step in (128, 64, 32, 16, 8, 4, 2, 1):
        c += step * int(mids[c + step - 1] < x)
    return c + (int(x == mids[c]) & (c & 1))


@table_math
def fast_search(start):
    """Whether :func:`nearest_code` serves the table whose start table is ``start`` (else
    :func:`nearest_code_slow`): callers choose once per block, outside their loops."""
    return start[start.shape[0] - 1] == 1


@table_math
def map_kind(start):
    """The kind of table whose start table is ``start``: :data:`SIGNED_DYNAMIC`, :data:`UNSIGNED_DYNAMIC`
    (searched by :func:`nearest_dynamic`) or 0. Callers choose once per block, outside their loops."""
    return start[start.shape[0] - 2]


@table_math
def _above(a, start, line, A, D, C, M):
    """``line`` where ``a >= start``, else ``(A, D, C, M)`` (selects)."""
    up = a >= start
    return (line[0] if up else A), (line[1] if up else D), (line[2] if up else C), (line[3] if up else M)


@table_math
def dynamic_lower(a, signed):
    """For ``a = |x|`` (not NaN), the index j of a code of :func:`dynamic_map` with ``j <= nearest(a) <=
    j + 1``: the largest code <= ``a`` up to rounding. The decade of ``a`` by comparisons, then
    ``j = clamp(a·A + D, C, M)`` truncated (:func:`_decade_lines`; ``a·A + D`` rounded once, a fused
    multiply-add as in :func:`._intrinsics.search_dynamic_block`). Only selects, no table: the loops
    calling it are vectorised. Non-decreasing in ``a`` (a composition of rounded monotone operations)."""
    lines = SIGNED_LINES if signed else UNSIGNED_LINES
    A, D, C, M = lines[0]
    A, D, C, M = _above(a, DECADES[0], lines[1], A, D, C, M)
    A, D, C, M = _above(a, DECADES[1], lines[2], A, D, C, M)
    A, D, C, M = _above(a, DECADES[2], lines[3], A, D, C, M)
    A, D, C, M = _above(a, DECADES[3], lines[4], A, D, C, M)
    A, D, C, M = _above(a, DECADES[4], lines[5], A, D, C, M)
    A, D, C, M = _above(a, DECADES[5], lines[6], A, D, C, M)
    u = fma(a, A, D)
    u = u if u > C else C
    u = u if u < M else M
    return int(u)


@table_math
def dynamic_start(x, signed):
    """For a float32 ``x``, a code j of :func:`dynamic_map` ``(signed)`` with ``j <= nearest(x) <= j + 1``:
    :func:`dynamic_lower` of ``|x|``, mirrored for negative ``x`` (``253 − j``, at least 0; unsigned: 0). NaN
    as -inf. Non-decreasing in ``x``."""
    x = x if x == x else NEG_INF
    j = dynamic_lower(abs(x), signed)
    if signed:
        return max(253 - j, 0) if x < ZERO_F else j
    return 0 if x < ZERO_F else j


@table_math
def nearest_dynamic(x, mids, signed):
    """:func:`nearest_code` for the table :func:`dynamic_map` ``(signed)`` (:func:`map_kind` non-zero):
    the code j of :func:`dynamic_start`, then one midpoint step with the tie rule, the only table lookup
    (of ``mids``). NaN → 0."""
    j = dynamic_start(x, signed)
    m = mids[j]
    return j + (int(x > m) | (int(x == m) & (j & 1)))


@block_elementwise
def _quantize_block(b, codes, absmax, a, mids, start_code, size, blocksize):
    # Block b: absmax = max |a| (NaN ignored, from -FLT_MAX), then codes = nearest(a·(1/absmax)).
    start = b * blocksize
    stop = min(start + blocksize, size)
    top = NEG_MAX
    for i in range(start, stop):
        m = abs(a[i])
        if m > top:
            top = m
    absmax[b] = top
    r = ONE / top
    if fast_search(start_code):
        for i in range(start, stop):
            codes[i] = nearest_code(a[i] * r, mids, start_code)
    else:
        for i in range(start, stop):
            codes[i] = nearest_code_slow(a[i] * r, mids)


@block_elementwise
def _dequantize(i, out, codes, absmax, code, blocksize):
    out[i] = code[codes[i]] * absmax[i // blocksize]


def _device_table(table: Any, device: str) -> Any:
    if device == "cpu" or _cuda.is_device_array(table):
        return table
    return _cuda.to_device(np.ascontiguousarray(table))


def check_code(name: str, code: Any, device: str) -> Any:
    """``code`` (None: the signed dynamic map) checked as a float32 table of 256 values on ``device``; a
    NumPy table given for a CUDA call is copied to the device."""
    if code is None:
        code = _dynamic_map(True)
    dev, shape, dtype, _, _, _ = _array_facts(name, code)
    if dtype != np.float32 or shape != (256,):
        raise TypeError(f"{name} must be a float32 array of shape (256,), got {dtype} {shape}")
    if dev != device and not (dev == "cpu" and device == "cuda"):
        raise TypeError(f"{name} is a {dev} array but the data is on {device}")
    if dev == "cpu":
        code = np.ascontiguousarray(plain_array(name, code))
    return _device_table(code, device)


def check_out(name: str, out: Any, shape: tuple, dtype: Any, device: str) -> Any:
    """A new zeroed array, or ``out`` checked: on ``device``, of ``shape`` and ``dtype``, writeable and
    C-contiguous. Returns ``(array, flat view)``."""
    if out is None:
        if device == "cpu":
            out = np.zeros(shape, dtype)
        else:
            out = _cuda.to_device(np.zeros(shape, dtype))
        return out, _flatten(out, device)
    dev, oshape, odtype, contiguous, writeable, _ = _array_facts(name, out)
    if dev != device:
        raise TypeError(f"{name} is a {dev} array but the data is on {device}")
    if odtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {odtype}")
    if tuple(oshape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(oshape)}")
    if not writeable:
        raise ValueError(f"{name} is read-only")
    if not contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return out, _flatten(plain_array(name, out), device)


def _check_blocksize(blocksize: Any, device: str) -> int:
    if isinstance(blocksize, (bool, np.bool_)) or not isinstance(blocksize, (int, np.integer)):
        raise TypeError(f"blocksize must be an int, got {type(blocksize).__name__}")
    if blocksize <= 0:
        raise ValueError(f"blocksize must be > 0, got {blocksize}")
    if device == "cuda" and blocksize not in CUDA_BLOCKSIZES:
        raise ValueError(f"blocksize must be one of {CUDA_BLOCKSIZES} on CUDA, got {blocksize}")
    return int(blocksize)


def quantize_blockwise(
    A: Any, code: Any = None, absmax: Any = None, out: Any = None, blocksize: int = 4096
) -> tuple[Any, Any]:
    r"""Blockwise 8-bit quantization (bitsandbytes ``quantize_blockwise``, its CUDA rounding).

    Per block :math:`b` of ``blocksize`` consecutive elements (flat row-major order; the last block may be
    partial):

    .. math::

        \mathrm{absmax}_b = \max_{i \in b} |A_i|, \qquad
        r = \mathrm{RN}_{32}(1/\mathrm{absmax}_b), \qquad
        \mathrm{codes}_i = \mathrm{nearest}(\mathrm{code}, \mathrm{RN}_{32}(A_i \cdot r))

    ``nearest``: the nearest table entry, a value exactly on a float32 midpoint going to the even index
    (:func:`nearest_code`); NaN and values below ``code[0]`` → 0. NaN inputs are ignored by the maximum; a
    block of zeros has ``absmax = 0`` and codes 0 (``0·inf`` is NaN), which dequantize to ±0.

    Parameters
    ----------
    A : array
        float32, float16 or bfloat16 values (NumPy or CUDA); read only. Half values are widened exactly.
    code : array, optional
        The float32 table of 256 ascending values; default the signed :func:`dynamic_map`.
    absmax : array, optional
        float32 output of shape ``(ceil(A.size/blocksize),)``; allocated if None.
    out : array, optional
        uint8 output of ``A``'s shape; allocated if None.
    blocksize : int
        Elements per block, > 0 (on CUDA one of 64, 128, ..., 4096). Default 4096.

    Returns
    -------
    tuple
        ``(codes, absmax)``.

    Raises
    ------
    TypeError
        ``A`` not a float32/float16/bfloat16 array; wrong dtypes of ``code``, ``absmax``, ``out``.
    ValueError
        ``blocksize`` out of range; wrong shapes; read-only or non-contiguous outputs.
    """
    device, shape, dtype, _, _, _ = _array_facts("A", A)
    if dtype != np.float32 and dtype not in HALF_DTYPES:
        raise TypeError(f"A must be float32, float16 or bfloat16, got {dtype}")
    size = _check_blocksize(blocksize, device)
    n = math.prod(shape)
    blocks = -(-n // size)
    table = check_code("code", code, device)
    codes, flat_codes = check_out("out", out, shape, np.uint8, device)
    absmax, flat_absmax = check_out("absmax", absmax, (blocks,), np.float32, device)
    if n == 0:
        return codes, absmax
    flat = _flatten(plain_array("A", A), device)
    if dtype != np.float32:
        from ._upcast import _widened

        flat = _widened(flat)
    _quantize_block.launch(
        device, blocks, flat_codes, flat_absmax, flat, *search_tables(table, device), n, size
    )
    return codes, absmax


def dequantize_blockwise(
    codes: Any, absmax: Any, code: Any = None, out: Any = None, blocksize: int = 4096
) -> Any:
    r"""Blockwise 8-bit dequantization (bitsandbytes ``dequantize_blockwise``):
    :math:`\mathrm{out}_i = \mathrm{RN}_{32}(\mathrm{code}[\mathrm{codes}_i] \cdot
    \mathrm{absmax}_{\lfloor i/\mathrm{blocksize} \rfloor})`.

    Parameters
    ----------
    codes : array
        uint8 codes (NumPy or CUDA).
    absmax : array
        float32, ``ceil(codes.size/blocksize)`` values (any shape of that size).
    code : array, optional
        The float32 table; default the signed :func:`dynamic_map`.
    out : array, optional
        float32 output of ``codes``' shape; allocated if None.
    blocksize : int
        Elements per block (as given to :func:`quantize_blockwise`). Default 4096.

    Returns
    -------
    array
        The float32 values.

    Raises
    ------
    TypeError, ValueError
        As :func:`quantize_blockwise`.
    """
    device, shape, dtype, contiguous, _, _ = _array_facts("codes", codes)
    if dtype != np.uint8:
        raise TypeError(f"codes must be uint8, got {dtype}")
    size = _check_blocksize(blocksize, device)
    n = math.prod(shape)
    adev, ashape, adtype, acontig, _, _ = _array_facts("absmax", absmax)
    if adtype != np.float32 or adev != device:
        raise TypeError(f"absmax must be a float32 array on the device of codes, got {adtype} on {adev}")
    if math.prod(ashape) != -(-n // size):
        raise ValueError(
            f"absmax must have {-(-n // size)} values for {n} codes in blocks of {size}, got "
            f"shape {tuple(ashape)}"
        )
    table = check_code("code", code, device)
    result, flat_out = check_out("out", out, shape, np.float32, device)
    if n == 0:
        return result
    _dequantize.launch(
        device,
        n,
        flat_out,
        _flatten(plain_array("codes", codes), device),
        _flatten(plain_array("absmax", absmax), device),
        table,
        size,
    )
    return result
