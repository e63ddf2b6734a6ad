"""What :class:`~optkernels.distributed.ShardedTable` needs of its optimizer, for a
:class:`~optkernels.optimizers.RowWiseAdagrad` over this rank's rows: row-sparse steps, a flat state with
one accumulator per row (``"sum.<name>"``, sharded by rows like the table), its checks and its load, and the
hyper-parameters and step counter the ranks compare."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..optimizers import Parameter
from ..optimizers.rowwise_adagrad import RowWiseAdagrad, sum_dtype

__all__ = ["RowWiseAdapter"]


class RowWiseAdapter:
    """A :class:`RowWiseAdagrad` over one table shard (``inner``), seen through the optimizer interface that
    ShardedTable uses.

    Args:
        inner: the RowWiseAdagrad built over ``[parameter]`` (one group, one parameter).
        parameter: this rank's rows.

    Attributes:
        inner: the RowWiseAdagrad.
        row_state_keys: the state keys holding one value per row (sharded, gathered and resharded by row).
    """

    _accepts_sparse = True
    need_scale = False

    def __init__(self, inner: RowWiseAdagrad, parameter: Parameter):
        if len(inner.param_groups) != 1 or len(inner.param_groups[0]["params"]) != 1:
            raise ValueError("For 'ShardedTable', the RowWiseAdagrad must hold the table alone")
        self.inner = inner
        group = inner.param_groups[0]
        self.lr, self.eps = float(group["lr"]), float(group["eps"])
        self.weight_decay, self.weight_decay_mode = (
            float(group["weight_decay"]),
            str(group["weight_decay_mode"]),
        )
        self.max_norm = float(group["max_norm"])
        self._global_step = 0
        self._parameter = parameter  # (not a number: the ranks' shard sizes differ, their configurations not)
        self._dtype = sum_dtype(parameter.data.dtype)
        self._key = f"sum.{parameter.name}"
        self.row_state_keys = (self._key,)

    def _rows(self) -> int:
        return int(self._parameter.data.shape[0])

    def _scalar_state(self) -> dict[str, Any]:
        return {}

    def step(self, gradients: list) -> bool:
        """One step of the shard from its row-sparse gradient (rows local to the shard)."""
        self.inner.step(gradients)
        self._global_step += 1
        return True

    def state_dict(self) -> dict[str, np.ndarray]:
        """``{"sum.<name>": (rows,) accumulators, "global_step": int64}`` (zeros before the first step)."""
        held = self.inner.state.get(0)
        h = np.zeros(self._rows(), self._dtype) if held is None else np.array(held["sum"])
        return {self._key: h, "global_step": np.array(self._global_step, np.int64)}

    def _checked_state(self, state: dict) -> dict[str, np.ndarray]:
        """The arrays to load, checked (KeyError: a missing key; ValueError, TypeError: shape, dtype)."""
        for key in (self._key, "global_step"):
            if key not in state:
                raise KeyError(f"For 'ShardedTable', the state has no {key!r}")
        h = np.asarray(state[self._key])
        if h.shape != (self._rows(),):
            raise ValueError(
                f"For 'ShardedTable', {self._key!r} has shape {h.shape}, expected ({self._rows()},)"
            )
        if h.dtype != self._dtype:
            raise TypeError(f"For 'ShardedTable', {self._key!r} has dtype {h.dtype}, expected {self._dtype}")
        return {self._key: h, "global_step": np.asarray(state["global_step"])}

    def _write_state(self, arrays: Any) -> None:
        self.inner.state[0] = {"sum": np.array(arrays[self._key])}
        self._global_step = int(arrays["global_step"])
