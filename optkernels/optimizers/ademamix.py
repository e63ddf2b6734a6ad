"""``AdEMAMix``: Adam with a slow second momentum and the paper's α/β3 warmups (MODERN §10)."""

from __future__ import annotations

from typing import Any

from ..kernels.ademamix import _ademamix, ademamix_scalars, ademamix_schedule
from ._validators import check_bool, check_float, check_range
from .lion import check_beta
from .optimizer import Optimizer, StepContext

__all__ = ["AdEMAMix"]


def _check_warmup(name: str, value: Any, owner: str) -> float | None:
    if value is None:
        return None
    return check_range(name, check_float(name, value, owner, allow_int=True), owner, 0.0)


class AdEMAMix(Optimizer):
    r"""AdEMAMix as bitsandbytes' reference class computes it (the paper's rule), per parameter with the
    ``ademamix`` kernel (t = :attr:`global_step` + 1, from 1)::

        α_t, β3_t = the warmups of :func:`optkernels.kernels.ademamix.ademamix_schedule` (t_alpha, t_beta3)
        m1 ← β1·m1 + (1 − β1)·g;  m2 ← β3_t·m2 + (1 − β3_t)·g;  nu ← β2·nu + (1 − β2)·g²
        u  = (m1/(1 − β1^t) + α_t·m2) / (√nu/√(1 − β2^t) + eps)
        w ← w − lr·(u + wd·w)                 (decay_after_update: w ← (w − lr·u)·(1 − lr·wd), the order of
                                               bitsandbytes' CUDA kernel)

    The global step always counts. Decay flags follow the base class; no loss scale, no gradient
    centralization.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-3 (any form of :class:`Optimizer`).
        beta1, beta2, beta3: decays of m1, nu and m2 in [0, 1). Defaults 0.9, 0.999, 0.9999.
        alpha: weight of the slow momentum, >= 0. Default 5.0.
        t_alpha, t_beta3: warmup lengths of α and β3 in steps (None or 0: no warmup). Default None.
        eps: >= 0. Default 1e-8.
        weight_decay: float or int >= 0, or a callable of the global step. Default 1e-2 (bitsandbytes').
        decay_after_update: bitsandbytes' CUDA order of the decay. Default False.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``m1``, ``m2``, ``nu`` (zeros).

    Raises:
        TypeError: a hyper-parameter not a number, the flag not a bool; the base class's errors.
        ValueError: a beta outside [0, 1), alpha, eps or a warmup length < 0; the base class's errors.
    """

    _coupled_decay = False
    _centralizes = False
    _scales_gradients = False
    _always_counts_steps = True

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        beta3: float = 0.9999,
        alpha: float = 5.0,
        t_alpha: float | None = None,
        t_beta3: float | None = None,
        eps: float = 1e-8,
        weight_decay: Any = 1e-2,
        decay_after_update: bool = False,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, comm=comm)
        owner = self._owner
        self.beta1, self.beta2, self.beta3 = (
            check_beta(name, value, owner, high_open=True)
            for name, value in (("beta1", beta1), ("beta2", beta2), ("beta3", beta3))
        )
        self.alpha = check_range("alpha", check_float("alpha", alpha, owner, allow_int=True), owner, 0.0)
        self.eps = check_range("eps", check_float("eps", eps, owner, allow_int=True), owner, 0.0)
        self.t_alpha = _check_warmup("t_alpha", t_alpha, owner)
        self.t_beta3 = _check_warmup("t_beta3", t_beta3, owner)
        self.decay_after_update = check_bool("decay_after_update", decay_after_update, owner)
        self._add_slots({"m1": 0.0, "m2": 0.0, "nu": 0.0})

    def _hyper(self, ctx: StepContext) -> tuple:
        t = ctx.global_step + 1
        alpha, beta3 = ademamix_schedule(t, self.alpha, self.beta1, self.beta3, self.t_alpha, self.t_beta3)
        return self.beta1, self.beta2, beta3, alpha, self.eps

    def _kernel_scalars(self, ctx, lr, dtype):
        return ademamix_scalars(
            dtype, lr, *self._hyper(ctx), 0.0, ctx.global_step + 1, self.decay_after_update
        )

    def _dense_kernel(self, plan):
        return _ademamix, (plan.flat, *plan.flats)

    def _dense_scalars(self, plan, scalars, ctx):
        if not self.decay_flags[plan.index]:
            return scalars
        return ademamix_scalars(
            plan.cdtype,
            ctx.lrs[plan.lr_index],
            *self._hyper(ctx),
            ctx.wds[plan.wd_index],
            ctx.global_step + 1,
            self.decay_after_update,
        )

    def _scalar_group(self, plan):
        return plan.key, (plan.wd_index if self.decay_flags[plan.index] else None)
