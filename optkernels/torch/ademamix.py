"""``AdEMAMix``: bitsandbytes' ``AdEMAMix`` (same arguments and defaults; 32-bit state) over optkernels'
AdEMAMix kernel (MODERN §10)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels.ademamix import _ademamix, ademamix_scalars, ademamix_schedule
from ._base import KernelOptimizer

__all__ = ["AdEMAMix"]

_BNB_WRAPPED = "__bnb_optimizer_quant_state__"


def _check(lr: float, betas: tuple, eps: float, weight_decay: float) -> None:
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class AdEMAMix(KernelOptimizer):
    r"""bitsandbytes' ``AdEMAMix`` (32-bit), computed by the ``ademamix`` kernel (t: the parameter's step,
    from 1)::

        α_t, β3_t = the warmups (t_alpha, t_beta3; see optkernels.kernels.ademamix.ademamix_schedule)
        m1 ← β1·m1 + (1 − β1)·g;  m2 ← β3_t·m2 + (1 − β3_t)·g;  nu ← β2·nu + (1 − β2)·g²
        w ← w − lr·(u + wd·w),  u = (m1/(1 − β1^t) + α_t·m2) / (√nu/√(1 − β2^t) + ε)

    The decay acts on the old parameter, as bitsandbytes' reference class and CPU backend do;
    ``decay_after_update=True`` gives its CUDA kernel's order, ``w ← (w − lr·u)·(1 − lr·wd)``.

    Args:
        params: an iterable of tensors or of parameter-group dicts.
        lr: learning rate (default 1e-3).
        betas: ``(β1, β2, β3)`` (default (0.9, 0.999, 0.9999)).
        alpha: weight of the slow momentum m2 (default 5.0).
        t_alpha, t_beta3: warmup lengths (default None: none).
        eps: default 1e-8.
        weight_decay: default 1e-2.
        optim_bits: 32 only (bitsandbytes' 8-bit block-quantised state is not element-wise; not provided).
        min_8bit_size, is_paged: accepted for compatibility; no effect.
        decay_after_update: bitsandbytes' CUDA decay order (keyword-only; default False).

    State: ``step``, ``m1``, ``m2``, ``nu`` in the parameter's dtype (bitsandbytes keeps float32
    ``state1`` = stack(m1, m2) and ``state2`` = nu, and an int step; :meth:`load_state_dict` converts a
    bitsandbytes state).

    Raises:
        ValueError: bitsandbytes' messages for out-of-range hyper-parameters; ``optim_bits != 32``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999, 0.9999),
        alpha: float = 5.0,
        t_alpha: int | None = None,
        t_beta3: int | None = None,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        optim_bits: int = 32,
        min_8bit_size: int = 4096,
        is_paged: bool = False,
        *,
        decay_after_update: bool = False,
    ):
        _check(lr, betas, eps, weight_decay)
        if optim_bits != 32:
            raise ValueError(f"optkernels' AdEMAMix keeps 32-bit state only, got optim_bits={optim_bits}")
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            alpha=alpha,
            t_alpha=t_alpha,
            t_beta3=t_beta3,
            decay_after_update=decay_after_update,
        )
        super().__init__(params, defaults)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict``; a bitsandbytes ``AdEMAMix`` state (``state1`` = stack(m1, m2),
        ``state2`` = nu, an int ``step``) is converted to this class's names and the parameters' dtype."""
        super().load_state_dict(state_dict)
        for p, state in self.state.items():
            state.update(state.pop(_BNB_WRAPPED, {}))  # bitsandbytes nests its tensors in a dict
            if "state1" in state:
                m1_m2, nu = state.pop("state1"), state.pop("state2")
                state["m1"], state["m2"] = (m.to(p.dtype, copy=True).contiguous() for m in m1_m2)
                state["nu"] = nu.to(p.dtype, copy=True).contiguous()
                state["step"] = torch.tensor(float(state.get("step", 0)), dtype=torch.float32)
                for key in [k for k in state if k not in ("m1", "m2", "nu", "step")]:
                    del state[key]  # bitsandbytes' 8-bit maps and norms have no counterpart here

    def _check_hyper(self, group: dict) -> None:
        _check(group["lr"], group["betas"], group["eps"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        return _ademamix, ("m1", "m2", "nu")

    def _prestep(self, group: dict) -> Any:
        return None

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2, beta3 = group["betas"]
        alpha, beta3 = ademamix_schedule(
            step, group["alpha"], beta1, beta3, group["t_alpha"], group["t_beta3"]
        )
        return ademamix_scalars(
            dtype,
            float(group["lr"]),
            beta1,
            beta2,
            beta3,
            alpha,
            group["eps"],
            group["weight_decay"],
            step,
            group.get("decay_after_update", False),
        )
