"""Learning-rate lists (MindSpore ``nn.dynamic_lr``): element ``i`` is the learning rate of step ``i``.

Pass the list as an optimizer's ``learning_rate``; the optimizer reads element ``global_step`` on each step
(0 past the end of the list, as MindSpore's Gather on CPU/GPU).

Every function computes in Python float64, with MindSpore's formulas in MindSpore's order of operations, so
the lists are bit-identical to MindSpore's (all published examples are reproduced exactly). ``e(i) =
floor(i / step_per_epoch)`` is the epoch of step ``i``, ``i = 0 .. total_step - 1``.

Argument checks follow MindSpore's validators (see :mod:`optkernels.optimizers.schedules`): a ``float``
argument must be a Python ``float`` (not an ``int`` or ``bool``) and finite, an ``int`` argument a Python
``int`` (not ``bool``), a flag a ``bool``; TypeError for a wrong type, ValueError for a value out of range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .schedules import _check_bool, _check_float, _check_int

__all__ = [
    "piecewise_constant_lr",
    "exponential_decay_lr",
    "natural_exp_decay_lr",
    "inverse_decay_lr",
    "cosine_decay_lr",
    "polynomial_decay_lr",
    "warmup_lr",
]


def piecewise_constant_lr(milestone: Sequence[int], learning_rates: Sequence[float]) -> list[float]:
    """Piecewise-constant learning rates (MindSpore ``nn.piecewise_constant_lr``).

    ``lr[i] = learning_rates[k]`` for ``i`` in ``[milestone[k-1], milestone[k])`` with ``milestone[-1] = 0``;
    the list has ``milestone[-1]`` elements (an equal milestone gives its rate zero steps).

    Args:
        milestone: list or tuple of positive ints, non-decreasing.
        learning_rates: list or tuple of floats, as long as ``milestone``.

    Raises:
        TypeError: either is not a list/tuple; an element of ``milestone`` is not an int or one of
            ``learning_rates`` not a float (the message names ``milestone[i]`` / ``learning_rates[i]``).
        ValueError: different lengths; ``milestone[i]`` < 1 or < ``milestone[i-1]``; a rate not finite.

    Example: ``piecewise_constant_lr([2, 5, 10], [0.1, 0.05, 0.01])`` -> ``[0.1, 0.1, 0.05, 0.05, 0.05, 0.01,
    0.01, 0.01, 0.01, 0.01]``.
    """
    owner = "piecewise_constant_lr"
    for name, value in (("milestone", milestone), ("learning_rates", learning_rates)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(
                f"For '{owner}', '{name}' must be a list or a tuple, but got {type(value).__name__}"
            )
    if len(milestone) != len(learning_rates):
        raise ValueError(
            f"For '{owner}', 'milestone' and 'learning_rates' must have the same length, but "
            f"got {len(milestone)} and {len(learning_rates)}"
        )
    lr: list[float] = []
    previous = 0
    for i, (end, rate) in enumerate(zip(milestone, learning_rates)):
        _check_int(owner, f"milestone[{i}]", end)
        rate = _check_float(owner, f"learning_rates[{i}]", rate, positive=None)
        if end < previous:
            raise ValueError(
                f"For '{owner}', 'milestone[{i}]' must be >= 'milestone[{i - 1}]', but got {end} < {previous}"
            )
        lr.extend([rate] * (end - previous))
        previous = end
    return lr


def _check_decay_inputs(
    owner: str,
    learning_rate: float,
    decay_rate: float,
    total_step: int,
    step_per_epoch: int,
    decay_epoch: int,
    is_stair: bool,
) -> tuple[float, float]:
    """The common checks of the decay lists, in MindSpore's order; returns (learning_rate, decay_rate)."""
    _check_int(owner, "total_step", total_step)
    _check_int(owner, "step_per_epoch", step_per_epoch)
    _check_int(owner, "decay_epoch", decay_epoch)
    learning_rate = _check_float(owner, "learning_rate", learning_rate, positive=True)
    decay_rate = _check_float(owner, "decay_rate", decay_rate, positive=True)
    _check_bool(owner, "is_stair", is_stair)
    return learning_rate, decay_rate


def exponential_decay_lr(
    learning_rate: float,
    decay_rate: float,
    total_step: int,
    step_per_epoch: int,
    decay_epoch: int,
    is_stair: bool = False,
) -> list[float]:
    """Exponential decay per epoch (MindSpore ``nn.exponential_decay_lr``).

    ``lr[i] = learning_rate * decay_rate ** (e / decay_epoch)``, or ``** floor(e / decay_epoch)`` when
    ``is_stair``, with ``e = floor(i / step_per_epoch)``.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate, a float > 0.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        decay_epoch: epochs per decay period, an int > 0.
        is_stair: decay once per ``decay_epoch`` epochs instead of every epoch.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``total_step``/``step_per_epoch``/
            ``decay_epoch`` not an int, ``is_stair`` not a bool.
        ValueError: an int < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.

    Example: ``exponential_decay_lr(0.1, 0.9, 6, 2, 1)`` -> ``[0.1, 0.1, 0.09000000000000001,
    0.09000000000000001, 0.08100000000000002, 0.08100000000000002]``.
    """
    owner = "exponential_decay_lr"
    learning_rate, decay_rate = _check_decay_inputs(
        owner, learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair
    )
    lr = []
    for i in range(total_step):
        epoch = i // step_per_epoch
        p = epoch // decay_epoch if is_stair else epoch / decay_epoch
        lr.append(learning_rate * decay_rate**p)
    return lr


def natural_exp_decay_lr(
    learning_rate: float,
    decay_rate: float,
    total_step: int,
    step_per_epoch: int,
    decay_epoch: int,
    is_stair: bool = False,
) -> list[float]:
    """Natural exponential decay per epoch (MindSpore ``nn.natural_exp_decay_lr``).

    ``lr[i] = learning_rate * e ** (-decay_rate * E)`` with ``E = e(i) = floor(i / step_per_epoch)`` (the rate
    decays by ``exp(-decay_rate)`` every *epoch*; ``decay_epoch`` is not a divisor), or, when ``is_stair``,
    ``E = floor(e / decay_epoch) * decay_epoch`` (the epoch quantised to multiples of ``decay_epoch``).
    Computed as MindSpore does, ``math.e ** x`` (which can differ from ``math.exp(x)`` in the last bit).

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate, a float > 0.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        decay_epoch: epochs per decay period, an int > 0.
        is_stair: decay once per ``decay_epoch`` epochs instead of every epoch.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``total_step``/``step_per_epoch``/
            ``decay_epoch`` not an int, ``is_stair`` not a bool.
        ValueError: an int < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.

    Example: ``natural_exp_decay_lr(0.1, 0.9, 6, 2, 2, True)`` -> ``[0.1, 0.1, 0.1, 0.1,
    0.016529888822158657, 0.016529888822158657]``.
    """
    owner = "natural_exp_decay_lr"
    learning_rate, decay_rate = _check_decay_inputs(
        owner, learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair
    )
    lr = []
    for i in range(total_step):
        epoch = i // step_per_epoch
        p = (epoch // decay_epoch) * decay_epoch if is_stair else epoch
        lr.append(learning_rate * math.e ** (-decay_rate * p))
    return lr


def inverse_decay_lr(
    learning_rate: float,
    decay_rate: float,
    total_step: int,
    step_per_epoch: int,
    decay_epoch: int,
    is_stair: bool = False,
) -> list[float]:
    """Inverse-time decay per epoch (MindSpore ``nn.inverse_decay_lr``).

    ``lr[i] = learning_rate / (1 + decay_rate * e / decay_epoch)``, or ``/ (1 + decay_rate * floor(e /
    decay_epoch))`` when ``is_stair``, with ``e = floor(i / step_per_epoch)``.

    Args:
        learning_rate: the initial learning rate, a float > 0.
        decay_rate: the decay rate, a float > 0.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        decay_epoch: epochs per decay period, an int > 0.
        is_stair: decay once per ``decay_epoch`` epochs instead of every epoch.

    Raises:
        TypeError: ``learning_rate``/``decay_rate`` not a float, ``total_step``/``step_per_epoch``/
            ``decay_epoch`` not an int, ``is_stair`` not a bool.
        ValueError: an int < 1; ``learning_rate``/``decay_rate`` <= 0 or not finite.

    Example: ``inverse_decay_lr(0.1, 0.5, 6, 1, 1, True)`` -> ``[0.1, 0.06666666666666667, 0.05, 0.04,
    0.03333333333333333, 0.028571428571428574]``.
    """
    owner = "inverse_decay_lr"
    learning_rate, decay_rate = _check_decay_inputs(
        owner, learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair
    )
    lr = []
    for i in range(total_step):
        epoch = i // step_per_epoch
        if is_stair:
            lr.append(learning_rate / (1 + decay_rate * (epoch // decay_epoch)))
        else:
            lr.append(learning_rate / (1 + decay_rate * epoch / decay_epoch))
    return lr


def cosine_decay_lr(
    min_lr: float, max_lr: float, total_step: int, step_per_epoch: int, decay_epoch: int
) -> list[float]:
    """Cosine decay per epoch (MindSpore ``nn.cosine_decay_lr``).

    ``lr[i] = min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * T / decay_epoch))`` with ``T = min(e,
    decay_epoch)``, ``e = floor(i / step_per_epoch)``: ``max_lr`` in epoch 0, ``min_lr`` from epoch
    ``decay_epoch`` on.

    Args:
        min_lr: the final learning rate, a float >= 0.
        max_lr: the initial learning rate, a float > 0 and > ``min_lr``.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        decay_epoch: the length of the decay in epochs, an int > 0.

    Raises:
        TypeError: ``min_lr``/``max_lr`` not a float; an int argument not an int.
        ValueError: ``min_lr`` < 0, ``max_lr`` <= 0, either not finite; an int < 1; ``min_lr >= max_lr``
            (checked last).

    Example: ``cosine_decay_lr(0.01, 0.1, 6, 2, 2)`` -> ``[0.1, 0.1, 0.05500000000000001,
    0.05500000000000001, 0.01, 0.01]``.
    """
    owner = "cosine_decay_lr"
    min_lr = _check_float(owner, "min_lr", min_lr, positive=False)
    max_lr = _check_float(owner, "max_lr", max_lr, positive=True)
    _check_int(owner, "total_step", total_step)
    _check_int(owner, "step_per_epoch", step_per_epoch)
    _check_int(owner, "decay_epoch", decay_epoch)
    if min_lr >= max_lr:
        raise ValueError(
            f"For '{owner}', 'max_lr' must be greater than 'min_lr', but got max_lr={max_lr}, min_lr={min_lr}"
        )
    delta = 0.5 * (max_lr - min_lr)
    lr = []
    for i in range(total_step):
        t = min(i // step_per_epoch, decay_epoch)
        lr.append(min_lr + delta * (1 + math.cos(math.pi * t / decay_epoch)))
    return lr


def polynomial_decay_lr(
    learning_rate: float,
    end_learning_rate: float,
    total_step: int,
    step_per_epoch: int,
    decay_epoch: int,
    power: float,
    update_decay_epoch: bool = False,
) -> list[float]:
    """Polynomial decay per epoch (MindSpore ``nn.polynomial_decay_lr``).

    ``lr[i] = (learning_rate - end_learning_rate) * (1 - T / D) ** power + end_learning_rate`` with ``e =
    floor(i / step_per_epoch)`` and, by default, ``T = min(e, decay_epoch)``, ``D = decay_epoch``
    (``end_learning_rate`` from epoch ``decay_epoch`` on); with ``update_decay_epoch``, ``T = e`` and ``D =
    decay_epoch * max(ceil(e / decay_epoch), 1)`` (the horizon stretches by ``decay_epoch`` each time it is
    reached: ``end_learning_rate`` exactly at multiples of ``decay_epoch``, a shallower decay after).

    Args:
        learning_rate: the initial learning rate, a float > 0.
        end_learning_rate: the final learning rate, a float >= 0.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        decay_epoch: the length of the decay in epochs, an int > 0.
        power: the exponent of the polynomial, a float > 0.
        update_decay_epoch: stretch the horizon as above.

    Raises:
        TypeError: ``learning_rate``/``end_learning_rate``/``power`` not a float; an int argument not an int;
            ``update_decay_epoch`` not a bool.
        ValueError: ``learning_rate``/``power`` <= 0, ``end_learning_rate`` < 0, any not finite; an int < 1.

    Example: ``polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5)`` -> ``[0.1, 0.1, 0.07363961030678928,
    0.07363961030678928, 0.01, 0.01]``.
    """
    owner = "polynomial_decay_lr"
    learning_rate = _check_float(owner, "learning_rate", learning_rate, positive=True)
    end_learning_rate = _check_float(owner, "end_learning_rate", end_learning_rate, positive=False)
    power = _check_float(owner, "power", power, positive=True)
    _check_int(owner, "total_step", total_step)
    _check_int(owner, "step_per_epoch", step_per_epoch)
    _check_int(owner, "decay_epoch", decay_epoch)
    _check_bool(owner, "update_decay_epoch", update_decay_epoch)
    delta = learning_rate - end_learning_rate
    lr = []
    for i in range(total_step):
        epoch = i // step_per_epoch
        if update_decay_epoch:
            t, horizon = epoch, decay_epoch * max(-(-epoch // decay_epoch), 1)
        else:
            t, horizon = min(epoch, decay_epoch), decay_epoch
        lr.append(delta * (1 - t / horizon) ** power + end_learning_rate)
    return lr


def warmup_lr(learning_rate: float, total_step: int, step_per_epoch: int, warmup_epoch: int) -> list[float]:
    """Linear warm-up per epoch (MindSpore ``nn.warmup_lr``).

    ``lr[i] = learning_rate * T / warmup_epoch`` with ``T = min(e, warmup_epoch)``, ``e = floor(i /
    step_per_epoch)``: 0 in epoch 0, ``learning_rate`` from epoch ``warmup_epoch`` on.

    Args:
        learning_rate: the learning rate reached after the warm-up, a float >= 0.
        total_step: the length of the list, an int > 0.
        step_per_epoch: steps per epoch, an int > 0.
        warmup_epoch: the length of the warm-up in epochs, an int > 0.

    Raises:
        TypeError: ``learning_rate`` not a float; an int argument not an int.
        ValueError: ``learning_rate`` < 0 or not finite; an int < 1.

    Example: ``warmup_lr(0.1, 6, 2, 2)`` -> ``[0.0, 0.0, 0.05, 0.05, 0.1, 0.1]``.
    """
    owner = "warmup_lr"
    learning_rate = _check_float(owner, "learning_rate", learning_rate, positive=False)
    _check_int(owner, "warmup_epoch", warmup_epoch)
    _check_int(owner, "total_step", total_step)
    _check_int(owner, "step_per_epoch", step_per_epoch)
    lr = []
    for i in range(total_step):
        t = min(i // step_per_epoch, warmup_epoch)
        lr.append(learning_rate * t / warmup_epoch)
    return lr
