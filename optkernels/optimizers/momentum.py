"""``Momentum``: heavy-ball or Nesterov momentum (MindSpore ``nn.Momentum``)."""

from __future__ import annotations

from typing import Any

from ..kernels._checks import check_range
from ..kernels.momentum import _momentum
from ._validators import check_bool, check_float
from ._validators import check_range as check_arg_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["Momentum"]


class Momentum(Optimizer):
    r"""Momentum SGD (MindSpore ``nn.Momentum``; OPTIMIZERS §2.2), per parameter with ``apply_momentum``::

        g ← w·(wd·loss_scale) + g  (decay flag)  →  centralize  →  g ← g/loss_scale
        moments ← momentum·moments + g
        w ← w − lr·moments                                     (plain)
        w ← w − (g·lr + moments·momentum·lr)                   (use_nesterov)

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: required (any form of :class:`Optimizer`).
        momentum: required, a float >= 0 (an int such as 0 is a TypeError, as in MindSpore).
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        loss_scale: float or int > 0. Default 1.0.
        use_nesterov: bool. Default False.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``moments`` (zeros). Dense gradients only.

    Raises:
        TypeError: ``momentum`` not a float, ``use_nesterov`` not a bool; the base class's type errors.
        ValueError: ``momentum`` < 0; the base class's value errors.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any,
        momentum: float,
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        use_nesterov: bool = False,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.momentum = check_arg_range("momentum", check_float("momentum", momentum, owner), owner, 0.0)
        self.use_nesterov = check_bool("use_nesterov", use_nesterov, owner)
        self._add_slots({"moments": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        b = scalar_batch(dtype)
        lr_ = b.scalar("learning_rate", lr)
        check_range("learning_rate", lr_, 0.0)
        return lr_, b.scalar("momentum", self.momentum), dtype.type(1.0), self.use_nesterov

    def _dense_kernel(self, plan):
        return _momentum, (plan.flat, plan.flats[0])
