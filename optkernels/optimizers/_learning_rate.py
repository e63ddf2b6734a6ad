"""The learning-rate forms an optimizer accepts (OPTIMIZERS §1.3), each turned into one :class:`LearningRate`.

| given                                   | kind       | value at step ``t``                          |
|-----------------------------------------|------------|----------------------------------------------|
| ``float`` / ``int`` (not bool)          | fixed      | the number (>= 0, finite)                    |
| 0-d NumPy array                         | fixed      | its value                                    |
| 1-D NumPy array, or any other iterable  | table      | element ``t``; **0.0 past the end**          |
| ``LearningRateSchedule``                | schedule   | ``schedule(t)``                              |

Past the end of a table the learning rate is 0.0, as MindSpore's CPU and GPU Gather return for an
out-of-range index (its docs call it undefined); a ``UserWarning`` is issued once per optimizer. Values are
kept in float64 and rounded to each parameter's dtype when used (MindSpore stores float32, which is the same
for float32 parameters). Tables must hold finite values >= 0 (a ValueError at construction, where MindSpore
would let the kernel run with a negative rate); a schedule's value is checked at each step before any array
is written.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from .parameter import Parameter
from .schedules import LearningRateSchedule

FIXED, TABLE, SCHEDULE = "fixed", "table", "schedule"


class LearningRate:
    """One learning rate of an optimizer: fixed, a table indexed by the global step, or a schedule.

    Attributes:
        kind: 'fixed', 'table' or 'schedule'.
        obj: what ``get_lr_parameter`` returns: a :class:`Parameter` holding the value (0-d float64 array,
            which may be changed in place to change the rate, as MindSpore users ``assign`` it) or the
            table (1-D float64), or the schedule itself.
    """

    __slots__ = ("kind", "obj", "_table", "_warned")

    def __init__(self, kind: str, obj: Any):
        self.kind = kind
        self.obj = obj
        self._table: Any = obj.data if kind == TABLE else None  # the 1-D table of a TABLE rate
        self._warned = False

    @property
    def dynamic(self) -> bool:
        """True for tables and schedules (the value depends on the global step)."""
        return self.kind != FIXED

    @property
    def table_length(self) -> int | None:
        """The length of a table learning rate, else None."""
        return None if self._table is None else int(self._table.shape[0])

    def value(self, global_step: int) -> float:
        """The learning rate of the step numbered ``global_step`` (0 on the first step), a Python float.

        Raises:
            ValueError: a schedule returned (or a fixed rate's Parameter was set to) a negative, NaN or
                infinite value.
        """
        if self.kind == FIXED:
            lr = float(self.obj.data)  # the Parameter may have been changed in place
            if not (math.isfinite(lr) and lr >= 0.0):
                raise ValueError(f"the learning rate {self.obj.name} holds {lr}; it must be finite and >= 0")
            return lr
        if self.kind == TABLE:
            if global_step < self._table.shape[0]:
                return float(self._table[global_step])
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"global step {global_step} is past the end of the learning-rate table "
                    f"({self._table.shape[0]} values): the learning rate is 0.0 from now on, as "
                    f"MindSpore's CPU/GPU Gather returns",
                    UserWarning,
                    stacklevel=4,
                )
            return 0.0
        lr = float(self.obj(global_step))
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(
                f"the learning-rate schedule {type(self.obj).__name__} returned {lr} at step "
                f"{global_step}; a learning rate must be finite and >= 0"
            )
        return lr


def parse_learning_rate(learning_rate: Any, owner: str, name: str = "learning_rate") -> LearningRate:
    """Turn a user's learning rate into a :class:`LearningRate` (see the module docstring for the forms).

    Args:
        learning_rate: the user's value.
        owner: the optimizer's class name (for messages).
        name: the name of the Parameter created for fixed rates and tables ('learning_rate', or
            'learning_rate_group_<k>' for a group's own rate, as MindSpore names them).

    Raises:
        TypeError: an unsupported type (None, bool, str, a dict, non-numeric items, a non-real array).
        ValueError: a negative, NaN or infinite value; an array of rank > 1; an empty table.
    """
    what = f"For '{owner}', the learning rate"
    if isinstance(learning_rate, LearningRateSchedule):
        return LearningRate(SCHEDULE, learning_rate)
    if isinstance(learning_rate, (bool, np.bool_)):
        raise TypeError(
            f"{what} must be a float, an int, a 0-d or 1-D array, an iterable of numbers or a "
            f"LearningRateSchedule, got bool"
        )
    if isinstance(learning_rate, (int, float, np.integer, np.floating)):
        value = float(learning_rate)
        _check_values(what, np.array([value]))
        return LearningRate(FIXED, Parameter(np.array(value, dtype=np.float64), name))
    if isinstance(learning_rate, np.ma.MaskedArray):
        raise TypeError(f"{what} must not be a masked array (its mask cannot be honoured)")
    if isinstance(learning_rate, np.ndarray):
        if learning_rate.dtype.kind not in "fiu":
            raise TypeError(f"{what} must have a real dtype, got {learning_rate.dtype}")
        if learning_rate.ndim > 1:
            raise ValueError(f"{what} must be a 0-d or 1-D array, got shape {learning_rate.shape}")
        values = learning_rate.astype(np.float64)
        _check_values(what, values.reshape(-1))
        if learning_rate.ndim == 0:
            return LearningRate(FIXED, Parameter(values.copy(), name))
        return _table(what, values, name)
    if isinstance(learning_rate, (str, bytes, dict)) or not isinstance(learning_rate, Iterable):
        raise TypeError(
            f"{what} must be a float, an int, a 0-d or 1-D array, an iterable of numbers or a "
            f"LearningRateSchedule, got {type(learning_rate).__name__}"
        )
    items = list(learning_rate)
    numbers = (int, float, np.integer, np.floating)
    if any(isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers) for x in items):
        raise TypeError(f"{what}: every item of an iterable learning rate must be a number")
    values = np.array(items, dtype=np.float64)
    _check_values(what, values)
    return _table(what, values, name)


def _table(what: str, values: np.ndarray, name: str) -> LearningRate:
    if values.shape[0] == 0:
        raise ValueError(f"{what} table must not be empty")
    return LearningRate(TABLE, Parameter(np.ascontiguousarray(values), name))


def _check_values(what: str, values: np.ndarray) -> None:
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} must be finite, got {values[~np.isfinite(values)][0]}")
    if np.any(values < 0):
        raise ValueError(f"{what} must be >= 0, got {values[values < 0][0]}")
