"""torch's Adam, AdamW and Adamax over optkernels' kernels.

* ``Adam``: MindSpore's Adam kernel (``apply_adam``'s element function) with ``lr_t = lr·√(1−β2^t)/(1−β1^t)``
  and epsilon ``ε·√(1−β2^t)``: ``lr_t·m/(√v + ε√(1−β2^t)) = lr/(1−β1^t)·m/(√v/√(1−β2^t) + ε)``, torch's
  formula; ``amsgrad`` is ``apply_adam_with_amsgrad``'s element function with the same two scalars (torch
  keeps ``max_exp_avg_sq = max(max_exp_avg_sq, v)`` and divides by its root). ``maximize`` and the coupled
  ``weight_decay`` are the gradient pre-step ``(±wd·w + g)·±1``.
* ``AdamW``: ``w ← w·(1 − lr·wd)`` (the ``scal`` kernel, one multi-tensor launch) before Adam.
* ``Adamax``: torch's rule (epsilon inside the max) is :mod:`optkernels.kernels.torch_rules`' kernel.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import torch

from ..kernels.adam import _adam, _adam_amsgrad
from ..kernels.axpy import _scal
from ..kernels.torch_rules import _adamax
from ._base import KernelOptimizer, _Plan
from . import _views

__all__ = ["Adam", "AdamW", "Adamax"]


def _check_adam_hyper(lr: Any, eps: float, betas: tuple, weight_decay: float) -> None:
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= float(lr):
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class Adam(KernelOptimizer):
    r"""torch.optim.Adam, computed by optkernels' Adam kernels (same arguments, defaults, state and
    ``state_dict``)::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        m ← m + (g − m)(1 − β1);  v ← v + (g² − v)(1 − β2)
        v̂max ← max(v̂max, v) (amsgrad, used below instead of v)
        w ← w − lr/(1 − β1^t)·m/(√v/√(1 − β2^t) + ε)

    Args:
        params: an iterable of tensors or of parameter-group dicts (torch's convention).
        lr: learning rate (default 1e-3).
        betas: ``(β1, β2)`` (default (0.9, 0.999)).
        eps: added to the denominator (1e-8).
        weight_decay: L2 penalty added to the gradient (0).
        amsgrad: use AMSGrad's maximum of v (False).
        maximize: maximize the objective (False).
        foreach, fused, capturable, differentiable: torch's implementation switches. ``foreach`` and
            ``fused`` choose nothing (optkernels has one implementation; ``fused`` also takes
            ``torch.amp.GradScaler``'s ``grad_scale``/``found_inf``, as torch's fused Adam does);
            ``capturable`` and ``differentiable`` parameters are updated by torch's own implementation.
        decoupled_weight_decay: AdamW's decay instead of L2 (torch 2.7+).

    Raises:
        ValueError: torch's messages for out-of-range hyper-parameters; a non-leaf tensor.
        TypeError: parameters that are not float32/float64 tensors (or float16/bfloat16 CPU tensors).
        RuntimeError (at ``step``): a sparse gradient ("Adam does not support sparse gradients").
    """

    def __init__(self, params: Iterable, lr: Any = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, foreach: Any = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: Any = None, decoupled_weight_decay: bool = False):
        _check_adam_hyper(lr, eps, betas, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", False)

    def _check_hyper(self, group: dict) -> None:
        _check_adam_hyper(group["lr"], group["eps"], group["betas"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        if group["amsgrad"]:
            return _adam_amsgrad, ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
        return _adam, ("exp_avg", "exp_avg_sq")

    def _prestep(self, group: dict) -> Any:
        if group.get("decoupled_weight_decay"):
            return (0.0, -1.0) if group["maximize"] else None
        return super()._prestep(group)

    def _before_update(self, group: dict, plan: _Plan, step: int) -> None:
        if group.get("decoupled_weight_decay") and group["weight_decay"] != 0:
            decoupled_decay(plan, 1.0 - float(group["lr"]) * group["weight_decay"])

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2 = group["betas"]
        root = math.sqrt(1.0 - beta2 ** step)
        lr_t = dtype.type(float(group["lr"]) * root / (1.0 - beta1 ** step))
        eps = dtype.type(group["eps"] * root)
        one_minus_beta1 = dtype.type(1.0 - beta1)
        one_minus_beta2 = dtype.type(1.0 - beta2)
        if group["amsgrad"]:
            return lr_t, one_minus_beta1, one_minus_beta2, eps
        return lr_t, dtype.type(beta1), one_minus_beta1, one_minus_beta2, eps, False


def decoupled_decay(plan: _Plan, factor: float) -> None:
    """``w ← factor·w`` over a plan's parameters (the ``scal`` kernel: one multi-tensor launch per dtype on
    the CPU, one launch per CUDA or half tensor)."""
    for dtype, _, tensors, _ in plan.cpu:
        one_row = _OneRow.of(tensors)
        _scal.launch_many("cpu", one_row, dtype.type(factor))
    for k, kind, arrays, n, _ in plan.single:
        dtype = _views.FLOAT_DTYPES.get(plan.params[k].dtype, np.dtype(np.float32))
        _scal.launch(kind, n, arrays[0], dtype.type(factor))


class _OneRow:
    """A view of a TensorList's chunk table with only its first address row (the parameters)."""

    __slots__ = ("chunks", "addresses", "like")

    def __init__(self, tensors: Any):
        self.chunks = tensors.chunks
        self.addresses = tensors.addresses[:1]
        self.like = tensors.like

    @staticmethod
    def of(tensors: Any) -> "_OneRow":
        row = tensors.__dict__.get("_param_row") if hasattr(tensors, "__dict__") else None
        if row is None:
            row = _OneRow(tensors)
            tensors._param_row = row
        return row


class AdamW(Adam):
    r"""torch.optim.AdamW: ``w ← w·(1 − lr·wd)``, then Adam without L2 (defaults as torch: weight_decay
    1e-2). Arguments as :class:`Adam`."""

    def __init__(self, params: Iterable, lr: Any = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: Any = None, capturable: bool = False, differentiable: bool = False,
                 fused: Any = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True


class Adamax(KernelOptimizer):
    r"""torch.optim.Adamax, computed by :mod:`optkernels.kernels.torch_rules`' Adamax kernel::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        m ← m + (g − m)(1 − β1);  u ← max(β2·u, |g| + ε)
        w ← w − lr/(1 − β1^t)·m/u

    Args: as torch (lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach, maximize,
    differentiable, capturable). State: ``step``, ``exp_avg``, ``exp_inf``.
    """

    def __init__(self, params: Iterable, lr: Any = 2e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: Any = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False):
        _check_adam_hyper(lr, eps, betas, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        _check_adam_hyper(group["lr"], group["eps"], group["betas"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        return _adamax, ("exp_avg", "exp_inf")

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2 = group["betas"]
        clr = dtype.type(float(group["lr"]) / (1.0 - beta1 ** step))
        return clr, dtype.type(1.0 - beta1), dtype.type(beta2), dtype.type(group["eps"])
