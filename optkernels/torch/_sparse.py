"""torch sparse COO gradients as optkernels' row-sparse ``(indices, values)``, without coalescing.

``nn.Embedding(sparse=True)`` gives an uncoalesced COO tensor whose indices repeat a row for every lookup;
optkernels' sparse kernels merge the duplicates themselves (deterministically, in order of appearance), so
the COO tensor's own index and value buffers are passed as they are: NumPy views, no copy, no sort.
"""
from __future__ import annotations

from typing import Any

import torch

from . import _views

__all__ = ["coalesced_rows", "launch_rows", "row_sparse"]


def row_sparse(grad: torch.Tensor, kind: str, negate: bool = False) -> tuple[Any, Any]:
    """``(indices, values)`` of a row-sparse COO gradient (sparse_dim 1) as arrays sharing its memory (NumPy
    for ``kind`` 'cpu', CUDA arrays for 'cuda'); ``negate``: the values negated (a new tensor of the values'
    size, not the table's: torch's maximize)."""
    indices = grad._indices()[0]
    values = grad._values().detach()
    if negate:
        values = -values
    if not values.is_contiguous():
        values = values.contiguous()
    if not indices.is_contiguous():
        indices = indices.contiguous()
    return _views.view(indices, kind), _views.view(values, kind)


def coalesced_rows(grad: torch.Tensor, kind: str, negate: bool = False) -> Any:
    """``(values, rows, width)`` of a row-sparse COO gradient (sparse_dim 1) coalesced by torch, as torch's
    sparse Adagrad and SparseAdam coalesce it (``negate``: ``-grad`` first, their ``maximize``): the
    values flat, the unique row indices, the elements per row, as arrays for ``kind``; None if it has no
    values. A float16/bfloat16 gradient is summed in float32 (the half contract: float32 math, each updated
    tensor rounded once)."""
    if negate:
        grad = -grad
    if grad.dtype in _views.HALF_DTYPES:
        grad = grad.float()
    grad = grad.coalesce()
    values = grad._values().contiguous()
    if values.numel() == 0:
        return None
    rows = grad._indices()[0].contiguous()
    return _views.view(values, kind, flat=True), _views.view(rows, kind), values.numel() // max(len(rows), 1)


def launch_rows(kernel: Any, kind: str, tensors: list, rows: tuple, scalars: tuple) -> None:
    """Run the row-sparse element function ``kernel`` over ``tensors`` (the parameter and its state, updated in
    place) and :func:`coalesced_rows`' ``rows``. The kernel indexes rows indirectly, so float16/bfloat16
    tensors are updated through float32 copies, each copied back (rounded once; untouched rows come back
    as they were)."""
    half = tensors[0].dtype in _views.HALF_DTYPES
    work = [t.detach().float() for t in tensors] if half else tensors
    kernel.launch(kind, rows[0].size, *(_views.view(t, kind, flat=True) for t in work), *rows, *scalars)
    if half:
        for t, w in zip(tensors, work):
            t.detach().copy_(w)
