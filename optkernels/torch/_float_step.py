"""The short path of a plain Adam/AdamW step over float32 or float64 CPU parameters.

A group of float32 (or float64) CPU parameters is updated by one multi-tensor launch over a launch table
(:meth:`KernelOptimizer._dense_step`: the parameters' and state tensors' addresses in its rows, the
gradients' refilled each step). Once a generic step has built, guarded and launched such a plan, the next
steps have nothing new to prepare but the step number and the gradients' addresses, so they take this short
path (:class:`FloatStep`): the plan, the group and its hyper-parameters compared with the ones it was made
for, one compiled check of every parameter, gradient and state tensor (:meth:`._fields.Guard.gradients_into`
while the guard watches the plan's state, else :meth:`KernelOptimizer._state_intact` first) that also writes
the gradients' addresses into the table's last row, then the step counters and the kernel's chunked entry,
as :meth:`~optkernels.kernels._elementwise.Elementwise.launch_many` calls it (no new compilation). Every
check runs before anything is written; anything else (a closure, AMP's ``found_inf``/``grad_scale``,
several groups, a changed hyper-parameter other than a float ``lr``, a tensor that differs from the plan's)
takes the generic step, which checks, raises and routes as it always does. The kernel, table and scalars
(the optimizer's ``_step_scalars`` of the step) are the generic step's: the same
bits.
"""

from __future__ import annotations

from typing import Any

from ..kernels._elementwise import PREFETCH_PART, SERIAL_BELOW
from ..kernels._threading import thread_mask
from ._base import _Plan
from ._half_step import _HYPER, _hyper, _plain_hyper
from ._short_path import ShortPath, gradients_checked, launch_table, lr_changed, planned_group, unchanged

__all__ = ["FloatStep"]


class FloatStep(ShortPath):
    """The short path (see the module docstring) of an Adam/AdamW optimizer's one group whose plan is one
    launch table of float32 or float64 CPU parameters, guarded. Made by :meth:`of` after a generic step;
    :meth:`run` steps or returns False (nothing written)."""

    __slots__ = (
        "dtype",
        "per_group",
        "tensors",
        "grads",
        "entry",
        "large",
        "threads",
    )

    def __init__(self, optimizer: Any, group: dict, plan: _Plan):
        dtype, _, tensors, _ = plan.cpu[0]
        assert plan.guard is not None  # (checked by of)
        self.group, self.plan, self.guard, self.tensors, self.dtype = group, plan, plan.guard, tensors, dtype
        self.hyper = _HYPER(group)
        self.lr = group["lr"]
        self.per_group = optimizer._group_scalars(group, dtype)
        self.grads = tensors.addresses[-1]  # the gradient row, written by the guard's check
        # the entry launch_many calls (without a prologue): already compiled by the generic step
        kernel = plan.key[1][0]
        self.entry = kernel.many_chunked(tensors.addresses.shape[0])
        # its prefetching entry where a part can be large enough for it (compiled on its first launch)
        large = kernel.prefetch_large and tensors.total >= PREFETCH_PART
        self.large = kernel.many_chunked(tensors.addresses.shape[0], prefetch=True) if large else None
        # what reads the calling thread's Numba thread count, where the list is large enough to run on all
        # of them (else None: _SerialBelow sets the count to one for the launch)
        self.threads = thread_mask()[0] if tensors.total >= SERIAL_BELOW else None

    @classmethod
    def of(cls, optimizer: Any) -> FloatStep | None:
        """The short path of ``optimizer``'s next steps, or None where its last step was not a plain step
        of one launch table of float CPU parameters that the short path repeats."""
        found = planned_group(optimizer, _plain_hyper)
        if found is None:
            return None
        group, plan = found
        if (
            group["capturable"]
            or len(plan.cpu) != 1
            or plan.single
            or plan.step_now is None
            or plan.steps_np is None
            or not plan.key[1][0].chunked_many
            or optimizer._prestep(group) is not None
        ):
            return None
        if not optimizer._state_intact(plan):
            return None  # the state is not the one the table was made from
        return cls(optimizer, group, plan)

    def run(self, optimizer: Any) -> bool:
        """One step of the group as the generic step would make it (the same kernel, table and scalars), or
        False where anything differs from what the short path was made for (nothing written)."""
        group = self.group
        plan: Any = self.plan  # its step fields are not None: checked by of
        if not unchanged(optimizer, self, _hyper(group)):
            return False
        changed = lr_changed(self, group)
        if changed is None:
            return False
        if changed:
            self.per_group = optimizer._group_scalars(group, self.dtype)
        guard = self.guard
        # the guard's check covers the state where it watches the plan's watch of this state dict
        watched = guard.watching is plan.watch is not None and optimizer.state is plan.watch.state
        if not watched and not optimizer._state_intact(plan):
            optimizer._plans.pop(0, None)  # its state rows are stale: the generic step plans anew
            return False
        if not gradients_checked(optimizer, plan, group["params"], self.grads, watched):
            return False
        step = plan.step_now + 1
        scalars = optimizer._step_scalars(group, self.per_group, step)
        # nothing is written above this line but the table's gradient row (refilled at every launch)
        plan.step_now = step
        plan.steps_np.fill(step)  # the state's 'step' tensors are views of it
        launch_table(self.entry, self.tensors, self.threads, scalars, self.large)
        return True
