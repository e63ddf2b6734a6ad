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

from ..kernels.torch_family import launch_small
from . import _views

__all__ = ["coalesced_rows", "launch_rows", "row_sparse"]


def _row_indices(grad: torch.Tensor) -> torch.Tensor:
    """The row index of each of ``grad``'s values: its one index row for ``sparse_dim`` 1, else the
    row-major combination of its k index rows (a new tensor), a row of the parameter seen as
    ``prod(shape[:k])`` rows of ``shape[k:]``."""
    indices = grad._indices()
    if indices.shape[0] == 1:
        return indices[0]
    sizes = grad.shape[: indices.shape[0]]
    strides = [1] * len(sizes)
    for d in range(len(sizes) - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    return (indices * torch.tensor(strides, dtype=indices.dtype, device=indices.device)[:, None]).sum(0)


def row_sparse(grad: torch.Tensor, kind: str, negate: bool = False) -> tuple[Any, Any]:
    """``(indices, values)`` of a sparse COO gradient as arrays sharing its memory (NumPy for ``kind`` 'cpu',
    CUDA arrays for 'cuda'; for ``sparse_dim`` k > 1 the indices combined row-major, a new array);
    ``negate``: the values negated (a new tensor of the values' size, not the table's: torch's maximize)."""
    indices = _row_indices(grad)
    values = grad._values().detach()
    if negate:
        values = -values
    if not values.is_contiguous():
        values = values.contiguous()
    if not indices.is_contiguous():
        indices = indices.contiguous()
    return _views.view(indices, kind), _views.view(values, kind)


def coalesced_rows(grad: torch.Tensor, kind: str, negate: bool = False) -> Any:
    """``(values, rows, width)`` of a sparse COO gradient coalesced by torch, as torch's sparse Adagrad and
    SparseAdam coalesce it (``negate``: ``-grad`` first, their ``maximize``): the values flat, the unique
    row indices (combined row-major for ``sparse_dim`` k > 1: rows of the parameter seen as
    ``prod(shape[:k])`` rows of ``shape[k:]``), the elements per row, as arrays for ``kind``; None if it
    has no values. A float16/bfloat16 gradient is summed in float32 (the half contract: float32 math, each
    updated tensor rounded once)."""
    if negate:
        grad = -grad
    if grad.dtype in _views.HALF_DTYPES:
        grad = grad.float()
    grad = grad.coalesce()
    values = grad._values().contiguous()
    if values.numel() == 0:
        return None
    rows = _row_indices(grad).contiguous()
    return _views.view(values, kind, flat=True), _views.view(rows, kind), values.numel() // max(len(rows), 1)


def launch_rows(kernel: Any, kind: str, tensors: list, rows: tuple, scalars: tuple) -> None:
    """Run the row-sparse element function ``kernel`` over ``tensors`` (the parameter and its state, updated in
    place, contiguous: seen flat, as the rows ``rows`` address) and :func:`coalesced_rows`' ``rows``. The
    kernel indexes rows indirectly, so float16/bfloat16 tensors are updated through float32 copies, each
    copied back (rounded once; untouched rows come back as they were)."""
    half = tensors[0].dtype in _views.HALF_DTYPES
    work = [t.detach().float() for t in tensors] if half else tensors
    arrays = [_views.view(t, kind, flat=True) for t in work]
    launch_small(kernel, kind, rows[0].size, *arrays, *rows, *scalars)  # serial for a few rows: same bits
    if half:
        for t, w in zip(tensors, work):
            t.detach().copy_(w)
