"""``ADOPT``: ``adopt.ADOPT`` (torch-adopt 0.1.0; same arguments, defaults, checks and state) over
optkernels' ADOPT kernel (MODERN §9)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ..kernels.adopt import _adopt, adopt_scalars
from ._base import KernelOptimizer
from .adam import _check_adam_hyper, _unsupported

__all__ = ["ADOPT"]


class ADOPT(KernelOptimizer):
    r"""torch-adopt's ``ADOPT`` (the authors' clipped algorithm), computed by the ``adopt`` kernel
    (k = the parameter's step before this one)::

        g ← −g (maximize);  g ← g + wd·w (weight_decay, not decouple)
        k = 0:  exp_avg_sq ← exp_avg_sq + g²;  nothing else
        k ≥ 1:  w ← w − lr·wd·w (decouple);  ĝ = clamp(g / max(√exp_avg_sq, ε), ±clip_lambda(k))
                exp_avg ← lerp(exp_avg, ĝ, 1 − β1);  w ← w − lr·exp_avg
                exp_avg_sq ← β2·exp_avg_sq + (1 − β2)·g²

    Args:
        params: an iterable of tensors or of parameter-group dicts.
        lr: learning rate (default 1e-3).
        betas: ``(β1, β2)`` (default (0.9, 0.9999)).
        eps: lower bound of the root (default 1e-6).
        clip_lambda: ``clip_lambda(k)``, the bound of the k-th update (default ``k**0.25``); None: none.
        weight_decay: decay coefficient (default 0).
        decouple: decoupled decay (default False).
        foreach, fused: accepted; ``fused=True`` raises as torch-adopt does.
        maximize: maximize the objective (default False).
        capturable, differentiable: must stay False.

    State: ``step``, ``exp_avg``, ``exp_avg_sq``, as torch-adopt's.

    Raises:
        ValueError: torch-adopt's messages for out-of-range hyper-parameters.
        RuntimeError: ``fused=True`` (torch-adopt: "`fused` is not currently supported").
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        betas: tuple = (0.9, 0.9999),
        eps: float = 1e-6,
        clip_lambda: Callable[[float], float] | None = lambda step: step**0.25,
        weight_decay: float = 0.0,
        decouple: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        if isinstance(lr, torch.Tensor) and foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
        _check_adam_hyper(lr, eps, betas, weight_decay)
        _unsupported(capturable=capturable, differentiable=differentiable)
        self.clip_lambda = clip_lambda
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            decouple=decouple,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)
        if fused:
            raise RuntimeError("`fused` is not currently supported")

    def _check_hyper(self, group: dict) -> None:
        _check_adam_hyper(group["lr"], group["eps"], group["betas"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        return _adopt, ("exp_avg", "exp_avg_sq")

    def _prestep(self, group: dict) -> Any:
        if group["decouple"]:
            return (0.0, -1.0) if group["maximize"] else None
        return super()._prestep(group)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        k = step - 1
        clip = math.inf if self.clip_lambda is None or k == 0 else float(self.clip_lambda(float(k)))
        beta1, beta2 = group["betas"]
        return adopt_scalars(
            dtype,
            float(group["lr"]),
            beta1,
            beta2,
            group["eps"],
            group["weight_decay"],
            k,
            clip,
            group["decouple"],
            coupled=False,
        )
