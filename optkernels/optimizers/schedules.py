"""Learning-rate schedules evaluated at the optimizer's step counter (MindSpore ``nn.LearningRateSchedule``).

A schedule is a callable object: ``lr = schedule(global_step)``. An optimizer given a schedule as its learning
rate calls it once per step with its step counter *before* incrementing it, so the first step uses
``global_step = 0``.

Arithmetic (how the float32 value is obtained)
----------------------------------------------
MindSpore evaluates a schedule as a small float32 graph on the int32 step tensor and returns a 0-d float32
tensor. Here:

* the step is cast to float32 (``s`` below; exact up to 2**24, rounded beyond, as MindSpore's Cast);
* the discrete quantities -- ``min(step, decay_steps)`` (on integers) and the quotients ``s / decay_steps``
  that are floored, ceiled or used as the decay exponent -- are computed in float32 exactly as MindSpore
  does (IEEE float32 division is the same on every backend, and decides where a staircase steps);
* the continuous rest of the formula (``pow``, ``exp``, ``cos`` and the arithmetic around them) is
  evaluated in float64 from those values and the Python float arguments, and rounded **once** to float32.

The result is returned as that float32 value widened to a Python ``float`` (so ``float(np.float32(lr)) ==
lr`` always holds): the number a MindSpore user sees when printing the schedule's output. MindSpore rounds
after every op, with ``pow``/``exp``/``cos`` kernels that differ between its backends by an ulp; rounding once
agrees with them to about one float32 ulp and reproduces every published MindSpore example bit for bit
(``ExponentialDecayLR(0.1, 0.9, 4)(2) == float(np.float32(0.09486833))``, where a correctly rounded float32
``powf`` followed by a float32 multiply gives 0.094868325, one ulp off).

Argument checks follow MindSpore's validators: a ``float`` argument must be a Python ``float`` (an ``int``,
a ``bool`` or a ``np.float32`` is a TypeError; ``np.float64``, a ``float`` subclass, is accepted) and finite
(ValueError); an ``int`` argument must be a Python ``int`` and not a ``bool`` (TypeError); a ``bool`` flag
must be a ``bool`` (TypeError). Range errors are ValueErrors. Every message names the class and the
argument.
"""

from __future__ import annotations

import abc
import math
import operator
from typing import Any

import numpy as np

__all__ = [
    "LearningRateSchedule",
    "ExponentialDecayLR",
    "NaturalExpDecayLR",
    "InverseDecayLR",
    "CosineDecayLR",
    "PolynomialDecayLR",
    "WarmUpLR",
]


# ---------------------------------------------------------------------------------------------------------
# Argument validation shared with dynamic_lr.py and loss_scale.py (MindSpore's _checkparam rules).


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_int(owner: str, name: str, value: Any, *, positive: bool = True) -> int:
    """A Python int (not bool); > 0 when ``positive`` (MindSpore ``check_positive_int``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"For '{owner}', '{name}' must be an int, but got {_type_name(value)}")
    if positive and value <= 0:
        raise ValueError(f"For '{owner}', '{name}' must be a positive int, but got {value}")
    return value


def _check_float(owner: str, name: str, value: Any, *, positive: bool | None) -> float:
    """A finite Python float (not int, not bool, not np.float32): > 0 if ``positive``, >= 0 if ``positive`` is
    False, any sign if None.

    MindSpore ``check_positive_float`` / ``check_non_negative_float`` / ``check_is_float``.
    """
    if isinstance(value, bool) or not isinstance(value, float):
        raise TypeError(f"For '{owner}', '{name}' must be a float, but got {_type_name(value)}")
    if not math.isfinite(value):
        raise ValueError(f"For '{owner}', '{name}' must be a finite float, but got {value}")
    if positive and not value > 0:
        raise ValueError(f"For '{owner}', '{name}' must be > 0, but got {value}")
    if positive is False and not value >= 0:
        raise ValueError(f"For '{owner}', '{name}' must be >= 0, but got {value}")
    return float(value)


def _check_bool(owner: str, name: str, value: Any) -> bool:
    """A Python bool (MindSpore ``check_value_type(name, value, [bool])``)."""
    if not isinstance(value, bool):
        raise TypeError(f"For '{owner}', '{name}' must be a bool, but got {_type_name(value)}")
    return value


def _check_step(owner: str, global_step: Any) -> int:
    """The step counter as a non-negative Python int.

    Accepted: a Python or NumPy integer (not bool), or a 0-d or shape-(1,) NumPy integer array.
    """
    if isinstance(global_step, np.ma.MaskedArray):
        raise TypeError(
            f"For '{owner}', 'global_step' must not be a masked array (its mask cannot be honoured)"
        )
    if isinstance(global_step, np.ndarray):
        if global_step.dtype.kind not in "iu":
            raise TypeError(
                f"For '{owner}', 'global_step' must have an integer dtype, but got {global_step.dtype}"
            )
        if global_step.ndim > 1 or global_step.size != 1:
            raise ValueError(
                f"For '{owner}', 'global_step' must be a 0-d or shape-(1,) array, "
                f"but got shape {global_step.shape}"
            )
        step = int(global_step.reshape(-1)[0])
    elif isinstance(global_step, (bool, np.bool_)):
        raise TypeError(f"For '{owner}', 'global_step' must be an integer, but got bool")
    else:
        try:
            step = operator.index(global_step)
        except TypeError:
            raise TypeError(
                f"For '{owner}', 'global_step' must be an integer or a 0-d or shape-(1,) "
                f"integer array, but got {_type_name(global_step)}"
            ) from None
    if not 0 <= step < 2**63:
        raise ValueError(f"For '{owner}', 'global_step' must be in [0, 2**63), but got {step}")
    return step


# ---------------------------------------------------------------------------------------------------------
# float32 helpers (see the module docstring).


def _f32(x: float) -> float:
    """``x`` rounded to float32, widened back to a Python float."""
    return float(np.float32(x))


def _div32(a: float, b: float) -> float:
    """``a / b`` as MindSpore computes it on float32 tensors: both rounded to float32, a float32 division."""
    return float(np.float32(a) / np.float32(b))


# float32(e) = 2.71828174591064453125: NaturalExpDecayLR raises this float32 constant to a power.
_E32 = _f32(math.e)


class LearningRateSchedule(abc.ABC):
    """Base class of the learning-rate schedules (MindSpore ``nn.LearningRateSchedule``).

    Subclasses implement ``__call__(global_step) -> float``.

    ``global_step`` is the optimizer's step counter: 0 on the first step, then 1, 2, ... It may be a Python
    or NumPy ``int`` (not ``bool``) or a 0-d / shape-(1,) integer NumPy array; a negative step is a
    ValueError. The returned value is a Python float (the schedules of this module return a float32 value
    widened to float, see the module docstring).
    """

    @abc.abstractmethod
    def __call__(self, global_step: Any) -> float:
        """Return the learning rate of step ``global_step`` (0 on the first step) as a Python float."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def _check_decay_args(
    owner: str, learning_rate: Any, decay_rate: Any, decay_steps: Any, is_stair: Any
) -> None:
    """The common checks of the three decay schedules, in MindSpore's order."""
    _check_int(owner, "decay_steps", decay_steps)
    _check_float(owner, "learning_rate", learning_rate, positive=True)
    _check_float(owner, "decay_rate", decay_rate, positive=True)
    _check_bool(owner, "is_stair", is_stair)


class ExponentialDecayLR(LearningRateSchedule):
    r"""Exponential decay (MindSpore ``nn.ExponentialDecayLR``).

    ``lr = learning_rate * decay_rate ** p`` with ``p = s / decay_steps`` (float32 quotient), or
    ``p = floor(s / decay_steps)`` when ``is_stair``; ``s`` is the step as float32.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate, a float > 0.
        decay_steps: the number of steps over which the rate decays by ``decay_rate``, an int > 0.
        is_stair: decay once every ``decay_steps`` steps instead of continuously.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``decay_steps`` not an int, ``is_stair`` not
            a bool.
        ValueError: ``decay_steps`` < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.
    """

    def __init__(self, learning_rate: float, decay_rate: float, decay_steps: int, is_stair: bool = False):
        _check_decay_args(type(self).__name__, learning_rate, decay_rate, decay_steps, is_stair)
        self.learning_rate = float(learning_rate)
        self.decay_rate = float(decay_rate)
        self.decay_steps = decay_steps
        self.is_stair = is_stair

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        p = _div32(step, self.decay_steps)
        if self.is_stair:
            p = math.floor(p)
        return _f32(self.learning_rate * self.decay_rate**p)


class NaturalExpDecayLR(LearningRateSchedule):
    r"""Natural exponential decay (MindSpore ``nn.NaturalExpDecayLR``), with MindSpore's code semantics.

    ``lr = learning_rate * e32 ** (-decay_rate * p)`` with ``p = s`` (the step: the rate decays by
    ``exp(-decay_rate)`` every *step*), or ``p = floor(s / decay_steps) * decay_steps`` when ``is_stair``
    (the step quantised to a multiple of ``decay_steps``).

    Quirks kept from MindSpore's code (its docstring says ``p = step / decay_steps``, the code does not
    divide): the decay is per step, and ``decay_steps`` only matters with ``is_stair``. The base is ``e32 =
    float32(e) = 2.7182817459...``, the float32 constant MindSpore's ``Pow`` receives, not ``e``: a relative
    difference of about ``3.2e-8 * decay_rate * p``.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate per step, a float > 0.
        decay_steps: the staircase width (used only when ``is_stair``), an int > 0.
        is_stair: quantise the step to multiples of ``decay_steps``.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``decay_steps`` not an int, ``is_stair`` not
            a bool.
        ValueError: ``decay_steps`` < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.
    """

    def __init__(self, learning_rate: float, decay_rate: float, decay_steps: int, is_stair: bool = False):
        _check_decay_args(type(self).__name__, learning_rate, decay_rate, decay_steps, is_stair)
        self.learning_rate = float(learning_rate)
        self.decay_rate = float(decay_rate)
        self.decay_steps = decay_steps
        self.is_stair = is_stair

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        p = _f32(step)
        if self.is_stair:
            p = float(np.float32(math.floor(_div32(step, self.decay_steps))) * np.float32(self.decay_steps))
        return _f32(self.learning_rate * _E32 ** (-self.decay_rate * p))


class InverseDecayLR(LearningRateSchedule):
    r"""Inverse-time decay (MindSpore ``nn.InverseDecayLR``).

    ``lr = learning_rate / (1 + decay_rate * p)`` with ``p = s / decay_steps`` (float32 quotient), or
    ``p = floor(s / decay_steps)`` when ``is_stair``.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate, a float > 0.
        decay_steps: the number of steps per unit of ``p``, an int > 0.
        is_stair: decay once every ``decay_steps`` steps instead of continuously.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``decay_steps`` not an int, ``is_stair`` not
            a bool.
        ValueError: ``decay_steps`` < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.
    """

    def __init__(self, learning_rate: float, decay_rate: float, decay_steps: int, is_stair: bool = False):
        _check_decay_args(type(self).__name__, learning_rate, decay_rate, decay_steps, is_stair)
        self.learning_rate = float(learning_rate)
        self.decay_rate = float(decay_rate)
        self.decay_steps = decay_steps
        self.is_stair = is_stair

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        p = _div32(step, self.decay_steps)
        if self.is_stair:
            p = math.floor(p)
        return _f32(self.learning_rate / (1.0 + self.decay_rate * p))


class CosineDecayLR(LearningRateSchedule):
    r"""Cosine decay from ``max_lr`` to ``min_lr`` in ``decay_steps`` steps (MindSpore ``nn.CosineDecayLR``).

    ``lr = min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * t / decay_steps))`` with
    ``t = min(step, decay_steps)``: ``max_lr`` at step 0, ``min_lr`` from step ``decay_steps`` on (no
    restart).

    Args:
        min_lr: the final learning rate, a float >= 0.
        max_lr: the initial learning rate, a float > 0 and > ``min_lr``.
        decay_steps: the length of the decay, an int > 0.

    Raises:
        TypeError: ``min_lr``/``max_lr`` not a float, ``decay_steps`` not an int.
        ValueError: ``min_lr`` < 0, ``max_lr`` <= 0, either not finite, ``decay_steps`` < 1,
            ``min_lr >= max_lr`` (checked last).
    """

    def __init__(self, min_lr: float, max_lr: float, decay_steps: int):
        owner = type(self).__name__
        _check_float(owner, "min_lr", min_lr, positive=False)
        _check_float(owner, "max_lr", max_lr, positive=True)
        _check_int(owner, "decay_steps", decay_steps)
        if min_lr >= max_lr:
            raise ValueError(
                f"For '{owner}', 'max_lr' must be greater than 'min_lr', but got "
                f"max_lr={max_lr}, min_lr={min_lr}"
            )
        self.min_lr = float(min_lr)
        self.max_lr = float(max_lr)
        self.decay_steps = decay_steps

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        t = _f32(min(step, self.decay_steps))
        delta = 0.5 * (self.max_lr - self.min_lr)
        return _f32(self.min_lr + delta * (1.0 + math.cos(math.pi * t / self.decay_steps)))


class PolynomialDecayLR(LearningRateSchedule):
    r"""Polynomial decay (MindSpore ``nn.PolynomialDecayLR``).

    ``lr = (learning_rate - end_learning_rate) * (1 - t / D) ** power + end_learning_rate`` where, by default,
    ``t = min(s, decay_steps)`` and ``D = decay_steps`` (``end_learning_rate`` from step ``decay_steps`` on);
    with ``update_decay_steps``, ``t = s`` and ``D = decay_steps * max(ceil(s / decay_steps), 1)``: the decay
    restarts from a shallower curve every ``decay_steps`` steps (``end_learning_rate`` exactly at each
    multiple of ``decay_steps``). ``t / D`` and ``s / decay_steps`` are float32 quotients.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        end_learning_rate: the final learning rate, a float >= 0.
        decay_steps: the length of the decay, an int > 0.
        power: the exponent of the polynomial, a float > 0.
        update_decay_steps: stretch the decay horizon every ``decay_steps`` steps (see above).

    Raises:
        TypeError: ``learning_rate``/``end_learning_rate``/``power`` not a float, ``decay_steps`` not an int,
            ``update_decay_steps`` not a bool.
        ValueError: ``learning_rate``/``power`` <= 0, ``end_learning_rate`` < 0, any of them not finite,
            ``decay_steps`` < 1.
    """

    def __init__(
        self,
        learning_rate: float,
        end_learning_rate: float,
        decay_steps: int,
        power: float,
        update_decay_steps: bool = False,
    ):
        owner = type(self).__name__
        _check_float(owner, "learning_rate", learning_rate, positive=True)
        _check_float(owner, "end_learning_rate", end_learning_rate, positive=False)
        _check_int(owner, "decay_steps", decay_steps)
        _check_bool(owner, "update_decay_steps", update_decay_steps)
        _check_float(owner, "power", power, positive=True)
        self.learning_rate = float(learning_rate)
        self.end_learning_rate = float(end_learning_rate)
        self.decay_steps = decay_steps
        self.power = float(power)
        self.update_decay_steps = update_decay_steps

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        if self.update_decay_steps:
            t = _f32(step)
            horizon = self.decay_steps * max(math.ceil(_div32(step, self.decay_steps)), 1)
        else:
            t = _f32(min(step, self.decay_steps))
            horizon = self.decay_steps
        p = _div32(t, horizon)
        diff = self.learning_rate - self.end_learning_rate
        return _f32(diff * (1.0 - p) ** self.power + self.end_learning_rate)


class WarmUpLR(LearningRateSchedule):
    r"""Linear warm-up (MindSpore ``nn.WarmUpLR``).

    ``lr = learning_rate * min(step, warmup_steps) / warmup_steps`` (float32 quotient): 0 at step 0,
    ``learning_rate`` from step ``warmup_steps`` on.

    Args:
        learning_rate: the learning rate reached at the end of the warm-up, a float >= 0.
        warmup_steps: the length of the warm-up, an int > 0.

    Raises:
        TypeError: ``learning_rate`` not a float, ``warmup_steps`` not an int.
        ValueError: ``learning_rate`` < 0 or not finite, ``warmup_steps`` < 1.
    """

    def __init__(self, learning_rate: float, warmup_steps: int):
        owner = type(self).__name__
        _check_float(owner, "learning_rate", learning_rate, positive=False)
        _check_int(owner, "warmup_steps", warmup_steps)
        self.learning_rate = float(learning_rate)
        self.warmup_steps = warmup_steps

    def __call__(self, global_step: Any) -> float:
        step = _check_step(type(self).__name__, global_step)
        fraction = _div32(min(step, self.warmup_steps), self.warmup_steps)
        return _f32(self.learning_rate * fraction)
