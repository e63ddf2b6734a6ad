"""The rest of optkernels' optimizer family over torch parameters, with MindSpore's names and arguments:
``LazyAdam``, ``FTRL``, ``ProximalAdagrad``, ``Lamb``, ``LARS``, ``AdaFactor``, ``Momentum``,
``AdamWeightDecay``.

Each wraps the NumPy optimizer class of :mod:`optkernels.optimizers` over :class:`Parameter`\\ s whose arrays
are views of the torch tensors' memory (NumPy for CPU tensors, CUDA arrays for CUDA ones): the very same
code runs, so the results are the same bits as that class on the same data. Gradients are read from
``p.grad`` at :meth:`step`: dense ones as views, ``nn.Embedding(sparse=True)``'s COO ones as
:class:`~optkernels.sparse.RowSparse` over the COO tensor's own buffers (uncoalesced: the optimizers merge
duplicates themselves); a parameter without a gradient gets a zero gradient, as a MindSpore graph would
give it. The learning rate is MindSpore's ``learning_rate`` (a number, a list per step, or an optkernels
schedule such as :class:`~optkernels.optimizers.WarmUpLR`), not torch's ``group['lr']``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from .. import optimizers as _numpy
from ..sparse import RowSparse
from . import _views
from ._sparse import row_sparse

__all__ = ["AdaFactor", "AdamWeightDecay", "FTRL", "LARS", "Lamb", "LazyAdam", "Momentum", "ProximalAdagrad"]


def _named(params: Any) -> tuple[list, Any]:
    """(tensors, what to give the NumPy class): tensors, ``(name, tensor)`` pairs (``named_parameters()``)
    or MindSpore group dicts of either, turned into :class:`optkernels.optimizers.Parameter` views."""
    items = list(params)
    tensors: list = []

    def convert(entries: Iterable, start: int) -> list:
        out = []
        for k, entry in enumerate(entries, start):
            name, t = entry if isinstance(entry, tuple) else (f"param{k}", entry)
            if not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params is {torch.typename(t)}"
                )
            if not t.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if t.dtype not in _views.STORAGE_DTYPES:
                raise TypeError(
                    f"parameter {name!r} has dtype {t.dtype}; optkernels updates float32, "
                    "float64, float16 and bfloat16 tensors"
                )
            tensors.append(t)
            out.append(_numpy.Parameter(_views.view(t, _views.device_kind(t)), name))
        return out

    if items and isinstance(items[0], dict):
        groups, start = [], 0
        for group in items:
            group = dict(group)
            entries = list(group["params"])
            group["params"] = convert(entries, start)
            start += len(entries)
            groups.append(group)
        return tensors, groups
    return tensors, convert(items, 0)


class _MindSporeOptimizer(torch.optim.Optimizer):
    """A torch optimizer driving one NumPy optimizer of :mod:`optkernels.optimizers` over views of the
    parameters (see the module docstring)."""

    _numpy_class: Any = None

    def __init__(self, params: Any, *args: Any, **kwargs: Any):
        tensors, converted = _named(params)
        self._inner = self._make_inner(converted, *args, **kwargs)
        self._zeros: dict[int, Any] = {}
        super().__init__(tensors, {})
        self._complete = True

    def _make_inner(self, converted: Any, *args: Any, **kwargs: Any) -> Any:
        return self._numpy_class(converted, *args, **kwargs)

    @property
    def inner(self) -> Any:
        """The NumPy optimizer doing the work (its ``global_step``, ``get_lr()``, ... are MindSpore's)."""
        return self._inner

    def add_param_group(self, param_group: dict) -> None:
        """Only at construction: MindSpore's optimizers take their parameters once."""
        if getattr(self, "_complete", False):
            raise NotImplementedError(
                f"{type(self).__name__} takes its parameters (and MindSpore groups) at construction"
            )
        super().add_param_group(param_group)

    def _gradient(self, p: torch.Tensor, k: int) -> Any:
        g = p.grad
        kind = _views.device_kind(p)
        if g is None:
            zero = self._zeros.get(k)
            if zero is None:
                zero = self._zeros[k] = _views.view(torch.zeros_like(p), kind)
            return zero
        if g.is_sparse:
            if g.sparse_dim() != 1:
                raise ValueError(f"{type(self).__name__}: sparse gradients must be row-sparse (sparse_dim 1)")
            indices, values = row_sparse(g, kind)
            return RowSparse(indices, values, tuple(p.shape))
        if g.dtype != p.dtype or g.shape != p.shape or g.device != p.device or not g.is_contiguous():
            raise ValueError(
                f"{type(self).__name__}: a gradient ({g.dtype}, {tuple(g.shape)}, {g.device}) "
                f"does not match its parameter ({p.dtype}, {tuple(p.shape)}, {p.device})"
            )
        return _views.view(g, kind)

    @torch.no_grad()
    def step(self, closure: Any | None = None) -> Any:
        """One MindSpore step of every parameter (a zero gradient for those without one); returns the
        closure's loss. Every check runs before any tensor is written."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"]]
        self._inner.step([self._gradient(p, k) for k, p in enumerate(params)])
        return loss

    def state_dict(self) -> dict:
        """The NumPy optimizer's ``state_dict`` (``{name: array}``, MindSpore's keys)."""
        return self._inner.state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore a :meth:`state_dict` into the state arrays, in place."""
        self._inner.load_state_dict(state_dict)


def _adapter(numpy_class: Any) -> type:
    doc = (
        f"MindSpore's ``{numpy_class.__name__}`` over torch parameters: "
        f":class:`optkernels.optimizers.{numpy_class.__name__}`'s arguments after ``params`` (tensors, "
        "``named_parameters()`` pairs or MindSpore group dicts), the same bits.\n\n"
        + inspect.cleandoc(numpy_class.__doc__ or "")
    )
    return type(
        numpy_class.__name__,
        (_MindSporeOptimizer,),
        {"_numpy_class": numpy_class, "__doc__": doc, "__module__": __name__},
    )


LazyAdam = _adapter(_numpy.LazyAdam)
FTRL = _adapter(_numpy.FTRL)
ProximalAdagrad = _adapter(_numpy.ProximalAdagrad)
Lamb = _adapter(_numpy.Lamb)
AdaFactor = _adapter(_numpy.AdaFactor)
Momentum = _adapter(_numpy.Momentum)
AdamWeightDecay = _adapter(_numpy.AdamWeightDecay)


class LARS(_MindSporeOptimizer):
    """MindSpore's ``LARS`` over torch parameters: ``LARS(optimizer, epsilon=1e-5, coefficient=0.001,
    use_clip=False, lars_filter=...)`` wraps another optimizer of this module (its parameters, its step);
    :class:`optkernels.optimizers.LARS` does the work."""

    def __init__(self, optimizer: _MindSporeOptimizer, *args: Any, **kwargs: Any):
        if not isinstance(optimizer, _MindSporeOptimizer):
            raise TypeError(
                f"For 'LARS', 'optimizer' must be one of optkernels.torch's MindSpore-named "
                f"optimizers, got {type(optimizer).__name__}"
            )
        self._inner = _numpy.LARS(optimizer.inner, *args, **kwargs)
        self._zeros = {}
        self._wrapped = optimizer
        torch.optim.Optimizer.__init__(self, [p for g in optimizer.param_groups for p in g["params"]], {})
        self._complete = True
