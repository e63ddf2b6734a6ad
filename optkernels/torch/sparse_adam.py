"""torch's SparseAdam over :mod:`optkernels.kernels.torch_rules`' row-sparse kernel: the gradient is coalesced
by torch (so duplicate rows are summed as torch sums them) and only the indexed rows are updated, with
torch's ``sparse_adam`` operations in its order and rounding, in one pass over the rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..kernels._elementwise import SERIAL_BELOW
from ..kernels._threading import for_this_process, parallel_launch
from ..kernels.torch_rules import (
    _torch_sparse_adam,
    sparse_adam_scalars,
    torch_sparse_adam_rows,
    torch_sparse_adam_rows_parallel,
)
from . import _views
from ._base import KernelOptimizer
from ._sparse import coalesced_rows, launch_rows
from ._sqrt import for_device
from .adam import host_lr

__all__ = ["SparseAdam"]


class SparseAdam(KernelOptimizer):
    r"""torch.optim.SparseAdam: for each row r in the coalesced gradient, ``m ← m + (g − m)(1 − β1)``,
    ``v ← v + (g² − v)(1 − β2)``, ``w ← w + (−lr·√(1−β2^t)/(1−β1^t))·(m/(√v + ε))``; other rows are
    untouched.

    Args: as torch (lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False). State: ``step`` (an int, as
    torch keeps it), ``exp_avg``, ``exp_avg_sq``. ``β1`` must be > 0 (the kernel's range).

    Raises:
        ValueError: torch's messages for out-of-range hyper-parameters.
        RuntimeError (at ``step``): a dense gradient.
    """

    sparse_grads = "only"
    tensor_steps = False

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        maximize: bool = False,
    ):
        defaults = dict(lr=lr, betas=betas, eps=eps, maximize=maximize)
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        lr, eps, betas = group["lr"], group["eps"], group["betas"]
        if isinstance(lr, torch.Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 < float(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 < betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 < betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")

    def _kernel(self, group: dict) -> tuple:
        return None, ("exp_avg", "exp_avg_sq")

    def _state_of(self, p: torch.Tensor, group: dict, sparse: bool = False) -> dict:
        state = self.state[p]
        if "step" not in state:
            state["step"] = 0
        return super()._state_of(p, group, sparse)

    def _sparse_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor, state: dict) -> None:
        state["step"] += 1
        step = int(state["step"])
        beta1, beta2 = group["betas"]
        kind = _views.device_kind(p)
        rows = coalesced_rows(grad, kind, group.get("maximize", False))
        if rows is None:
            return
        dtype = _views.FLOAT_DTYPES.get(p.dtype, _views.FLOAT_DTYPES[torch.float32])
        tensors = [p, state["exp_avg"], state["exp_avg_sq"]]
        scalars = sparse_adam_scalars(
            dtype, step, host_lr(group["lr"]), beta1, beta2, group["eps"], self._sqrt_kernel(dtype)
        )
        if kind == "cpu" and p.dtype in _views.FLOAT_DTYPES:  # whole rows: no index arithmetic per element
            arrays = [_views.host_view(t).reshape(-1) for t in tensors]
            if rows[0].size < SERIAL_BELOW:
                torch_sparse_adam_rows(*arrays, *rows, *scalars)
            else:
                with parallel_launch():
                    for_this_process(torch_sparse_adam_rows_parallel)(*arrays, *rows, *scalars)
            return
        launch_rows(_torch_sparse_adam, kind, tensors, rows, for_device(scalars, kind))
