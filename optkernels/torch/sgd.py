"""torch's SGD over :mod:`optkernels.kernels.torch_rules`' element functions (torch's single-tensor op order
and CPU rounding; the buffer's first step copies the gradient, as torch's clone does)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels.torch_rules import _torch_sgd, _torch_sgd_momentum, sgd_scalars
from ._base import KernelOptimizer, _Plan
from .adam import host_lr

__all__ = ["SGD"]


class SGD(KernelOptimizer):
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
