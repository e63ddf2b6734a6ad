"""``Lion``: the sign of an interpolated momentum with decoupled weight decay (MODERN §8)."""

from __future__ import annotations

from typing import Any

from ..kernels.lion import _lion, lion_scalars
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer

__all__ = ["Lion"]


def check_beta(name: str, value: Any, owner: str, *, high_open: bool = False) -> float:
    """A float (or int) beta in [0, 1] (``high_open``: [0, 1))."""
    return check_range(
        name, check_float(name, value, owner, allow_int=True), owner, 0.0, 1.0, high_open=high_open
    )


class Lion(Optimizer):
    r"""Lion (google/automl ``Lion``, lucidrains ``lion_pytorch.Lion``), per parameter with the ``lion``
    kernel::

        w ← w·(1 − lr·wd)                  (wd/lr₀ instead of wd with decoupled_weight_decay)
        c = β1·exp_avg + (1 − β1)·g;  w ← w − lr·sign(c);  exp_avg ← β2·exp_avg + (1 − β2)·g

    The decay multiplies the old parameter and is scaled by the learning rate (lucidrains' default, the
    paper's rule); ``decoupled_weight_decay=True`` divides it by ``lr₀``, the parameter's learning rate at
    step 0, so that the decay follows the schedule's shape but not its scale (lucidrains' option). Decay
    flags follow the base class (the default filter ungrouped, the group's weight decay grouped). No loss
    scale, no gradient centralization.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-4 (any form of :class:`Optimizer`).
        beta1: interpolation factor of the update, in [0, 1]. Default 0.9.
        beta2: momentum decay, in [0, 1]. Default 0.99.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        decoupled_weight_decay: divide the decay by the initial learning rate. Default False.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``exp_avg`` (zeros).

    Raises:
        TypeError: a beta not a number, the flag not a bool; the base class's errors.
        ValueError: a beta outside [0, 1]; with ``decoupled_weight_decay``, an initial learning rate of 0;
            the base class's errors.
    """

    _coupled_decay = False
    _centralizes = False
    _scales_gradients = False

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-4,
        beta1: float = 0.9,
        beta2: float = 0.99,
        weight_decay: Any = 0.0,
        decoupled_weight_decay: bool = False,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        owner = self._owner
        self.beta1 = check_beta("beta1", beta1, owner)
        self.beta2 = check_beta("beta2", beta2, owner)
        self.decoupled_weight_decay = check_bool("decoupled_weight_decay", decoupled_weight_decay, owner)
        self._initial_lrs = [lr.value(0) for lr in self._lrs]
        if self.decoupled_weight_decay and 0.0 in self._initial_lrs:
            raise ValueError(
                f"For '{owner}', decoupled_weight_decay divides by the initial learning rate, which is 0"
            )
        self._add_slots({"exp_avg": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        return lion_scalars(dtype, lr, self.beta1, self.beta2, 0.0)[:-1]

    def _dense_kernel(self, plan):
        return _lion, (plan.flat, *plan.flats)

    def _dense_scalars(self, plan, scalars, ctx):
        wd = ctx.wds[plan.wd_index] if self.decay_flags[plan.index] else 0.0
        if self.decoupled_weight_decay:
            wd = wd / self._initial_lrs[plan.lr_index]
        return (*scalars, plan.cdtype.type(1.0 - float(ctx.lrs[plan.lr_index]) * wd))

    def _scalar_group(self, plan):
        return plan.key, (plan.wd_index if self.decay_flags[plan.index] else None)
