"""``RowWiseAdagrad`` over torch tensors: FBGEMM's exact row-wise Adagrad (state ``sum``, one float per row),
taking dense gradients and the sparse COO gradients of ``nn.Embedding(sparse=True)`` as they are (duplicate
rows merged by the kernel, deterministically)."""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ..optimizers.rowwise_adagrad import check_rowwise_hyper
from ..sparse import rowwise_adagrad
from ..sparse._indices import out_of_range_error
from ..sparse.rowwise_adagrad import (
    PlainTable,
    kept_launch,
    plain_scalars,
    plain_table,
    run_kept,
)
from . import _memory, _views
from ._base import KernelOptimizer, _contiguous, _Work, unwrapped
from ._sparse import row_sparse

__all__ = ["RowWiseAdagrad"]

#: Parameter dtypes of the short step (:meth:`RowWiseAdagrad._table_step`): the kernel's own, no copies.
_TABLE_DTYPES = (torch.float32, torch.float64)
_SPARSE_COO, _STRIDED = torch.sparse_coo, torch.strided

#: A group's hyper-parameters, in the order of :func:`~optkernels.sparse.rowwise_adagrad.plain_scalars`.
_HYPER = operator.itemgetter("lr", "eps", "weight_decay", "weight_decay_mode", "max_norm")
#: The types of hyper-parameter values that the short table step may take as unchanged while they are the
#: same object (not a tensor: torch's schedulers change a tensor lr in place).
_IMMUTABLE = frozenset((float, int, str, bool))


def _unowned_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy array over the memory of the C-contiguous CPU tensor ``t`` that does not keep it alive (a
    view kept between steps must not hold a table that was replaced): used only while ``t``'s address,
    shape and dtype are seen unchanged (:meth:`_TableViews.fits`)."""
    view = t.detach().numpy()
    memory = (ctypes.c_char * view.nbytes).from_address(view.ctypes.data)
    return np.frombuffer(memoryview(memory).cast("B"), view.dtype).reshape(view.shape)


class _TableViews:
    """The plain call's table (:class:`~optkernels.sparse.rowwise_adagrad.PlainTable`) over NumPy views of
    a parameter and its ``sum`` state, kept between steps with what makes the views right: each tensor's
    address, shape and dtype (C-contiguous CPU tensors), and the hyper-parameters of its scalars."""

    __slots__ = ("p_address", "h_address", "shape", "h_shape", "dtype", "hyper", "plain")

    def __init__(self, p: torch.Tensor, h: torch.Tensor, plain: PlainTable) -> None:
        self.p_address, self.h_address = p.data_ptr(), h.data_ptr()
        self.shape, self.h_shape, self.dtype = p.shape, h.shape, p.dtype
        self.hyper: tuple = ()
        self.plain = plain

    @classmethod
    def of(cls, p: torch.Tensor, h: Any) -> _TableViews | None:
        """The views of a 2-D float32/float64 C-contiguous CPU table ``p`` and its ``sum`` state ``h``
        (one float of its dtype per row, C-contiguous, on the CPU), or None (where the plain call does not
        take them, or nothing is to be updated)."""
        dtype = p.dtype
        if p.layout is not _STRIDED or dtype not in _TABLE_DTYPES or not _views.host_cpu(p):
            return None
        if not (p.is_contiguous() and p.dim() == 2 and p.numel()):
            return None
        if not (
            isinstance(h, torch.Tensor)
            and h.layout is _STRIDED
            and h.dtype is dtype
            and h.is_cpu
            and h.shape == p.shape[:1]
            and h.is_contiguous()
        ):
            return None
        # the scalars come with the group's hyper-parameters (see table); these are placeholders
        plain = plain_table(_unowned_view(p), _unowned_view(h), 0.0, 0.0, 0.0, "none", 0.0)
        return None if plain is None else cls(p, h, plain)

    def fits(self, p: torch.Tensor, h: Any) -> bool:
        """Whether ``p`` and ``h`` are still the tensors of these views: the same address, shape and dtype,
        C-contiguous CPU tensors (a replaced or resized parameter or state is not)."""
        dtype = self.dtype
        return (
            p.layout is _STRIDED
            and p.dtype is dtype
            and _views.host_cpu(p)
            and p.is_contiguous()
            and p.data_ptr() == self.p_address
            and p.shape == self.shape
            and isinstance(h, torch.Tensor)
            and h.dtype is dtype
            and h.is_cpu
            and h.is_contiguous()
            and h.layout is _STRIDED
            and h.data_ptr() == self.h_address
            and h.shape == self.h_shape
        )

    def table(self, hyper: tuple) -> PlainTable | None:
        """The plain table with the scalars of ``hyper`` (a group's :data:`_HYPER`, ``lr`` taken as a
        float), made again where a value is not the same object as before or may change in place (a tensor);
        None where the plain call does not take them."""
        lr, eps, weight_decay, mode, max_norm = hyper
        kept = self.hyper  # () until scalars are kept, and then only for values of _IMMUTABLE types
        if (
            kept
            and lr is kept[0]
            and eps is kept[1]
            and weight_decay is kept[2]
            and mode is kept[3]
            and max_norm is kept[4]
        ):
            return self.plain
        scalars = plain_scalars(self.plain.dtype, float(lr), eps, weight_decay, mode, max_norm, self.shape[1])
        if scalars is None:
            return None
        self.plain.scalars = scalars
        # a tensor lr changes in place: its scalars are made again each step
        self.hyper = hyper if all(type(value) in _IMMUTABLE for value in hyper) else ()
        return self.plain


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
        hooks, profiler or gradient scaler, where the kernel's plain call takes the arrays
        (:func:`~optkernels.sparse.rowwise_adagrad.plain_gradient`'s checks, read from torch): the kernel on NumPy views
        after the checks of the full step, in a few attribute reads (between training steps the caches
        are cold, where the full step's general sorting costs about as much as a tenth of the update). The
        views of the table and its state are kept (:class:`_TableViews`) while the tensors keep their
        memory and layout. True if done; False, nothing written, for anything else: the full step then
        decides (and words the errors)."""
        groups = self.param_groups
        if len(groups) != 1 or not self._unobserved():
            return False
        attributes = self.__dict__  # torch.amp.GradScaler's attributes (see KernelOptimizer._unscale)
        if attributes.get("found_inf") is not None or attributes.get("grad_scale") is not None:
            return False
        group = groups[0]
        params = group["params"]
        if len(params) != 1 or group.get("differentiable") or group.get("capturable"):
            return False
        p = params[0]
        g = p.grad
        if g is None or g.layout is not _SPARSE_COO or not g.is_cpu:
            return False
        h = self.state.get(p, {}).get("sum")
        views = attributes.get("_table_views")
        if views is None or not views.fits(p, h):
            views = attributes["_table_views"] = _TableViews.of(p, h)
            if views is None:
                return False
        if g.shape != views.shape:
            return False
        table = views.table(_HYPER(group))
        if table is None:
            return False
        # the gradient's facts from torch (cheaper than NumPy's when cold); its values have the shape
        # (nnz, row length) and its indices (sparse_dim, nnz), which torch's COO tensors enforce
        rows, values = g._indices(), g._values()
        if values.dtype is not views.dtype or not (values.is_contiguous() and rows.is_contiguous()):
            return False
        address = values.data_ptr()
        sparse_dim, count = rows.shape
        itemsize = table.dtype.itemsize
        if sparse_dim != 1 or not count or address % itemsize:
            return False
        if not table.apart(address, count * table.row_len * itemsize):
            return False
        self._check_hyper(group)
        # the gradient's memory by its addresses (its NumPy views cost more than the rest of the launch)
        bad = run_kept(table, kept_launch(table, count, False), address, rows.data_ptr())
        if bad >= 0:
            raise out_of_range_error("indices", rows.numpy()[0], bad, table.rows)
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
