"""``Lamb``: layer-wise adaptive moments (MindSpore ``nn.Lamb``)."""

from __future__ import annotations

from typing import Any

from ..kernels.lamb import lamb
from ._validators import check_betas_eps
from .optimizer import Optimizer

__all__ = ["Lamb"]


class Lamb(Optimizer):
    r"""LAMB (MindSpore ``nn.Lamb``; OPTIMIZERS §2.12), per parameter with the ``lamb`` kernel::

        g ← centralize(g)                                   (flagged grouped parameters)
        t = global_step after its increment (1 on the first step: Lamb always counts steps)
        lamb_m ← β1·lamb_m + (1−β1)·g;  lamb_v ← β2·lamb_v + (1−β2)·g²
        m̂ = lamb_m/(1 − β1^t);  v̂ = lamb_v/(1 − β2^t)
        u = m̂/(sqrt(v̂) + eps) + λ·w                    (λ = weight decay if the decay flag is set, else 0)
        trust = ‖w‖/‖m̂/sqrt(v̂ + eps) + λ·w‖, clipped to [0, 10] (1 if a norm is 0)
        w ← w − trust·lr·u

    The decay is decoupled (inside the trust ratio); no ``loss_scale`` argument; dense gradients only. The
    trust ratio's norm takes ``sqrt(v̂ + eps)`` as MindSpore's code does (its documentation writes
    ``sqrt(v̂) + eps`` there too).

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: required (any form of :class:`Optimizer`).
        beta1, beta2: floats in (0, 1). Defaults 0.9, 0.999.
        eps: float > 0. Default 1e-6.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``lamb_m``, ``lamb_v`` (zeros).

    Raises:
        TypeError: a beta or eps not a float; the base class's errors.
        ValueError: a beta outside (0, 1), eps <= 0; the base class's errors.
    """

    _coupled_decay = False
    _scales_gradients = False
    _always_counts_steps = True
    _distinct_gradients = True

    def __init__(
        self,
        params: Any,
        learning_rate: Any,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: Any = 0.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        self.beta1, self.beta2, self.eps = check_betas_eps(beta1, beta2, eps, self._owner)
        self._add_slots({"lamb_m": 0.0, "lamb_v": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        return (lr,)

    def _apply_dense(self, plan, grad, scalars, ctx):
        m, v = plan.flats
        decay = ctx.wds[plan.wd_index] if self.decay_flags[plan.index] else 0.0
        lamb(plan.flat, m, v, scalars[0], self.beta1, self.beta2, self.eps, decay, ctx.global_step + 1, grad)
