"""Row-wise Adagrad: FBGEMM's ``EXACT_ROWWISE_ADAGRAD`` (LOWBIT.md §8), one accumulator per row, for dense
and row-sparse gradients, CPU and CUDA.

Each row is updated by one thread, which sums its squares left to right in the arrays' dtype: the result
does not depend on the thread count. Duplicate indices are merged first, each distinct row's gradient rows
summed in order of appearance (as :func:`~optkernels.sparse.merge_duplicates` sums them), so each distinct
row is updated once with its summed gradient (FBGEMM's "exact" variant). On the CPU a row-sparse gradient
takes the sparse ops' row loop (:mod:`._whole_rows`: the merge inside the loop, each row's sum computed
into a block of rows whose sums of squares then run side by side); dense gradients and
CUDA arrays take one loop iteration (one CUDA thread) per row, after :func:`merge_duplicates` for CUDA.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numba
import numpy as np

from ..kernels import _cuda
from ..kernels._address import data_address
from ..kernels._checks import _array_facts, _flatten, check_arrays, check_range, plain_array, to_scalar
from ..kernels._elementwise import ZERO, elementwise
from ..kernels._huge_pages import HUGE_PAGE_THRESHOLD, advise_scattered_once, unadvised
from ..kernels._upcast import via_float32
from ._call import unpack_grad
from ._indices import host_indices, out_of_range_error
from ._plan import REUSED_BYTES, position_example
from ._row_sums import LANES, square_sums_8
from ._rows import JIT_OPTIONS
from ._whole_rows import KeptLaunch, WholeRowUpdate, kept_launch_fits, launch_cpu
from .merge import check_merge, merge_duplicates
from .row_sparse import RowSparse

MODES = ("none", "l2", "decoupled")
"""``weight_decay_mode`` values: FBGEMM's ``WeightDecayMode`` NONE, L2 and DECOUPLE."""


#: Distinct rows whose sums of squares the CPU row loop computes together, one per vector lane
#: (:func:`._row_sums.square_sums_8`; each row's own sum still runs left to right): one vector multiply
#: and add per column for the block, where a row alone would leave the adders waiting on each addition.
ROW_BLOCK = LANES


@elementwise
def _row(j, var, momentum, grad, rows, totals, dense, summed, d, lr, eps, wd, l2, decay, max_norm, one):
    # Row r = rows[j] (j itself for a dense gradient) of the 2-D table var with row j of the 2-D grad; its
    # sum of squares is totals[j] if summed, else computed here. (Two indices, the column one from 0 up:
    # no wraparound select on the column, and no row view whose reference count the loop would update.)
    r = np.int64(j)  # one signed type for both cases (a CPU launch's index j is unsigned)
    if not dense:
        r = rows[j]
    row_len = var.shape[1]
    if summed:
        total = totals[j]
    else:
        total = ZERO
        for c in range(row_len):
            x = grad[j, c]
            if l2:
                x = x + wd * var[r, c]
            total += x * x
    h = momentum[r] + total / d
    momentum[r] = h
    mult = lr / (math.sqrt(h) + eps)
    corr = one - mult * wd if l2 else decay
    if max_norm > ZERO:
        norm = ZERO
        for c in range(row_len):
            v = corr * var[r, c] - mult * grad[j, c]
            var[r, c] = v
            norm += v * v
        norm = math.sqrt(norm)
        if norm > max_norm:
            scale = max_norm / norm
            for c in range(row_len):
                var[r, c] = var[r, c] * scale
    else:  # a loop of its own, without the norm's sequential sum: it vectorises
        for c in range(row_len):
            var[r, c] = corr * var[r, c] - mult * grad[j, c]


_row_cpu = numba.njit(inline="always", **JIT_OPTIONS)(_row.py_func)


@numba.njit(inline="always", **JIT_OPTIONS)
def _block_sums(hats, totals, n):
    # totals[k] = sum over c, left to right, of hats[k, c]², k < n (a full block's ROW_BLOCK rows at once,
    # one per vector lane: the same bits)
    if n < ROW_BLOCK:
        for k in range(n):
            total = ZERO
            for c in range(hats.shape[1]):
                total += hats[k, c] * hats[k, c]
            totals[k] = total
        return
    square_sums_8(hats, totals)


@numba.njit(inline="always", **JIT_OPTIONS)
def _table_rows(
    j,
    rows,
    block,
    n,
    last,
    hats,
    totals,
    flat_momentum,
    var,
    momentum,
    d,
    lr,
    eps,
    wd,
    l2,
    decay,
    max_norm,
    one,
):
    # Row r = rows[j] of the 2-D table var (momentum seen as (rows, 1); flat_momentum: the same memory,
    # 1-D) joins the held rows rows[j - n : j], its summed gradient row in block[n]; for l2 its
    # ĝ = g + wd·var[r] goes to hats[n]. A full block, or a task's last row, updates every held row with the
    # element function's row update, given its sum of squares.
    if l2:
        r = rows[j]
        for c in range(block.shape[1]):
            hats[n, c] = block[n, c] + wd * var[r, c]
    n += 1
    if n < ROW_BLOCK and not last:
        return n
    _block_sums(hats if l2 else block, totals, n)
    held = rows[j + 1 - n : j + 1]
    for k in range(n):
        _row_cpu(
            k,
            var,
            flat_momentum,
            block,
            held,
            totals,
            False,
            True,
            d,
            lr,
            eps,
            wd,
            l2,
            decay,
            max_norm,
            one,
        )
    return 0


#: Each worker's scratch rows: the block of summed gradient rows, ĝ's block (l2) and the block's sums of
#: squares (ROW_BLOCK values, in as many rows as they need).
_WORK_ROWS = f"{2 * ROW_BLOCK} + ({ROW_BLOCK} + row_len - 1) // row_len"

_table_update = WholeRowUpdate(
    _table_rows,
    2,
    {
        "hats": f"work[{ROW_BLOCK} : {2 * ROW_BLOCK}]",
        "totals": f"work[{2 * ROW_BLOCK} :].reshape(work.size - {2 * ROW_BLOCK} * row_len)[:{ROW_BLOCK}]",
        "flat_momentum": "momentum.reshape(momentum.size)",
    },
    ROW_BLOCK,
    _WORK_ROWS,
)


def _check_momentum(momentum: Any, device: str, dtype: np.dtype, rows: int) -> Any:
    dev, shape, mdtype, contiguous, writeable, _ = _array_facts("momentum", momentum)
    if dev != device:
        raise TypeError(f"momentum is a {dev} array but var is a {device} array")
    if mdtype != dtype:
        raise TypeError(f"momentum must have var's dtype {dtype}, got {mdtype}")
    if tuple(shape) != (rows,):
        raise ValueError(f"momentum must have shape (var.shape[0],) = ({rows},), got {tuple(shape)}")
    if not writeable or not contiguous:
        raise ValueError("momentum must be writeable and C-contiguous")
    return _flatten(plain_array("momentum", momentum), device)


_WIDE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)


_F32, _F64 = _WIDE_DTYPES
_ONE_F32, _ONE_F64 = np.float32(1), np.float64(1)


def _hyper(value: Any, t: type) -> Any:
    """A Python number ``value`` as ``t`` when it is >= 0 (NaN is not), else None. (Compared as the Python
    number: a number >= 0 stays >= 0 as ``t``; the few that become -0.0 take the checked path, which accepts
    them as well.)"""
    kind = type(value)
    if (kind is float and value >= 0) or (kind is int and 0 <= value < 2**63):
        return t(value)
    return None


class PlainTable:
    """A table and its accumulator that passed the plain call's checks (:func:`plain_table`), with the
    scalars of its hyper-parameters: what a row-sparse step needs beyond its gradient
    (:func:`plain_gradient`, :func:`launch_plain`). A caller may keep one for the next steps of the same
    arrays and hyper-parameters (the torch drop-in does, re-checking its tensors)."""

    __slots__ = ("var", "momentum", "dtype", "rows", "row_len", "spans", "scalars", "advised")

    def __init__(self, var: np.ndarray, momentum: np.ndarray, scalars: tuple) -> None:
        self.var = var
        self.momentum = momentum
        rows, row_len = var.shape
        self.rows, self.row_len, self.dtype = rows, row_len, var.dtype
        itemsize = var.dtype.itemsize
        v0, m0 = data_address(var), data_address(momentum)
        #: var's and momentum's byte spans (C-contiguous: [address, address + size x itemsize))
        self.spans = (v0, v0 + rows * row_len * itemsize, m0, m0 + rows * itemsize)
        self.scalars = scalars
        self.advised = False  # var is known to be on huge pages (advised by a step of this object)

    def apart(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` (a gradient's bytes) overlaps neither var nor momentum."""
        v0, v1, m0, m1 = self.spans
        end = address + nbytes
        return not ((v0 < end and address < v1) or (m0 < end and address < m1))


def plain_scalars(
    dtype: np.dtype, lr: Any, eps: Any, wd: Any, mode: Any, max_norm: Any, row_len: int
) -> tuple | None:
    """The row loop's scalars for a table of ``dtype`` (float32/float64) and rows of ``row_len``, where the
    hyper-parameters are Python numbers >= 0 and ``mode`` a known one; else None (the checked path then
    decides, and words the errors). Called again with the same objects, the last call's tuple itself (no
    NumPy scalar made again: a kept launch then writes no scalars)."""
    last = _last_scalars[0]  # the previous call's, for the same objects (a float is never changed)
    if (
        last is not None
        and last[0] is dtype
        and last[1] is lr
        and last[2] is eps
        and last[3] is wd
        and last[4] is mode
        and last[5] is max_norm
        and last[6] == row_len
    ):
        return last[7]
    if mode not in MODES:
        return None
    t = dtype.type
    lr_, eps_, wd_, max_norm_ = _hyper(lr, t), _hyper(eps, t), _hyper(wd, t), _hyper(max_norm, t)
    if lr_ is None or eps_ is None or wd_ is None or max_norm_ is None:
        return None
    one = _ONE_F32 if dtype is _F32 else _ONE_F64
    decay = one - lr_ * wd_ if mode == "decoupled" else one
    scalars = (t(row_len), lr_, eps_, wd_, mode == "l2", decay, max_norm_, one)
    _last_scalars[0] = (dtype, lr, eps, wd, mode, max_norm, row_len, scalars)
    return scalars


#: The last :func:`plain_scalars`: its arguments (Python floats and ints, which never change: the same
#: objects are the same values, -0.0 apart from 0.0) and its scalars.
_last_scalars: list = [None]


def plain_table(
    var: Any, momentum: Any, lr: Any, eps: Any, wd: Any, mode: Any, max_norm: Any
) -> PlainTable | None:
    """The :class:`PlainTable` of the common call's table, checked in a few attribute reads: plain NumPy
    arrays, C-contiguous, aligned and writeable, a 2-D float32/float64 table and its 1-D momentum of the
    same dtype, not sharing memory, Python numbers in range for the hyper-parameters, a known mode. None for
    anything else: the checked path (:func:`_checked_call`) then decides, and words the errors. (Between
    training steps the caches are cold, where each of the checked path's general checks costs tens of
    microseconds.)"""
    ndarray = np.ndarray
    if not (type(var) is ndarray and type(momentum) is ndarray):
        return None
    dtype = var.dtype  # identities: NumPy's built-in dtypes are single objects (any other: the checks)
    if (dtype is not _F32 and dtype is not _F64) or momentum.dtype is not dtype:
        return None
    if var.ndim != 2 or momentum.ndim != 1 or momentum.shape[0] != var.shape[0]:
        return None
    v, m = var.flags, momentum.flags
    if not (v.c_contiguous and v.writeable and v.aligned and m.c_contiguous and m.writeable and m.aligned):
        return None
    scalars = plain_scalars(dtype, lr, eps, wd, mode, max_norm, var.shape[1])
    if scalars is None:
        return None
    table = PlainTable(var, momentum, scalars)
    v0, v1, m0, m1 = table.spans
    if v0 < m1 and m0 < v1:  # as np.may_share_memory's bounds test (several times dearer when cold)
        return None
    return table


def plain_gradient(table: PlainTable, grad: Any, indices: Any) -> bool:
    """Whether a row-sparse gradient ``(grad, indices)`` fits the plain call on ``table``: NumPy arrays,
    ``grad`` 2-D of the table's dtype and row length, one row per index, C-contiguous and aligned, its
    memory apart from the table's and the momentum's; ``indices`` 1-D int64, C-contiguous. The row worker's
    argument types then follow from the dtype alone (see :func:`launch_plain`). False: nothing was read
    but attributes."""
    ndarray = np.ndarray
    if type(grad) is not ndarray or type(indices) is not ndarray:
        return False
    if grad.dtype is not table.dtype or indices.dtype is not _INT64 or grad.ndim != 2 or indices.ndim != 1:
        return False
    count = indices.shape[0]
    row_len = table.row_len
    if grad.shape[0] != count or grad.shape[1] != row_len or not count * row_len:
        return False
    g = grad.flags
    if not (g.c_contiguous and g.aligned and indices.flags.c_contiguous):
        return False
    return table.apart(data_address(grad), count * row_len * table.dtype.itemsize)


def launch_plain(table: PlainTable, grad: np.ndarray, indices: np.ndarray, drop: bool) -> None:
    """Run the CPU row loop (:data:`_table_update`) for a gradient that :func:`plain_gradient` accepted on
    ``table`` (:func:`run_kept` of the :func:`kept_launch`); then move a large table onto huge pages the
    first time (see :func:`_on_huge_pages`).

    Raises:
        IndexError: an out-of-range index (unless ``drop``); nothing was written then.
    """
    kept = kept_launch(table, indices.shape[0], drop)
    bad = run_kept(table, kept, data_address(grad), data_address(indices))
    if bad >= 0:
        raise out_of_range_error("indices", indices, bad, table.rows)


#: How many launches (:func:`kept_launch`) a thread keeps, and how many bytes of plan workspace at most.
KEPT_LAUNCHES = 8
KEPT_BYTES = 2 * REUSED_BYTES

_kept = threading.local()


def kept_launch(table: PlainTable, count: int, drop: bool) -> KeptLaunch:
    """The :class:`~._whole_rows.KeptLaunch` of the plain call's row loop on ``table``'s arrays for
    gradients of ``count`` (>= 1) int64 indices, dropping out-of-range ones if ``drop``: the calling
    thread's, found by the arrays' addresses, sizes and shape (one kept for a table since freed is right
    for a new one in the same memory), made on first use (all forgotten when :data:`KEPT_LAUNCHES` or
    :data:`KEPT_BYTES` would be passed); a new one each call where its plan workspace would be larger than
    the row loops keep (:func:`~._whole_rows.kept_launch_fits`)."""
    key = (table.spans, table.rows, table.row_len, count, drop)
    launches = getattr(_kept, "launches", None)
    if launches is None:
        launches = _kept.launches = {}
    kept = launches.get(key)
    if kept is None:
        dtype, row_len = table.dtype, table.row_len
        positions = position_example(count).dtype
        # the plain call's worker types follow from the dtype (see plain_gradient)
        worker = _table_update.keyed.get((dtype, positions))
        states = [table.var, table.momentum.reshape(table.rows, 1)]  # the row loop's 2-D states
        if worker is None:  # a gradient as plain_gradient takes it: 2-D, C-contiguous, aligned
            example = [np.empty((2, row_len), dtype), *states]
            worker = _table_update.cpu_worker(_INT64, positions, example, table.scalars)
            _table_update.keyed[(dtype, positions)] = worker
        args = (_INT64, count, table.rows, not drop, row_len, dtype, states, table.scalars)
        kept = KeptLaunch(_table_update, worker, *args)
        if kept_launch_fits(_table_update, count, row_len, dtype.itemsize):
            held = sum(launch.nbytes for launch in launches.values())
            if len(launches) >= KEPT_LAUNCHES or held + kept.nbytes > KEPT_BYTES:
                launches.clear()
            launches[key] = kept
    return kept


def run_kept(table: PlainTable, kept: KeptLaunch, grad: int, indices: int) -> int:
    """Run ``kept`` (``table``'s, from :func:`kept_launch`) with the scalars of ``table`` over the
    gradient rows at address ``grad`` and the int64 indices at ``indices`` (C-contiguous, aligned, apart from
    the table's memory: :func:`plain_gradient`'s checks); return the position of the first out-of-range
    index (nothing was written) or -1. A large table is moved onto huge pages after its first completed step
    (:func:`_on_huge_pages`)."""
    address, end = table.spans[0], table.spans[1]
    # looked up before the launch (whose memory traffic leaves the caches cold for Python), advised after
    # the step, for the next ones
    advise = not table.advised and unadvised(address, end - address)
    bad = kept.run(indices, grad, table.scalars)
    if bad < 0:
        if advise:
            advise_scattered_once(address, end - address)
        table.advised = True
    return bad


def _on_huge_pages(table: np.ndarray) -> None:
    """Move a C-contiguous table of :data:`~optkernels.kernels._huge_pages.HUGE_PAGE_THRESHOLD` bytes or
    more onto transparent huge pages the first time it is seen (Linux;
    :func:`~optkernels.kernels._huge_pages.advise_scattered_once`): the row loop reads and writes rows
    scattered over it, each on a 4 KiB page of its own otherwise (a TLB miss and a page walk per row)."""
    nbytes = table.nbytes
    if nbytes >= HUGE_PAGE_THRESHOLD:
        advise_scattered_once(data_address(table), nbytes)


def rowwise_adagrad(
    var: Any,
    momentum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float = 0.01,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mode: str = "none",
    max_norm: float = 0.0,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    r"""FBGEMM's exact row-wise Adagrad in place (``EXACT_ROWWISE_ADAGRAD``, LOWBIT.md §8.2).

    For each updated row :math:`i` with gradient row :math:`g` of length :math:`D`:

    .. math::

        \hat g = g + \mathrm{wd}\,w \ (\text{l2}),\ \text{else } g \qquad
        h_i \leftarrow h_i + \tfrac{1}{D}\textstyle\sum_d \hat g_d^2 \qquad
        \mu = \frac{\mathrm{lr}}{\sqrt{h_i} + \epsilon}

        w \leftarrow c\,w - \mu\,g, \quad c = 1 - \mu\,\mathrm{wd}\ (\text{l2}),\
        1 - \mathrm{lr}\,\mathrm{wd}\ (\text{decoupled}),\ 1\ (\text{none})

    then, if ``max_norm > 0`` and :math:`\|w\|_2 > \mathrm{max\_norm}`, :math:`w \leftarrow
    w\cdot\mathrm{max\_norm}/\|w\|_2` (FBGEMM's GPU kernel; its CPU kernel has no max_norm). Sums run left to
    right over the row, in the arrays' dtype. A dense gradient updates every row; a row-sparse one only its
    distinct indices, duplicates summed first (in order of appearance). On Linux a C-contiguous NumPy table
    of 4 MiB or more updated by a row-sparse gradient is moved onto transparent huge pages after the first
    step that sees it (``madvise``; up to 1 GiB, a copy made once: see docs/guide/lowbit.rst), which changes no
    value or address.

    Parameters
    ----------
    var : array
        The table, at least 1-D (rows along axis 0), float32/float64 (float16/bfloat16: computed on float32
        copies, rounded once), NumPy or CUDA; updated in place.
    momentum : array
        One accumulator per row (FBGEMM's ``momentum1``, state ``"sum"``), shape ``(var.shape[0],)``, var's
        dtype; updated in place.
    grad : array or RowSparse
        Dense: var's shape. Row-sparse: rows ``(len(indices),) + var.shape[1:]`` with ``indices``, or a
        :class:`~optkernels.sparse.RowSparse` (``indices=None``).
    indices : array, optional
        1-D int32/int64 row indices of a row-sparse gradient; None for a dense one.
    lr, eps : float
        Learning rate (>= 0) and the epsilon outside the square root (>= 0). FBGEMM's defaults 0.01, 1e-8.
    weight_decay : float
        >= 0.
    weight_decay_mode : str
        ``"none"``, ``"l2"`` or ``"decoupled"``.
    max_norm : float
        >= 0; 0 disables the row-norm clip.
    out_of_range : str
        ``"raise"`` (IndexError before anything is written) or ``"drop"``.

    Returns
    -------
    tuple
        ``(var, momentum)``, the updated arrays themselves.

    Raises
    ------
    TypeError
        Wrong types, dtypes or devices.
    ValueError
        Shapes, layout, a hyper-parameter out of range, an unknown ``weight_decay_mode``.
    IndexError
        An out-of-range index with ``out_of_range="raise"``.
    """
    table = plain_table(var, momentum, lr, eps, weight_decay, weight_decay_mode, max_norm)
    if (
        table is not None
        and plain_gradient(table, grad, indices)
        and type(out_of_range) is str
        and out_of_range in ("raise", "drop")
    ):
        launch_plain(table, grad, indices, out_of_range == "drop")
        return var, momentum
    result = _checked_call(
        var,
        momentum,
        grad,
        indices,
        lr=lr,
        eps=eps,
        weight_decay=weight_decay,
        weight_decay_mode=weight_decay_mode,
        max_norm=max_norm,
        out_of_range=out_of_range,
    )
    if (
        type(var) is np.ndarray
        and var.dtype in _WIDE_DTYPES
        and var.flags.c_contiguous
        and (indices is not None or isinstance(grad, RowSparse))
    ):
        _on_huge_pages(var)  # a row-sparse step on a NumPy table (not on a half table's float32 copy)
    return result


@via_float32()
def _checked_call(
    var: Any,
    momentum: Any,
    grad: Any,
    indices: Any = None,
    *,
    lr: float = 0.01,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mode: str = "none",
    max_norm: float = 0.0,
    out_of_range: str = "raise",
) -> tuple[Any, Any]:
    """:func:`rowwise_adagrad` with every check (and float16/bfloat16 arrays through float32 copies)."""
    if weight_decay_mode not in MODES:
        raise ValueError(f"weight_decay_mode must be one of {MODES}, got {weight_decay_mode!r}")
    dense = indices is None and not isinstance(grad, RowSparse)
    values = grad
    if not dense:
        values, indices = unpack_grad(grad, indices, tuple(_array_facts("var", var)[1]))
    batch = check_arrays({"var": var}, {"grad": values}, same_shape=dense)
    if len(batch.shape) == 0:
        raise ValueError("var must be at least 1-D (rows along axis 0), got a 0-d array")
    rows = batch.shape[0]
    row_len = math.prod(batch.shape[1:])
    if not dense and tuple(getattr(values, "shape", ())[1:]) != tuple(batch.shape[1:]):
        raise ValueError(
            f"grad rows must have shape var.shape[1:] = {tuple(batch.shape[1:])}, got "
            f"{tuple(values.shape[1:])}"
        )
    flat_momentum = _check_momentum(momentum, batch.device, batch.storage, rows)
    scalars = {}
    for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay), ("max_norm", max_norm)):
        scalars[name] = to_scalar(name, value, batch.dtype)
        check_range(name, scalars[name], 0.0)
    t = batch.dtype.type
    lr_, wd = scalars["lr"], scalars["weight_decay"]
    decay = t(1) - lr_ * wd if weight_decay_mode == "decoupled" else t(1)
    l2 = weight_decay_mode == "l2"
    flat_var = batch.flat[0]
    row_scalars = (t(row_len), lr_, scalars["eps"], wd, l2, decay, scalars["max_norm"], t(1))
    if dense:
        n, flat_grad, unique = rows, batch.flat[1], np.zeros(1, np.int64)
        if batch.device == "cuda":
            unique = _cuda.to_device(unique)
    else:
        drop, _, count, _, _, _ = check_merge(indices, values, rows, out_of_range)
        if batch.device == "cpu" and count and row_len:
            # the merge fused into the row loop: each distinct row's gradient summed into a block buffer
            host = host_indices(indices).astype(np.int64, copy=False)  # one compiled loop for both types
            arrays = [
                batch.flat[1].reshape(count, row_len),
                flat_var.reshape(rows, row_len),
                flat_momentum.reshape(rows, 1),
            ]
            bad = launch_cpu(_table_update, host, rows, drop, arrays, row_scalars)
            if bad >= 0:
                raise out_of_range_error("indices", host, bad, rows)
            return var, momentum
        unique, merged = merge_duplicates(indices, values, rows, out_of_range=out_of_range)
        n = unique.shape[0]
        flat_grad = _flatten(merged, batch.device)
    if n and row_len:
        _row.launch(
            batch.device,
            n,
            flat_var.reshape(rows, row_len),
            flat_momentum,
            flat_grad.reshape(n, row_len),
            unique,
            flat_momentum,  # in place of the sums of squares, which each row computes (summed False)
            dense,
            False,
            *row_scalars,
        )
    return var, momentum
