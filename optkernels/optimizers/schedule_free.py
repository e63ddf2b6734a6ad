"""``AdamWScheduleFree`` and ``SGDScheduleFree``: Schedule-Free training (MODERN §11). The parameters hold y
in train mode and x in eval mode; the slot ``z`` holds the base sequence."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels._torch_lerp import lerp_scalars
from ..kernels.schedule_free import (
    _lerp_towards,
    _schedule_free_adamw,
    _schedule_free_sgd,
    schedule_free_adamw_scalars,
    schedule_free_sgd_scalars,
    schedule_free_weight,
)
from ._validators import check_float, check_range
from .lion import check_beta
from .optimizer import Optimizer, StepContext

__all__ = ["AdamWScheduleFree", "SGDScheduleFree", "NOT_IN_TRAIN_MODE"]

#: schedulefree's message for a step outside train mode (raised here as RuntimeError).
NOT_IN_TRAIN_MODE = (
    "Optimizer was not in train mode when step is called. Please insert .train() and .eval() "
    "calls on the optimizer. See documentation for details."
)


class _ScheduleFree(Optimizer):
    """What both Schedule-Free optimizers share: the averaging weights (per learning rate), the train/eval
    swap, and their state."""

    _coupled_decay = False
    _centralizes = False
    _scales_gradients = False
    _always_counts_steps = True

    def _init_schedule_free(
        self, beta: float, warmup_steps: Any, r: Any, weight_lr_power: Any, slots: dict
    ) -> None:
        owner = self._owner
        if isinstance(warmup_steps, (bool, np.bool_)) or not isinstance(warmup_steps, (int, np.integer)):
            raise TypeError(
                f"For '{owner}', 'warmup_steps' must be an int, got {type(warmup_steps).__name__}"
            )
        self.warmup_steps = int(check_range("warmup_steps", float(warmup_steps), owner, 0.0))
        self.r = check_float("r", r, owner, allow_int=True)
        self.weight_lr_power = check_float("weight_lr_power", weight_lr_power, owner, allow_int=True)
        self._beta = beta
        self._lr_max = np.full(len(self._lrs), -1.0)
        self._weight_sum = np.zeros(len(self._lrs))
        self._train_mode = True
        self._add_slots(dict(z=0.0, **slots))
        for plan in self._local_plans:  # z starts at the parameter
            z = plan.slots["z"]
            if isinstance(z, np.ndarray):
                z[...] = plan.param.data
            else:
                z.copy_to_device(plan.param.data)

    # ------------------------------------------------------------------ train / eval

    @property
    def train_mode(self) -> bool:
        """True while the parameters hold y (training), False while they hold the average x."""
        return self._train_mode

    def train(self) -> None:
        """Parameters x → y: ``w ← lerp(w, z, 1 − β)`` (no-op in train mode)."""
        if not self._train_mode:
            self._swap(1.0 - self._beta)
            self._train_mode = True

    def eval(self) -> None:
        """Parameters y → x: ``w ← lerp(w, z, 1 − 1/β)`` (no-op in eval mode). Evaluate and save in eval
        mode."""
        if self._train_mode:
            self._swap(1.0 - 1.0 / self._beta)
            self._train_mode = False

    def _swap(self, weight: float) -> None:
        self._widen_compensated()
        for plan in self._local_plans:
            z = plan.flats[0]
            _lerp_towards.launch(plan.device, plan.size, plan.flat, z, *lerp_scalars(plan.cdtype, weight))
        with self._rounding_context():
            self.broadcast_params(True)  # the parallel optimizer: each parameter from the rank that owns it
            self._write_masters()

    def step(self, gradients: Any) -> bool:
        """One step (see :meth:`Optimizer.step`); in eval mode a RuntimeError (schedulefree's message)."""
        if not self._train_mode:
            raise RuntimeError(NOT_IN_TRAIN_MODE)
        return super().step(gradients)

    # ------------------------------------------------------------------ per step

    def _prepare_step(self, ctx: StepContext) -> None:
        k = ctx.global_step
        ctx.extra["weights"] = [
            schedule_free_weight(
                k,
                lr,
                self.warmup_steps,
                self.r,
                self.weight_lr_power,
                float(self._lr_max[i]),
                float(self._weight_sum[i]),
            )
            for i, lr in enumerate(ctx.lrs)
        ]

    def _commit_step(self, ctx: StepContext) -> None:
        for i, (_, lr_max, weight_sum, _) in enumerate(ctx.extra["weights"]):
            self._lr_max[i], self._weight_sum[i] = lr_max, weight_sum

    def _kernel_scalars(self, ctx, lr, dtype):
        return ()

    def _dense_scalars(self, plan, scalars, ctx):
        lr_t, _, _, c = ctx.extra["weights"][plan.lr_index]
        wd = ctx.wds[plan.wd_index] if self.decay_flags[plan.index] else 0.0
        return self._scalars(plan.cdtype, lr_t, c, wd, ctx.global_step + 1)

    def _scalar_group(self, plan):
        return plan.key, (plan.wd_index if self.decay_flags[plan.index] else None)

    # ------------------------------------------------------------------ state

    def _scalar_state(self):
        return {
            "lr_max": self._lr_max.copy(),
            "weight_sum": self._weight_sum.copy(),
            "train_mode": np.array(self._train_mode),
        }

    def _load_scalar_state(self, state):
        self._lr_max = np.array(state["lr_max"], np.float64)
        self._weight_sum = np.array(state["weight_sum"], np.float64)
        self._train_mode = bool(state["train_mode"])


class AdamWScheduleFree(_ScheduleFree):
    r"""Schedule-Free AdamW as ``schedulefree.AdamWScheduleFree`` (v1.3+) computes it, per parameter with the
    ``schedule_free_adamw`` kernel (k = :attr:`global_step` before the step; per learning rate, the
    averaging weights of :func:`optkernels.kernels.schedule_free.schedule_free_weight`)::

        lr_t = lr·min(1, (k + 1)/warmup_steps);  c = the averaging weight of step k
        v ← β2·v + (1 − β2)·g²;  ĝ = g/(√(v/(1 − β2^(k+1))) + eps) + wd·w
        w ← lerp(w, z, c) + lr_t·(β1·(1 − c) − 1)·ĝ;   z ← z − lr_t·ĝ          (w holds y)

    :meth:`eval` turns the parameters into the average x (evaluate and save there), :meth:`train` back
    into y. Unlike the package, a new optimizer starts in train mode (y = x = z before the first step, so
    both modes agree) and ``z`` is the parameter at construction; a step in eval mode raises RuntimeError.
    The global step always counts; decay flags follow the base class; no loss scale, no gradient
    centralization.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 0.0025 (any form of :class:`Optimizer`; the warmup multiplies it).
        beta1: interpolation between x and z, in (0, 1). Default 0.9.
        beta2: second-moment decay, in [0, 1). Default 0.999.
        eps: >= 0. Default 1e-8.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        warmup_steps: linear warmup length, an int >= 0. Default 0.
        r: the averaging weights' power of the step number. Default 0.0.
        weight_lr_power: the averaging weights' power of the largest learning rate so far. Default 2.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``z`` (the parameter), ``exp_avg_sq`` (zeros). State scalars: ``lr_max``, ``weight_sum`` (one per
    learning rate), ``train_mode``.

    Raises:
        TypeError: a hyper-parameter of the wrong type; the base class's errors.
        ValueError: a beta or warmup_steps out of range, eps < 0; the base class's errors.
        RuntimeError: a step in eval mode.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 0.0025,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: Any = 0.0,
        warmup_steps: int = 0,
        r: float = 0.0,
        weight_lr_power: float = 2.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        owner = self._owner
        self.beta1 = check_range(
            "beta1",
            check_float("beta1", beta1, owner, allow_int=True),
            owner,
            0.0,
            1.0,
            low_open=True,
            high_open=True,
        )
        self.beta2 = check_beta("beta2", beta2, owner, high_open=True)
        self.eps = check_range("eps", check_float("eps", eps, owner, allow_int=True), owner, 0.0)
        self._init_schedule_free(self.beta1, warmup_steps, r, weight_lr_power, {"exp_avg_sq": 0.0})

    def _scalars(self, dtype, lr_t, c, wd, step):
        return schedule_free_adamw_scalars(dtype, lr_t, self.beta1, self.beta2, self.eps, wd, c, step)

    def _dense_kernel(self, plan):
        return _schedule_free_adamw, (plan.flat, *plan.flats)


class SGDScheduleFree(_ScheduleFree):
    r"""Schedule-Free SGD as ``schedulefree.SGDScheduleFree`` computes it, per parameter with the
    ``schedule_free_sgd`` kernel (as :class:`AdamWScheduleFree`, with ``momentum`` for β1 and no second
    moment)::

        g ← g + wd·w;   w ← lerp(w, z, c) + lr_t·(momentum·(1 − c) − 1)·g;   z ← z − lr_t·g

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1.0.
        momentum: in (0, 1). Default 0.9.
        weight_decay, warmup_steps, r, weight_lr_power, comm: as :class:`AdamWScheduleFree`.

    Slots: ``z``. State scalars as :class:`AdamWScheduleFree`.

    Raises:
        As :class:`AdamWScheduleFree`.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1.0,
        momentum: float = 0.9,
        weight_decay: Any = 0.0,
        warmup_steps: int = 0,
        r: float = 0.0,
        weight_lr_power: float = 2.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        owner = self._owner
        self.momentum = check_range(
            "momentum",
            check_float("momentum", momentum, owner, allow_int=True),
            owner,
            0.0,
            1.0,
            low_open=True,
            high_open=True,
        )
        self._init_schedule_free(self.momentum, warmup_steps, r, weight_lr_power, {})

    def _scalars(self, dtype, lr_t, c, wd, step):
        return schedule_free_sgd_scalars(dtype, lr_t, self.momentum, wd, c)

    def _dense_kernel(self, plan):
        return _schedule_free_sgd, (plan.flat, *plan.flats)
