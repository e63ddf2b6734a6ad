"""``AnyPrecisionAdamW`` over torch tensors: torchdistx's optimizer (same constructor, defaults and state)
whose step is optkernels' kernel :func:`optkernels.kernels.any_precision_adamw`, with the optional
Kahan-compensated bfloat16 parameter update."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..kernels import any_precision_adamw
from . import _views

__all__ = ["AnyPrecisionAdamW"]

_DTYPES = (torch.float32, torch.bfloat16)


def _dtype_arg(name: str, value: Any) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {value!r}")
    if value not in _DTYPES:
        raise ValueError(f"{name} must be torch.float32 or torch.bfloat16, got {value}")
    return value


class AnyPrecisionAdamW(torch.optim.Optimizer):
    r"""torchdistx's ``AnyPrecisionAdamW``: AdamW with states in any precision and an optional
    Kahan-compensated update of bfloat16 parameters (LOWBIT.md §9.3). Each operation is computed in float32
    and rounded to its output's dtype:

    .. math::

        p \leftarrow p(1-\mathrm{lr}\cdot\mathrm{wd}), \quad m \leftarrow m\beta_1 + (1-\beta_1)g, \quad
        v \leftarrow v\beta_2 + ((1-\beta_2)g)g,

        d = \sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon, \quad u = (-\mathrm{lr}/(1-\beta_1^t)\cdot m)/d

    Kahan summation: :math:`c \leftarrow c + u`, :math:`p' = p + c`, :math:`c \leftarrow c + (p - p')`,
    :math:`p \leftarrow p'`; without it :math:`p \leftarrow p + u`.

    Parameters
    ----------
    params : iterable
        Tensors or parameter groups (float32 or bfloat16 CPU tensors).
    lr : float
        Learning rate. Default 1e-3.
    betas : tuple of float
        :math:`(\beta_1, \beta_2)`. Default (0.9, 0.999).
    eps : float
        Default 1e-8.
    weight_decay : float
        Decoupled weight decay. Default 0.0.
    use_kahan_summation : bool
        Keep the compensation buffer (state ``compensation``). Default False.
    momentum_dtype, variance_dtype, compensation_buffer_dtype : torch.dtype
        torch.float32 or torch.bfloat16 (defaults float32, bfloat16, bfloat16).

    Notes
    -----
    State per parameter, as torchdistx's: ``step`` (float32 0-d tensor), ``exp_avg``, ``exp_avg_sq`` and,
    with Kahan, ``compensation``. The roundings are torch's CPU ops' (scalars ``1−β`` and ``1−lr·wd``
    from Python floats; the moments' multiply-add fused, as torch's vector loops on x86-64 with FMA).
    Departures: CPU tensors only; torchdistx's check for CUDA and NCCL bfloat16 support is not made (so
    the defaults work on a CPU-only torch); float16 and float64 parameters raise TypeError.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        use_kahan_summation: bool = False,
        momentum_dtype: torch.dtype = torch.float32,
        variance_dtype: torch.dtype = torch.bfloat16,
        compensation_buffer_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not isinstance(use_kahan_summation, bool):
            raise TypeError(f"use_kahan_summation must be a bool, got {type(use_kahan_summation).__name__}")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            use_kahan_summation=use_kahan_summation,
            momentum_dtype=_dtype_arg("momentum_dtype", momentum_dtype),
            variance_dtype=_dtype_arg("variance_dtype", variance_dtype),
            compensation_buffer_dtype=_dtype_arg("compensation_buffer_dtype", compensation_buffer_dtype),
        )
        super().__init__(params, defaults)

    def _state_of(self, p: torch.Tensor, group: dict) -> dict:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, dtype=group["momentum_dtype"])
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=group["variance_dtype"])
            if group["use_kahan_summation"]:
                state["compensation"] = torch.zeros_like(p, dtype=group["compensation_buffer_dtype"])
        return state

    @staticmethod
    def _check(p: torch.Tensor, g: torch.Tensor) -> None:
        if g.is_sparse:
            raise RuntimeError("AnyPrecisionAdamW does not support sparse gradients")
        if p.device.type != "cpu":
            raise TypeError(f"AnyPrecisionAdamW runs on CPU tensors, got a tensor on {p.device}")
        if p.dtype not in _DTYPES or g.dtype != p.dtype:
            raise TypeError(
                "AnyPrecisionAdamW updates float32 or bfloat16 parameters with gradients of their dtype, "
                f"got {p.dtype} and {g.dtype}"
            )
        if not p.is_contiguous():
            raise ValueError("AnyPrecisionAdamW: parameters must be contiguous")

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter with a gradient; returns ``closure()``'s loss (or None)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = [(p, group) for group in self.param_groups for p in group["params"] if p.grad is not None]
        for p, _ in work:
            self._check(p, p.grad)  # every parameter checked before any is written
        for p, group in work:
            state = self._state_of(p, group)
            b1, b2 = group["betas"]
            compensation = state.get("compensation")
            any_precision_adamw(
                _views.host_view(p),
                _views.host_view(state["exp_avg"]),
                _views.host_view(state["exp_avg_sq"]),
                _views.host_view(p.grad.contiguous()),
                int(state["step"].item()) + 1,
                None if compensation is None else _views.host_view(compensation),
                lr=group["lr"],
                beta1=b1,
                beta2=b2,
                eps=group["eps"],
                weight_decay=group["weight_decay"],
            )
            state["step"] += 1
        return loss
