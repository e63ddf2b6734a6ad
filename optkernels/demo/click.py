"""A click-through model on a hashed embedding table: the table's gradient is row-sparse
(:class:`~optkernels.sparse.RowSparse`), the other parameters' gradients are dense."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..optimizers import Parameter
from ..sparse import RowSparse
from .metrics import logistic_loss, roc_auc

__all__ = ["ClickModel"]


class ClickModel:
    r"""Logistic regression on sum-pooled embeddings of hashed categorical features::

        e_i = Σ_f E[r_{i,f}]              (r_{i,f}: the table row of field f of example i, see hash_features)
        z_i = e_i·w + b;   p_i = sigmoid(z_i);   loss = mean logistic loss of z and the clicks

    The gradient of the table ``E`` touches only the rows of the batch: row ``r_{i,f}`` receives
    ``(∂loss/∂z_i)·w`` once per occurrence, so it is handed to the optimizer as a
    :class:`~optkernels.sparse.RowSparse` with one entry per (example, field), repeats included (the sparse
    kernels sum them). ``w`` and ``b`` get dense gradients.

    Initial values: ``E ~ N(0, 0.05²)``, ``w ~ N(0, 1/dim)``, ``b = 0``.

    Args:
        rows: the number of table rows (a power of two, as :func:`~optkernels.demo.data.hash_features`
            needs).
        dim: the embedding width.
        rng: the generator of the initial values.
        dtype: float32 (default) or float64.

    Attributes:
        table, weight, bias: the Parameters ``embedding.table`` ``(rows, dim)``, ``head.weight`` ``(dim,)``
            and ``head.bias`` ``(1,)``.
    """

    def __init__(self, rows: int, dim: int, rng: np.random.Generator, dtype: npt.DTypeLike = np.float32):
        self.dtype = np.dtype(dtype)
        table = (0.05 * rng.standard_normal((rows, dim))).astype(self.dtype)
        self.table = Parameter(table, "embedding.table")
        self.weight = Parameter((rng.standard_normal(dim) / np.sqrt(dim)).astype(self.dtype), "head.weight")
        self.bias = Parameter(np.zeros(1, self.dtype), "head.bias")

    @property
    def parameters(self) -> list[Parameter]:
        """The parameters in optimizer order: table, weight, bias."""
        return [self.table, self.weight, self.bias]

    def logits(self, rows: np.ndarray) -> np.ndarray:
        """The click log-odds ``z`` of examples given by their table rows ``(n, fields)``; shape ``(n,)``."""
        pooled = self.table.data[rows].sum(axis=1)
        return pooled @ self.weight.data + self.bias.data[0]

    def loss_and_gradients(
        self, rows: np.ndarray, clicks: np.ndarray
    ) -> tuple[float, list[RowSparse | np.ndarray]]:
        r"""The loss on a batch and the gradients::

            δ_i = (p_i − y_i)/n;   ∂E = RowSparse(rows.ravel(), repeat(δ_i·w, fields));
            ∂w = Σ_i δ_i·e_i;      ∂b = Σ_i δ_i

        Args:
            rows: int64 table rows ``(n, fields)``.
            clicks: float32 targets ``(n,)`` of 0 and 1.

        Returns:
            ``(loss, [∂E as RowSparse, ∂w, ∂b])``, in :attr:`parameters` order.
        """
        n, fields = rows.shape
        pooled = self.table.data[rows].sum(axis=1)
        z = pooled @ self.weight.data + self.bias.data[0]
        loss, delta = logistic_loss(z, clicks.astype(self.dtype, copy=False))
        row_grads = np.repeat(np.outer(delta, self.weight.data), fields, axis=0)
        table_grad = RowSparse(rows.reshape(-1), row_grads, self.table.shape)
        return loss, [table_grad, delta @ pooled, np.array([delta.sum()], self.dtype)]

    def evaluate(self, rows: np.ndarray, clicks: np.ndarray) -> tuple[float, float]:
        """``(mean loss, ROC AUC)`` on a data set."""
        z = self.logits(rows)
        return logistic_loss(z, clicks.astype(self.dtype, copy=False))[0], roc_auc(z, clicks)
