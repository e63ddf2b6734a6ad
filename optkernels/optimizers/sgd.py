"""``SGD``: stochastic gradient descent with momentum, dampening and Nesterov (MindSpore ``nn.SGD``)."""

from __future__ import annotations

from typing import Any

from ..kernels._checks import check_range
from ..kernels.sgd import _sgd
from ._validators import check_bool, check_float
from ._validators import check_range as check_arg_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""Stochastic gradient descent (MindSpore ``nn.SGD``; OPTIMIZERS §2.1), per parameter with the ``sgd``
    kernel called with ``weight_decay=0`` (the decay goes through the base pipeline, as in MindSpore 2.x)::

        g ← w·(wd·loss_scale) + g  (decay flag)  →  centralize  →  g ← g/loss_scale
        if momentum > 0:
            first step:  accum ← g                               (the ``stat`` slot starts at ONES)
            later:       accum ← momentum·accum + (1 − dampening)·g
            g ← g + momentum·accum  (nesterov)   or   g ← accum
        p ← p − lr·g

    Weight decay is the base class's coupled decay (``decay_weight``), in the same pipeline order as every
    other optimizer: ungrouped, the default filter applies (parameters whose name contains 'beta' or
    'gamma' are not decayed); grouped, each group's ``weight_decay`` applies (the constructor's value for a
    group without one). Net effect ``g/loss_scale + wd·w`` (MindSpore 2.10 on the CPU: after one step with
    ``weight_decay=0.01``, ``bn.gamma`` moves by ``lr·g`` and ``conv.weight`` by ``lr·(g + 0.01·w)``).
    A dynamic (callable) weight decay is a TypeError, as in MindSpore's SGD. Dense gradients only.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`; groups may set ``lr``, ``weight_decay``
            and ``grad_centralization``).
        learning_rate: default 0.1 (any form of :class:`Optimizer`).
        momentum: float or int >= 0. Default 0.0.
        dampening: float or int >= 0. Default 0.0.
        weight_decay: float or int >= 0 (a group's too). Default 0.0.
        nesterov: bool; needs ``momentum > 0`` and ``dampening == 0``. Default False.
        loss_scale: float or int > 0. Default 1.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``accum`` (zeros), ``stat`` (ones).

    Raises:
        TypeError: ``momentum``/``dampening`` not a number, ``weight_decay`` (or a group's) callable,
            ``nesterov`` not a bool, and the base class's type errors.
        ValueError: ``momentum`` or ``dampening`` < 0, ``nesterov`` with ``momentum <= 0`` or
            ``dampening != 0``, and the base class's value errors.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 0.1,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        if callable(weight_decay):
            raise TypeError(
                f"For 'SGD', dynamic weight decay is not supported: 'weight_decay' must be a "
                f"float or an int, got {type(weight_decay).__name__}"
            )
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        momentum = check_float("momentum", momentum, owner, allow_int=True)
        self.momentum = check_arg_range("momentum", momentum, owner, 0.0)
        dampening = check_float("dampening", dampening, owner, allow_int=True)
        self.dampening = check_arg_range("dampening", dampening, owner, 0.0)
        if self.dynamic_weight_decay:
            raise TypeError(
                f"For '{owner}', dynamic weight decay is not supported: 'weight_decay' (and a "
                f"group's) must be a float or an int, got a callable"
            )
        self.nesterov = check_bool("nesterov", nesterov, owner)
        if self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            raise ValueError(
                f"For '{owner}', 'nesterov' needs momentum > 0 and dampening == 0, got momentum="
                f"{self.momentum}, dampening={self.dampening}"
            )
        self._add_slots({"accum": 0.0, "stat": 1.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        b = scalar_batch(dtype)
        lr_ = b.scalar("learning_rate", lr)
        check_range("learning_rate", lr_, 0.0)
        one = dtype.type(1)
        return (
            lr_,
            b.scalar("momentum", self.momentum),
            one - dtype.type(self.dampening),
            dtype.type(0),
            self.nesterov,
        )

    def _dense_kernel(self, plan):
        accum, stat = plan.flats
        return _sgd, (plan.flat, accum, stat)
