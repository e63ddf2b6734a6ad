"""``AdamWeightDecay``: Adam with decoupled weight decay and no bias correction (MindSpore
``nn.AdamWeightDecay``)."""

from __future__ import annotations

from typing import Any

from ..kernels._checks import check_range
from ..kernels.adam import _betas_epsilon
from ..kernels.adam_weight_decay import _adam_weight_decay
from ._validators import check_betas_eps
from .optimizer import Optimizer, scalar_batch

__all__ = ["AdamWeightDecay"]


class AdamWeightDecay(Optimizer):
    r"""AdamW as MindSpore has it (``nn.AdamWeightDecay``; OPTIMIZERS §2.4), per parameter with the
    ``adam_weight_decay`` kernel::

        adam_m ← adam_m + (g − adam_m)·(1 − beta1);  adam_v ← adam_v + (g² − adam_v)·(1 − beta2)
        u = adam_m/(sqrt(adam_v) + eps) + wd·w            (wd only if the parameter's decay flag is set)
        w ← w − lr·u

    No bias correction, no beta powers; the decay is decoupled (not added to the gradient) and scaled by
    ``lr``; decay flags follow the default filter (ungrouped) or the group rule. No loss scale (there is no
    ``loss_scale`` argument: passing one is a TypeError), no gradient centralization (a group's flag is
    accepted and ignored, as in MindSpore), dense gradients only. ``target`` may be set (Adam's rules); it
    changes nothing numerically (MindSpore's fused host primitive and its composite compute the same).

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-3 (any form of :class:`Optimizer`).
        beta1, beta2: floats in (0, 1). Defaults 0.9, 0.999.
        eps: float > 0. Default 1e-6 (not Adam's 1e-8).
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``adam_m``, ``adam_v`` (zeros).

    Raises:
        TypeError: a beta or eps not a float; the base class's errors.
        ValueError: a beta outside (0, 1), eps <= 0; the base class's errors.
    """

    _coupled_decay = False
    _centralizes = False
    _scales_gradients = False
    _target_rules = "platform"

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: Any = 0.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        self.beta1, self.beta2, self.eps = check_betas_eps(beta1, beta2, eps, self._owner)
        self._add_slots({"adam_m": 0.0, "adam_v": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        b = scalar_batch(dtype)
        lr_ = b.scalar("lr", lr)
        check_range("lr", lr_, 0.0)
        b1, b2, eps = _betas_epsilon(b, self.beta1, self.beta2, self.eps)
        one = dtype.type(1)
        return lr_, one - b1, one - b2, eps

    def _dense_kernel(self, plan):
        m, v = plan.flats
        return _adam_weight_decay, (plan.flat, m, v)

    def _dense_scalars(self, plan, scalars, ctx):
        decay = plan.cdtype.type(ctx.wds[plan.wd_index] if self.decay_flags[plan.index] else 0.0)
        return (*scalars, decay)

    def _scalar_group(self, plan):
        return plan.key, (plan.wd_index if self.decay_flags[plan.index] else None)
