"""torch's Adagrad and RMSprop over optkernels' kernels.

* ``Adagrad``: :mod:`optkernels.kernels.torch_rules`' Adagrad element function (torch's op order and CPU
  rounding, ``clr = lr/(1 + (t − 1)·lr_decay)``); sparse gradients are coalesced by torch
  and only the indexed rows updated, in torch's sparse order of operations.
* ``RMSprop``: torch's rule (epsilon outside the root, lr after the momentum buffer, torch's rounding) is
  :mod:`optkernels.kernels.torch_rules`' kernel: MindSpore's ``apply_rms_prop`` computes another formula.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels.torch_rules import (
    _torch_adagrad,
    _torch_sparse_adagrad,
    adagrad_scalars,
    rms_prop_kernel,
    rms_prop_scalars,
)
from . import _views
from ._base import KernelOptimizer
from ._sparse import coalesced_rows, launch_rows
from ._sqrt import for_device
from .adam import host_lr

__all__ = ["Adagrad", "RMSprop"]


def _check_lr(lr: Any) -> None:
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= float(lr):
        raise ValueError(f"Invalid learning rate: {lr}")


class Adagrad(KernelOptimizer):
    r"""torch.optim.Adagrad, computed by optkernels' Adagrad kernels::

        g ← −g (maximize);  g ← g + wd·w (weight_decay, dense gradients only)
        clr = lr/(1 + (t − 1)·lr_decay)
        s ← s + g²;  w ← w − clr·g/(√s + ε)

    Sparse COO gradients (``nn.Embedding(sparse=True)``'s, or of any ``sparse_dim``) update only their rows,
    coalesced by torch first (duplicates summed as torch sums them).

    Args: as torch (lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10, foreach,
    maximize, differentiable, fused). State: ``step``, ``sum``.
    """

    sparse_grads = "yes"

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: Any = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: Any = None,
    ):
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            fused=fused,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        _check_lr(group["lr"])
        if not 0.0 <= group["lr_decay"]:
            raise ValueError(f"Invalid lr_decay value: {group['lr_decay']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if not 0.0 <= group["initial_accumulator_value"]:
            raise ValueError(f"Invalid initial_accumulator_value value: {group['initial_accumulator_value']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")

    def _check_sparse(self, p: torch.Tensor, g: torch.Tensor) -> None:
        super()._check_sparse(p, g)
        group = next(gr for gr in self.param_groups if any(q is p for q in gr["params"]))
        if group["weight_decay"] != 0:
            raise RuntimeError("weight_decay option is not compatible with sparse gradients")

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        init = self.defaults["initial_accumulator_value"]  # as torch: the constructor's, not the group's
        return torch.full_like(p, init, memory_format=torch.preserve_format)

    def _kernel(self, group: dict) -> tuple:
        return _torch_adagrad, ("sum",)

    def _prestep(self, group: dict) -> Any:
        return None  # maximize and weight decay are in the element function (torch's rounding)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        return adagrad_scalars(
            dtype,
            step,
            host_lr(group["lr"]),
            group["lr_decay"],
            group["eps"],
            group["weight_decay"],
            group["maximize"],
            self._sqrt_kernel(dtype),
        )

    def _sparse_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor, state: dict) -> None:
        state["step"] += 1
        kind = _views.device_kind(p)
        rows = coalesced_rows(grad, kind, group["maximize"])
        if rows is None:
            return
        dtype = _views.FLOAT_DTYPES.get(p.dtype, _views.FLOAT_DTYPES[torch.float32])
        scalars = adagrad_scalars(
            dtype,
            int(state["step"]),
            host_lr(group["lr"]),
            group["lr_decay"],
            group["eps"],
            0.0,
            False,
            self._sqrt_kernel(dtype),
        )[-6:-3]  # (eps, −clr, mkl), without the tail scalars
        # torch's dense += sparse·α rounds the product first only for one scalar value (a sparse tensor of
        # one element, dense_dim 0, is flagged coalesced and takes another loop); else a fused multiply-add
        fused = grad.dense_dim() > 0 or rows[0].size != 1
        launch_rows(_torch_sparse_adagrad, kind, [p, state["sum"]], rows, (*for_device(scalars, kind), fused))


class RMSprop(KernelOptimizer):
    r"""torch.optim.RMSprop, computed by :mod:`optkernels.kernels.torch_rules`' RMSprop kernels::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        s ← α·s + (1 − α)·g²;  ḡ ← ḡ + (g − ḡ)(1 − α) (centered)
        d = √(s − ḡ²) + ε (centered)  or  √s + ε
        b ← μ·b + g/d;  w ← w − lr·b (momentum > 0)   or   w ← w − lr·g/d

    Args: as torch (lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, capturable,
    foreach, maximize, differentiable). State: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0),
    ``grad_avg`` (centered).
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach: Any = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            capturable=capturable,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        _check_lr(group["lr"])
        for name, label in (
            ("eps", "epsilon"),
            ("momentum", "momentum"),
            ("weight_decay", "weight_decay"),
            ("alpha", "alpha"),
        ):
            if not 0.0 <= group[name]:
                raise ValueError(f"Invalid {label} value: {group[name]}")

    def _kernel(self, group: dict) -> tuple:
        names: tuple[str, ...] = ("square_avg",)
        if group["centered"]:
            names += ("grad_avg",)
        if group["momentum"] > 0:
            names += ("momentum_buffer",)
        return rms_prop_kernel(bool(group["centered"]), group["momentum"] > 0), names

    def _prestep(self, group: dict) -> Any:
        return None  # maximize and weight decay are in the element function (torch's rounding)

    def _state_names(self, group: dict) -> tuple:
        names: tuple[str, ...] = ("square_avg",)
        if group["momentum"] > 0:
            names += ("momentum_buffer",)
        if group["centered"]:
            names += ("grad_avg",)
        return names

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        return rms_prop_scalars(
            dtype,
            host_lr(group["lr"]),
            group["alpha"],
            group["eps"],
            group["weight_decay"],
            group["momentum"],
            group["maximize"],
            self._sqrt_kernel(dtype),
        )
