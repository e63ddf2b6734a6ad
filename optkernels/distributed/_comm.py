"""The MPI plumbing of :mod:`optkernels.distributed`: mpi4py loaded on first use, the deterministic
collectives (a sum in rank order, a concatenation in rank order) and a digest of descriptions (the
agreement across ranks before each collective is :mod:`._agree`).

Every collective here moves raw bytes (a contiguous MPI type of the element's size), so any NumPy dtype,
float16 and ml_dtypes' bfloat16 included, travels bit for bit; the arithmetic is NumPy's, on each rank.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._install import install_hint

__all__ = [
    "as_bytes",
    "check_comm",
    "chunk_bounds",
    "concat_rows",
    "digest",
    "element_type",
    "mpi",
    "ordered_sum",
]

_TYPES: dict[int, Any] = {}


def mpi() -> Any:
    """mpi4py's ``MPI`` module (imported here, on first use: ``import optkernels.distributed`` needs no MPI).

    Raises:
        ImportError: mpi4py is not installed, with the install command.
    """
    try:
        from mpi4py import MPI
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(f"optkernels.distributed needs mpi4py and an MPI: {install_hint('mpi')}") from error
    return MPI


def check_comm(comm: Any, owner: str) -> Any:
    """``comm`` if it is an mpi4py intracommunicator, else TypeError naming ``owner``."""
    MPI = mpi()
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(
            f"For '{owner}', 'comm' must be an mpi4py intracommunicator (e.g. MPI.COMM_WORLD), "
            f"got {type(comm).__name__}"
        )
    return comm


def element_type(itemsize: int) -> Any:
    """The MPI datatype of one element of ``itemsize`` bytes (contiguous bytes, committed once)."""
    kind = _TYPES.get(itemsize)
    if kind is None:
        kind = mpi().BYTE.Create_contiguous(itemsize)
        kind.Commit()
        kind = _TYPES.setdefault(itemsize, kind)
    return kind


def as_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array (a view), for MPI."""
    return array.reshape(-1).view(np.uint8)


def digest(items: Iterable[Any]) -> bytes:
    """A 32-byte SHA-256 of the ``repr`` of each item (names, shapes, dtype strings: stable across runs)."""
    h = hashlib.sha256()
    for item in items:
        h.update(repr(item).encode())
        h.update(b"\0")
    return h.digest()


def chunk_bounds(n: int, size: int) -> np.ndarray:
    """Where ``n`` elements are cut into ``size`` fixed chunks: ``bounds[r] = n·r // size``."""
    return np.array([n * r // size for r in range(size + 1)], np.int64)


def ordered_sum(comm: Any, flat: np.ndarray, *, average: bool) -> np.ndarray:
    r"""The sum over ranks of a 1-D C-contiguous array, the same bits on every rank, in a new array::

        out = ((x_0 + x_1) + x_2) + ... + x_{P-1}        (then out / P in the dtype, when average)

    in the arrays' dtype, element by element, in rank order whatever order messages arrive in. A
    reduce-scatter by fixed chunks (an all-to-all: rank ``r`` receives chunk ``r`` of every rank and sums
    it in rank order), then an all-gather of the summed chunks: each rank sends and receives
    ``2·(P−1)/P`` of the buffer, as a ring all-reduce does.

    Args:
        comm: the communicator.
        flat: this rank's buffer; the same length and dtype on every rank (the caller checks).
        average: divide the sum by the number of ranks (a true division, rounded to the dtype).
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    dtype = flat.dtype
    if size == 1:
        out = flat.copy()
        return out
    bounds = chunk_bounds(flat.size, size)
    counts, displs = np.diff(bounds), bounds[:-1]
    mine = int(counts[rank])
    kind = element_type(dtype.itemsize)
    # The result's buffer first receives every rank's chunk (P·mine <= n + P − 1 elements): one allocation.
    out = np.empty(max(flat.size, size * mine), dtype)
    parts = out[: size * mine].reshape(size, mine)
    comm.Alltoallv(
        [as_bytes(flat), (counts, displs), kind],
        [as_bytes(parts), ([mine] * size, [mine * r for r in range(size)]), kind],
    )
    acc = parts[0].copy()
    for r in range(1, size):
        np.add(acc, parts[r], out=acc)
    if average:
        np.divide(acc, dtype.type(size), out=acc)
    comm.Allgatherv([as_bytes(acc), kind], [as_bytes(out), (counts, displs), kind])
    return out[: flat.size]


def concat_rows(comm: Any, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Every rank's ``rows`` (``counts[r]`` rows on rank ``r``, the same trailing shape and dtype everywhere)
    concatenated in rank order, on every rank."""
    counts = np.asarray(counts, np.int64)
    inner = int(np.prod(rows.shape[1:], dtype=np.int64))
    out = np.empty((int(counts.sum()),) + rows.shape[1:], rows.dtype)
    if comm.Get_size() == 1:
        out[...] = rows
        return out
    sizes = counts * inner
    displs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    kind = element_type(rows.dtype.itemsize)
    comm.Allgatherv([as_bytes(np.ascontiguousarray(rows)), kind], [as_bytes(out), (sizes, displs), kind])
    return out
