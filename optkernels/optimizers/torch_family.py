"""torch.optim's NAdam, RAdam, Adadelta, ASGD and Rprop rules as optimizers over NumPy (or CUDA) parameters,
with this package's API (groups, learning-rate schedules, coupled weight decay, loss scale, ``state_dict``).

The update of each parameter is :mod:`optkernels.kernels.torch_family`'s element function (torch's order of
operations and fused rounding; IEEE square roots). The step count ``t`` is the global step after its
increment (these classes always count steps). Weight decay is the base class's coupled decay
``g ← w·wd·loss_scale + g`` (its decay filter), except with ``decoupled_weight_decay=True`` (NAdam, RAdam):
``w ← w·(1 − lr·wd)`` before the update, for the parameters whose decay flag is set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels import torch_family as K
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer, StepContext, _Plan

__all__ = ["ASGD", "Adadelta", "NAdam", "RAdam", "Rprop"]


def _betas(owner: str, beta1: Any, beta2: Any, eps: Any) -> tuple[float, float, float]:
    """torch's ranges: betas in [0, 1), eps >= 0 (floats)."""
    b1 = check_range("beta1", check_float("beta1", beta1, owner), owner, 0.0, 1.0, high_open=True)
    b2 = check_range("beta2", check_float("beta2", beta2, owner), owner, 0.0, 1.0, high_open=True)
    return b1, b2, check_range("eps", check_float("eps", eps, owner), owner, 0.0)


class _TorchRule(Optimizer):
    """Shared plumbing: the step count, and decoupled decay handed to the kernel per parameter."""

    _always_counts_steps = True
    decoupled_weight_decay = False

    def _dense_kernel(self, plan):
        return self._kernel, (plan.flat, *plan.flats)

    def _decoupled(self, plan: _Plan, ctx: StepContext) -> float:
        """This parameter's decoupled decay (0 when off, or when its decay flag is not set)."""
        if not self.decoupled_weight_decay or not self.decay_flags[plan.index]:
            return 0.0
        return float(ctx.wds[plan.wd_index])

    def _scalar_group(self, plan):
        if not self.decoupled_weight_decay:
            return plan.key
        return plan.key + (plan.wd_index, self.decay_flags[plan.index])


class NAdam(_TorchRule):
    r"""torch.optim.NAdam's rule (MODERN.md §2)::

        g ← w·wd·loss_scale + g (coupled; decay flag) → centralize → g ← g/loss_scale
        μ_t = β1(1 − ½·0.96^(tψ));  Π ← f32(Π·μ_t)  (float32, as torch's state)
        m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²;  d = √(v/(1 − β2^t)) + ε
        w ← w − lr(1 − μ_t)/(1 − Π)·g/d − lr·μ_{t+1}/(1 − Π·μ_{t+1})·m/d

    Parameters
    ----------
    params : list
        Parameters or group dicts (see :class:`Optimizer`).
    learning_rate : float, array or schedule
        Default 2e-3.
    beta1, beta2 : float
        In [0, 1). Defaults 0.9, 0.999.
    eps : float
        >= 0. Default 1e-8.
    weight_decay : float or callable
        Default 0.0.
    momentum_decay : float
        ψ >= 0. Default 4e-3.
    decoupled_weight_decay : bool
        ``w ← w·(1 − lr·wd)`` instead of the coupled decay. Default False.
    loss_scale : float
        Default 1.0.
    comm : mpi4py communicator, optional
        Shards the state over the ranks (``optkernels.distributed``; bit-identical to one process).

    Notes
    -----
    Slots ``exp_avg``, ``exp_avg_sq``; scalar ``mu_product``.
    """

    _kernel = K._nadam

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 2e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: Any = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        self.decoupled_weight_decay = check_bool(
            "decoupled_weight_decay", decoupled_weight_decay, type(self).__name__
        )
        if self.decoupled_weight_decay:
            self._coupled_decay = False
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        self.beta1, self.beta2, self.eps = _betas(self._owner, beta1, beta2, eps)
        self.momentum_decay = check_range(
            "momentum_decay", check_float("momentum_decay", momentum_decay, self._owner), self._owner, 0.0
        )
        self.mu_product = np.float32(1.0)
        self._add_slots({"exp_avg": 0.0, "exp_avg_sq": 0.0})

    def _prepare_step(self, ctx):
        t = ctx.global_step + 1
        ctx.extra["mu_product"] = np.float32(
            self.mu_product * np.float32(K.nadam_mu(self.beta1, self.momentum_decay, t))
        )

    def _commit_step(self, ctx):
        self.mu_product = ctx.extra["mu_product"]

    def _kernel_scalars(self, ctx, lr, dtype):
        return (lr,)

    def _dense_scalars(self, plan, scalars, ctx):
        wd = self._decoupled(plan, ctx)
        return K.nadam_scalars(
            plan.cdtype,
            float(scalars[0]),
            self.beta1,
            self.beta2,
            self.eps,
            wd,
            self.momentum_decay,
            ctx.global_step + 1,
            float(ctx.extra["mu_product"]),
            decoupled=wd != 0,
        )

    def _scalar_state(self):
        return {"mu_product": np.array(self.mu_product, np.float32)}

    def _load_scalar_state(self, state):
        self.mu_product = np.float32(state["mu_product"])


class RAdam(_TorchRule):
    r"""torch.optim.RAdam's rule (MODERN.md §3)::

        g ← w·wd·loss_scale + g (coupled; decay flag) → centralize → g ← g/loss_scale
        m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²;  m̂ = m/(1 − β1^t)
        ρ_t > 5:  w ← w − m̂·lr·√(1 − β2^t)/(√v + ε)·r_t      else  w ← w − m̂·lr

    Parameters
    ----------
    params : list
        Parameters or group dicts.
    learning_rate : float, array or schedule
        Default 1e-3.
    beta1, beta2 : float
        In [0, 1). Defaults 0.9, 0.999.
    eps : float
        >= 0. Default 1e-8.
    weight_decay : float or callable
        Default 0.0.
    decoupled_weight_decay : bool
        ``w ← w·(1 − lr·wd)`` instead of the coupled decay. Default False.
    loss_scale : float
        Default 1.0.
    comm : mpi4py communicator, optional
        Shards the state over the ranks (``optkernels.distributed``; bit-identical to one process).

    Notes
    -----
    Slots ``exp_avg``, ``exp_avg_sq``.
    """

    _kernel = K._radam

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: Any = 0.0,
        decoupled_weight_decay: bool = False,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        self.decoupled_weight_decay = check_bool(
            "decoupled_weight_decay", decoupled_weight_decay, type(self).__name__
        )
        if self.decoupled_weight_decay:
            self._coupled_decay = False
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        self.beta1, self.beta2, self.eps = _betas(self._owner, beta1, beta2, eps)
        self._add_slots({"exp_avg": 0.0, "exp_avg_sq": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        return (lr,)

    def _dense_scalars(self, plan, scalars, ctx):
        wd = self._decoupled(plan, ctx)
        return K.radam_scalars(
            plan.cdtype,
            float(scalars[0]),
            self.beta1,
            self.beta2,
            self.eps,
            wd,
            ctx.global_step + 1,
            decoupled=wd != 0,
        )


class Adadelta(_TorchRule):
    r"""torch.optim.Adadelta's rule (MODERN.md §4)::

        g ← w·wd·loss_scale + g (coupled; decay flag) → centralize → g ← g/loss_scale
        s ← ρ·s + (1 − ρ)·g²;  δ = √(a + ε)/√(s + ε)·g;  a ← ρ·a + (1 − ρ)·δ²;  w ← w − lr·δ

    Parameters
    ----------
    params : list
        Parameters or group dicts.
    learning_rate : float, array or schedule
        Default 1.0.
    rho : float
        In [0, 1]. Default 0.9.
    eps : float
        >= 0. Default 1e-6.
    weight_decay : float or callable
        Default 0.0.
    loss_scale : float
        Default 1.0.
    comm : mpi4py communicator, optional
        Shards the state over the ranks (``optkernels.distributed``; bit-identical to one process).

    Notes
    -----
    Slots ``square_avg``, ``acc_delta``.
    """

    _kernel = K._adadelta

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.rho = check_range("rho", check_float("rho", rho, owner), owner, 0.0, 1.0)
        self.eps = check_range("eps", check_float("eps", eps, owner), owner, 0.0)
        self._add_slots({"square_avg": 0.0, "acc_delta": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        return K.adadelta_scalars(dtype, float(lr), self.rho, self.eps, 0.0)


class ASGD(_TorchRule):
    r"""torch.optim.ASGD's rule (MODERN.md §5)::

        g ← w·wd·loss_scale + g (coupled; decay flag) → centralize → g ← g/loss_scale
        w ← w·(1 − λη) − η·g;  ax ← ax + (w − ax)·μ  (μ ≠ 1)  or  ax ← w
        then η ← f32(lr/(1 + λ·lr·t)^α),  μ ← f32(1/max(1, t − t0))      (for the next step)

    η starts at ``f32(lr)`` and μ at 1, float32 scalars as torch keeps them; ``lr`` is the parameter's
    learning rate at the step (a schedule's value at ``t``), so η follows it as torch's does a group's ``lr``.

    Parameters
    ----------
    params : list
        Parameters or group dicts.
    learning_rate : float, array or schedule
        Default 1e-2.
    lambd, alpha, t0 : float
        Defaults 1e-4, 0.75, 1e6.
    weight_decay : float or callable
        Default 0.0.
    loss_scale : float
        Default 1.0.
    comm : mpi4py communicator, optional
        Shards the state over the ranks (``optkernels.distributed``; bit-identical to one process).

    Notes
    -----
    Slot ``ax`` (the average); scalars ``eta``, ``mu`` per learning rate.
    """

    _kernel = K._asgd

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.lambd = check_float("lambd", lambd, owner, allow_int=True)
        self.alpha = check_float("alpha", alpha, owner, allow_int=True)
        self.t0 = check_float("t0", t0, owner, allow_int=True)
        n = len(self._lrs)
        self.eta = np.array([np.float32(lr) for lr in self._lr_values()], np.float32).reshape(n)
        self.mu = np.ones(n, np.float32)
        self._add_slots({"ax": 0.0})

    def _prepare_step(self, ctx):
        t = ctx.global_step + 1
        following = [K.asgd_next(lr, self.lambd, self.alpha, self.t0, t) for lr in ctx.lrs]
        ctx.extra["used"] = (self.eta, self.mu)
        ctx.extra["eta"] = np.array([eta for eta, _ in following], np.float32)
        ctx.extra["mu"] = np.array([mu for _, mu in following], np.float32)

    def _commit_step(self, ctx):
        self.eta, self.mu = ctx.extra["eta"], ctx.extra["mu"]

    def _kernel_scalars(self, ctx, lr, dtype):
        return (lr,)

    def _dense_scalars(self, plan, scalars, ctx):
        eta, mu = ctx.extra["used"]
        k = plan.lr_index
        return K.asgd_scalars(plan.cdtype, float(eta[k]), float(mu[k]), self.lambd, 0.0)

    def _scalar_state(self):
        return {"eta": self.eta.copy(), "mu": self.mu.copy()}

    def _load_scalar_state(self, state):
        self.eta = np.array(state["eta"], np.float32).reshape(-1)
        self.mu = np.array(state["mu"], np.float32).reshape(-1)


class Rprop(_TorchRule):
    r"""torch.optim.Rprop's rule (MODERN.md §6)::

        g ← w·wd·loss_scale + g (coupled; decay flag) → centralize → g ← g/loss_scale
        s = sign(g·prev);  f = η+ (s > 0), η− (s < 0), 1 (s = 0)
        step_size ← clamp(step_size·f, min, max);  g ← 0 where f = η−
        w ← w − sign(g)·step_size;  prev ← g

    ``step_size`` starts at each parameter's learning rate at step 0 (torch: the group's ``lr``); later
    learning rates are not used (as torch's).

    Parameters
    ----------
    params : list
        Parameters or group dicts.
    learning_rate : float, array or schedule
        The initial step size. Default 1e-2.
    etas : tuple
        ``(η−, η+)`` with ``0 < η− < 1 < η+``. Default (0.5, 1.2).
    step_sizes : tuple
        ``(min, max)``. Default (1e-6, 50).
    weight_decay : float or callable
        Default 0.0.
    loss_scale : float
        Default 1.0.
    comm : mpi4py communicator, optional
        Shards the state over the ranks (``optkernels.distributed``; bit-identical to one process).

    Notes
    -----
    Slots ``prev``, ``step_size``.
    """

    _kernel = K._rprop

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-2,
        etas: tuple = (0.5, 1.2),
        step_sizes: tuple = (1e-6, 50.0),
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        minus, plus = (check_float(f"etas[{k}]", e, owner, allow_int=True) for k, e in enumerate(etas))
        if not 0.0 < minus < 1.0 < plus:
            raise ValueError(
                f"For '{owner}', 'etas' must satisfy 0 < etas[0] < 1 < etas[1], got {tuple(etas)}"
            )
        self.etas = (minus, plus)
        self.step_sizes = tuple(
            check_float(f"step_sizes[{k}]", s, owner, allow_int=True) for k, s in enumerate(step_sizes)
        )
        self._add_slots({"prev": 0.0, "step_size": 0.0})
        lrs = self._lr_values()
        for plan in self._local_plans:
            slot, initial = plan.slots["step_size"], self._new_array(plan, lrs[plan.lr_index], host=True)
            if isinstance(slot, np.ndarray):
                slot[...] = initial
            else:
                _cuda.copy_to_device(slot, initial)

    def _kernel_scalars(self, ctx, lr, dtype):
        return K.rprop_scalars(dtype, self.etas, self.step_sizes)
