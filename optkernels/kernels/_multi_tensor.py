"""Many tensors in one call: the chunk table and address table of a multi-tensor CPU loop.

An optimizer step over a model of T tensors would otherwise call an element-wise loop T times, each call
paying Numba's dispatch and a parallel-region start (a few µs each, far more on a loaded machine): for a
model of many small tensors that overhead exceeds the arithmetic. A :class:`TensorList` describes T
tensors (of one dtype) so that :meth:`Elementwise.launch_many <._elementwise.Elementwise.launch_many>`
updates all of them in ONE parallel loop:

* the **chunk table** cuts the concatenated element range of the T tensors into chunks of at most
  ``chunk`` elements that never span two tensors: row ``c`` is ``(tensor, start, stop, size)``, the
  chunk covering elements ``start..stop-1`` of tensor ``tensor`` (of ``size`` elements). Zero-size tensors
  have no chunk. It depends only on the sizes: built once per list.
* the **balanced table** (:meth:`TensorList.balanced`) is the same cover cut for ``threads`` threads:
  Numba gives each thread an equal share of a ``prange``'s iterations, in contiguous blocks, so rows are
  laid out in ``threads`` blocks of equal row count, block ``k`` covering the ``k``-th of ``threads`` equal
  slices of the concatenated elements (padded with empty rows): every thread gets the same number of
  elements, where the plain table, cut by row count, can give one thread a whole extra chunk (a single
  tensor of 7 chunks on 2 threads: 4 against 3).
* the **address table** holds, for every array argument ``j`` of the element function and every tensor
  ``t``, the address of the first element of that tensor's (flat, C-contiguous) array: ``addresses[j,
  t]``. Rows of arrays that live as long as the list (parameters, optimizer slots) are set once with
  :meth:`TensorList.set_row`; a row that changes every call (the gradients of a step) is refilled with
  :meth:`TensorList.set_addresses`, whose caller keeps those arrays alive during the launch. Every array
  must be aligned to its dtype (the compiled loop assumes it, as NumPy's own allocations are).

The compiled loop is ``for c in prange(chunks): for i in chunk: element(i, *views_of_tensor_t, *scalars)``:
the element function is called exactly as the single-tensor loop calls it, with the same scalars, so every
tensor ends with the same bits as one call per tensor, whatever the number of threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from ._pointers import data_addresses

__all__ = ["CHUNK", "TensorList", "balanced_table", "chunk_table"]

#: Elements per chunk: large enough that a chunk's loop runs at full speed, small enough that a model of
#: many 10k-100k tensors gives every thread many chunks.
CHUNK = 16384


def chunk_table(sizes: Sequence[int], chunk: int = CHUNK) -> np.ndarray:
    """The chunks of tensors of the given sizes: an int64 array of shape ``(n_chunks, 4)`` with rows
    ``(tensor, start, stop, size)``, in tensor order then element order.

    Each tensor of size ``s`` gives ``ceil(s/chunk)`` chunks ``[k·chunk, min((k+1)·chunk, s))``; every
    element of every tensor is in exactly one chunk, and a chunk never spans two tensors.

    Args:
        sizes: element counts, >= 0.
        chunk: the largest chunk, >= 1.

    Raises:
        ValueError: a negative size, or ``chunk < 1``.
    """
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    if chunk < 1:
        raise ValueError(f"'chunk' must be >= 1, got {chunk}")
    if sizes.size and sizes.min() < 0:
        raise ValueError(f"'sizes' must be >= 0, got {sizes.min()}")
    counts = -(-sizes // chunk)
    tensor = np.repeat(np.arange(sizes.size, dtype=np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)  # index of each tensor's first chunk
    start = (np.arange(tensor.size, dtype=np.int64) - first) * chunk
    size = sizes[tensor]
    return np.stack([tensor, start, np.minimum(start + chunk, size), size], axis=1)


def balanced_table(sizes: Sequence[int], chunk: int, parts: int) -> np.ndarray:
    """A chunk table (rows ``(tensor, start, stop, size)``, as :func:`chunk_table`'s) of ``parts`` blocks of
    equal row count: the concatenated elements of the tensors are cut into ``parts`` slices of equal size,
    block ``k`` holds slice ``k``, each tensor's part of it in pieces of at most ``chunk`` elements and of
    equal size, every bound inside a tensor rounded down to a multiple of :data:`ALIGN` where ``chunk`` is
    at least twice that (so sizes are equal within ``ALIGN`` elements), then empty rows ``(0, 0, 0, sizes[0])`` up to the longest block's
    length. Every element is in exactly one row; no row spans two tensors.

    Args:
        sizes: element counts, >= 0, with a positive sum.
        chunk: the largest piece, >= 1.
        parts: the number of blocks (threads), >= 1.
    """
    sizes = [int(s) for s in sizes]
    total = sum(sizes)
    cuts = [total * k // parts for k in range(parts + 1)]
    # pieces of at most `step` elements, whose bounds then move down by less than `align`: at most `chunk`
    align = ALIGN if chunk >= 2 * ALIGN else 1
    step = chunk - align + 1
    blocks: list[list[tuple[int, int, int, int]]] = [[] for _ in range(parts)]
    offset = 0  # the first element of tensor t in the concatenation
    for t, size in enumerate(sizes):
        for k in range(parts):
            lo, hi = max(cuts[k], offset) - offset, min(cuts[k + 1], offset + size) - offset
            if hi <= lo:
                continue
            pieces = -(-(hi - lo) // step)
            bounds = [_aligned(lo + (hi - lo) * j // pieces, size, align) for j in range(pieces + 1)]
            blocks[k] += [(t, a, b, size) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        offset += size
    rows = max(map(len, blocks))
    padded = [row for block in blocks for row in block + [(0, 0, 0, sizes[0])] * (rows - len(block))]
    return np.asarray(padded, np.int64).reshape(-1, 4)


#: Row bounds inside a tensor of the balanced table are multiples of this many elements (64 bytes of
#: float32): each row's vector loop meets its arrays at the alignment the plain table's rows have, and two
#: threads never write one cache line.
ALIGN = 16


def _aligned(x: int, size: int, align: int) -> int:
    """``x`` rounded down to a multiple of ``align`` (a tensor's end, ``size``, stays)."""
    return x if x == size else x - x % align


class TensorList:
    """T tensors of one dtype, described for multi-tensor launches (see the module docstring).

    Args:
        sizes: the element count of each tensor.
        dtype: the dtype of every array (float32 or float64 for the optimizers' kernels).
        n_arrays: how many array arguments the element function takes (rows of the address table).
        chunk: the largest chunk (:data:`CHUNK`).

    Attributes:
        sizes: tuple of the sizes.
        total: their sum.
        dtype: the dtype.
        chunk: the largest chunk.
        chunks: the chunk table (:func:`chunk_table`).
        addresses: int64 array ``(n_arrays, T)``; all zero until set.
        like: a zero-length array of ``dtype`` (tells the compiled loop the element type).
    """

    def __init__(self, sizes: Sequence[int], dtype: Any, n_arrays: int, chunk: int = CHUNK):
        self.sizes = tuple(int(s) for s in sizes)
        self.total = sum(self.sizes)
        self.dtype = np.dtype(dtype)
        self.chunk = chunk
        self.chunks = chunk_table(self.sizes, chunk)
        self.addresses = np.zeros((n_arrays, len(self.sizes)), np.int64)
        self.like = np.empty(0, self.dtype)
        self._kept: list[Any] = [None] * n_arrays
        self._subsets: dict[tuple, np.ndarray] = {}
        self._balanced: dict[int, np.ndarray] = {}
        self._workspace: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.sizes)

    def set_row(self, row: int, arrays: Sequence[np.ndarray]) -> None:
        """Address row ``row`` := the arrays (one per tensor), which the list keeps referenced from now on.

        Raises:
            TypeError: an array is not a NumPy array of the list's dtype.
            ValueError: the wrong number of arrays, or an array that is not C-contiguous or has the wrong
                number of elements.
        """
        self._check(arrays)
        self._kept[row] = list(arrays)
        data_addresses(arrays, self.addresses[row])

    def set_addresses(self, row: int, arrays: Sequence[np.ndarray]) -> None:
        """Address row ``row`` := the arrays, unchecked and not kept: for the per-call row (gradients),
        whose caller has already checked them (NumPy arrays of the dtype, C-contiguous, the tensor's size)
        and keeps them alive until the launch returns."""
        data_addresses(arrays, self.addresses[row])

    def chunks_without(self, excluded: tuple[int, ...]) -> np.ndarray:
        """The chunk table without the chunks of the tensors in ``excluded`` (cached per tuple): their
        addresses are then never read."""
        if not excluded:
            return self.chunks
        table = self._subsets.get(excluded)
        if table is None:
            table = self.chunks[~np.isin(self.chunks[:, 0], np.asarray(excluded, np.int64))]
            self._subsets[excluded] = table = np.ascontiguousarray(table)
        return table

    def balanced(self, threads: int) -> np.ndarray:
        """The chunk table for a launch on ``threads`` threads (:func:`balanced_table`, cached per count):
        equal elements per thread. ``chunks`` itself for one thread or an empty list."""
        if threads <= 1 or not self.total:
            return self.chunks
        table = self._balanced.get(threads)
        if table is None:
            table = self._balanced[threads] = balanced_table(self.sizes, self.chunk, threads)
        return table

    def workspace(self) -> np.ndarray:
        """A ``(threads, chunk)`` array of the dtype, one row per Numba thread (``NUMBA_NUM_THREADS``, the
        most there can be): the per-thread chunk buffer of a launch with a prologue. One per list, so two
        lists can be launched at the same time from two Python threads."""
        if self._workspace is None:
            width = max(1, min(self.chunk, max(self.sizes, default=1)))
            self._workspace = np.empty((numba.config.NUMBA_NUM_THREADS, width), self.dtype)
        return self._workspace

    def _check(self, arrays: Sequence[np.ndarray]) -> None:
        if len(arrays) != len(self.sizes):
            raise ValueError(f"got {len(arrays)} arrays for {len(self.sizes)} tensors")
        for k, (a, size) in enumerate(zip(arrays, self.sizes)):
            if not isinstance(a, np.ndarray) or a.dtype != self.dtype:
                raise TypeError(
                    f"array {k} must be a NumPy array of dtype {self.dtype}, got "
                    f"{getattr(a, 'dtype', type(a).__name__)}"
                )
            if not a.flags.c_contiguous or a.size != size:
                raise ValueError(f"array {k} must be C-contiguous with {size} elements")
            if not a.flags.aligned:
                raise ValueError(f"array {k} must be aligned to its dtype")
