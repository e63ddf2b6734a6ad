"""``RowWiseAdagrad`` over torch tensors: FBGEMM's exact row-wise Adagrad (state ``sum``, one float per row),
taking dense gradients and the sparse COO gradients of ``nn.Embedding(sparse=True)`` as they are (duplicate
rows merged by the kernel, deterministically)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..optimizers.rowwise_adagrad import check_rowwise_hyper
from ..sparse import rowwise_adagrad
from . import _memory, _views
from ._base import KernelOptimizer, _contiguous, _Work, unwrapped
from ._sparse import row_sparse

__all__ = ["RowWiseAdagrad"]

#: Parameter dtypes of the short step (:meth:`RowWiseAdagrad._table_step`): the kernel's own, no copies.
_TABLE_DTYPES = (torch.float32, torch.float64)


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

    Notes
    -----
    State per parameter: ``sum``, float32 ``(p.shape[0],)`` (the parameter's dtype for float64). Dense
    gradients update every row; sparse COO gradients (sparse_dim 1) only their rows. A CPU table of 4 MiB
    or more (on Linux) is moved onto transparent huge pages when its state is made (up to 1 GiB: a copy
    made once; larger tables are only advised), which changes no value.
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

    @unwrapped
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()``'s loss (or None). The
        common step of an embedding table (see :meth:`_table_step`) takes a short path, the rest
        :class:`KernelOptimizer`'s step."""
        if closure is None and self._table_step():
            return None
        return super().step(closure)

    def _table_step(self) -> bool:
        """The step of one float32/float64 CPU table with a row-sparse COO gradient (``sparse_dim`` 1, as
        ``nn.Embedding(sparse=True)`` gives) and its ``sum`` state already made, in one group, without
        hooks, profiler or gradient scaler: the kernel called with views of the tensors after the checks
        of the full step, in a few attribute reads (between training steps the caches are cold, where the
        full step's general sorting costs about as much as a tenth of the update). True if done; False,
        nothing written, for anything else: the full step then decides (and words the errors)."""
        if len(self.param_groups) != 1 or not self._unobserved():
            return False
        attributes = self.__dict__  # torch.amp.GradScaler's attributes (see KernelOptimizer._unscale)
        if attributes.get("found_inf") is not None or attributes.get("grad_scale") is not None:
            return False
        group = self.param_groups[0]
        params = group["params"]
        if len(params) != 1 or group.get("differentiable") or group.get("capturable"):
            return False
        p = params[0]
        g = p.grad
        if g is None or g.layout is not torch.sparse_coo or p.layout is not torch.strided:
            return False
        dtype = p.dtype
        if dtype not in _TABLE_DTYPES or not _views.host_cpu(p) or not p.is_contiguous():
            return False
        if g.dtype != dtype or not g.is_cpu or g.shape != p.shape or g.sparse_dim() != 1:
            return False
        h = self.state.get(p, {}).get("sum")
        if not (
            isinstance(h, torch.Tensor)
            and h.dtype == dtype
            and h.is_cpu
            and h.shape == p.shape[:1]
            and h.is_contiguous()
        ):
            return False
        # the index row through NumPy (torch's indexing is the slowest of these reads)
        indices, values = g._indices().numpy()[0], g._values()
        if not (indices.flags.c_contiguous and values.is_contiguous()):
            return False
        self._check_hyper(group)
        rowwise_adagrad(
            p.detach().numpy(),
            h.detach().numpy(),
            values.detach().numpy(),
            indices,
            **self._hyper(group),
        )
        return True

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
        """The ``sum`` state of ``p``, zeros; a large CPU table is moved onto huge pages as its state is made
        (:func:`._memory.advise_table`): each step reads and writes rows scattered over the table, each on
        a page of its own, where 4 KiB pages cost a TLB miss and a page walk per row."""
        _memory.advise_table(p)
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
