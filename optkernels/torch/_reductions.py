"""Whether :mod:`optkernels.kernels.torch_reductions` gives this process's torch's bits.

The order in which torch's CPU kernels add (their vector width, their tails) is a property of the torch
build and of the CPU capability it runs with, so before Adafactor's multi-tensor step uses those kernels in
place of torch's ``linalg_vector_norm`` and ``mean``, :func:`matches_torch` compares them with torch once
per dtype and process, on tensors whose sizes cover each branch (vector bodies, the tails, a single
element, the cascade's levels). Where they differ, the step calls torch for its reductions.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from ..kernels import torch_many as M
from ..kernels.torch_family import lerp_scalars
from . import _views

__all__ = ["matches_torch"]

#: full-tensor norms probed: every tail of the 8- and 4-lane bodies, one element, the cascade's levels
_VECTOR_SIZES = (*range(1, 26), 64, 100, 1000, 4099)
#: gradients of matrices probed (row norms, column norms, the row means)
_MATRIX_SHAPES = ((7, 5), (1, 9), (9, 1), (3, 4, 5), (2, 6, 1), (20, 33), (70, 16), (300, 12), (1, 1))


def matches_torch(dtype: torch.dtype, matrices: bool = True) -> bool:
    """Whether the kernels' norms (and, with ``matrices``, the factored moments' row and column norms and
    row means) of ``dtype`` (float32 or float64) CPU tensors are this torch's bits, on the probe tensors
    (each part checked once per dtype and process, when a step first needs it: a step over vectors alone
    compiles no matrix kernel).

    Parameters
    ----------
    dtype : torch.dtype
        ``torch.float32`` or ``torch.float64``.
    matrices : bool
        Whether the step has matrices (factored moments) too.

    Returns
    -------
    bool
        True where every probe gives torch's bits.
    """
    return _norms_match(dtype) and (not matrices or _factored_match(dtype))


@functools.cache
def _norms_match(dtype: torch.dtype) -> bool:
    """The full-tensor norms on the vector probes."""
    np_dtype = _views.FLOAT_DTYPES[dtype]
    like = np.empty(0, np_dtype)
    gen = torch.Generator().manual_seed(20261126)
    vectors = [torch.randn(n, generator=gen, dtype=dtype) * 3 for n in _VECTOR_SIZES]
    tasks = np.array([[t, 0, v.numel(), v.numel()] for t, v in enumerate(vectors)], np.int64)
    ours = M.tensor_norms(tasks, _views.addresses(vectors)[0], like)
    theirs = np.array([torch.linalg.vector_norm(v).item() for v in vectors])
    return bool(np.array_equal(ours, theirs))


@functools.cache
def _factored_match(dtype: torch.dtype) -> bool:
    """The factored moments on the matrix probes."""
    np_dtype = _views.FLOAT_DTYPES[dtype]
    like = np.empty(0, np_dtype)
    gen = torch.Generator().manual_seed(20261127)
    grads = [torch.randn(s, generator=gen, dtype=dtype) for s in _MATRIX_SHAPES]
    rows = [torch.rand(list(g.shape[:-1]) + [1], generator=gen, dtype=dtype) for g in grads]
    cols = [torch.rand(list(g.shape[:-2]) + [1, g.shape[-1]], generator=gen, dtype=dtype) for g in grads]
    weight = 0.25
    expected = []
    for g, r, c in zip(grads, rows, cols):
        r2 = r.lerp(torch.linalg.vector_norm(g, 2, -1, True).square_().div_(g.size(-1)), weight)
        c2 = c.lerp(torch.linalg.vector_norm(g, 2, -2, True).square_().div_(g.size(-2)), weight)
        expected.append((r2, c2, r2.mean(dim=-2, keepdim=True).reshape(-1).numpy()))
    batches = [g.numel() // (g.shape[-2] * g.shape[-1]) for g in grads]
    firsts = np.cumsum([0] + batches)
    dims = np.array([batches, [g.shape[-2] for g in grads], [g.shape[-1] for g in grads], firsts[:-1]])
    divisors = np.array([[g.shape[-1] for g in grads], [g.shape[-2] for g in grads]], np_dtype)
    w, one_minus_w, small = lerp_scalars(weight, np_dtype)
    weights = np.array([[w] * len(grads), [one_minus_w] * len(grads)], np_dtype)
    means = np.empty(firsts[-1], np_dtype)
    M.factored_moments(
        np.array([[t, 0, g.numel(), g.numel()] for t, g in enumerate(grads)], np.int64),
        _views.addresses(grads, rows, cols),
        dims.astype(np.int64),
        divisors,
        weights,
        np.full(len(grads), small, np.bool_),
        means,
        like,
    )
    return all(
        torch.equal(r, r2) and torch.equal(c, c2) and np.array_equal(means[firsts[k] : firsts[k + 1]], m2)
        for k, (r, c, (r2, c2, m2)) in enumerate(zip(rows, cols, expected))
    )
