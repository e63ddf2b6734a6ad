"""``ADOPT``: Adam with the gradient normalised by the previous second moment, clipped (MODERN §9)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..kernels.adopt import _adopt, adopt_scalars
from ._validators import check_bool, check_float, check_range
from .lion import check_beta
from .optimizer import Optimizer

__all__ = ["ADOPT", "default_clip"]


def default_clip(step: float) -> float:
    """The authors' clip bound for the k-th update: ``k**0.25``."""
    return step**0.25


class ADOPT(Optimizer):
    r"""ADOPT as the authors' ``torch-adopt`` 0.1.0 computes it, per parameter with the ``adopt`` kernel
    (k = :attr:`global_step` before the step: 0 on the first)::

        g ← w·wd + g                                  (coupled decay, in the kernel; not with decouple)
        k = 0:  exp_avg_sq ← g²  (plus its old value); the parameters do not move
        k ≥ 1:  w ← w − lr·wd·w                       (decouple)
                ĝ = clamp(g / max(√exp_avg_sq, eps), ±clip_lambda(k))     (the previous exp_avg_sq)
                exp_avg ← lerp(exp_avg, ĝ, 1 − β1);  w ← w − lr·exp_avg
                exp_avg_sq ← β2·exp_avg_sq + (1 − β2)·g²

    The global step always counts (the learning rate of step k is its value at ``k``). Decay flags follow
    the base class; no loss scale, no gradient centralization.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-3 (any form of :class:`Optimizer`).
        beta1, beta2: moment decays in [0, 1). Defaults 0.9, 0.9999.
        eps: lower bound of ``√exp_avg_sq``, >= 0. Default 1e-6.
        clip_lambda: ``clip_lambda(k) -> bound`` (k a float, from 1), or None for no clipping. Default
            :func:`default_clip` (``k**0.25``).
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        decouple: decoupled decay ``w·(1 − lr·wd)`` before the update instead of the coupled one. Default
            False.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``exp_avg``, ``exp_avg_sq`` (zeros).

    Raises:
        TypeError: a beta or eps not a number, clip_lambda not callable or None, decouple not a bool; the
            base class's errors.
        ValueError: a beta outside [0, 1), eps < 0; at a step, a clip bound < 0 or NaN; the base class's
            errors.
    """

    _coupled_decay = False  # the kernel adds it (no rounding of g + wd·w to a half parameter's dtype)
    _centralizes = False
    _scales_gradients = False
    _always_counts_steps = True

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.9999,
        eps: float = 1e-6,
        clip_lambda: Callable[[float], float] | None = default_clip,
        weight_decay: Any = 0.0,
        decouple: bool = False,
        comm: Any = None,
    ):
        owner = type(self).__name__
        self.decouple = check_bool("decouple", decouple, owner)
        if clip_lambda is not None and not callable(clip_lambda):
            raise TypeError(
                f"For '{owner}', 'clip_lambda' must be a callable or None, got {type(clip_lambda).__name__}"
            )
        self.clip_lambda = clip_lambda
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        self.beta1 = check_beta("beta1", beta1, owner, high_open=True)
        self.beta2 = check_beta("beta2", beta2, owner, high_open=True)
        self.eps = check_range("eps", check_float("eps", eps, owner, allow_int=True), owner, 0.0)
        self._add_slots({"exp_avg": 0.0, "exp_avg_sq": 0.0})

    def _clip(self, k: int) -> float:
        return math.inf if self.clip_lambda is None or k == 0 else float(self.clip_lambda(float(k)))

    def _kernel_scalars(self, ctx, lr, dtype):
        k = ctx.global_step
        return adopt_scalars(
            dtype, lr, self.beta1, self.beta2, self.eps, 0.0, k, self._clip(k), coupled=False
        )

    def _dense_kernel(self, plan):
        return _adopt, (plan.flat, *plan.flats)

    def _dense_scalars(self, plan, scalars, ctx):
        if not self.decay_flags[plan.index]:
            return scalars
        k = ctx.global_step
        return adopt_scalars(
            plan.cdtype,
            ctx.lrs[plan.lr_index],
            self.beta1,
            self.beta2,
            self.eps,
            ctx.wds[plan.wd_index],
            k,
            self._clip(k),
            self.decouple,
        )

    def _scalar_group(self, plan):
        return plan.key, (plan.wd_index if self.decay_flags[plan.index] else None)
