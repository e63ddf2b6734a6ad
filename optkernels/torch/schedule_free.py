"""``AdamWScheduleFree`` and ``SGDScheduleFree``: facebookresearch's ``schedulefree`` classes (same
arguments, defaults, group entries, state and ``train()``/``eval()``) over optkernels' Schedule-Free kernels
(MODERN §11).

After a full step whose groups were each one CPU launch table, the next steps are steady: a group's guard
checks its tensors' fields, writes the gradients' addresses and launches the kernel in one compiled call;
anything found changed runs the full step, before anything is written."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ..kernels._torch_lerp import lerp_scalars
from ..kernels.schedule_free import (
    _lerp_towards,
    _rounded,
    _rounded_adamw,
    _schedule_free_adamw,
    _schedule_free_sgd,
    adamw_rounding,
    schedule_free_adamw_host,
    schedule_free_sgd_host,
    schedule_free_weight,
    sgd_rounding,
)
from ..optimizers.schedule_free import NOT_IN_TRAIN_MODE
from . import _views
from ._base import KernelOptimizer, _Plan, unwrapped
from ._fields import Guard

__all__ = ["AdamWScheduleFree", "SGDScheduleFree"]

_FOREACH = hasattr(torch, "_foreach_mul_")


class _ScheduleFree(KernelOptimizer):
    """The group bookkeeping (k, lr_max, weight_sum, scheduled_lr; train_mode) and the train/eval swap."""

    counts_steps = False
    numbered_steps = False
    _beta_of: Callable[[dict], float]
    _host_scalars: Callable[[dict, float, float, int], tuple]  # (group, lr_t, c, k + 1): Python floats
    _rounding: tuple[Any, int]  # the compiled rounding of those (a Numba function), their count
    _rounded_host: Callable[[Any, tuple], tuple]  # the same rounding on the host: (dtype, host values)

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        if name == "z":
            return torch.clone(p, memory_format=torch.preserve_format)
        return super()._new_state(name, p, group)

    def _prestep(self, group: dict) -> Any:
        return None

    def _private_steps(self, plan: _Plan) -> np.ndarray:
        if plan.private_steps is None:  # no step counter: every parameter launches at step 1
            plan.private_steps = np.ones(len(plan.params), np.int64)
        return plan.private_steps

    @unwrapped
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient, as the base class's ``step``; returns
        ``closure()``'s loss (or None). A steady step (no closure, no step hooks, torch's profiler off) goes
        straight to its compiled call."""
        steady = self.__dict__.get("_steady")
        if steady is not None and closure is None and self._unobserved():
            if not self.param_groups[0]["train_mode"]:
                raise Exception(NOT_IN_TRAIN_MODE)
            if self._steady_step(steady):
                return None
        return super().step(closure)

    def _step(self, closure: Callable[[], Any] | None = None) -> Any:
        if not self.param_groups[0]["train_mode"]:
            raise Exception(NOT_IN_TRAIN_MODE)
        steady = self.__dict__.get("_steady")
        if steady is not None and closure is None and self._steady_step(steady):
            return None
        weights: dict[int, tuple] = {}
        self._weights = weights
        for group in self.param_groups:
            k = group["k"]
            lr_t, lr_max, weight_sum, c = _group_weight(group)
            weights[id(group)] = (lr_t, c, k + 1, lr_max, weight_sum)
        loss = super()._step(closure)
        # the groups' entries change only with a step that ran (a failed step changes nothing)
        for group in self.param_groups:
            lr_t, _c, k1, lr_max, weight_sum = weights[id(group)]
            _record(group, (lr_t, lr_max, weight_sum, k1))
        self._steady = _steady_plans(self)
        return loss

    def _steady_step(self, steady: list[tuple[dict, _Plan, Guard, Callable]]) -> bool:
        """The step of an optimizer whose every group is one guarded launch (:func:`_steady_plans`), when
        each guard finds its tensors as its plan was built for: the same checks, scalars and launch as the
        full step, without its per-group sorting; the scalars go to the compiled call as Python floats.
        False (nothing written) where anything differs: the full step then runs."""
        groups = self.param_groups
        attributes = self.__dict__  # set by torch.amp.GradScaler: the full step honours them
        if (
            len(groups) != len(steady)
            or attributes.get("found_inf") is not None
            or attributes.get("grad_scale") is not None
        ):
            return False
        plans = self._plans
        if (
            len(steady) == 1
        ):  # one group: the same checks, without the lists (fewer cold lines after backward)
            group, plan, guard, launcher = steady[0]
            if not self._as_planned(groups[0], plans.get(0), group, plan):
                return False
            k1 = group["k"] + 1
            lr_t, lr_max, weight_sum, c = _group_weight(group)
            # the guard's check, the scalars' rounding and the launch in one compiled call; the host values
            # raise before any write
            if not guard.launch(launcher, group["params"], self._host_scalars(group, lr_t, c, k1)):
                return False
            _record(group, (lr_t, lr_max, weight_sum, k1))
            return True
        launches, entries = [], []
        for index, (group, plan, guard, launcher) in enumerate(steady):
            if not self._as_planned(groups[index], plans.get(index), group, plan):
                return False
            k = group["k"]
            lr_t, lr_max, weight_sum, c = _group_weight(group)
            host = self._host_scalars(group, lr_t, c, k + 1)  # raises before any write
            launches.append((guard, launcher, plan, group["params"], host))
            entries.append((lr_t, lr_max, weight_sum, k + 1))
        found = []  # every group checked before any launches
        for guard, _launcher, _plan, params, _host in launches:
            ptrs = guard.addresses(params)
            if ptrs is None:
                return False
            found.append(ptrs[guard.n :])
        for (_guard, _launcher, plan, _params, host), grads in zip(launches, found):
            dtype, _positions, tensors, _members = plan.cpu[0]
            tensors.addresses[-1, :] = grads
            plan.key[1][0].launch_many("cpu", tensors, *self._rounded_host(dtype, host))
        for group, entry in zip(groups, entries):
            _record(group, entry)
        return True

    def _as_planned(self, group: dict, plan: Any, planned_group: dict, planned: Any) -> bool:
        """Whether ``group`` (now at its index) and ``plan`` (now kept for it) are the steady step's, its
        state intact and its flags still the kernels' own."""
        return (
            group is planned_group
            and plan is planned
            and self._state_intact(plan)
            and not group.get("differentiable")
            and not group.get("capturable")
        )

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        lr_t, c, k1 = self._weights[id(group)][:3]
        return self._rounded_host(dtype, self._host_scalars(group, lr_t, c, k1))

    @torch.no_grad()
    def eval(self) -> None:
        """Parameters y → x: ``p ← lerp(p, z, 1 − 1/β)`` for each parameter with a ``z`` (no-op in eval
        mode)."""
        for group in self.param_groups:
            if group["train_mode"]:
                self._swap(group, 1.0 - 1.0 / self._beta_of(group))
                group["train_mode"] = False

    @torch.no_grad()
    def train(self) -> None:
        """Parameters x → y: ``p ← lerp(p, z, 1 − β)`` (no-op in train mode)."""
        for group in self.param_groups:
            if not group["train_mode"]:
                self._swap(group, 1.0 - self._beta_of(group))
                group["train_mode"] = True

    def _swap(self, group: dict, weight: float) -> None:
        for p in group["params"]:
            z = self.state[p].get("z") if p in self.state else None
            if z is None or p.numel() == 0:
                continue
            kind = _views.device_kind(p)
            dtype = _views.FLOAT_DTYPES.get(p.dtype, np.dtype(np.float32))
            _lerp_towards.launch(
                kind,
                p.numel(),
                _views.view(p, kind, flat=True),
                _views.view(z.to(p.device), kind, flat=True),
                *lerp_scalars(dtype, weight),
            )


def _record(group: dict, entry: tuple[float, float, float, int]) -> None:
    """Write a step's ``(lr_t, lr_max, weight_sum, k + 1)`` into ``group``'s bookkeeping."""
    group["scheduled_lr"], group["lr_max"], group["weight_sum"], group["k"] = entry


def _group_weight(group: dict) -> tuple[float, float, float, float]:
    """:func:`schedule_free_weight` of ``group``'s next step: ``(lr_t, lr_max, weight_sum, c)``."""
    return schedule_free_weight(
        group["k"],
        group["lr"],
        group["warmup_steps"],
        group["r"],
        group["weight_lr_power"],
        group["lr_max"],
        group["weight_sum"],
    )


def _steady_plans(opt: _ScheduleFree) -> list[tuple[dict, _Plan, Guard, Callable]] | None:
    """``[(group, plan, guard, launcher)]`` for every group of ``opt`` whose plan is one CPU launch table
    over all its parameters, checked by a guard (:class:`._fields.Guard`, whose :meth:`~._fields.Guard.
    launcher` is the group's compiled launch), after a full step; None where any group's is not (its steps
    then run in full)."""
    out = []
    for index, group in enumerate(opt.param_groups):
        plan = opt._plans.get(index)
        if (
            plan is None
            or not plan.whole
            or plan.guard is None
            or len(plan.cpu) != 1
            or plan.single
            or plan.key[1] != opt._kernel(group)
        ):
            return None
        tensors = plan.cpu[0][2]
        out.append((group, plan, plan.guard, plan.guard.launcher(plan.key[1][0], tensors, *opt._rounding)))
    return out or None


class AdamWScheduleFree(_ScheduleFree):
    r"""``schedulefree.AdamWScheduleFree`` (v1.3+), computed by the ``schedule_free_adamw`` kernel (per
    group: k counts steps, ``c`` is the averaging weight, see
    :func:`optkernels.kernels.schedule_free.schedule_free_weight`)::

        lr_t = lr·min(1, (k + 1)/warmup_steps);  v ← β2·v + (1 − β2)·g²
        ĝ = g/(√(v/(1 − β2^(k+1))) + ε) + wd·y;   y ← lerp(y, z, c) + lr_t·(β1·(1 − c) − 1)·ĝ;   z ← z − lr_t·ĝ

    Call :meth:`train` before training and :meth:`eval` before evaluating or saving, as with the package.
    ``p.grad`` is left as it was (the package divides it in place).

    Args:
        params: an iterable of tensors or of parameter-group dicts.
        lr: default 0.0025.  betas: ``(β1, β2)``, default (0.9, 0.999).  eps: default 1e-8.
        weight_decay: default 0.  warmup_steps: default 0.  r: default 0.0.  weight_lr_power: default 2.0.
        foreach: accepted; no effect (optkernels has one implementation).

    State: ``z``, ``exp_avg_sq`` per parameter; group entries ``k``, ``train_mode``, ``weight_sum``,
    ``lr_max``, ``scheduled_lr``, as the package's.

    Raises:
        Exception: a step outside train mode (the package's message).
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 0.0025,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        warmup_steps: int = 0,
        r: float = 0.0,
        weight_lr_power: float = 2.0,
        foreach: bool | None = _FOREACH,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            r=r,
            k=0,
            warmup_steps=warmup_steps,
            train_mode=False,
            weight_sum=0.0,
            lr_max=-1.0,
            scheduled_lr=0.0,
            weight_lr_power=weight_lr_power,
            weight_decay=weight_decay,
            foreach=foreach,
        )
        super().__init__(params, defaults)

    @staticmethod
    def _beta_of(group: dict) -> float:
        return group["betas"][0]

    def _kernel(self, group: dict) -> tuple:
        return _schedule_free_adamw, ("z", "exp_avg_sq")

    _rounding = (adamw_rounding, 8)
    _rounded_host = staticmethod(_rounded_adamw)

    def _host_scalars(self, group: dict, lr_t: float, c: float, step: int) -> tuple:
        beta1, beta2 = group["betas"]
        return schedule_free_adamw_host(lr_t, beta1, beta2, group["eps"], group["weight_decay"], c, step)


class SGDScheduleFree(_ScheduleFree):
    r"""``schedulefree.SGDScheduleFree``, computed by the ``schedule_free_sgd`` kernel::

        g ← g + wd·y;   y ← lerp(y, z, c) + lr_t·(momentum·(1 − c) − 1)·g;   z ← z − lr_t·g

    Args:
        params: an iterable of tensors or of parameter-group dicts.
        lr: default 1.0.  momentum: in (0, 1), default 0.9.  weight_decay: default 0.
        warmup_steps, r, weight_lr_power, foreach: as :class:`AdamWScheduleFree`.

    State: ``z`` per parameter; group entries as :class:`AdamWScheduleFree`.

    Raises:
        ValueError: the package's messages for ``lr < 0``, ``weight_decay < 0`` and a momentum outside
            (0, 1).
        Exception: a step outside train mode.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1.0,
        momentum: float = 0.9,
        weight_decay: float = 0,
        warmup_steps: int = 0,
        r: float = 0.0,
        weight_lr_power: float = 2,
        foreach: bool | None = _FOREACH,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if momentum <= 0 or momentum >= 1:
            raise ValueError(f"Momentum must be between 0 and 1 exclusive: {momentum}")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            r=r,
            k=0,
            warmup_steps=warmup_steps,
            train_mode=False,
            weight_sum=0.0,
            lr_max=-1.0,
            scheduled_lr=0.0,
            weight_lr_power=weight_lr_power,
            weight_decay=weight_decay,
            foreach=foreach,
        )
        super().__init__(params, defaults)

    @staticmethod
    def _beta_of(group: dict) -> float:
        return group["momentum"]

    def _kernel(self, group: dict) -> tuple:
        return _schedule_free_sgd, ("z",)

    _rounding = (sgd_rounding, 4)
    _rounded_host = staticmethod(_rounded)

    def _host_scalars(self, group: dict, lr_t: float, c: float, step: int) -> tuple:
        return schedule_free_sgd_host(lr_t, group["momentum"], group["weight_decay"], c)
