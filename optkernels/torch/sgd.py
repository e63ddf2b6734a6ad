"""torch's SGD over :mod:`optkernels.kernels.torch_rules`' element functions (torch's single-tensor op order
and CPU rounding; the buffer's first step copies the gradient, as torch's clone does).

SGD of one group of float32 or float64 CPU parameters (plain, or with momentum once a step has made every
``momentum_buffer``) is a step with nothing to prepare but the gradients' addresses, so after a generic
step has built and guarded its plan, the next steps take a short path (:class:`_PlainStep`): the state's
entries and buffers compared with the ones the launch table holds (:meth:`KernelOptimizer._state_intact`;
any change drops the plan: the generic step plans anew), the group's hyper-parameters compared with the ones the
kernel's scalars were made from, one compiled check of every parameter and gradient (and of the state,
where the guard watches it: :class:`._fields.StateWatch`) that also writes the gradients' addresses into
the launch table (:meth:`._fields.Guard.gradients_into`), and the kernel's
chunked entry called directly, from :meth:`SGD.step` itself where no step hook or profiler is on (right
after a backward pass every Python call and object it passes through is out of cache). With momentum, the
check (the state included) and the launch are one compiled call whose threads claim the table's rows from
both ends (:meth:`._fields.Guard.watched_launcher`): a thread that wakes late takes fewer rows. Anything else (a
closure, AMP's ``found_inf``/``grad_scale``, several groups, a changed hyper-parameter other than a float
``lr``, a tensor that differs from the plan's) takes the generic step, which checks, raises and routes as
it always does.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numba
import numpy as np
import torch

from ..kernels._elementwise import SERIAL_BELOW
from ..kernels._threading import thread_mask
from ..kernels.torch_rules import _torch_sgd, _torch_sgd_momentum, sgd_scalars
from ._base import KernelOptimizer, _Plan
from ._short_path import (
    ShortPath,
    ShortPathSteps,
    gradients_checked,
    launch_table,
    lr_changed,
    planned_group,
    unchanged,
)
from .adam import host_lr

__all__ = ["SGD"]


class SGD(ShortPathSteps, KernelOptimizer):
    r"""torch.optim.SGD, computed by optkernels' kernels::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        b ← g (first step);  b ← μ·b + (1 − dampening)·g (later)        (momentum ≠ 0)
        w ← w − lr·(g + μ·b) (nesterov)  or  w ← w − lr·b  or (momentum = 0) w ← w − lr·g

    Args: as torch (lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize, foreach,
    differentiable, fused). State: ``momentum_buffer`` (momentum ≠ 0).

    Raises:
        ValueError: torch's messages (negative lr, momentum, weight_decay; nesterov without momentum or
            with dampening).
    """

    counts_steps = False
    sparse_by_torch = True  # torch's SGD takes sparse gradients: its own step runs them
    optional_state = ("momentum_buffer",)  # torch starts a missing buffer from the gradient

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: Any = None,
        differentiable: bool = False,
        fused: Any = None,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        lr = group["lr"]
        if isinstance(lr, torch.Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if float(lr) < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if group["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _short_path_of(self) -> _PlainStep | None:
        return _PlainStep.of(self)

    def _kernel(self, group: dict) -> tuple:
        if group["momentum"] == 0:
            return _torch_sgd, ()
        return _torch_sgd_momentum, ("momentum_buffer",)

    def _prestep(self, group: dict) -> Any:
        return None  # maximize and weight decay are in the element function (torch's rounding)

    def _build(self, group: dict, params: list, key: tuple) -> _Plan:
        fresh = [self.state.get(p, {}).get("momentum_buffer") is None for p in params]
        plan = super()._build(group, params, key)
        plan.private_steps = np.where(fresh, 0, 1).astype(np.int64)
        if fresh and len(set(fresh)) == 1:  # all new or all continuing: counted in plan.step_now
            plan.step_now = 0 if fresh[0] else 1
        return plan

    def _private_steps(self, plan: _Plan) -> np.ndarray:
        plan.private_steps += 1
        return plan.private_steps

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        lr, first = host_lr(group["lr"]), step == 1
        momentum, dampening, wd = group["momentum"], group["dampening"], group["weight_decay"]
        nesterov, maximize = group["nesterov"], group["maximize"]
        return self._remembered(
            (dtype, first, type(lr), lr, momentum, dampening, wd, nesterov, maximize),
            lambda: sgd_scalars(dtype, first, lr, momentum, dampening, wd, nesterov, maximize),
        )


@numba.njit(cache=True)
def _as_given(host: tuple, like: np.ndarray) -> tuple:
    """The scalars of a guarded launch (:meth:`._fields.Guard.watched_launcher`) as given: made by
    :meth:`SGD._scalars` already."""
    return host


#: The hyper-parameters a plain step's scalars and plan were made for (``lr`` is compared apart).
_HYPER = operator.itemgetter(
    "momentum", "dampening", "weight_decay", "nesterov", "maximize", "differentiable", "foreach", "fused"
)
_PLAIN = frozenset((bool, int, float, type(None)))


def _plain_hyper(group: dict) -> bool:
    return all(type(v) in _PLAIN for v in _HYPER(group))


class _PlainStep(ShortPath):
    """The short path of an SGD step (see the module docstring) over ``plan``, the one plan of ``group``:
    one launch table of float32 or float64 CPU parameters (and their momentum buffers), guarded. Made by :meth:`of` after a
    generic step; :meth:`run` steps or returns False (nothing written)."""

    __slots__ = (
        "scalars",
        "tensors",
        "grads",
        "entry",
        "threads",
        "step",
        "momentum",
        "launcher",
    )

    def __init__(self, optimizer: SGD, group: dict, plan: _Plan):
        dtype, _, tensors, _ = plan.cpu[0]
        assert plan.guard is not None  # (checked by of)
        self.group, self.plan, self.guard, self.tensors = group, plan, plan.guard, tensors
        self.hyper = _HYPER(group)
        self.lr = group["lr"]
        kernel = plan.key[1][0]
        self.step = 1 if kernel is _torch_sgd else 2  # momentum: a later step (the buffer exists)
        self.scalars = optimizer._scalars(group, self.step, dtype)
        self.grads = tensors.addresses[-1]  # the gradient row, written by the guard's check
        self.entry = kernel.many_chunked(tensors.addresses.shape[0])
        self.momentum = kernel is _torch_sgd_momentum  # the table holds the buffers (see run)
        # what reads the calling thread's Numba thread count, where the list is large enough to run on all
        # of them (else None: _SerialBelow sets the count to one for the launch)
        self.threads = thread_mask()[0] if tensors.total >= SERIAL_BELOW else None
        # momentum: the guard's check (state included), the launch and its threads' claims of the rows in
        # one compiled call (a thread that starts late takes fewer rows)
        self.launcher = (
            self.guard.watched_launcher(kernel, tensors, _as_given, len(self.scalars))
            if self.momentum
            else None
        )

    @classmethod
    def of(cls, optimizer: SGD) -> _PlainStep | None:
        """The short path of ``optimizer``'s next steps, or None where its last step was not a plain step
        that the short path repeats."""
        found = planned_group(optimizer, _plain_hyper)
        if found is None:
            return None
        group, plan = found
        if (
            len(plan.cpu) != 1
            or plan.single
            or not plan.key[1][0].chunked_many
            # momentum: every buffer made by an earlier step (the first step copies the gradient)
            or (group["momentum"] != 0 and not (plan.step_now or 0) >= 1)
        ):
            return None
        if not optimizer._state_intact(plan):
            return None  # the state is not the one the table was made from
        return cls(optimizer, group, plan)

    def run(self, optimizer: SGD) -> bool:
        """One step of the group as the generic step would make it (the same kernel, scalars and table),
        or False where anything differs from what the short path was made for (nothing written)."""
        group = self.group
        if not unchanged(optimizer, self, _HYPER(group)):
            return False
        changed = lr_changed(self, group)
        if changed is None:
            return False
        if changed:
            self.scalars = optimizer._scalars(group, self.step, self.tensors.dtype)
        plan, guard = self.plan, self.guard
        # the guard's check covers the state where it watches the plan's watch of this state dict
        watched = (
            self.momentum and guard.watching is plan.watch is not None and optimizer.state is plan.watch.state
        )
        if self.momentum and not watched and not optimizer._state_intact(plan):
            optimizer._plans.pop(0, None)  # its buffer row is stale: the generic step plans anew
            return False
        launcher = self.launcher
        if launcher is not None:  # the check and the launch in one compiled call
            found = guard.launch_watched(launcher, group["params"], self.scalars)
            if found == -1:
                return True
            if watched and not optimizer._state_intact(plan):  # the state changed (checked through Python)
                optimizer._plans.pop(0, None)
                return False
            if not (watched and guard.launch_watched(launcher, group["params"], self.scalars) == -1):
                optimizer._fast_refused = plan
                return False
            return True
        if not gradients_checked(optimizer, plan, group["params"], self.grads, watched):
            return False
        launch_table(self.entry, self.tensors, self.threads, self.scalars)
        return True
