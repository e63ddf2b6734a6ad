"""``AdaMax``: Adam with the infinity norm (MindSpore ``nn.AdaMax``)."""

from __future__ import annotations

from typing import Any

from ..kernels._checks import check_range
from ..kernels.ada_max import _ada_max
from ..kernels.adam import _betas_epsilon
from ._validators import check_betas_eps
from .adam import BetaPowers
from .optimizer import Optimizer, scalar_batch

__all__ = ["AdaMax"]


class AdaMax(Optimizer):
    r"""AdaMax (MindSpore ``nn.AdaMax``; OPTIMIZERS §2.7), per parameter with ``apply_ada_max``::

        g ← w·(wd·loss_scale) + g (decay flag) → centralize → g ← g/loss_scale
        beta1_power ← beta1_power·beta1                      (before the update; t = 1 first)
        moment1 ← moment1 + (g − moment1)·(1 − beta1);  moment2 ← max(beta2·moment2, |g|)
        w ← w − lr/(1 − beta1_power)·moment1/(moment2 + eps)

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 0.001 (any form of :class:`Optimizer`).
        beta1, beta2: floats in (0, 1). Defaults 0.9, 0.999.
        eps: float > 0. Default 1e-08.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        loss_scale: float or int > 0. Default 1.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``moment1``, ``moment2`` (zeros); scalar ``beta1_power`` (starts at 1). Dense gradients only.

    Raises:
        TypeError: a beta or eps not a float; the base class's errors.
        ValueError: a beta outside (0, 1), eps <= 0; the base class's errors.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-08,
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        self.beta1, self.beta2, self.eps = check_betas_eps(beta1, beta2, eps, self._owner)
        self._powers = BetaPowers(self, {"beta1_power": self.beta1})
        self._add_slots({"moment1": 0.0, "moment2": 0.0})

    @property
    def beta1_power(self) -> float:
        """``beta1**t`` after the last step (1.0 before the first)."""
        return float(self._powers.values["beta1_power"])

    def _prepare_step(self, ctx):
        ctx.extra.update(self._powers.advanced())

    def _commit_step(self, ctx):
        self._powers.values = {"beta1_power": ctx.extra["beta1_power"]}

    def _kernel_scalars(self, ctx, lr, dtype):
        b = scalar_batch(dtype)
        b1p = b.scalar("beta1_power", ctx.extra["beta1_power"])
        check_range("beta1_power", b1p, 0.0, 1.0, high_open=True)
        lr_ = b.scalar("lr", lr)
        check_range("lr", lr_, 0.0)
        b1, b2, eps = _betas_epsilon(b, self.beta1, self.beta2, self.eps)
        one = dtype.type(1)
        return lr_ / (one - b1p), one - b1, b2, eps

    def _dense_kernel(self, plan):
        m, v = plan.flats
        return _ada_max, (plan.flat, m, v)

    def _scalar_state(self):
        return self._powers.state()

    def _load_scalar_state(self, state):
        self._powers.load(state)
