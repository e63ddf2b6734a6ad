"""A kernel for the adapter whose square roots are torch's own.

torch's CPU ``sqrt`` is not correctly rounded (this wheel's is MKL's vector sqrt; which inputs come out 1 ulp
from IEEE depends on the CPU MKL dispatches to). A rule with a root is therefore given as two element
functions (:mod:`optkernels.kernels.torch_family`): ``moments`` updates the state and writes each root's
argument into scratch arrays, ``apply`` reads the roots back. :class:`TorchSqrtKernel` runs them over a
group's multi-tensor table with ``torch.sqrt_`` over the scratch in between, so the roots are torch's bits on
any CPU torch runs on. Single-tensor launches (CUDA, float16/bfloat16 CPU tensors) take the one-pass
function with IEEE roots.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch

from ..kernels._elementwise import Elementwise
from ..kernels._multi_tensor import TensorList

__all__ = ["TorchSqrtKernel"]


class TorchSqrtKernel:
    """``moments`` → torch ``sqrt_`` of the scratch → ``apply``, as one kernel of the adapter.

    Args:
        fused: the one-pass element function ``f(i, param, *states, grad, *scalars)`` (IEEE roots).
        moments, apply: ``f(i, param, *states, *roots, grad, *scalars)``, with the same scalars as ``fused``.
        n_roots: how many scratch arrays (roots) the two phases share.
    """

    def __init__(self, fused: Elementwise, moments: Elementwise, apply: Elementwise, n_roots: int):
        self.fused, self.moments, self.apply, self.n_roots = fused, moments, apply, n_roots
        self.__name__ = fused.__name__
        self._tables: weakref.WeakKeyDictionary[TensorList, tuple] = weakref.WeakKeyDictionary()

    def launch(self, device: str, n: int, *args: Any) -> None:
        """One tensor (CUDA, or float16/bfloat16 on the CPU): the one-pass function."""
        self.fused.launch(device, n, *args)

    def _extended(self, tensors: TensorList) -> tuple[TensorList, torch.Tensor]:
        """The table with the scratch rows inserted before the gradient's, and the scratch (cached per
        table: the adapter keeps one table per plan)."""
        cached = self._tables.get(tensors)
        if cached is None:
            sizes = np.asarray(tensors.sizes, np.int64)
            total = int(sizes.sum())
            scratch = torch.empty(self.n_roots * total, dtype=torch.from_numpy(tensors.like).dtype)
            ext = TensorList(
                tensors.sizes, tensors.dtype, tensors.addresses.shape[0] + self.n_roots, tensors.chunk
            )
            offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            base, item = scratch.data_ptr(), tensors.dtype.itemsize
            for r in range(self.n_roots):
                ext.addresses[tensors.addresses.shape[0] - 1 + r] = base + (r * total + offsets) * item
            cached = self._tables[tensors] = (ext, scratch)
        return cached

    def launch_many(
        self,
        device: str,
        tensors: TensorList,
        *scalars: Any,
        chunks: Any = None,
        prologue: Any = None,
        prologue_scalars: tuple = (),
    ) -> None:
        """Every tensor of the table (``chunks``: a subset), roots by torch; ``prologue`` is not supported
        (the element functions do torch's gradient pre-step themselves)."""
        if prologue is not None:
            raise ValueError(f"{self.__name__}: the pre-step is part of the element functions")
        ext, scratch = self._extended(tensors)
        k = tensors.addresses.shape[0] - 1
        ext.addresses[:k] = tensors.addresses[:k]
        ext.addresses[-1] = tensors.addresses[-1]
        self.moments.launch_many(device, ext, *scalars, chunks=chunks)
        scratch.sqrt_()
        self.apply.launch_many(device, ext, *scalars, chunks=chunks)
