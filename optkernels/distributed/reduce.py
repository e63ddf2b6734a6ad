"""``reduce_gradients``: MindSpore's DistributedGradReducer over MPI, deterministic, and a global finiteness
flag for loss scaling across ranks."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..optimizers.loss_scale import all_finite as _local_all_finite
from ..sparse import RowSparse
from . import _agree, _comm

__all__ = ["reduce_gradients", "all_finite", "origin"]

_local = threading.local()
_produced: dict[int, list[int]] = {}  # communicator -> the ranks whose last reduce inputs were not finite


def _scratch(dtype: np.dtype, n: int) -> np.ndarray:
    """A flat buffer of ``n`` elements of ``dtype``, this thread's, reused from call to call."""
    buffers = _local.__dict__.setdefault("buffers", {})
    buffer = buffers.get(dtype.str)
    if buffer is None or buffer.size < n:
        buffer = buffers[dtype.str] = np.empty(n, dtype)
    return buffer[:n]


def _check(grads: Any) -> list:
    if not isinstance(grads, (tuple, list)):
        raise TypeError(
            f"For 'reduce_gradients', 'grads' must be a tuple or list of gradients, got "
            f"{type(grads).__name__}"
        )
    for k, g in enumerate(grads):
        if isinstance(g, RowSparse):
            if not (isinstance(g.values, np.ndarray) and isinstance(g.indices, np.ndarray)):
                raise TypeError(
                    f"For 'reduce_gradients', grads[{k}] is a row-sparse gradient on the GPU; "
                    "only NumPy gradients are reduced"
                )
        elif not isinstance(g, np.ndarray):
            raise TypeError(
                f"For 'reduce_gradients', grads[{k}] must be a NumPy array or a RowSparse, got "
                f"{type(g).__name__}"
            )
        elif g.dtype.kind not in "fc" and g.dtype.name != "bfloat16":
            raise TypeError(f"For 'reduce_gradients', grads[{k}] must have a floating dtype, got {g.dtype}")
    return list(grads)


def _describe(g: Any) -> tuple:
    if isinstance(g, RowSparse):
        return ("sparse", tuple(g.dense_shape), g.values.dtype.str, g.indices.dtype.str)
    return ("dense", g.shape, g.dtype.str)


def reduce_gradients(
    grads: Sequence[Any], comm: Any, *, average: bool = True, nonfinite: str = "record"
) -> tuple:
    r"""The gradients summed (or averaged) over the ranks of ``comm`` (MindSpore's DistributedGradReducer):
    a new tuple, the same bits on every rank.

    Dense gradients: one fused all-reduce per dtype over a flat buffer holding all of them (not one call
    per tensor), with the result defined as the sum in rank order, element by element in the dtype::

        g = ((g_0 + g_1) + g_2) + ... + g_{P-1}          then g / P  (average=True)

    whatever order the messages arrive in (:func:`optkernels.distributed._comm.ordered_sum`).
    Row-sparse gradients (:class:`~optkernels.sparse.RowSparse`): their sum is their concatenation: indices
    and values all-gathered in rank order (``values / P`` when averaging); duplicates stay, for the sparse
    kernels' deterministic merge.

    Before anything is sent, every rank checks its gradients and the ranks compare what they hold (one small
    all-gather): an invalid gradient on any rank raises on every rank.

    Args:
        grads: a tuple or list of NumPy arrays (floating) and RowSparse gradients (NumPy), the same number,
            kinds, shapes and dtypes on every rank (row-sparse gradients may have any number of rows).
        comm: an mpi4py intracommunicator; a collective call on all of its ranks.
        average: divide by the number of ranks (a true division in the dtype). Default True.
        nonfinite: what to do when some rank's gradients hold an inf or a NaN: ``"record"`` (default: sum
            them, as MindSpore does, and remember which ranks produced them, for the parallel optimizer's
            message), ``"raise"`` (FloatingPointError on every rank, naming the ranks and gradients, before
            anything is summed) or ``"off"`` (no check: no pass over the gradients).

    Returns:
        A tuple with one reduced gradient per input, in order (dense: views of one buffer per dtype). Each
        calling thread keeps one flat buffer per dtype (the size of its dense gradients) for the next call.

    Raises:
        TypeError: ``grads`` not a tuple/list, an entry that is not a floating NumPy array or a NumPy
            RowSparse; ``comm`` not an intracommunicator (this one on the calling rank only). On every rank
            when any rank's input is wrong, naming that rank.
        ValueError: the gradient lists differ across ranks (kinds, shapes or dtypes), or ``average``
            differs: raised on every rank.
        FloatingPointError: non-finite gradients under ``nonfinite="raise"`` (on every rank).
    """
    comm = _comm.check_comm(comm, "reduce_gradients")
    error, finite = None, True
    try:
        grads = _check(grads)
        if not isinstance(average, (bool, np.bool_)):
            raise TypeError(f"For 'reduce_gradients', 'average' must be a bool, got {type(average).__name__}")
        if nonfinite not in ("record", "raise", "off"):
            raise ValueError(
                f"For 'reduce_gradients', 'nonfinite' must be 'record', 'raise' or 'off', got {nonfinite!r}"
            )
        if nonfinite != "off":
            finite = _local_all_finite(grads)
    except Exception as caught:
        error = caught
    found = _agree.agree(
        comm,
        "reduce_gradients",
        "reduce_gradients",
        error=error,
        finite=finite,
        fields=lambda: {
            "gradients (kinds, shapes, dtypes)": [_describe(g) for g in grads],
            "average": bool(average),
            "nonfinite": nonfinite,
        },
        what="the gradient lists (kinds, shapes, dtypes) or the options",
    )
    if nonfinite != "off":
        _produced[comm.py2f()] = found
    if found and nonfinite == "raise":
        which = comm.allgather(
            None if finite else [k for k, g in enumerate(grads) if not _local_all_finite(g)]
        )
        listed = ", ".join(f"rank {r}: grads{which[r]}" for r in found)
        raise FloatingPointError(
            f"For 'reduce_gradients', non-finite gradients ({listed}); nothing was summed"
        )
    size = comm.Get_size()
    out: list[Any] = [None] * len(grads)
    by_dtype: dict[str, list[int]] = {}
    for k, g in enumerate(grads):
        if not isinstance(g, RowSparse):
            by_dtype.setdefault(g.dtype.str, []).append(k)
    for ks in by_dtype.values():
        if size == 1:  # the sum over one rank: a copy of each gradient
            for k in ks:
                out[k] = np.array(grads[k], copy=True)
            continue
        if len(ks) > 1:  # one flat buffer (kept per thread and reused: no page faults each step)
            flat = _scratch(grads[ks[0]].dtype, sum(grads[k].size for k in ks))
            np.concatenate([grads[k].reshape(-1) for k in ks], out=flat)
        else:
            flat = np.ascontiguousarray(grads[ks[0]]).reshape(-1)
        total = _comm.ordered_sum(comm, flat, average=average)
        start = 0
        for k in ks:
            n = grads[k].size
            out[k] = total[start : start + n].reshape(grads[k].shape)
            start += n
    sparse = [k for k, g in enumerate(grads) if isinstance(g, RowSparse)]
    if sparse:
        mine = np.array([grads[k].indices.size for k in sparse], np.int64)
        every = np.empty((size, mine.size), np.int64)
        if size > 1:
            comm.Allgather(mine, every)
        else:
            every[0] = mine
        for j, k in enumerate(sparse):
            g = grads[k]
            indices = _comm.concat_rows(comm, np.ascontiguousarray(g.indices), every[:, j])
            values = _comm.concat_rows(comm, np.ascontiguousarray(g.values), every[:, j])
            if average and size > 1:
                np.divide(values, values.dtype.type(size), out=values)
            out[k] = RowSparse(indices, values, g.dense_shape)
    return tuple(out)


def all_finite(grads: Any, comm: Any) -> bool:
    """Whether every gradient on every rank is finite (a global overflow flag: the same answer on every
    rank; a rank with an inf or NaN makes it False everywhere).

    Args:
        grads: what :func:`optkernels.optimizers.all_finite` accepts (arrays, row-sparse gradients, lists).
        comm: an mpi4py intracommunicator; a collective call.

    Raises:
        TypeError: an entry of another type, on every rank (naming the rank).
    """
    comm = _comm.check_comm(comm, "all_finite")
    error, finite = None, True
    try:
        finite = _local_all_finite(grads)
    except Exception as caught:
        error = caught
    return not _agree.agree(comm, "all_finite", "all_finite", error=error, finite=finite)


def origin(comm: Any, found: list[int]) -> str:
    """Where the non-finite gradients that ranks ``found`` came from, for messages: the ranks whose inputs
    to the last :func:`reduce_gradients` on ``comm`` held infs or NaNs, if it saw any."""
    produced = _produced.get(comm.py2f())
    if produced:
        return f"produced by rank(s) {produced}: their gradients given to reduce_gradients held infs or NaNs"
    if produced is not None:
        return (
            f"found by rank(s) {found}; every rank's gradients given to reduce_gradients were finite: "
            "their sum overflowed"
        )
    return f"found by rank(s) {found}, among the gradients of the parameters they own"
