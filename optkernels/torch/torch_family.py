"""torch's NAdam, RAdam, Adadelta, ASGD and Rprop over :mod:`optkernels.kernels.torch_family`'s kernels.

Each class takes torch's constructor arguments and defaults, keeps torch's state (keys, dtypes, 0-d float32
scalars) and ``state_dict``, and on the CPU gives the bits of ``torch.optim.<Name>(foreach=False)`` for
float32 and float64 parameters: the element functions round as torch's CPU ops do (explicit fused
multiply-adds) and the square roots are torch's own (:mod:`._torch_sqrt`); for float16 and bfloat16 CPU
parameters, every operation rounded to the dtype as torch rounds it (:mod:`._half_rule`). The per-parameter scalar state
(NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``) is updated with torch's own 0-d tensor operations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels import torch_family as K
from ..kernels import torch_half_rules as H
from ..kernels.torch_rules import NO_TAIL
from . import _views
from ._base import KernelOptimizer, _Plan
from ._half_rule import HalfRule
from ._torch_sqrt import TorchSqrtKernel
from .adam import squeezed, tensor_betas

__all__ = ["ASGD", "Adadelta", "NAdam", "RAdam", "Rprop"]

_NADAM = HalfRule(TorchSqrtKernel(K._nadam, K._nadam_moments, K._nadam_apply, 1), H._nadam_half)
_RADAM = HalfRule(TorchSqrtKernel(K._radam, K._radam_moments, K._radam_apply, 1), H._radam_half)
_ADADELTA = HalfRule(
    TorchSqrtKernel(K._adadelta, K._adadelta_moments, K._adadelta_apply, 2), H._adadelta_half
)
_ASGD = HalfRule(K._asgd, H._asgd_half)
_RPROP = HalfRule(K._rprop, H._rprop_half)


def check_lr(lr: Any, message: str = "Invalid learning rate: {}") -> None:
    """torch's learning-rate checks: a 1-element Tensor, and ``lr >= 0`` (``message`` formatted with it)."""
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= float(lr):
        raise ValueError(message.format(lr))


def check_betas_eps(group: dict) -> None:
    """torch's Adam-family checks of ``eps``, ``betas`` and ``weight_decay`` (messages as torch's)."""
    eps, betas = group["eps"], group["betas"]
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for k in (0, 1):
        if not 0.0 <= betas[k] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {k}: {betas[k]}")
    if not 0.0 <= group["weight_decay"]:
        raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")


def scalar_dtype() -> torch.dtype:
    """torch's dtype of 0-d optimizer state: float64 if that is the default dtype, else float32."""
    return torch.float64 if torch.get_default_dtype() is torch.float64 else torch.float32


def _steps_of(plan: _Plan) -> np.ndarray:
    """The plan's step numbers: these drop-ins count steps, so ``_build`` has set ``steps_np``."""
    assert plan.steps_np is not None
    return plan.steps_np


def _by_step(plan: _Plan) -> dict[int, list]:
    """The plan's parameters by step number (one entry where they step together, as they usually do)."""
    if plan.step_now is not None:
        return {plan.step_now: plan.params}
    out: dict[int, list] = {}
    for t, p in zip(_steps_of(plan).tolist(), plan.params):
        out.setdefault(int(t), []).append(p)
    return out


def _fill(tensors: list, value: float) -> None:
    """``t.fill_(value)`` of every 0-d tensor of ``tensors``: one ``torch._foreach_copy_`` per dtype from a
    0-d tensor holding ``value`` rounded as ``fill_`` rounds it (to the dtype, from the Python float)."""
    by_dtype: dict = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    for (dtype, device), same in by_dtype.items():
        source = torch.full((), value, dtype=dtype, device=device)
        torch._foreach_copy_(same, [source] * len(same))


class TorchRule(KernelOptimizer):
    """A drop-in whose element function does torch's gradient pre-step itself (maximize, weight decay),
    with torch's fused rounding; the adapter's separate pre-step is off."""

    def _prestep(self, group: dict) -> None:
        return None

    def _group_reason(self, group: dict) -> str | None:
        """As the base class's; also ``betas`` (NAdam, RAdam) holding a tensor of 1 or more dimensions (0-d
        ones the kernels' scalars take as torch does: :func:`~optkernels.torch.adam.tensor_betas`)."""
        return tensor_betas(group, zero_d=False) or super()._group_reason(group)

    def _torch_reason(self, group: dict, p: torch.Tensor) -> str | None:
        """As the base class's; also 0-d tensor ``betas`` with a float16/bfloat16 parameter (torch's step
        then computes its moment weights as float32 tensors, which the half kernels' scalars do not)."""
        reason = super()._torch_reason(group, p)
        if reason is None and p.dtype in _views.HALF_DTYPES and tensor_betas(group):
            reason = "Tensor betas with float16/bfloat16 parameters"
        return reason

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        """:meth:`_rule_scalars`, then the three of torch's half tail (:class:`._half_rule.HalfRule`)."""
        return (*self._rule_scalars(group, step, dtype), *NO_TAIL)

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        """The float rule's scalars for a step (:mod:`optkernels.kernels.torch_family`)."""
        raise NotImplementedError

    def _scalar_state(self, plan: _Plan) -> dict:
        """``step -> state of the first parameter at that step`` (the group's parameters are launched
        together per step value, so their scalar state must agree)."""
        steps = _steps_of(plan)
        first: dict = {}
        for k, p in enumerate(plan.params):
            first.setdefault(int(steps[k]), self.state[p])
        return first


class NAdam(TorchRule):
    r"""torch.optim.NAdam over optkernels' kernels (MODERN.md §2)::

        g ← −g (maximize);  g ← g + wd·w  or  w ← w·(1 − lr·wd) (decoupled_weight_decay)
        μ_t = β1(1 − ½·0.96^(tψ));  Π ← Π·μ_t
        m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²;  d = √(v/(1 − β2^t)) + ε
        w ← w − lr(1 − μ_t)/(1 − Π)·g/d − lr·μ_{t+1}/(1 − Π·μ_{t+1})·m/d

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts (torch's convention).
    lr : float
        Learning rate (default 2e-3).
    betas : tuple
        ``(β1, β2)`` (default (0.9, 0.999)).
    eps : float
        Added to the root (1e-8).
    weight_decay : float
        Coupled (L2) decay, or decoupled with ``decoupled_weight_decay`` (0).
    momentum_decay : float
        ψ (4e-3).
    decoupled_weight_decay, maximize : bool
        torch's flags (False).
    foreach, capturable, differentiable
        Accepted as torch's; ``foreach`` is ignored; ``capturable``/``differentiable`` parameters are updated
        by torch's own implementation.

    State: ``step``, ``mu_product`` (0-d float32), ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 2e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: Any = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        self._check_hyper(defaults)
        self._products: dict = {}
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"])
        check_betas_eps(group)
        if not 0.0 <= group["momentum_decay"]:
            raise ValueError(f"Invalid momentum_decay value: {group['momentum_decay']}")

    def _kernel(self, group: dict) -> tuple:
        return _NADAM, ("exp_avg", "exp_avg_sq")

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        if name == "exp_avg":  # a first step: torch's 0-d state first, in torch's key order
            self.state[p].setdefault("mu_product", torch.ones((), dtype=scalar_dtype()))
        return super()._new_state(name, p, group)

    def _before_update(self, group: dict, plan: _Plan, step: int) -> None:
        beta1, psi = group["betas"][0], group["momentum_decay"]
        state = self.state
        for t, members in _by_step(plan).items():  # torch's ``mu_product *= mu`` of each, one call per step
            torch._foreach_mul_([state[p]["mu_product"] for p in members], K.nadam_mu(beta1, psi, t))
        self._products = {t: s["mu_product"].item() for t, s in self._scalar_state(plan).items()}

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2 = group["betas"]
        return K.nadam_scalars(
            dtype,
            squeezed(group["lr"]),  # a tensor lr: torch's host arithmetic in its dtype, as torch does it
            beta1,
            beta2,
            group["eps"],
            group["weight_decay"],
            group["momentum_decay"],
            step,
            self._products[step],
            decoupled=group["decoupled_weight_decay"],
            maximize=group["maximize"],
        )


class RAdam(TorchRule):
    r"""torch.optim.RAdam over optkernels' kernels (MODERN.md §3)::

        g ← −g (maximize);  g ← g + wd·w  or  w ← w·(1 − lr·wd) (decoupled_weight_decay)
        m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²;  m̂ = m/(1 − β1^t)
        ρ_t > 5:  w ← w − m̂·lr·√(1 − β2^t)/(√v + ε)·r_t      else  w ← w − m̂·lr

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts.
    lr : float
        Learning rate (1e-3).
    betas : tuple
        ``(β1, β2)`` ((0.9, 0.999)).
    eps : float
        Added to √v (1e-8).
    weight_decay : float
        Coupled decay, or decoupled with ``decoupled_weight_decay`` (0).
    decoupled_weight_decay, maximize : bool
        torch's flags (False).
    foreach, capturable, differentiable
        As :class:`NAdam`.

    State: ``step``, ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: Any = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay,
            differentiable=differentiable,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"])
        check_betas_eps(group)

    def _kernel(self, group: dict) -> tuple:
        return _RADAM, ("exp_avg", "exp_avg_sq")

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2 = group["betas"]
        return K.radam_scalars(
            dtype,
            squeezed(group["lr"]),  # a tensor lr: torch's host arithmetic in its dtype, as torch does it
            beta1,
            beta2,
            group["eps"],
            group["weight_decay"],
            step,
            decoupled=group["decoupled_weight_decay"],
            maximize=group["maximize"],
        )


class Adadelta(TorchRule):
    r"""torch.optim.Adadelta over optkernels' kernels (MODERN.md §4)::

        g ← −g (maximize);  g ← g + wd·w
        s ← ρ·s + (1 − ρ)·g²;  δ = √(a + ε)/√(s + ε)·g;  a ← ρ·a + (1 − ρ)·δ²;  w ← w − lr·δ

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts.
    lr : float
        Scales δ (1.0).
    rho : float
        Averaging coefficient in [0, 1] (0.9).
    eps : float
        Inside both roots (1e-6).
    weight_decay : float
        Coupled decay (0).
    foreach, capturable, maximize, differentiable
        As torch (``foreach`` ignored; ``capturable``/``differentiable`` parameters are updated by torch's own
        implementation).

    State: ``step``, ``square_avg``, ``acc_delta``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        foreach: Any = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            rho=rho,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            capturable=capturable,
            foreach=foreach,
            differentiable=differentiable,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"])
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {group['rho']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _kernel(self, group: dict) -> tuple:
        return _ADADELTA, ("square_avg", "acc_delta")

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        return K.adadelta_scalars(
            dtype,
            float(group["lr"]),
            group["rho"],
            group["eps"],
            group["weight_decay"],
            maximize=group["maximize"],
        )


class ASGD(TorchRule):
    r"""torch.optim.ASGD over optkernels' kernels (MODERN.md §5)::

        g ← −g (maximize);  g ← g + wd·w
        w ← w·(1 − λη) − η·g;  ax ← ax + (w − ax)·μ  (μ ≠ 1)  or  ax ← w
        η ← lr/(1 + λ·lr·t)^α;  μ ← 1/max(1, t − t0)      (0-d float32 state, for the next step)

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts.
    lr : float
        Learning rate (1e-2).
    lambd, alpha, t0 : float
        Decay term (1e-4), the power of η's schedule (0.75), the step averaging starts at (1e6).
    weight_decay : float
        Coupled decay (0).
    foreach, maximize, differentiable, capturable
        As torch (``foreach`` ignored; ``capturable``/``differentiable`` parameters are updated by torch's own
        implementation).

    State: ``step``, ``eta``, ``mu`` (0-d float32), ``ax``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: Any = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        self._check_hyper(defaults)
        self._etas: dict = {}
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"])
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _kernel(self, group: dict) -> tuple:
        return _ASGD, ("ax",)

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        state = self.state[p]  # a first step: torch's 0-d state first, in torch's key order
        if "eta" not in state:
            state["eta"] = torch.as_tensor(squeezed(group["lr"]), dtype=scalar_dtype()).clone().detach()
            state["mu"] = torch.ones((), dtype=scalar_dtype())
        return super()._new_state(name, p, group)

    def _before_update(self, group: dict, plan: _Plan, step: int) -> None:
        self._etas = {t: (s["eta"].item(), s["mu"].item()) for t, s in self._scalar_state(plan).items()}
        # a tensor lr: eta computed in its dtype, as torch computes it
        lr, lambd, alpha, t0 = squeezed(group["lr"]), group["lambd"], group["alpha"], group["t0"]
        state = self.state
        for t, members in _by_step(plan).items():  # torch's ``fill_`` of each 0-d state, one call per step
            for name, value in zip(("eta", "mu"), K.asgd_next(lr, lambd, alpha, t0, t)):
                _fill([state[p][name] for p in members], float(value))

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        eta, mu = self._etas[step]
        return K.asgd_scalars(
            dtype, eta, mu, group["lambd"], group["weight_decay"], maximize=group["maximize"]
        )


class Rprop(TorchRule):
    r"""torch.optim.Rprop over optkernels' kernels (MODERN.md §6)::

        g ← −g (maximize);  s = sign(g·prev)
        f = η+ (s > 0), η− (s < 0), 1 (s = 0);  step_size ← clamp(step_size·f, min, max)
        g ← 0 where f = η−;  w ← w − sign(g)·step_size;  prev ← g

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts.
    lr : float
        The initial step size (1e-2).
    etas : tuple
        ``(η−, η+)`` with ``0 < η− < 1 < η+`` ((0.5, 1.2)).
    step_sizes : tuple
        ``(min, max)`` step sizes ((1e-6, 50)).
    capturable, foreach, maximize, differentiable
        As torch (``foreach`` ignored; ``capturable``/``differentiable`` parameters are updated by torch's own
        implementation).

    State: ``step``, ``prev``, ``step_size``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-2,
        etas: tuple = (0.5, 1.2),
        step_sizes: tuple = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: Any = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(
            lr=lr,
            etas=etas,
            step_sizes=step_sizes,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"])
        etas = group["etas"]
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")

    def _kernel(self, group: dict) -> tuple:
        return _RPROP, ("prev", "step_size")

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        if name == "step_size":
            lr = group["lr"]
            return torch.full_like(
                p, lr.item() if isinstance(lr, torch.Tensor) else lr, memory_format=torch.preserve_format
            )
        return super()._new_state(name, p, group)

    def _rule_scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        return K.rprop_scalars(
            dtype, tuple(group["etas"]), tuple(group["step_sizes"]), maximize=group["maximize"]
        )
