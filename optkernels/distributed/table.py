"""``ShardedTable``: an embedding table split by rows across the ranks of a communicator, each rank holding
rows ``r`` with ``r % size == rank`` and its optimizer's slots for those rows only.

A step takes each rank's row-sparse gradient, routes every row to its owner (one all-to-all of counts,
then of indices and of values), and runs the rank's optimizer (LazyAdam, Adam, FTRL, ProximalAdagrad,
Adagrad, RowWiseAdagrad: our sparse kernels, with their deterministic duplicate merge) on its rows. The owner receives the
rows of each source rank in rank order, each source's rows in their order, so duplicates are summed in the
order a single process sees them in the concatenated gradient (:func:`reduce_gradients`): the table
equals, bit for bit, the single-process optimizer over the whole table fed that gradient. Rows are dealt
round-robin (not in contiguous ranges) so that the frequent small ids of a Zipf distribution spread over
all ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..optimizers import Optimizer, Parameter
from ..optimizers.loss_scale import all_finite as local_all_finite
from ..optimizers.rowwise_adagrad import RowWiseAdagrad
from ..sparse import RowSparse
from . import _agree, _comm
from . import _nonfinite as nonfinite_mode
from ._fingerprint import config_fields, digest_fields, optimizer_fields, step_fields
from ._rowwise import RowWiseAdapter

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
            takes row-sparse gradients (LazyAdam, Adam, FTRL, ProximalAdagrad, Adagrad, RowWiseAdagrad) or a
            ``functools.partial`` of one with its hyper-parameters.
        dtype: float32 (default) or float64.
        init: None (zeros), or ``init(rows) -> array (len(rows), dim)``: the initial values of the given
            global rows (e.g. from a generator seeded by row, so that any number of ranks starts alike).
        name: the parameter's name (the state's keys: ``"moment1.<name>"``). Default "embedding.table".
        average: divide gradients by the number of ranks (as :func:`reduce_gradients`). Default True.
        nonfinite: what :meth:`step` does with a rank's inf or NaN gradient values (see :attr:`nonfinite`).

    Every rank builds its part, then the ranks compare their tables: the geometry, a fingerprint of
    ``optimizer`` (a class, a ``functools.partial``'s keywords, a lambda's code and captured values) and
    the built optimizer's hyper-parameters.

    Attributes:
        local: this rank's rows, a ``(local_rows, dim)`` array (the optimizer's :class:`Parameter` data).
        rows: the global ids of this rank's rows.
        optimizer: the optimizer of this rank's rows.
        steps: the number of :meth:`step` calls so far (compared across ranks at every step).
        last_nonfinite: the message of the last non-finite gradients found (None: none yet).

    Raises:
        TypeError: arguments of the wrong type; an optimizer that does not take row-sparse gradients.
        ValueError: a non-positive size; the tables differ across ranks (naming the fields and ranks).
        Any rank's error is raised on every rank, naming that rank.
    """

    def __init__(
        self,
        num_rows: int,
        dim: int,
        comm: Any,
        optimizer: Callable[[list], Optimizer],
        *,
        dtype: Any = np.float32,
        init: Callable[[np.ndarray], Any] | None = None,
        name: str = "embedding.table",
        average: bool = True,
        nonfinite: str | None = None,
    ):
        owner = "ShardedTable"
        self.comm = _comm.check_comm(comm, owner)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.steps = 0
        self.last_nonfinite: str | None = None
        self._fingerprint: bytes | None = None
        self.obj = _agree.register(comm, owner)
        error = None
        try:
            self._build(num_rows, dim, optimizer, dtype, init, name, average, nonfinite)
        except Exception as caught:
            error = caught
        _agree.agree(
            comm,
            "construction",
            owner,
            error=error,
            obj=self.obj,
            fields=lambda: {**self._geometry(), "optimizer": optimizer, **optimizer_fields(self.optimizer)},
            what="the tables (geometry, optimizer rule and hyper-parameters)",
        )

    def _build(
        self,
        num_rows: int,
        dim: int,
        optimizer: Callable,
        dtype: Any,
        init: Any,
        name: str,
        average: bool,
        nonfinite: str | None,
    ) -> None:
        owner = "ShardedTable"
        for label, value in (("num_rows", num_rows), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"For '{owner}', '{label}' must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"For '{owner}', '{label}' must be >= 1, got {value}")
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"For '{owner}', 'dtype' must be float32 or float64, got {dtype}")
        self.num_rows, self.dim, self.dtype, self.average = int(num_rows), int(dim), dtype, bool(average)
        self.name = name
        self.rows = np.arange(self.rank, self.num_rows, self.size, dtype=np.int64)
        if init is None:
            data = np.zeros((self.rows.size, self.dim), dtype)
        else:
            data = np.ascontiguousarray(init(self.rows), dtype=dtype)
            if data.shape != (self.rows.size, self.dim):
                raise ValueError(
                    f"For '{owner}', init(rows) must return shape {(self.rows.size, self.dim)}, "
                    f"got {data.shape}"
                )
        self.parameter = Parameter(data, name)
        built = optimizer([self.parameter])
        self.optimizer = RowWiseAdapter(built, self.parameter) if isinstance(built, RowWiseAdagrad) else built
        if not isinstance(self.optimizer, (Optimizer, RowWiseAdapter)) or not self.optimizer._accepts_sparse:
            raise TypeError(
                f"For '{owner}', 'optimizer' must build an optimizer that takes row-sparse "
                f"gradients (LazyAdam, Adam, FTRL, ProximalAdagrad, Adagrad, RowWiseAdagrad), got "
                f"{type(self.optimizer).__name__}"
            )
        self.nonfinite = (
            nonfinite_mode.default_mode(self.optimizer.need_scale) if nonfinite is None else nonfinite
        )

    def _geometry(self) -> dict[str, Any]:
        return {
            "num_rows": self.num_rows,
            "dim": self.dim,
            "dtype": self.dtype.str,
            "name": self.name,
            "average": self.average,
        }

    @property
    def nonfinite(self) -> str:
        """What :meth:`step` does when a rank's gradient holds an inf or a NaN: ``"skip"`` (every rank skips
        the step), ``"raise"`` (FloatingPointError on every rank), ``"warn"`` (applied, with a warning) or
        ``"off"`` (not checked); each names the ranks. Default ``"skip"`` when the optimizer divides by a
        loss scale, else ``"warn"``."""
        return self._nonfinite

    @nonfinite.setter
    def nonfinite(self, mode: str) -> None:
        self._nonfinite = nonfinite_mode.check_mode("ShardedTable", mode)

    @property
    def local(self) -> np.ndarray:
        """This rank's rows (local row ``i`` is global row ``i·size + rank``)."""
        return self.parameter.data

    def fingerprint(self) -> np.ndarray:
        """A digest (32 bytes, as a uint8 array) of the table's configuration: its geometry, its optimizer's
        rule and hyper-parameters (not the number of ranks, not the step counters)."""
        if self._fingerprint is None:
            self._fingerprint = digest_fields({**self._geometry(), **config_fields(self.optimizer)})
        return np.frombuffer(self._fingerprint, np.uint8).copy()

    # ------------------------------------------------------------------------------------ agreement

    def _agree(
        self,
        kind: str,
        error: BaseException | None,
        *,
        finite: bool = True,
        count: int = 0,
        fields: Any = None,
        explain: Any = None,
        what: str = "the tables' states",
    ) -> list[int]:
        return _agree.agree(
            self.comm,
            kind,
            f"ShardedTable.{kind}",
            error=error,
            finite=finite,
            obj=self.obj,
            count=count,
            fields=fields,
            explain=explain,
            what=what,
        )

    def _checked_ids(self, ids: Any, label: str) -> np.ndarray:
        """The ids as int64 (checked on every rank before any collective)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise TypeError(
                f"For 'ShardedTable', '{label}' must be a 1-D integer array, got {ids.dtype} of "
                f"shape {ids.shape}"
            )
        bad = np.flatnonzero((ids < 0) | (ids >= self.num_rows))
        if bad.size:
            raise IndexError(
                f"For 'ShardedTable', '{label}' holds {ids[bad[0]]} at position {bad[0]}, "
                f"outside [0, {self.num_rows})"
            )
        return ids.astype(np.int64, copy=False)

    def _route(self, ids: np.ndarray, payload: np.ndarray | None) -> tuple:
        """Send each id (and its payload row) to its owner; returns what this rank received, in source-rank
        order (each source's items in their order), plus the plan to send answers back."""
        size = self.size
        dest = ids % size
        if size <= 8:  # a stable grouping by owner: a few vectorized passes beat a stable sort
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
        divided by the number of ranks when ``average``); bit for bit. Before anything is sent, the ranks
        compare their step counters and optimizer configurations at this step, and whether their gradients
        are finite (see :attr:`nonfinite`).

        Args:
            gradient: a NumPy :class:`RowSparse` of dense shape ``(num_rows, dim)`` and the table's dtype
                (any number of rows, repeats allowed).

        Returns:
            True, or False when the step was skipped on every rank (non-finite gradients, ``"skip"``).

        Raises:
            TypeError, ValueError, IndexError: on every rank when any rank's gradient is invalid (naming that
                rank), before anything is sent or written; ValueError when the ranks' step counters or
                optimizer configurations differ; FloatingPointError: non-finite gradients under ``"raise"``.
        """
        error, ids, finite = None, None, True
        try:
            if not isinstance(gradient, RowSparse) or not isinstance(gradient.values, np.ndarray):
                raise TypeError(
                    f"For 'ShardedTable', 'gradient' must be a NumPy RowSparse, got {type(gradient).__name__}"
                )
            if tuple(gradient.dense_shape) != (self.num_rows, self.dim):
                raise ValueError(
                    f"For 'ShardedTable', 'gradient' has dense_shape "
                    f"{tuple(gradient.dense_shape)}, the table is {(self.num_rows, self.dim)}"
                )
            if gradient.values.dtype != self.dtype:
                raise TypeError(
                    f"For 'ShardedTable', 'gradient' has dtype {gradient.values.dtype}, the "
                    f"table {self.dtype}"
                )
            ids = self._checked_ids(gradient.indices, "gradient.indices")
            if self._nonfinite != "off":
                finite = local_all_finite(gradient.values)
        except Exception as caught:
            error = caught
        self.steps += 1
        found = self._agree(
            "step",
            error,
            finite=finite,
            count=self.steps,
            fields=lambda: step_fields(self.optimizer, self.fingerprint().tobytes()),
            explain=lambda: step_fields(self.optimizer),
            what="the tables' optimizer configurations at this step",
        )
        assert ids is not None  # _agree raised on every rank if this rank's checks failed
        if found:
            self.last_nonfinite = (
                f"For 'ShardedTable.step', non-finite gradient values at step call "
                f"{self.steps}, produced by rank(s) {found}"
            )
            if not nonfinite_mode.handle(self._nonfinite, self.last_nonfinite):
                return False
        got_ids, values, _ = self._route(ids, np.ascontiguousarray(gradient.values))
        if self.average and self.size > 1:
            np.divide(values, values.dtype.type(self.size), out=values)
        local = RowSparse(got_ids // self.size, values, self.local.shape)
        return self.optimizer.step([local])

    def lookup(self, ids: Any) -> np.ndarray:
        """The rows ``ids`` of the whole table (this rank's ids; every rank may ask for different ones), as a
        new ``(len(ids), dim)`` array. A collective call.

        Raises:
            TypeError, IndexError: on every rank when any rank's ids are invalid (naming that rank).
        """
        error, checked = None, None
        try:
            checked = self._checked_ids(ids, "ids")
        except Exception as caught:
            error = caught
        self._agree("lookup", error)
        assert checked is not None  # _agree raised on every rank if this rank's checks failed
        asked, _, (order, send_counts, recv_counts) = self._route(checked, None)
        answers = np.ascontiguousarray(self.local[asked // self.size])
        back = _alltoallv(self.comm, answers, recv_counts, send_counts)
        out = np.empty((checked.size, self.dim), self.dtype)
        out[order] = back
        return out

    def gather(self, root: int | None = 0) -> np.ndarray | None:
        """The whole table on ``root`` (None: on every rank); None on the other ranks. A collective call."""
        self._agree("gather", self._root_error(root), fields={"root": root})
        return self._gather_rows(self.local, root)

    def _root_error(self, root: Any) -> ValueError | None:
        if root is None or (
            isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < self.size
        ):
            return None
        return ValueError(
            f"For 'ShardedTable', 'root' must be None or a rank in [0, {self.size}), got {root!r}"
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        """This rank's checkpoint: its optimizer state (its rows' slots, keyed as the optimizer's), its rows
        (``"shard.values"``) and what identifies the shard: ``"shard.world_size"``, ``"shard.rank"``,
        ``"shard.num_rows"``, ``"shard.row_ids"`` (the global rows it holds), ``"shard.fingerprint"``
        (:meth:`fingerprint`). Loads back into the same rank (:meth:`load_state_dict`), or, with the other
        ranks' files, into a table of any number of ranks. Not a collective call."""
        out = self.optimizer.state_dict()
        out.update(
            {
                "shard.world_size": np.array(self.size, np.int64),
                "shard.rank": np.array(self.rank, np.int64),
                "shard.num_rows": np.array(self.num_rows, np.int64),
                "shard.row_ids": self.rows.copy(),
                "shard.fingerprint": self.fingerprint(),
                "shard.values": self.local.copy(),
            }
        )
        return out

    def consolidated_state_dict(self, root: int | None = 0) -> dict[str, np.ndarray] | None:
        """The optimizer state of the whole table on ``root`` (None: every rank): what a single-process
        optimizer over the whole table (a Parameter of the same name) has; None on the other ranks."""
        self._agree("consolidated_state_dict", self._root_error(root), fields={"root": root})
        mine = self.optimizer.state_dict()
        out: dict[str, Any] = {}
        for key, value in mine.items():
            if self._by_row(key, value) and value.shape[0] == self.local.shape[0]:
                out[key] = self._gather_rows(value, root)
            else:
                out[key] = value
        if root is not None and self.rank != root:
            return None
        return out

    def load_state_dict(self, state: Any, *, strict: bool = True) -> None:
        """Load optimizer state (and, from shard checkpoints, the rows) on every rank. A collective call.

        ``state`` is one of:

        * a whole-table state (:meth:`consolidated_state_dict` of any number of ranks, or a single-process
          optimizer's ``state_dict`` over the whole table): this rank takes its rows' slots;
        * this rank's own checkpoint (:meth:`state_dict`): it must come from the same rank of the same number
          of ranks;
        * the checkpoints of every rank of a run at any number of ranks, as a list (resharding): the rows and
          slots are reassembled by their global ids and this rank takes its own; a continued run is
          bit-for-bit the run that was never sharded differently.

        Args:
            state: a mapping (a dict, ``np.load``'s NpzFile) or a list of them (see above).
            strict: compare the checkpoints' configuration fingerprint (geometry, optimizer rule and
                hyper-parameters) with this table's. Default True; False lets a run resume with other
                hyper-parameters (the geometry is still checked).

        Raises:
            ValueError: a shard written by another rank or at another number of ranks (given alone), an
                incomplete or inconsistent set of shards, another geometry or configuration; TypeError,
                KeyError: from the optimizer's checks. On every rank when any rank's check fails, before
                any rank writes anything; ValueError when the loaded step counters differ across ranks.
        """
        error, arrays, values = None, None, None
        try:
            mine, values = self._own_state(state, strict)
            arrays = self.optimizer._checked_state(mine)
        except Exception as caught:
            error = caught

        def fields() -> dict:
            assert arrays is not None  # _agree calls fields only when this rank's checks passed
            return {
                f"loaded {k}": np.asarray(v) for k, v in arrays.items() if "." not in k and np.size(v) <= 8
            }

        self._agree(
            "load_state_dict",
            error,
            fields=fields,
            what="the loaded states (step counters, per-step scalars)",
        )
        self.optimizer._write_state(arrays)
        if values is not None:
            self.local[...] = values

    def _own_state(self, state: Any, strict: bool) -> tuple[dict, np.ndarray | None]:
        """This rank's optimizer state and rows (None: not in ``state``) from what load_state_dict takes."""
        owner = "ShardedTable"
        if isinstance(state, (list, tuple)):
            whole = self._reassembled([_shard(owner, s) for s in state], strict)
        elif hasattr(state, "keys") and "shard.rank" in state.keys():
            shard = _shard(owner, state)
            size, rank = int(shard["shard.world_size"]), int(shard["shard.rank"])
            if (size, rank) != (self.size, self.rank):
                raise ValueError(
                    f"For '{owner}', the checkpoint holds the shard of rank {rank} of {size}; "
                    f"this is rank {self.rank} of {self.size}: load every rank's checkpoint as "
                    "a list to reshard, or give each rank its own file"
                )
            self._check_shard(shard, strict)
            return {k: v for k, v in shard.items() if not k.startswith("shard.")}, shard["shard.values"]
        elif hasattr(state, "keys"):
            whole = {key: np.asarray(state[key]) for key in state.keys()}
        else:
            raise TypeError(
                f"For '{owner}', load_state_dict needs a mapping or a list of per-rank "
                f"checkpoints, got {type(state).__name__}"
            )
        mine = {}
        for key, value in whole.items():
            if self._by_row(key, value) and value.shape[0] == self.num_rows:
                value = value[self.rank :: self.size]
            mine[key] = value
        values = mine.pop("shard.values", None)
        return mine, values

    def _by_row(self, key: str, value: np.ndarray) -> bool:
        """Whether a state entry holds one value (or row) per table row: 2-D slots, and the 1-D per-row
        state an optimizer names (RowWiseAdagrad's ``sum``)."""
        return value.ndim == 2 or (value.ndim == 1 and key in getattr(self.optimizer, "row_state_keys", ()))

    def _check_shard(self, shard: dict, strict: bool) -> None:
        owner = "ShardedTable"
        if int(shard["shard.num_rows"]) != self.num_rows:
            raise ValueError(
                f"For '{owner}', the checkpoint is of a table of "
                f"{int(shard['shard.num_rows'])} rows, this one has {self.num_rows}"
            )
        if shard["shard.values"].shape[1:] != (self.dim,):
            raise ValueError(
                f"For '{owner}', the checkpoint's rows have shape "
                f"{shard['shard.values'].shape[1:]}, this table's ({self.dim},)"
            )
        if strict and shard["shard.fingerprint"].tobytes() != self.fingerprint().tobytes():
            raise ValueError(
                f"For '{owner}', the checkpoint's configuration fingerprint differs from this "
                "table's (another optimizer rule, hyper-parameters or geometry); pass "
                "strict=False to resume with other hyper-parameters"
            )

    def _reassembled(self, shards: list[dict], strict: bool) -> dict[str, np.ndarray]:
        """The whole-table state from every rank's checkpoint (any number of ranks)."""
        owner = "ShardedTable"
        if not shards:
            raise ValueError(f"For '{owner}', the list of checkpoints is empty")
        size = int(shards[0]["shard.world_size"])
        ranks = sorted(int(s["shard.rank"]) for s in shards)
        if any(int(s["shard.world_size"]) != size for s in shards) or ranks != list(range(size)):
            every = sorted({int(s["shard.world_size"]) for s in shards})
            raise ValueError(
                f"For '{owner}', the checkpoints must be those of every rank of one run: got "
                f"ranks {ranks} of world sizes {every}"
            )
        keys = set(shards[0])
        whole: dict[str, np.ndarray] = {}
        for shard in shards:
            self._check_shard(shard, strict)
            if set(shard) != keys:
                raise ValueError(
                    f"For '{owner}', the checkpoints hold different entries: {sorted(keys ^ set(shard))}"
                )
            ids = shard["shard.row_ids"]
            for key, value in shard.items():
                if key in ("shard.row_ids", "shard.rank", "shard.fingerprint"):
                    continue
                if self._by_row(key, value) and value.shape[0] == ids.size:
                    if key not in whole:
                        whole[key] = np.zeros((self.num_rows,) + value.shape[1:], value.dtype)
                    whole[key][ids] = value
                elif key not in whole:
                    whole[key] = value
                elif whole[key].tobytes() != value.tobytes():
                    raise ValueError(f"For '{owner}', the checkpoints' {key!r} differ across their ranks")
        for key in ("shard.world_size", "shard.num_rows"):
            whole.pop(key, None)
        return whole

    def load(self, table: np.ndarray) -> None:
        """Set this rank's rows from the whole table (any rank count wrote it). A collective call."""
        table = np.asarray(table)
        error = None
        if table.shape != (self.num_rows, self.dim):
            error = ValueError(
                f"For 'ShardedTable', the table must have shape {(self.num_rows, self.dim)}, "
                f"got {table.shape}"
            )
        self._agree("load", error)
        self.local[...] = table[self.rank :: self.size]

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
            out[r :: self.size] = stacked[start : start + counts[r]]
            start += counts[r]
        return out


def _shard(owner: str, state: Any) -> dict[str, np.ndarray]:
    """One rank's checkpoint as a dict of arrays, with every ``shard.*`` entry present."""
    if not hasattr(state, "keys"):
        raise TypeError(f"For '{owner}', a checkpoint must be a mapping, got {type(state).__name__}")
    out = {key: np.asarray(state[key]) for key in state.keys()}
    missing = [k for k in _SHARD_KEYS if k not in out]
    if missing:
        raise KeyError(
            f"For '{owner}', the checkpoint has no {missing[0]!r}: not a ShardedTable.state_dict()"
        )
    return out


_SHARD_KEYS = (
    "shard.world_size",
    "shard.rank",
    "shard.num_rows",
    "shard.row_ids",
    "shard.fingerprint",
    "shard.values",
)


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
