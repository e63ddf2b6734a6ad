"""``Muon`` (torch.optim.Muon's rule, Newton–Schulz through NumPy's BLAS) and ``MuonWithAdamW``, Muon's
usual recipe: Muon on the 2-D hidden matrices, AdamW on the rest, with the split rule of
:func:`default_muon_split` (overridable)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels.torch_family import _decayed_step, _muon_momentum, muon_momentum_scalars
from ._validators import check_bool, check_float, check_range
from .adam_weight_decay import AdamWeightDecay
from .optimizer import Optimizer

__all__ = ["Muon", "MuonWithAdamW", "default_muon_split", "newton_schulz"]


def newton_schulz(
    u: np.ndarray, coefficients: tuple = (3.4445, -4.7750, 2.0315), steps: int = 5, eps: float = 1e-7
) -> np.ndarray:
    r"""Muon's Newton–Schulz iteration in ``u``'s dtype with NumPy's matmul (BLAS)::

        X = u/max(‖u‖_F, eps) (as (min, max));  steps times:  G = X·Xᵀ;  X ← a·X + (b·G + c·G·G)·X

    torch runs it in bfloat16: its result differs from this float32/float64 one by bfloat16's rounding,
    about 1e-2 relative in the output (MODERN.md §1.2).

    Parameters
    ----------
    u : ndarray
        A 2-D float32 or float64 matrix.
    coefficients : tuple
        ``(a, b, c)``.
    steps : int
        Iterations.
    eps : float
        Floor of the norm.

    Returns
    -------
    ndarray
        A new matrix of ``u``'s shape and dtype.
    """
    a, b, c = (u.dtype.type(k) for k in coefficients)
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = x / u.dtype.type(max(float(np.linalg.norm(x)), eps))
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return np.ascontiguousarray(x.T if tall else x)


#: Names that the default split gives to AdamW although their parameter is 2-D (embeddings, output heads).
ADAMW_NAMES = re.compile(
    r"(^|[._])(embed\w*|emb|wte|wpe|tok_embeddings|lm_head|head|classifier|output|fc_out)"
    r"([._]|$)"
)


def default_muon_split(name: str, shape: tuple) -> bool:
    """The usual split (Keller Jordan's Muon README, torch's Muon docstring): True (Muon) for a 2-D parameter
    whose name does not mark it as an embedding or an output head (:data:`ADAMW_NAMES`: ``embed…``, ``wte``,
    ``lm_head``, ``head``, ``classifier``, ``output``...); False (AdamW) for the rest: biases, norms' gains,
    convolutions, embeddings, heads.

    Parameters
    ----------
    name : str
        The parameter's name.
    shape : tuple
        Its shape.

    Returns
    -------
    bool
        True for Muon.
    """
    return len(shape) == 2 and ADAMW_NAMES.search(name) is None


class Muon(Optimizer):
    r"""torch.optim.Muon's rule (MODERN.md §1.1) on 2-D parameters::

        buf ← lerp(buf, g, 1 − μ);  u = lerp(g, buf, μ) (nesterov) or buf        (the kernel)
        O = NS(u)                                                                 (:func:`newton_schulz`)
        w ← w·(1 − lr·wd);  w ← w − lr·r·O      (r = √max(1, rows/cols), or 0.2·√max(rows, cols))

    Newton–Schulz runs in the parameter's dtype through NumPy (CUDA parameters: on a host copy of ``u``);
    torch runs it in bfloat16, so the two differ by ~1e-2 relative in O (``optkernels.torch.Muon`` gives
    torch's bits). Weight decay is decoupled, for the parameters whose decay flag is set.

    Parameters
    ----------
    params : list
        2-D Parameters or group dicts (see :class:`Optimizer`).
    learning_rate : float, array or schedule
        Default 1e-3.
    weight_decay : float or callable
        Default 0.1.
    momentum : float
        μ >= 0. Default 0.95.
    nesterov : bool
        Default True.
    ns_coefficients : tuple
        Default (3.4445, -4.7750, 2.0315).
    eps : float
        Default 1e-7.
    ns_steps : int
        In [1, 100). Default 5.
    adjust_lr_fn : str, optional
        None/"original" or "match_rms_adamw".
    loss_scale : float
        Default 1.0.

    Notes
    -----
    Slot ``momentum_buffer``.
    """

    _coupled_decay = False

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        weight_decay: Any = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple = (3.4445, -4.7750, 2.0315),
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        loss_scale: float = 1.0,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        owner = self._owner
        for plan in self._plans:
            if len(plan.shape) != 2:
                raise ValueError(
                    f"For '{owner}', Muon updates 2-D parameters; {plan.name} has shape {plan.shape}"
                )
        self.momentum = check_range(
            "momentum", check_float("momentum", momentum, owner, allow_int=True), owner, 0.0
        )
        self.nesterov = check_bool("nesterov", nesterov, owner)
        if len(ns_coefficients) != 3:
            raise ValueError(f"For '{owner}', 'ns_coefficients' must be 3 numbers, got {ns_coefficients!r}")
        self.ns_coefficients = tuple(check_float("ns_coefficients", float(k), owner) for k in ns_coefficients)
        self.eps = check_range("eps", check_float("eps", eps, owner), owner, 0.0)
        if (
            isinstance(ns_steps, bool)
            or not isinstance(ns_steps, (int, np.integer))
            or not 0 < ns_steps < 100
        ):
            raise ValueError(f"For '{owner}', 'ns_steps' must be an int in [1, 100), got {ns_steps!r}")
        self.ns_steps = int(ns_steps)
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"For '{owner}', adjust_lr_fn {adjust_lr_fn!r} is not supported")
        self.adjust_lr_fn = adjust_lr_fn
        self._add_slots({"momentum_buffer": 0.0})
        self._updates: dict = {}

    def _kernel_scalars(self, ctx: Any, lr: float, dtype: Any) -> tuple:
        return (lr,)

    def _apply_dense(self, plan: Any, grad: Any, scalars: tuple, ctx: Any) -> None:
        update = self._updates.get(plan.index)
        if update is None:
            update = self._updates[plan.index] = self._new_array(plan, 0.0).reshape(-1)
        dtype = plan.cdtype
        _muon_momentum.launch(
            plan.device,
            plan.size,
            plan.flats[0],
            update,
            grad,
            *muon_momentum_scalars(dtype, self.momentum, self.nesterov),
        )
        host = update if plan.device == "cpu" else _cuda.to_host(update)
        ortho = newton_schulz(host.reshape(plan.shape), self.ns_coefficients, self.ns_steps, self.eps)
        if plan.device == "cpu":
            update[...] = ortho.reshape(-1)
        else:
            _cuda.copy_to_device(update, ortho.reshape(-1))
        lr = float(scalars[0])
        wd = float(ctx.wds[plan.wd_index]) if self.decay_flags[plan.index] else 0.0
        rows, cols = plan.shape
        ratio = (
            0.2 * math.sqrt(max(rows, cols))
            if self.adjust_lr_fn == "match_rms_adamw"
            else math.sqrt(max(1, rows / cols))
        )
        _decayed_step.launch(
            plan.device, plan.size, plan.flat, update, dtype.type(1 - lr * wd), dtype.type(-(lr * ratio))
        )


class MuonWithAdamW:
    r"""Muon on the hidden 2-D matrices and AdamW (:class:`AdamWeightDecay`) on the rest, stepped together.

    ``split(name, shape) -> bool`` (default :func:`default_muon_split`) sends a parameter to Muon (True) or
    AdamW (False). Gradients are given in :attr:`parameters`' order, as to any optimizer here; the state is
    one flat dict (``"muon/<key>"``, ``"adamw/<key>"``).

    Parameters
    ----------
    params : list
        :class:`Parameter` objects (their names drive the split).
    learning_rate, weight_decay, momentum, nesterov, ns_steps, adjust_lr_fn
        Muon's (0.02, 0.01, 0.95, True, 5, None: Keller Jordan's recipe).
    adamw_learning_rate, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay
        AdamWeightDecay's (3e-4, 0.9, 0.95, 1e-8, 0.01). It is MindSpore's AdamW: no bias correction
        (OPTIMIZERS.md), unlike torch's.
    split : callable, optional
        The rule.

    Raises
    ------
    ValueError
        A parameter that the rule gives to Muon is not 2-D; either optimizer's errors.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 0.02,
        weight_decay: Any = 0.01,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        adamw_learning_rate: Any = 3e-4,
        adamw_beta1: float = 0.9,
        adamw_beta2: float = 0.95,
        adamw_eps: float = 1e-8,
        adamw_weight_decay: Any = 0.01,
        split: Callable[[str, tuple], bool] | None = None,
    ):
        rule = split or default_muon_split
        self.parameters = tuple(params)
        self._is_muon = [bool(rule(p.name, tuple(p.shape))) for p in self.parameters]
        muon = [p for p, m in zip(self.parameters, self._is_muon) if m]
        other = [p for p, m in zip(self.parameters, self._is_muon) if not m]
        self.muon = (
            Muon(
                muon,
                learning_rate,
                weight_decay,
                momentum,
                nesterov,
                ns_steps=ns_steps,
                adjust_lr_fn=adjust_lr_fn,
            )
            if muon
            else None
        )
        self.adamw = (
            AdamWeightDecay(
                other, adamw_learning_rate, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay
            )
            if other
            else None
        )

    def __call__(self, gradients: Any) -> bool:
        return self.step(gradients)

    def step(self, gradients: Any) -> bool:
        """One step of both optimizers; ``gradients`` in :attr:`parameters`' order. Returns True."""
        if len(gradients) != len(self.parameters):
            raise ValueError(
                f"For 'MuonWithAdamW', got {len(gradients)} gradients for {len(self.parameters)} parameters"
            )
        for opt, mine in ((self.muon, True), (self.adamw, False)):
            if opt is not None:
                opt([g for g, m in zip(gradients, self._is_muon) if m is mine])
        return True

    def state_dict(self) -> dict[str, np.ndarray]:
        """Both optimizers' states, keys prefixed ``muon/`` and ``adamw/``."""
        return {
            f"{prefix}/{k}": v
            for prefix, opt in (("muon", self.muon), ("adamw", self.adamw))
            if opt is not None
            for k, v in opt.state_dict().items()
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output (each optimizer checks its part before writing)."""
        done = []
        try:
            for prefix, opt in (("muon", self.muon), ("adamw", self.adamw)):
                if opt is not None:
                    before = opt.state_dict()
                    opt.load_state_dict(
                        {k.partition("/")[2]: state[k] for k in state.keys() if k.startswith(prefix + "/")}
                    )
                    done.append((opt, before))
        except Exception:
            for opt, before in done:  # a failed load leaves both as they were
                opt.load_state_dict(before)
            raise
