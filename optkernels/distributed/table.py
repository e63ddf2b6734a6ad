"""``ShardedTable``: an embedding table split by rows across the ranks of a communicator, each rank holding
rows ``r`` with ``r % size == rank`` and its optimizer's slots for those rows only.

A step takes each rank's row-sparse gradient, routes every row to its owner (one all-to-all of counts,
then of indices and of values), and runs the rank's optimizer (LazyAdam, Adam, FTRL, ProximalAdagrad,
Adagrad: our sparse kernels, with their deterministic duplicate merge) on its rows. The owner receives the
rows of each source rank in rank order, each source's rows in their order, so duplicates are summed in the
order a single process sees them in the concatenated gradient (:func:`reduce_gradients`): the table
equals, bit for bit, the single-process optimizer over the whole table fed that gradient. Rows are dealt
round-robin (not in contiguous ranges) so that the frequent small ids of a Zipf distribution spread over
all ranks.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..optimizers import Optimizer, Parameter
from ..sparse import RowSparse
from . import _comm
from .reduce import agree

__all__ = ["ShardedTable"]


class ShardedTable:
    r"""A ``(num_rows, dim)`` table whose rows are spread over the ranks of ``comm``: rank ``k`` of ``P``
    holds rows ``k, k+P, k+2P, ...`` (local row ``i`` is global row ``i·P + k``) and the optimizer state of
    those rows. Every method is a collective call on all ranks of ``comm``.

    Args:
        num_rows: the number of rows of the whole table (an int >= 1).
        dim: the row width (an int >= 1).
        comm: an mpi4py intracommunicator.
        optimizer: ``optimizer([parameter]) -> Optimizer`` over this rank's rows: an optimizer class that
            takes row-sparse gradients (LazyAdam, Adam, FTRL, ProximalAdagrad, Adagrad) or a
            ``functools.partial`` of one with its hyper-parameters.
        dtype: float32 (default) or float64.
        init: None (zeros), or ``init(rows) -> array (len(rows), dim)``: the initial values of the given
            global rows (e.g. from a generator seeded by row, so that any number of ranks starts alike).
        name: the parameter's name (the state's keys: ``"moment1.<name>"``). Default "embedding.table".
        average: divide gradients by the number of ranks (as :func:`reduce_gradients`). Default True.

    Attributes:
        local: this rank's rows, a ``(local_rows, dim)`` array (the optimizer's :class:`Parameter` data).
        rows: the global ids of this rank's rows.
        optimizer: the optimizer of this rank's rows.

    Raises:
        TypeError: arguments of the wrong type; an optimizer that does not take row-sparse gradients.
        ValueError: a non-positive size; the tables differ across ranks (raised on every rank).
    """

    def __init__(self, num_rows: int, dim: int, comm: Any, optimizer: Callable[[list], Optimizer], *,
                 dtype: Any = np.float32, init: Callable[[np.ndarray], Any] | None = None,
                 name: str = "embedding.table", average: bool = True):
        owner = "ShardedTable"
        for label, value in (("num_rows", num_rows), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"For '{owner}', '{label}' must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"For '{owner}', '{label}' must be >= 1, got {value}")
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"For '{owner}', 'dtype' must be float32 or float64, got {dtype}")
        self.comm = _comm.check_comm(comm, owner)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.num_rows, self.dim, self.dtype, self.average = int(num_rows), int(dim), dtype, bool(average)
        self.rows = np.arange(self.rank, self.num_rows, self.size, dtype=np.int64)
        _comm.check_same(comm, _comm.digest([self.num_rows, self.dim, dtype.str, name, self.average,
                                             getattr(optimizer, "__name__", type(optimizer).__name__)]),
                         f"For '{owner}', the tables (num_rows, dim, dtype, name, optimizer) differ across "
                         "ranks")
        if init is None:
            data = np.zeros((self.rows.size, self.dim), dtype)
        else:
            data = np.ascontiguousarray(init(self.rows), dtype=dtype)
            if data.shape != (self.rows.size, self.dim):
                raise ValueError(f"For '{owner}', init(rows) must return shape {(self.rows.size, self.dim)}, "
                                 f"got {data.shape}")
        self.parameter = Parameter(data, name)
        self.optimizer = optimizer([self.parameter])
        if not isinstance(self.optimizer, Optimizer) or not self.optimizer._accepts_sparse:
            raise TypeError(f"For '{owner}', 'optimizer' must build an optimizer that takes row-sparse "
                            f"gradients (LazyAdam, Adam, FTRL, ProximalAdagrad, Adagrad), got "
                            f"{type(self.optimizer).__name__}")

    @property
    def local(self) -> np.ndarray:
        """This rank's rows (local row ``i`` is global row ``i·size + rank``)."""
        return self.parameter.data

    # ------------------------------------------------------------------------------------ routing

    def _checked_ids(self, ids: Any, label: str) -> np.ndarray | str:
        """The ids as int64, or an error message (checked on every rank before any collective)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            return f"TypeError:'{label}' must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}"
        bad = np.flatnonzero((ids < 0) | (ids >= self.num_rows))
        if bad.size:
            return (f"IndexError:'{label}' holds {ids[bad[0]]} at position {bad[0]}, outside [0, "
                    f"{self.num_rows})")
        return ids.astype(np.int64, copy=False)

    def _agree_or_raise(self, checked: Any) -> np.ndarray:
        """Every rank learns whether every rank's input is valid; all raise together if one is not."""
        ok = agree(self.comm, not isinstance(checked, str))
        if isinstance(checked, str):
            kind, _, message = checked.partition(":")
            raise {"TypeError": TypeError, "IndexError": IndexError, "ValueError": ValueError}[kind](
                f"For 'ShardedTable', {message}")
        if not ok:
            raise ValueError("For 'ShardedTable', another rank's input was invalid (its error names it); "
                             "nothing was changed")
        return checked

    def _route(self, ids: np.ndarray, payload: np.ndarray | None) -> tuple:
        """Send each id (and its payload row) to its owner; returns what this rank received, in source-rank
        order (each source's items in their order), plus the plan to send answers back."""
        size = self.size
        dest = ids % size
        if size <= 8:    # a stable grouping by owner: a few vectorized passes beat a stable sort
            order = np.concatenate([np.flatnonzero(dest == r) for r in range(size)])
        else:
            order = np.argsort(dest, kind="stable")
        send_counts = np.bincount(dest, minlength=size).astype(np.int64)
        recv_counts = np.empty(size, np.int64)
        self.comm.Alltoall(send_counts, recv_counts)
        got_ids = _alltoallv(self.comm, np.ascontiguousarray(ids[order]), send_counts, recv_counts)
        got = None
        if payload is not None:
            got = _alltoallv(self.comm, np.ascontiguousarray(payload[order]), send_counts, recv_counts)
        return got_ids, got, (order, send_counts, recv_counts)

    # ------------------------------------------------------------------------------------ public

    def step(self, gradient: RowSparse) -> bool:
        r"""One optimizer step from this rank's row-sparse gradient (a collective call).

        The table moves as a single process's optimizer over the whole table would, fed the gradient
        that :func:`reduce_gradients` makes of every rank's: their rows concatenated in rank order (values
        divided by the number of ranks when ``average``); bit for bit.

        Args:
            gradient: a NumPy :class:`RowSparse` of dense shape ``(num_rows, dim)`` and the table's dtype
                (any number of rows, repeats allowed).

        Raises:
            TypeError, ValueError, IndexError: on every rank when any rank's gradient is invalid (the
                invalid rank's error names it), before anything is sent or written.
        """
        checked: Any
        if not isinstance(gradient, RowSparse) or not isinstance(gradient.values, np.ndarray):
            checked = f"TypeError:'gradient' must be a NumPy RowSparse, got {type(gradient).__name__}"
        elif tuple(gradient.dense_shape) != (self.num_rows, self.dim):
            checked = (f"ValueError:'gradient' has dense_shape {tuple(gradient.dense_shape)}, the table is "
                       f"{(self.num_rows, self.dim)}")
        elif gradient.values.dtype != self.dtype:
            checked = f"TypeError:'gradient' has dtype {gradient.values.dtype}, the table {self.dtype}"
        else:
            checked = self._checked_ids(gradient.indices, "gradient.indices")
        ids = self._agree_or_raise(checked)
        got_ids, values, _ = self._route(ids, np.ascontiguousarray(gradient.values))
        if self.average and self.size > 1:
            np.divide(values, values.dtype.type(self.size), out=values)
        local = RowSparse(got_ids // self.size, values, self.local.shape)
        return self.optimizer.step([local])

    def lookup(self, ids: Any) -> np.ndarray:
        """The rows ``ids`` of the whole table (this rank's ids; every rank may ask for different ones), as a
        new ``(len(ids), dim)`` array. A collective call.

        Raises:
            TypeError, IndexError: on every rank when any rank's ids are invalid.
        """
        ids = self._agree_or_raise(self._checked_ids(ids, "ids"))
        asked, _, (order, send_counts, recv_counts) = self._route(ids, None)
        answers = np.ascontiguousarray(self.local[asked // self.size])
        back = _alltoallv(self.comm, answers, recv_counts, send_counts)
        out = np.empty((ids.size, self.dim), self.dtype)
        out[order] = back
        return out

    def gather(self, root: int | None = 0) -> np.ndarray | None:
        """The whole table on ``root`` (None: on every rank); None on the other ranks."""
        return self._gather_rows(self.local, root)

    def state_dict(self) -> dict[str, np.ndarray]:
        """This rank's optimizer state (its rows' slots), keyed as the optimizer's."""
        return self.optimizer.state_dict()

    def consolidated_state_dict(self, root: int | None = 0) -> dict[str, np.ndarray] | None:
        """The optimizer state of the whole table on ``root`` (None: every rank): what a single-process
        optimizer over the whole table (a Parameter of the same name) has; None on the other ranks."""
        mine = self.optimizer.state_dict()
        out: dict[str, Any] = {}
        for key, value in mine.items():
            if value.ndim == 2 and value.shape[0] == self.local.shape[0]:
                out[key] = self._gather_rows(value, root)
            else:
                out[key] = value
        if root is not None and self.rank != root:
            return None
        return out

    def load_state_dict(self, state: Any) -> None:
        """Load a whole-table state (from :meth:`consolidated_state_dict` with any number of ranks, or from a
        single-process optimizer over the whole table): this rank takes its rows."""
        mine = {}
        for key in state.keys():
            value = np.asarray(state[key])
            if value.ndim == 2 and value.shape[0] == self.num_rows:
                value = value[self.rank::self.size]
            mine[key] = value
        self.optimizer.load_state_dict(mine)

    def load(self, table: np.ndarray) -> None:
        """Set this rank's rows from the whole table (any rank count wrote it)."""
        table = np.asarray(table)
        if table.shape != (self.num_rows, self.dim):
            raise ValueError(f"For 'ShardedTable', the table must have shape {(self.num_rows, self.dim)}, "
                             f"got {table.shape}")
        self.local[...] = table[self.rank::self.size]

    def _gather_rows(self, rows: np.ndarray, root: int | None) -> np.ndarray | None:
        counts = np.array([len(range(r, self.num_rows, self.size)) for r in range(self.size)], np.int64)
        stacked: np.ndarray | None
        if root is None:
            stacked = _comm.concat_rows(self.comm, np.ascontiguousarray(rows), counts)
        else:
            stacked = _gather_to(self.comm, np.ascontiguousarray(rows), counts, root)
            if stacked is None:
                return None
        out = np.empty((self.num_rows,) + rows.shape[1:], rows.dtype)
        start = 0
        for r in range(self.size):
            out[r::self.size] = stacked[start:start + counts[r]]
            start += counts[r]
        return out


def _alltoallv(comm: Any, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray) -> np.ndarray:
    """All-to-all of rows: ``send_counts[r]`` rows of ``send`` to rank r (in order), ``recv_counts[r]`` rows
    from rank r, received in rank order."""
    inner = int(np.prod(send.shape[1:], dtype=np.int64))
    out = np.empty((int(recv_counts.sum()),) + send.shape[1:], send.dtype)
    if comm.Get_size() == 1:
        out[...] = send
        return out
    s, r = send_counts * inner, recv_counts * inner
    sd = np.concatenate(([0], np.cumsum(s)[:-1]))
    rd = np.concatenate(([0], np.cumsum(r)[:-1]))
    kind = _comm.element_type(send.dtype.itemsize)
    comm.Alltoallv([_comm.as_bytes(send), (s, sd), kind], [_comm.as_bytes(out), (r, rd), kind])
    return out


def _gather_to(comm: Any, rows: np.ndarray, counts: np.ndarray, root: int) -> np.ndarray | None:
    inner = int(np.prod(rows.shape[1:], dtype=np.int64))
    if comm.Get_size() == 1:
        return rows.copy()
    kind = _comm.element_type(rows.dtype.itemsize)
    if comm.Get_rank() != root:
        comm.Gatherv([_comm.as_bytes(rows), kind], None, root=root)
        return None
    out = np.empty((int(counts.sum()),) + rows.shape[1:], rows.dtype)
    sizes = counts * inner
    displs = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    comm.Gatherv([_comm.as_bytes(rows), kind], [_comm.as_bytes(out), (sizes, displs), kind], root=root)
    return out
