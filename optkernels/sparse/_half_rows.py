"""float16/bfloat16 for the lazy sparse ops, on the indexed rows only (:func:`half_rows`).

:func:`~optkernels.kernels._upcast.via_float32` widens whole half arrays: for an embedding table that is
O(table) memory traffic per call for an update that touches a few rows. A lazy op (one that reads and
writes only the rows in ``indices``) can instead run the float32 kernel on a compact table of those rows:

* ``rows`` are the distinct in-range indices, ascending, and ``compact[k] = rows.index(indices[k])``
  (dropped indices get ``len(rows)``, out of range of the compact table, so the kernel drops them too);
* each state array's rows ``a[rows]`` are widened into a float32 array of shape ``(len(rows),) +
  a.shape[1:]`` (one parallel gather), the gradient is widened whole, and the float32 kernel runs on them
  with ``compact``;
* each updated compact array is rounded once to nearest even and written into ``a[rows]`` (one parallel
  scatter).

Why this is bit-identical to the full copy: widening is exact and element-wise, so the compact arrays hold
the same float32 values as the full copies' rows (the conversions are :mod:`optkernels.kernels._lowp`'s,
checked on every half bit pattern against the NumPy and ml_dtypes casts of the full copy's widening; the
rounding is the same LLVM IR as the full copy's write-back). The kernel merges duplicates by summing each
row's gradient rows in order of appearance (:func:`~optkernels.sparse.merge_duplicates`); the positions ``k``
with ``compact[k] == j`` are exactly those with ``indices[k] == rows[j]``, in the same order, so every
sum is the same float32 sum; the per-element update depends only on that element's state, its summed
gradient and the scalars (which do not depend on the table's length). Rounding is element-wise. Rows not
indexed are neither read nor written (the full copy rewrites them with their own value: the same bits,
except a bfloat16 signalling NaN, which comes back as a quiet NaN).

A :class:`~optkernels.sparse.RowSparse` gradient (of ``var``'s dense shape) is taken as its
``(values, indices)``. The full copy is kept (it also words every error) for anything else: CUDA arrays,
wrong shapes, dtypes or layouts, arrays sharing memory, ``out_of_range="raise"`` with an index out of range,
other half array arguments, and stochastic rounding (its random bits hash each element's index in the
rounded array, which the compact table would change).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels._checks import HALF_DTYPES
from ..kernels._lowp import BFLOAT16, CPU, stochastic_stream
from ..kernels._upcast import _is_half, map_result, via_float32
from ..kernels._workers import run_parts
from ._indices import INDEX_DTYPES, OUT_OF_RANGE_MODES
from ._plan import plan_in_range, plan_merge
from .row_sparse import RowSparse

_FLOAT32 = np.dtype(np.float32)
_widen_bf16, _widen_f16 = CPU["_widen_bf16"], CPU["_widen_f16"]
_narrow_bf16, _narrow_f16 = CPU["_narrow_bf16"], CPU["_narrow_f16"]


def _gather_widened(j, table, rows, out, bf16):
    """``out[j] = table[rows[j]]`` widened to float32 (2-D uint16 bits in, 2-D float32 out); one part of
    :func:`~optkernels.kernels._workers.run_parts`."""
    if bf16:
        _widen_bf16(table[rows[j]], out[j])
    else:
        _widen_f16(table[rows[j]], out[j])


def _scatter_rounded(j, src, rows, table, bf16):
    """``table[rows[j]] = src[j]`` rounded to nearest even (2-D float32 in, 2-D uint16 bits out); one part
    of :func:`~optkernels.kernels._workers.run_parts`."""
    if bf16:
        _narrow_bf16(src[j], table[rows[j]])
    else:
        _narrow_f16(src[j], table[rows[j]])


def _bits_2d(a: np.ndarray) -> np.ndarray:
    """The uint16 bits of the C-contiguous half array ``a`` as ``(rows, row_len)``."""
    return a.view(np.uint16).reshape(a.shape[0], math.prod(a.shape[1:]))


def _widened_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """float32 ``a[rows]`` (the conversions of :mod:`optkernels.kernels._lowp`, checked on every half bit
    pattern against NumPy's and ml_dtypes' casts, which the full copy uses)."""
    out = np.empty((rows.shape[0], math.prod(a.shape[1:])), np.float32)
    if out.size:
        run_parts(rows.shape[0], _gather_widened, (_bits_2d(a), rows, out, bool(a.dtype == BFLOAT16)))
    return out.reshape((rows.shape[0],) + a.shape[1:])


def _round_rows_into(a: np.ndarray, rows: np.ndarray, src: np.ndarray) -> None:
    """``a[rows] = src`` rounded once to nearest even (the conversion of the full copy's write-back)."""
    if src.size:
        bits = _bits_2d(a)
        run_parts(
            rows.shape[0],
            _scatter_rounded,
            (src.reshape(rows.shape[0], -1), rows, bits, bool(a.dtype == BFLOAT16)),
        )


def _compact_indices(indices: np.ndarray, num_rows: int, drop: bool) -> tuple | None:
    """``(rows, compact)`` (see the module docstring), or None when an index is out of range and not
    dropped."""
    host = np.ascontiguousarray(indices)
    if drop:
        plan = plan_merge(host, num_rows)
    else:
        bad, in_range = plan_in_range(host, num_rows)
        if bad >= 0 or in_range is None:
            return None
        plan = in_range
    n_rows = plan.rows.shape[0]
    # int32 where it fits: one compiled row worker then serves the compact tables and float32 int32 calls
    compact = np.full(host.shape[0], n_rows, np.int32 if host.shape[0] < 2**31 - 1 else np.int64)
    compact[plan.order] = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(plan.starts))
    return plan.rows, compact


def _usable(states: list, grad: Any, indices: Any, others: list) -> bool:
    """Whether the call is plain enough for the compact path (else the full copy runs and checks it)."""
    if not all(type(a) is np.ndarray for a in (*states, grad, indices)):
        return False
    shape = states[0].shape
    if not shape or any(
        a.shape != shape or a.dtype not in HALF_DTYPES or not a.flags.c_contiguous or not a.flags.writeable
        for a in states
    ):
        return False
    if indices.dtype not in INDEX_DTYPES or indices.ndim != 1 or any(_is_half(a) for a in others):
        return False
    if grad.dtype not in HALF_DTYPES and grad.dtype != _FLOAT32:
        return False
    if grad.shape != (indices.shape[0],) + shape[1:]:
        return False
    arrays = (*states, grad, indices)
    return not any(np.may_share_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1 :])


def half_rows(*states: str) -> Callable:
    """Decorator of a lazy sparse kernel whose arrays updated in place are the arguments ``states`` (then
    ``grad``, ``indices``, ``out_of_range``): float16/bfloat16 calls run the float32 kernel on the indexed
    rows only (see the module docstring); everything else goes to ``via_float32()(kernel)``."""

    def decorate(kernel: Callable) -> Callable:
        full = via_float32()(kernel)
        signature = inspect.signature(kernel)

        @functools.wraps(kernel)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if stochastic_stream() is not None:
                return full(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return full(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            halves = [given[s] for s in states]
            grad, indices = given["grad"], given["indices"]
            if (
                isinstance(grad, RowSparse)
                and indices is None
                and tuple(grad.dense_shape) == getattr(halves[0], "shape", None)
            ):
                grad, indices = grad.values, grad.indices
            others = [v for k, v in given.items() if k not in (*states, "grad", "indices")]
            mode = given["out_of_range"]
            if (
                not isinstance(mode, str)
                or mode not in OUT_OF_RANGE_MODES
                or not _usable(halves, grad, indices, others)
            ):
                return full(*args, **kwargs)
            plan = _compact_indices(indices, halves[0].shape[0], mode == "drop")
            if plan is None:
                return full(*args, **kwargs)  # raises the IndexError, having written nothing
            rows, compact = plan
            wide = {}
            for name, a in zip(states, halves):
                wide[name] = _widened_rows(a, rows)
            if grad.dtype != _FLOAT32:
                grad = _widened_rows(np.ascontiguousarray(grad), np.arange(grad.shape[0], dtype=np.int64))
            given.update(wide, grad=grad, indices=compact)
            result = kernel(*bound.args, **bound.kwargs)  # validates first: a failure writes nothing
            originals = {id(wide[s]): (wide[s], a) for s, a in zip(states, halves)}

            def back(r: Any) -> Any:
                hit = originals.get(id(r))
                if hit is None:
                    return r
                updated, half = hit
                _round_rows_into(half, rows, updated)
                return half

            return map_result(result, back)

        wrapper.__wrapped__ = kernel
        return wrapper

    return decorate
