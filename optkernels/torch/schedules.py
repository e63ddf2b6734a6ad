"""optkernels' learning-rate schedules (:mod:`optkernels.optimizers.schedules`: ``WarmUpLR``,
``CosineDecayLR``, ...) as torch LR schedulers, for any ``torch.optim`` optimizer, optkernels.torch's
drop-ins included."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..optimizers.schedules import LearningRateSchedule

__all__ = ["ScheduleLR"]


class ScheduleLR(torch.optim.lr_scheduler.LRScheduler):
    """A torch LR scheduler whose learning rate is an optkernels schedule of the step count: the step
    numbered k (from 0, as MindSpore's ``global_step``) runs with ``lr = schedule(k)``. Call
    ``scheduler.step()`` after each ``optimizer.step()``, as with torch's schedulers.

    Args:
        optimizer: a ``torch.optim.Optimizer`` (optkernels.torch's or torch's own).
        schedule: a :class:`~optkernels.optimizers.LearningRateSchedule`, or one per parameter group.
        last_epoch: torch's resume argument (default -1: a fresh start).

    Raises:
        TypeError: a schedule that is not a ``LearningRateSchedule``, or a list of the wrong length.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        schedule: LearningRateSchedule | Sequence[LearningRateSchedule],
        last_epoch: int = -1,
    ):
        schedules: list[Any] = (
            list(schedule)
            if isinstance(schedule, (list, tuple))
            else [schedule] * len(optimizer.param_groups)
        )
        if len(schedules) != len(optimizer.param_groups):
            raise TypeError(
                f"ScheduleLR: {len(schedules)} schedules for {len(optimizer.param_groups)} parameter groups"
            )
        for s in schedules:
            if not isinstance(s, LearningRateSchedule):
                raise TypeError(
                    f"ScheduleLR needs optkernels LearningRateSchedule objects, got {type(s).__name__}"
                )
        self.schedules = schedules
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        """The learning rate of each group at step ``last_epoch``."""
        return [s(max(self.last_epoch, 0)) for s in self.schedules]
