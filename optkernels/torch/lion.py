"""``Lion``: lucidrains' ``lion_pytorch.Lion`` (same arguments, defaults and state) over optkernels' Lion
kernel (MODERN §8)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..kernels.lion import _lion, lion_scalars
from ._base import KernelOptimizer, _Plan

__all__ = ["Lion"]


class Lion(KernelOptimizer):
    r"""``lion_pytorch.Lion`` (lucidrains; the paper's google/automl rule), computed by the ``lion``
    kernel::

        w ← w·(1 − lr·wd)                                   (wd/lr₀ with decoupled_weight_decay)
        c = β1·exp_avg + (1 − β1)·g;  w ← w − lr·sign(c);  exp_avg ← β2·exp_avg + (1 − β2)·g

    Args:
        params: an iterable of tensors or of parameter-group dicts.
        lr: learning rate (default 1e-4), > 0.
        betas: ``(β1, β2)``, each in [0, 1] (default (0.9, 0.99)).
        weight_decay: decay coefficient, multiplied by the learning rate (default 0).
        use_triton: accepted for compatibility and ignored (lucidrains' Triton kernel is a CUDA variant of
            the same rule; optkernels runs its own kernel on the CPU and CUDA).
        decoupled_weight_decay: use ``wd/lr₀`` (``lr₀``: the constructor's ``lr``), so that the decay
            follows the learning-rate schedule's shape only (default False).

    State: ``exp_avg`` per parameter (no step counter), as lucidrains'.

    Raises:
        AssertionError: ``lr <= 0`` or a beta outside [0, 1] (lucidrains' asserts).
        TypeError: parameters that are not float32/float64 tensors (or float16/bfloat16 CPU tensors).
    """

    counts_steps = False
    numbered_steps = False

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-4,
        betas: tuple = (0.9, 0.99),
        weight_decay: float = 0.0,
        use_triton: bool = False,
        decoupled_weight_decay: bool = False,
    ):
        assert lr > 0.0
        assert all(0.0 <= beta <= 1.0 for beta in betas)
        self._init_lr = lr
        self.decoupled_wd = decoupled_weight_decay
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def _kernel(self, group: dict) -> tuple:
        return _lion, ("exp_avg",)

    def _prestep(self, group: dict) -> Any:
        return None

    def _private_steps(self, plan: _Plan) -> np.ndarray:
        if plan.private_steps is None:  # no step counter: every parameter launches at step 1
            plan.private_steps = np.ones(len(plan.params), np.int64)
        return plan.private_steps

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        lr, wd = group["lr"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        key = (lr, beta1, beta2, wd, self.decoupled_wd, self._init_lr, dtype)
        return self._remembered(key, lambda: self._lion_scalars(dtype, lr, beta1, beta2, wd))

    def _lion_scalars(self, dtype: np.dtype, lr: Any, beta1: Any, beta2: Any, wd: Any) -> tuple:
        if self.decoupled_wd:
            wd /= self._init_lr
        return lion_scalars(dtype, float(lr), beta1, beta2, wd)
