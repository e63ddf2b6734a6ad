"""The short path of a plain Adam/AdamW step over float16/bfloat16 CPU parameters.

A group of half CPU parameters is updated by one launch per tensor (:meth:`KernelOptimizer._launch_half`:
torch's rounding of every operation, through a :class:`~optkernels.kernels._elementwise.HalfLauncher` kept
in the plan). Once a generic step has built, guarded and launched such a plan, the next steps repeat the
same launches with nothing new to prepare but the step number, the gradients' addresses and torch's tails
(which follow torch's thread count), so they take this short path (:class:`HalfStep`): the plan, the group
and its hyper-parameters compared with the ones it was made for, the state checked as the generic step
checks it (:meth:`KernelOptimizer._state_intact`), one compiled check of every parameter and gradient that
also writes the gradients' addresses (:meth:`._fields.Guard.gradients_into`), then the step counters and
the launches. Every check runs before anything is written; anything else (a closure, AMP's
``found_inf``/``grad_scale``, several groups, a changed hyper-parameter other than a float ``lr``, a tensor
that differs from the plan's, a stochastic-rounding context) takes the generic step, which checks, raises
and routes as it always does. The launches are the generic step's (the same launchers, arrays and
scalars; a bfloat16 tensor of :data:`DENOMINATOR_TABLE_FROM` elements per thread or more is given, in
place of the ``mkl`` scalar that its loop does not use, the path's tables of Adam's denominators, which each
part of the launch fills for the step on its own thread): the same bits.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch

from ..kernels._denominator_table import PartTables, tables_pay
from ..kernels._elementwise import HalfLauncher, _lowp_module
from ..kernels._threading import thread_mask
from ..kernels.torch_rules import PartTablesBuffer, SqrtKernel
from ._base import _bits, _bits_at, _dense, _Plan, _tail_scalars_of
from ._short_path import ShortPath, _plain, gradients_checked, lr_changed, planned_group, unchanged

__all__ = ["HalfStep"]

#: The hyper-parameters an Adam step's scalars and plan were made for (``lr`` is compared apart).
_HYPER = operator.itemgetter(
    "betas",
    "eps",
    "weight_decay",
    "amsgrad",
    "maximize",
    "foreach",
    "capturable",
    "differentiable",
    "fused",
    "decoupled_weight_decay",
)
_MISSING = object()


def _hyper(group: dict) -> Any:
    """:data:`_HYPER` of ``group``, or a marker that equals nothing where one of them is missing."""
    try:
        return _HYPER(group)
    except KeyError:
        return _MISSING


_FLOAT32 = np.dtype(np.float32)

#: A bfloat16 tensor of at least this many elements per thread of the launch (Numba's count) steps with
#: tables of the step's denominators
#: (:meth:`optkernels.torch.Adam._tabled_half_scalars`, the same bits): each part of the launch refills its
#: own table's 32768 positive entries, on its thread, which costs about what reading them saves on
#: this many elements. Never where the processor reads a table slower than it computes the entries
#: (:func:`~optkernels.kernels._denominator_table.tables_pay`: AMD's Zen cores).
DENOMINATOR_TABLE_FROM = 1 << 15 if tables_pay() else 1 << 62


def _plain_hyper(group: dict) -> bool:
    """Every hyper-parameter of :data:`_HYPER` present and plain (:func:`_plain`)."""
    hyper = _hyper(group)
    return hyper is not _MISSING and _plain(hyper)


class HalfStep(ShortPath):
    """The short path (see the module docstring) of an Adam/AdamW optimizer's one group whose plan holds only
    float16/bfloat16 CPU parameters, each launched by a kept :class:`HalfLauncher`. Made by :meth:`of` after
    a generic step; :meth:`run` steps or returns False (nothing written)."""

    __slots__ = (
        "per_group",
        "grads",
        "launches",
        "tabled",
        "largest",
        "table",
        "tails",
        "keys",
    )

    def __init__(self, optimizer: Any, group: dict, plan: _Plan, launches: list):
        assert plan.guard is not None  # (checked by of)
        self.group, self.plan, self.guard, self.launches = group, plan, plan.guard, launches
        self.hyper = _HYPER(group)
        self.lr = group["lr"]
        self.per_group = optimizer._group_scalars(group, _FLOAT32)
        self.grads = np.empty(len(plan.params), np.int64)  # written by the guard's check
        self.tabled = [  # the launches that may step with a table of denominators (not torch's fused step)
            not group.get("fused") and n >= DENOMINATOR_TABLE_FROM and plan.params[k].dtype == torch.bfloat16
            for k, n, _, _ in launches
        ]
        self.largest = max((n for (_, n, _, _), t in zip(launches, self.tabled) if t), default=0)
        self.table = PartTablesBuffer() if self.largest else None  # this path's own tables
        self.tails: list = [None] * len(launches)  # per launch: (torch's thread count, its tail scalars)
        self.keys: dict = {}  # (launcher, what varies) -> (_types_key, its entry point) (see _launch)

    @classmethod
    def of(cls, optimizer: Any) -> HalfStep | None:
        """The short path of ``optimizer``'s next steps, or None where its last step was not a plain step
        of half CPU parameters that the short path repeats."""
        found = planned_group(optimizer, _plain_hyper)
        if found is None:
            return None
        group, plan = found
        if (
            group["capturable"]
            or plan.cpu
            or not plan.single
            or plan.step_now is None
            or plan.steps_np is None
            or optimizer._prestep(group) is not None
        ):
            return None
        launches = []
        own = getattr(plan.key[1][0], "tails", None)  # a kernel with its own tails (torch's fused Adam)
        for k, kind, _arrays, n, _buffer in plan.single:
            kept = plan.half.get(k)
            if kind != "cpu" or kept is None or kept[0] is None or not isinstance(kept[-1], HalfLauncher):
                return None
            tails = own(n, plan.params[k].element_size()) if own is not None else None
            launches.append((k, n, kept, tails))
        if not optimizer._state_intact(plan):
            return None  # the state is not the one the plan was made from
        return cls(optimizer, group, plan, launches)

    def run(self, optimizer: Any) -> bool:
        """One step of the group as the generic step would make it (the same launchers, arrays and scalars),
        or False where anything differs from what the short path was made for (nothing written)."""
        group = self.group
        plan: Any = self.plan  # its step fields are not None: checked by of
        if not unchanged(optimizer, self, _hyper(group)) or _lowp_module().stochastic_stream() is not None:
            return False
        changed = lr_changed(self, group)
        if changed is None:
            return False
        if changed:
            self.per_group = optimizer._group_scalars(group, _FLOAT32)
            self.keys.clear()
        if not optimizer._state_intact(plan):
            optimizer._plans.pop(0, None)  # a state tensor replaced: the generic step plans anew
            return False
        params = group["params"]
        grads = self.grads
        if not gradients_checked(optimizer, plan, params, grads, False):
            return False
        step = plan.step_now + 1
        shared = optimizer._half_step_scalars(group, self.per_group, step)
        own = self.table
        parts = thread_mask()[0]()  # (a launch's parts: its threads)
        least = DENOMINATOR_TABLE_FROM * parts  # (elements a launch reads a table from)
        if own is None or self.largest < least:
            return self._launch(plan, params, grads, shared, None, step, least)
        tabled = optimizer._tabled_half_scalars(group, shared, own, parts)
        held = tabled is not None and type(tabled[-1]) is PartTables  # given back after the launches
        try:
            return self._launch(plan, params, grads, shared, tabled, step, least)
        finally:
            if held:
                own.release()

    def _launch(
        self, plan: Any, params: list, grads: Any, shared: tuple, tabled: Any, step: int, least: int
    ) -> bool:
        """:meth:`run`'s launches with the step's scalars ``shared`` (``tabled`` those of the bfloat16
        tensors of ``least`` elements or more, which read a table, or None), after the step counters are set
        to ``step``; False where a launcher does not fit its arguments (nothing written)."""
        calls = []
        threads = torch.get_num_threads()  # (torch's tails follow it)
        for j, (k, n, kept, tails) in enumerate(self.launches):
            address = int(grads[j])
            seen = kept[2]
            if seen is None or seen[0] != address:  # the gradient's bits, kept while its memory stays
                grad = params[k].grad
                seen = (address, _bits_at(address, n)) if _dense(grad) else (None, _bits(grad))
                if seen[0] is not None:
                    kept[2] = seen
            scalars = tabled if tabled is not None and self.tabled[j] and n >= least else shared
            tail = tails
            if tail is None:
                known = self.tails[j]
                if known is None or known[0] != threads:
                    known = self.tails[j] = (threads, _tail_scalars_of(n, threads))
                tail = known[1]
            args = (*kept[1], seen[1], *scalars, *tail)
            launcher = kept[-1]
            if not launcher.fits(args):
                return False
            keyed = None
            if seen[0] is not None:
                # the types that vary between steps: the gradient's alignment, the quotient's, the mkl
                # scalar's (a SqrtKernel's kernel) and the tails' (by n); the others follow per_group's
                # (keys cleared with it)
                mkl = scalars[-1]
                kind = mkl if type(mkl) is SqrtKernel else type(mkl)
                varies = (launcher, seen[0] & 1, type(scalars[-4]), kind, type(tail[0]))
                keyed = self.keys.get(varies)
                if keyed is None or keyed[1] is None:  # (the entry point, once by_key has found it)
                    key = _types_key(seen[0], scalars, tail) if keyed is None else keyed[0]
                    keyed = self.keys[varies] = (key, launcher.entry_of(key))
            calls.append((launcher, n, args, keyed))
        # nothing is written above this line (run checked that no stochastic-rounding context is active)
        plan.step_now = step
        plan.steps_np.fill(step)  # the state's 'step' tensors are views of it
        for launcher, n, args, keyed in calls:
            if keyed is None:
                launcher(n, *args)
            elif keyed[1] is None:
                launcher.by_key(keyed[0], n, *args)
            else:
                launcher.run_entry(keyed[1], n, args)
        return True


def _types_key(address: int, scalars: tuple, tail: tuple) -> tuple:
    """What the Numba types of a launch's arguments depend on beyond the plan's own arrays (the same
    objects every step): the gradient's bits (:func:`._base._bits_at` of ``address``: 1-D, contiguous,
    writable, aligned where the address is even), the scalars' types and the ``mkl`` scalar's own Numba
    type (a SqrtKernel's is its kernel's), for :meth:`HalfLauncher.by_key`."""
    mkl = scalars[-1]
    return (address & 1, *map(type, scalars), mkl if type(mkl) is SqrtKernel else None, *map(type, tail))
