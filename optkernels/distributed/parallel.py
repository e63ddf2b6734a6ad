"""The parallel optimizer (MindSpore's ``enable_parallel_optimizer``; ZeRO stage 1): what an optimizer built
with ``comm=`` does.

Design (the layering keeps :mod:`optkernels.optimizers` below this package): the base ``Optimizer`` takes
``comm=None``; given a communicator it calls :func:`optkernels.optimizers._parallel.attach`, which builds
a :class:`ParallelOptimizer` through the factory this package installs on import. At construction the
ranks compare their parameters (names, shapes, dtypes) and configurations (:mod:`._agree`: a mismatch is
a ValueError on every rank, not a hang) and split the parameters by bytes (:func:`assign_owners`); every
step, ``load_state_dict`` and ``consolidated_state_dict`` first agrees across ranks the same way (a rank's
error raised on all; counters, configuration and non-finite gradients compared); the optimizer then
creates slots only for its own parameters and updates only those (the same kernels, scalars and bits as
one process), and its ``broadcast_params`` (called by ``step``) sends each root's updated parameters to
every rank, root by root in rank order (large parameters in place, small ones packed into one
broadcast). Every rank needs the same, already reduced
gradients (:func:`~optkernels.distributed.reduce_gradients`); the gradients of the parameters it does not
own are checked and not read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..optimizers import _parallel
from ..optimizers.loss_scale import all_finite as local_all_finite
from . import _agree, _comm, _nonfinite
from ._fingerprint import config_fields, digest_fields, optimizer_fields, small_scalar_state, step_fields
from .reduce import origin

__all__ = ["ParallelOptimizer", "assign_owners", "set_nonfinite"]

_SHARE = "share."  # the keys a rank's state_dict() adds to say whose share it is


def assign_owners(nbytes: list[int], size: int) -> list[int]:
    """The rank that owns each parameter: balanced bytes, the same on every run and every rank.

    Largest first (ties: the earlier parameter), each to the rank holding the fewest bytes so far (ties:
    the fewest parameters, then the lower rank): with at least as many parameters as ranks, every rank owns
    one, and no rank holds more than the average plus the largest parameter.

    Args:
        nbytes: the size in bytes of each parameter, in the optimizer's order.
        size: the number of ranks.
    """
    load = [(0, 0, r) for r in range(size)]
    owners = [0] * len(nbytes)
    for k in sorted(range(len(nbytes)), key=lambda k: (-nbytes[k], k)):
        best = min(load)
        owners[k] = best[2]
        load[best[2]] = (best[0] + nbytes[k], best[1] + 1, best[2])
    return owners


class ParallelOptimizer:
    """The per-optimizer state of the parallel optimizer (see the module docstring).

    Attributes:
        comm: the communicator. rank, size: this rank and the number of ranks.
        owners: the owning rank of each parameter, in the optimizer's order.
        steps: the number of ``step`` calls so far (compared across ranks at every step).
        last_nonfinite: the message of the last non-finite gradients found (None: none yet).
    """

    def __init__(self, optimizer: Any, comm: Any):
        owner = optimizer._owner
        self.comm = _comm.check_comm(comm, owner)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.steps = 0
        self.last_nonfinite: str | None = None
        self._nonfinite: str | None = None
        self._config_digest: tuple[bytes, bool] | None = None
        self._owner = owner
        plans = optimizer._plans
        error = next(
            (
                TypeError(
                    f"For '{owner}', the parallel optimizer (comm=) takes NumPy parameters; "
                    f"{plan.name} is a CUDA array"
                )
                for plan in plans
                if plan.device != "cpu"
            ),
            None,
        )
        self.obj = _agree.register(comm, owner)
        _agree.agree(
            comm,
            "construction",
            owner,
            error=error,
            obj=self.obj,
            fields=lambda: {
                "parameters (names, shapes, dtypes)": _comm.digest(
                    [(p.name, p.shape, p.dtype.str) for p in plans]
                ),
                **optimizer_fields(optimizer),
            },
            what="the optimizers (parameter lists, hyper-parameters)",
        )
        self.owners = assign_owners([p.size * p.dtype.itemsize for p in plans], self.size)
        for plan, rank in zip(plans, self.owners):
            plan.owned = rank == self.rank
        self._by_root = [[p for p in plans if self.owners[p.index] == r] for r in range(self.size)]
        # Per root: parameters of at least 1 MiB are broadcast in place, the smaller ones packed together
        # into one buffer (one broadcast for many small tensors, no copies of the large ones).
        self._sends = [
            ([p for p in ps if _in_place(p)], [p for p in ps if not _in_place(p)]) for ps in self._by_root
        ]
        self._buffer = np.empty(
            max([sum(p.size * p.dtype.itemsize for p in small) for _, small in self._sends] + [0]), np.uint8
        )

    @property
    def nonfinite(self) -> str:
        """What :meth:`agreed_step` does when a rank finds a non-finite gradient among those it owns:
        ``"skip"``, ``"raise"``, ``"warn"`` or ``"off"`` (:mod:`._nonfinite`). Default ``"skip"`` when the
        optimizer divides by a loss scale (MindSpore's overflow rule), else ``"warn"``."""
        return self._nonfinite or "warn"

    @nonfinite.setter
    def nonfinite(self, mode: str) -> None:
        self._nonfinite = _nonfinite.check_mode(self._owner, mode)

    def agreed_step(self, optimizer: Any, gradients: Any) -> tuple[list, bool] | None:
        """The start of a parallel step (called by ``Optimizer.step``, a collective call): every rank
        validates its gradients and checks those of its own parameters for infs and NaNs, then one record
        exchange compares the outcome, the step counters and the configuration (hyper-parameters, the
        learning rates and weight decays at this step, the per-step scalars) across ranks.

        Returns:
            The validated gradients and whether they are plain (the step goes on), or None: the step is
            skipped on every rank (non-finite gradients under ``nonfinite="skip"``).

        Raises:
            The first failing rank's error, on every rank (naming that rank); ValueError when the counters or
            the configurations differ; RuntimeError when a rank is in another call; FloatingPointError on
            non-finite gradients under ``nonfinite="raise"``. Nothing is written before.
        """
        if self._nonfinite is None:
            self._nonfinite = _nonfinite.default_mode(optimizer.need_scale)
        error, checked, finite = None, None, True
        try:
            checked = optimizer._validated(gradients)
            if self._nonfinite != "off":
                finite = local_all_finite([checked[0][p.index] for p in optimizer._local_plans])
        except Exception as caught:
            error = caught
        self.steps += 1
        where = f"{self._owner}.step"
        found = _agree.agree(
            self.comm,
            "step",
            where,
            error=error,
            finite=finite,
            obj=self.obj,
            count=self.steps,
            fields=lambda: step_fields(optimizer, *self._config(optimizer)),
            explain=lambda: step_fields(optimizer),
            what="the optimizers' configurations at this step",
        )
        assert checked is not None  # agree raised on every rank if this rank's checks failed
        if found:
            names = self.comm.allgather(
                None
                if finite
                else [p.name for p in optimizer._local_plans if not local_all_finite(checked[0][p.index])]
            )
            bad = [n for r in found for n in names[r]]
            self.last_nonfinite = (
                f"For '{where}', non-finite gradients at step call {self.steps}: {bad} "
                f"({origin(self.comm, found)})"
            )
            if not _nonfinite.handle(self._nonfinite, self.last_nonfinite):
                return None
        return checked

    def _config(self, optimizer: Any) -> tuple[bytes, bool]:
        """The digest of the optimizer's configuration (:func:`config_fields`) and whether its per-step
        scalars are small enough to compare every step; computed on the first step (after the subclass set
        its hyper-parameters) and kept."""
        if self._config_digest is None:
            self._config_digest = (digest_fields(config_fields(optimizer)), small_scalar_state(optimizer))
        return self._config_digest

    def load_state(self, optimizer: Any, state: Any) -> None:
        """``optimizer.load_state_dict(state)`` as a collective call: every rank checks its state, then one
        record exchange compares the outcome and what was loaded (step counters, per-step scalars) with the
        configurations; only then does every rank write.

        Raises:
            The first failing rank's error, on every rank (naming it); ValueError when the loaded counters
            or scalars, or the configurations, differ across ranks. Nothing is written anywhere then.
        """
        error, arrays = None, None
        try:
            arrays = optimizer._checked_state(self._own_share(optimizer, state))
        except Exception as caught:
            error = caught

        def fields() -> dict:
            assert arrays is not None  # agree calls fields only when this rank's checks passed
            loaded = {
                f"loaded {k}": np.asarray(v) for k, v in arrays.items() if "." not in k and np.size(v) <= 8
            }
            return {**loaded, **optimizer_fields(optimizer)}

        _agree.agree(
            self.comm,
            "load_state_dict",
            f"{self._owner}.load_state_dict",
            error=error,
            obj=self.obj,
            fields=fields,
            what="the loaded states (step counters, per-step scalars) or the optimizers' configurations",
        )
        optimizer._write_state(arrays)

    def share_metadata(self, optimizer: Any) -> dict[str, np.ndarray]:
        """What a rank's ``state_dict`` carries to say whose share it is: ``"share.world_size"``,
        ``"share.rank"`` and ``"share.fingerprint"`` (a digest of the optimizer's configuration: rule,
        hyper-parameters, not the counters)."""
        return {
            "share.world_size": np.array(self.size, np.int64),
            "share.rank": np.array(self.rank, np.int64),
            "share.fingerprint": np.frombuffer(self._config(optimizer)[0], np.uint8).copy(),
        }

    def _own_share(self, optimizer: Any, state: Any) -> Any:
        """The state to load (a whole state, the subset this rank checks) from what ``load_state_dict``
        takes: a whole state; this rank's own share (``state_dict()`` of the same rank and world size); or
        every rank's shares as a list, from any world size (merged: each parameter's slots from its owner)."""
        owner = self._owner
        if isinstance(state, (list, tuple)):
            shares = [self._checked_share(optimizer, s) for s in state]
            ranks = sorted(int(s["share.rank"]) for s in shares)
            sizes = {int(s["share.world_size"]) for s in shares}
            if len(sizes) != 1 or ranks != list(range(sizes.pop())):
                every = sorted({int(s["share.world_size"]) for s in shares})
                raise ValueError(
                    f"For '{owner}', the shares must be those of every rank of one run: got "
                    f"ranks {ranks} of world sizes {every}"
                )
            merged: dict[str, np.ndarray] = {}
            for share in shares:
                for key, value in share.items():
                    if key.startswith(_SHARE):
                        continue
                    if key in merged and merged[key].tobytes() != value.tobytes():
                        raise ValueError(f"For '{owner}', the shares' {key!r} differ across their ranks")
                    merged.setdefault(key, value)
            return merged
        if hasattr(state, "keys") and "share.rank" in state.keys():
            share = self._checked_share(optimizer, state)
            size, rank = int(share["share.world_size"]), int(share["share.rank"])
            if (size, rank) != (self.size, self.rank):
                raise ValueError(
                    f"For '{owner}', the state is the share of rank {rank} of {size}; this is "
                    f"rank {self.rank} of {self.size}: load every rank's share as a list to "
                    "reshard, or give each rank its own file"
                )
            return {k: v for k, v in share.items() if not k.startswith(_SHARE)}
        return state

    def _checked_share(self, optimizer: Any, state: Any) -> dict[str, np.ndarray]:
        owner = self._owner
        if (
            not hasattr(state, "keys")
            or "share.rank" not in state.keys()
            or "share.world_size" not in state.keys()
        ):
            raise TypeError(
                f"For '{owner}', a share must be a mapping from a parallel optimizer's "
                f"state_dict() (with 'share.rank' and 'share.world_size'), got "
                f"{type(state).__name__}"
            )
        share = {key: np.asarray(state[key]) for key in state.keys()}
        mine = self.share_metadata(optimizer)["share.fingerprint"]
        if "share.fingerprint" in share and share["share.fingerprint"].tobytes() != mine.tobytes():
            raise ValueError(
                f"For '{owner}', the share's configuration fingerprint differs from this "
                "optimizer's (another rule or hyper-parameters); drop its 'share.fingerprint' "
                "entry to load it anyway"
            )
        return share

    def shard_bytes(self, rank: int | None = None) -> int:
        """The bytes of parameters owned by ``rank`` (default: this rank)."""
        rank = self.rank if rank is None else rank
        return sum(p.size * p.dtype.itemsize for p in self._by_root[rank])

    def broadcast_params(self, optimizer: Any) -> None:
        """Each rank's updated parameters to every rank: for root = 0 .. P−1 in order, the root's parameters
        of 1 MiB or more broadcast in place, then one broadcast of its smaller ones packed together."""
        if self.size == 1:
            return
        comm = self.comm
        for root, (large, small) in enumerate(self._sends):
            for p in large:
                comm.Bcast(_comm.as_bytes(p.param.data), root=root)
            if not small:
                continue
            total = sum(p.size * p.dtype.itemsize for p in small)
            buffer = self._buffer[:total]
            if root == self.rank:
                _pack(small, buffer)
            comm.Bcast(buffer, root=root)
            if root != self.rank:
                _unpack(small, buffer)

    def average_groups(self, groups: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        """The arrays of each group averaged over the ranks, one fused all-reduce per group (THOR's
        statistics, grouped by ``split_indices``): the sum in rank order divided by the number of ranks, as
        :func:`~optkernels.distributed.reduce_gradients` computes it; the same bits on every rank. Every
        array of a group must share one dtype."""
        out: list[list[np.ndarray]] = []
        for arrays in groups:
            if not arrays:
                out.append([])
                continue
            flat = np.concatenate([np.ascontiguousarray(a).reshape(-1) for a in arrays])
            total = _comm.ordered_sum(self.comm, flat, average=True)
            parts, start = [], 0
            for a in arrays:
                parts.append(total[start : start + a.size].reshape(a.shape))
                start += a.size
            out.append(parts)
        return out

    def all_agree(self, flag: bool) -> bool:
        """The AND of ``flag`` over the ranks (e.g. "all gradients finite": every rank skips together); a
        False is recorded in :attr:`last_nonfinite` with the ranks that produced it."""
        found = _agree.agree(
            self.comm, "flag", f"{self._owner} (a flag over the ranks)", finite=bool(flag), obj=self.obj
        )
        if found:
            self.last_nonfinite = (
                f"For '{self._owner}', a False flag on ranks {found} ({origin(self.comm, found)})"
            )
        return not found

    def consolidated_state_dict(self, optimizer: Any, root: int | None) -> dict | None:
        """Every rank's ``state_dict`` merged on ``root`` (None: on every rank): the state a single-process
        optimizer over the same parameters has, loadable into one (or into a parallel optimizer of any number
        of ranks). Other ranks get None. A collective call."""
        error = None
        if root is not None and (
            isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.size
        ):
            error = ValueError(
                f"For '{self._owner}', 'root' must be None or a rank in [0, {self.size}), got {root!r}"
            )
        _agree.agree(
            self.comm,
            "consolidated_state_dict",
            f"{self._owner}.consolidated_state_dict",
            error=error,
            obj=self.obj,
            fields={"root": root},
        )
        mine = {k: v for k, v in optimizer.state_dict().items() if not k.startswith(_SHARE)}
        if self.size == 1:
            return mine
        states = self.comm.allgather(mine) if root is None else self.comm.gather(mine, root=root)
        if states is None:
            return None
        order = {p.name: p.index for p in optimizer._plans}
        merged = dict(states[0])
        for state in states[1:]:
            for key, value in state.items():
                if key not in merged:
                    merged[key] = value
        slots: dict[str, int] = {}
        for key in merged:
            slot, _, name = key.partition(".")
            if name in order:
                slots.setdefault(slot, len(slots))

        def rank_key(key: str) -> tuple:
            slot, _, name = key.partition(".")
            if name in order:
                return (1, slots[slot], order[name])
            return (0 if key == "global_step" else 2, 0, 0)

        return {key: merged[key] for key in sorted(merged, key=rank_key)}


def set_nonfinite(target: Any, mode: str) -> None:
    """What a parallel optimizer (built with ``comm=``; or LARS around one) or a :class:`ShardedTable` does
    when a rank finds a non-finite gradient before a step: ``"skip"`` the step on every rank, ``"raise"``
    FloatingPointError on every rank, ``"warn"`` and apply it, or ``"off"`` (no check). Each names the ranks
    that produced the infs or NaNs.

    Args:
        target: the optimizer or the table.
        mode: one of ``"skip"``, ``"raise"``, ``"warn"``, ``"off"``.

    Raises:
        TypeError: ``target`` is not a parallel optimizer or a table; ``mode`` not a str.
        ValueError: an unknown mode.
    """
    hook = getattr(getattr(target, "opt", target), "_parallel", None)
    if hook is None and not hasattr(target, "nonfinite"):
        raise TypeError(
            f"For 'set_nonfinite', 'target' must be an optimizer built with comm= or a "
            f"ShardedTable, got {type(target).__name__}"
        )
    (hook or target).nonfinite = mode


def _in_place(plan: Any) -> bool:
    return plan.size * plan.dtype.itemsize >= 1 << 20 and plan.param.data.flags.c_contiguous


def _pack(plans: list, buffer: np.ndarray) -> None:
    start = 0
    for p in plans:
        n = p.size * p.dtype.itemsize
        buffer[start : start + n] = np.ascontiguousarray(p.param.data).reshape(-1).view(np.uint8)
        start += n


def _unpack(plans: list, buffer: np.ndarray) -> None:
    start = 0
    for p in plans:
        n = p.size * p.dtype.itemsize
        data = p.param.data
        data[...] = buffer[start : start + n].view(p.dtype).reshape(p.shape)
        start += n


_parallel.install(ParallelOptimizer)
