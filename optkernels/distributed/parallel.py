"""The parallel optimizer (MindSpore's ``enable_parallel_optimizer``; ZeRO stage 1): what an optimizer built
with ``comm=`` does.

Design (the layering keeps :mod:`optkernels.optimizers` below this package): the base ``Optimizer`` takes
``comm=None``; given a communicator it calls :func:`optkernels.optimizers._parallel.attach`, which builds
a :class:`ParallelOptimizer` through the factory this package installs on import. At construction it
checks that every rank lists the same parameters (a digest of names, shapes and dtypes; a mismatch is a
ValueError on every rank, not a hang) and splits them by bytes (:func:`assign_owners`); the optimizer then
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
from . import _comm
from .reduce import agree

__all__ = ["ParallelOptimizer", "assign_owners"]


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
    """

    def __init__(self, optimizer: Any, comm: Any):
        owner = optimizer._owner
        self.comm = _comm.check_comm(comm, owner)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        plans = optimizer._plans
        described = [owner] + [(p.name, p.shape, p.dtype.str) for p in plans]
        _comm.check_same(comm, _comm.digest(described),
                         f"For '{owner}', the parameter lists (names, shapes, dtypes) differ across ranks; "
                         "every rank must build the optimizer over the same parameters")
        for plan in plans:
            if plan.device != "cpu":
                raise TypeError(f"For '{owner}', the parallel optimizer (comm=) takes NumPy parameters; "
                                f"{plan.name} is a CUDA array")
        self.owners = assign_owners([p.size * p.dtype.itemsize for p in plans], self.size)
        for plan, rank in zip(plans, self.owners):
            plan.owned = rank == self.rank
        self._by_root = [[p for p in plans if self.owners[p.index] == r] for r in range(self.size)]
        # Per root: parameters of at least 1 MiB are broadcast in place, the smaller ones packed together
        # into one buffer (one broadcast for many small tensors, no copies of the large ones).
        self._sends = [([p for p in ps if _in_place(p)], [p for p in ps if not _in_place(p)])
                       for ps in self._by_root]
        self._buffer = np.empty(max([sum(p.size * p.dtype.itemsize for p in small)
                                     for _, small in self._sends] + [0]), np.uint8)

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
                parts.append(total[start:start + a.size].reshape(a.shape))
                start += a.size
            out.append(parts)
        return out

    def all_agree(self, flag: bool) -> bool:
        """The AND of ``flag`` over the ranks (e.g. "all gradients finite": every rank skips together)."""
        return agree(self.comm, flag)

    def consolidated_state_dict(self, optimizer: Any, root: int | None) -> dict | None:
        """Every rank's ``state_dict`` merged on ``root`` (None: on every rank): the state a single-process
        optimizer over the same parameters has, loadable into one (or into a parallel optimizer of any number
        of ranks). Other ranks get None. A collective call."""
        mine = optimizer.state_dict()
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


def _in_place(plan: Any) -> bool:
    return plan.size * plan.dtype.itemsize >= 1 << 20 and plan.param.data.flags.c_contiguous


def _pack(plans: list, buffer: np.ndarray) -> None:
    start = 0
    for p in plans:
        n = p.size * p.dtype.itemsize
        buffer[start:start + n] = np.ascontiguousarray(p.param.data).reshape(-1).view(np.uint8)
        start += n


def _unpack(plans: list, buffer: np.ndarray) -> None:
    start = 0
    for p in plans:
        n = p.size * p.dtype.itemsize
        data = p.param.data
        data[...] = buffer[start:start + n].view(p.dtype).reshape(p.shape)
        start += n


_parallel.install(ParallelOptimizer)
