"""torch sparse COO gradients as optkernels' row-sparse ``(indices, values)``, without coalescing.

``nn.Embedding(sparse=True)`` gives an uncoalesced COO tensor whose indices repeat a row for every lookup;
optkernels' sparse kernels merge the duplicates themselves (deterministically, in order of appearance), so
the COO tensor's own index and value buffers are passed as they are: NumPy views, no copy, no sort. A
gradient with ``sparse_dim`` k > 1 (``grad.to_sparse()`` of a matrix) is the same thing over the
parameter seen as ``prod(shape[:k])`` rows of ``shape[k:]``: its k indices are combined into one
(row-major), the only copy made.
"""
from __future__ import annotations

from typing import Any

import torch

from . import _views

__all__ = ["row_sparse", "row_view"]


def row_view(t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor ``t`` (a parameter or its state) seen as the rows ``grad``'s indices address:
    ``t`` itself for ``sparse_dim`` 1, else a view of shape ``(prod(shape[:k]), *shape[k:])``."""
    k = grad.sparse_dim()
    return t if k == 1 else t.detach().view(-1, *t.shape[k:])


def row_sparse(grad: torch.Tensor, kind: str, negate: bool = False) -> tuple[Any, Any]:
    """``(indices, values)`` of a row-sparse COO gradient (sparse_dim 1) as arrays sharing its memory (NumPy
    for ``kind`` 'cpu', CUDA arrays for 'cuda'); ``negate``: the values negated (a new tensor of the values'
    size, not the table's: torch's maximize)."""
    indices = grad._indices()
    if indices.shape[0] == 1:
        indices = indices[0]
    else:                       # row-major combination of the k indices
        sizes = grad.shape[:indices.shape[0]]
        strides = [1] * len(sizes)
        for d in range(len(sizes) - 2, -1, -1):
            strides[d] = strides[d + 1] * sizes[d + 1]
        indices = (indices * torch.tensor(strides, dtype=indices.dtype, device=indices.device)[:, None]).sum(0)
    values = grad._values().detach()
    if negate:
        values = -values
    if not values.is_contiguous():
        values = values.contiguous()
    if not indices.is_contiguous():
        indices = indices.contiguous()
    return _views.view(indices, kind), _views.view(values, kind)
