"""``RowWiseAdagrad`` over torch tensors: FBGEMM's exact row-wise Adagrad (state ``sum``, one float per row),
taking dense gradients and the sparse COO gradients of ``nn.Embedding(sparse=True)`` as they are (duplicate
rows merged by the kernel, deterministically)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..optimizers.rowwise_adagrad import check_rowwise_hyper
from ..sparse import rowwise_adagrad
from . import _views
from ._base import KernelOptimizer, _contiguous, _Work
from ._sparse import row_sparse

__all__ = ["RowWiseAdagrad"]


class RowWiseAdagrad(KernelOptimizer):
    r"""FBGEMM's ``EXACT_ROWWISE_ADAGRAD`` as a torch optimizer (:func:`optkernels.sparse.rowwise_adagrad`):
    per updated row, :math:`h \leftarrow h + \mathrm{mean}(\hat g^2)`,
    :math:`w \leftarrow c\,w - \frac{\mathrm{lr}}{\sqrt{h}+\epsilon} g`, then the optional row-norm clip.

    Parameters
    ----------
    params : iterable
        Tensors (rows along dim 0) or parameter groups.
    lr, eps, weight_decay : float
        Defaults 0.01, 1e-8, 0.0.
    weight_decay_mode : str
        ``'none'``, ``'l2'`` or ``'decoupled'``.
    max_norm : float
        > 0: the row-norm clip. Default 0.0.

    State per parameter: ``sum``, float32 ``(p.shape[0],)`` (the parameter's dtype for float64). Dense
    gradients update every row; sparse COO gradients (sparse_dim 1) only their rows.
    """

    sparse_grads = "yes"
    counts_steps = False

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.01,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        weight_decay_mode: str = "none",
        max_norm: float = 0.0,
    ):
        super().__init__(params, check_rowwise_hyper(lr, eps, weight_decay, weight_decay_mode, max_norm))

    def _kernel(self, group: dict) -> tuple:
        return None, ("sum",)

    def _check_sparse(self, p: torch.Tensor, g: torch.Tensor) -> None:
        super()._check_sparse(p, g)
        if g.sparse_dim() != 1:
            raise ValueError(
                f"RowWiseAdagrad: sparse gradients must be row-sparse (sparse_dim 1, as "
                f"nn.Embedding(sparse=True) gives), got sparse_dim {g.sparse_dim()}"
            )

    def _state_fits(self, p: torch.Tensor, group: dict) -> bool:
        """The state is empty or its ``sum`` is one contiguous float per row of ``p``, on ``p``'s device."""
        h = self.state.get(p, {}).get("sum")
        return h is None or (
            isinstance(h, torch.Tensor)
            and h.shape == p.shape[:1]
            and h.device == p.device
            and h.is_contiguous()
        )

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
        return torch.zeros(p.shape[:1], dtype=dtype, device=p.device)

    def _hyper(self, group: dict) -> dict:
        return dict(
            lr=float(group["lr"]),
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            weight_decay_mode=group["weight_decay_mode"],
            max_norm=group["max_norm"],
        )

    def _dense_step(self, work: _Work) -> None:
        group, params, grads = work.group, work.dense, work.grads
        for p, g in zip(params, grads):
            state = self._state_of(p, group)
            kind = _views.device_kind(p)
            rowwise_adagrad(
                _views.view(p, kind),
                _views.view(state["sum"], kind),
                _views.view(_contiguous(g), kind),
                **self._hyper(group),
            )

    def _sparse_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor, state: dict) -> None:
        kind = _views.device_kind(p)
        indices, values = row_sparse(grad, kind)
        rowwise_adagrad(
            _views.view(p, kind), _views.view(state["sum"], kind), values, indices, **self._hyper(group)
        )
