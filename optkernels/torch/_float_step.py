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
(:func:`~optkernels.kernels.torch_rules.adam_step_scalars` of the step) are the generic step's: the same
bits.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from ..kernels._elementwise import SERIAL_BELOW, _SerialBelow
from ..kernels._threading import parallel_allowed, parallel_launch, thread_mask
from ..kernels.torch_rules import adam_step_scalars
from ._base import _Plan
from ._half_step import _HYPER, _MISSING, _hyper, _plain

__all__ = ["FloatStep"]


class FloatStep:
    """The short path (see the module docstring) of an Adam/AdamW optimizer's one group whose plan is one
    launch table of float32 or float64 CPU parameters, guarded. Made by :meth:`of` after a generic step;
    :meth:`run` steps or returns False (nothing written)."""

    __slots__ = (
        "group",
        "plan",
        "guard",
        "hyper",
        "lr",
        "dtype",
        "per_group",
        "tensors",
        "grads",
        "entry",
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
        self.entry = plan.key[1][0].many_chunked(tensors.addresses.shape[0])
        # what reads the calling thread's Numba thread count, where the list is large enough to run on all
        # of them (else None: _SerialBelow sets the count to one for the launch)
        self.threads = thread_mask()[0] if tensors.total >= SERIAL_BELOW else None

    @classmethod
    def of(cls, optimizer: Any) -> FloatStep | None:
        """The short path of ``optimizer``'s next steps, or None where its last step was not a plain step
        of one launch table of float CPU parameters that the short path repeats."""
        groups = optimizer.param_groups
        if len(groups) != 1:
            return None
        group = groups[0]
        plan = optimizer._plans.get(0)
        if (
            plan is None
            or plan is optimizer._fast_refused
            or type(group["lr"]) is not float
            or _hyper(group) is _MISSING
            or not _plain(_HYPER(group))
            or group["differentiable"]
            or group["capturable"]
            or not plan.whole
            or plan.guard is None
            or len(plan.cpu) != 1
            or plan.single
            or plan.copies
            or plan.step_now is None
            or plan.steps_np is None
            or plan.key[1] != optimizer._kernel(group)
            or not plan.key[1][0].chunked_many
            or plan.key[0] != tuple(map(id, group["params"]))
            or optimizer._prestep(group) is not None
        ):
            return None
        if not optimizer._state_intact(plan):
            return None  # the state is not the one the table was made from
        return cls(optimizer, group, plan)

    def run(self, optimizer: Any) -> bool:
        """One step of the group as the generic step would make it (the same kernel, table and scalars), or
        False where anything differs from what the short path was made for (nothing written)."""
        group, plan = self.group, self.plan
        attributes = optimizer.__dict__
        if (
            optimizer._plans.get(0) is not plan
            or len(optimizer.param_groups) != 1
            or optimizer.param_groups[0] is not group
            or "found_inf" in attributes
            or "grad_scale" in attributes
            or _hyper(group) != self.hyper
        ):
            return False
        lr = group["lr"]
        if lr is not self.lr:
            if type(lr) is not float or not lr >= 0.0:
                return False  # the generic step's checks judge it
            if lr != self.lr:
                self.per_group = optimizer._group_scalars(group, self.dtype)
            self.lr = lr
        guard = self.guard
        # the guard's check covers the state where it watches the plan's watch of this state dict
        watched = guard.watching is plan.watch is not None and optimizer.state is plan.watch.state
        if not watched and not optimizer._state_intact(plan):
            optimizer._plans.pop(0, None)  # its state rows are stale: the generic step plans anew
            return False
        params = group["params"]
        if not guard.gradients_into(params, self.grads):
            if watched and not optimizer._state_intact(plan):  # the state changed (checked through Python)
                optimizer._plans.pop(0, None)
                return False
            if not (watched and guard.gradients_into(params, self.grads)):  # (watched anew)
                optimizer._fast_refused = plan
                return False
        step = plan.step_now + 1  # (not None: checked by of)
        scalars = adam_step_scalars(self.per_group, step)
        # nothing is written above this line but the table's gradient row (refilled at every launch)
        plan.step_now = step
        plan.steps_np.fill(step)  # the state's 'step' tensors are views of it
        tensors = self.tensors
        launch = parallel_launch()
        if self.threads is not None and type(launch) is nullcontext:  # nothing to enter, nothing to set
            table = tensors.balanced(self.threads())
            self.entry(parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars)
            return True
        with launch, _SerialBelow(tensors.total) as threads:
            table = tensors.balanced(threads)
            self.entry(parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars)
        return True
