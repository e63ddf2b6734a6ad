"""``RowWiseAdagrad``: FBGEMM's exact row-wise Adagrad for embedding tables over NumPy or CUDA arrays, one
float accumulator per row (state ``sum``), dense or row-sparse gradients."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels._checks import HALF_DTYPES
from ..sparse import RowSparse, rowwise_adagrad
from ..sparse.rowwise_adagrad import MODES
from .lowbit import ArrayOptimizer, to_device, to_host

__all__ = ["RowWiseAdagrad"]


def check_rowwise_hyper(lr: Any, eps: Any, weight_decay: Any, weight_decay_mode: Any, max_norm: Any) -> dict:
    """The constructor's checks (ValueError), shared with the torch drop-in; returns the group defaults."""
    for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay), ("max_norm", max_norm)):
        if not 0.0 <= value:
            raise ValueError(f"Invalid {name} value: {value}")
    if weight_decay_mode not in MODES:
        raise ValueError(f"weight_decay_mode must be one of {MODES}, got {weight_decay_mode!r}")
    return dict(
        lr=lr, eps=eps, weight_decay=weight_decay, weight_decay_mode=weight_decay_mode, max_norm=max_norm
    )


def sum_dtype(dtype: Any) -> np.dtype:
    """The accumulator's dtype: the parameter's, float32 for float16/bfloat16 parameters."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF_DTYPES else np.dtype(dtype)


class RowWiseAdagrad(ArrayOptimizer):
    r"""FBGEMM's ``EXACT_ROWWISE_ADAGRAD`` (:func:`optkernels.sparse.rowwise_adagrad`): per updated row
    :math:`i`, :math:`h_i \leftarrow h_i + \mathrm{mean}_d(\hat g_d^2)`,
    :math:`w \leftarrow c\,w - \frac{\mathrm{lr}}{\sqrt{h_i}+\epsilon} g`, then the optional row-norm clip.

    Parameters
    ----------
    params : list
        NumPy or CUDA arrays (tables, rows along axis 0), :class:`Parameter` objects, or group dicts.
    lr : float
        Default 0.01.
    eps : float
        Outside the square root. Default 1e-8.
    weight_decay : float
        Default 0.0.
    weight_decay_mode : str
        ``'none'``, ``'l2'`` (folded into the row statistic, :math:`c = 1 - \mu\,\mathrm{wd}`) or
        ``'decoupled'`` (:math:`c = 1 - \mathrm{lr}\,\mathrm{wd}`).
    max_norm : float
        > 0: rows whose norm exceeds it after the update are scaled back to it. Default 0.0 (off).

    Notes
    -----
    ``step(grads)``: one gradient per parameter (None: skip), dense or a
    :class:`~optkernels.sparse.RowSparse` (duplicate indices summed first; only those rows change). State
    per parameter: ``sum``, one accumulator per row (float32 for float16/bfloat16 tables).
    """

    def __init__(
        self,
        params: Any,
        lr: float = 0.01,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        weight_decay_mode: str = "none",
        max_norm: float = 0.0,
    ):
        self._groups(params, check_rowwise_hyper(lr, eps, weight_decay, weight_decay_mode, max_norm))

    def step(self, grads: Any) -> None:
        """One update of every parameter whose gradient is not None."""
        grads = list(grads)
        self._check_grads(grads, sparse=lambda g: isinstance(g, RowSparse))
        for group in self.param_groups:
            for k in group["params"]:
                g = grads[k]
                if g is None:
                    continue
                p = self._arrays[k]
                if k not in self.state:
                    self.state[k] = {
                        "sum": to_device(np.zeros(p.shape[:1], sum_dtype(p.dtype)), self._device(k))
                    }
                rowwise_adagrad(
                    p,
                    self.state[k]["sum"],
                    g,
                    lr=group["lr"],
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    weight_decay_mode=group["weight_decay_mode"],
                    max_norm=group["max_norm"],
                )

    def state_dict(self) -> dict:
        """``{'state': {k: {'sum': array}}, 'param_groups': [...]}`` (host copies)."""
        return {
            "state": {k: {"sum": to_host(s["sum"])} for k, s in self.state.items()},
            "param_groups": [dict(g, params=list(g["params"])) for g in self.param_groups],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` (groups must have the same sizes)."""
        ids = self._load_groups(state_dict)
        self.state = {
            ids[old]: {"sum": to_device(np.array(s["sum"]), self._device(ids[old]))}
            for old, s in state_dict["state"].items()
        }
