"""bitsandbytes' 8-bit optimizers over NumPy (or CUDA) arrays: ``Adam8bit``, ``AdamW8bit``, ``Lion8bit``,
``AdEMAMix8bit``, ``SGD8bit``, ``RMSprop8bit``, ``Adagrad8bit``.

Their constructors, parameter groups, state (``step``, ``state1``/``state2`` uint8 codes, ``absmax1``/
``absmax2`` float32 block maxima, ``qmap1``/``qmap2`` maps) and state_dict layout are bitsandbytes' (0.50,
LOWBIT.md §4); the step is :func:`~optkernels.kernels.optimizer_update_8bit_blockwise` (bitsandbytes' CUDA
semantics). Parameters with fewer than ``min_8bit_size`` elements keep float32 states (the 32-bit kernel).
The constructor argument classes (``_AdamArgs``...) and :func:`blockwise_step` are shared with the torch
drop-ins of :mod:`optkernels.torch.lowbit`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels.blockwise_optim import BLOCK, optimizer_update_8bit_blockwise, optimizer_update_32bit
from ..kernels.quantization import dynamic_map
from .parameter import Parameter

__all__ = ["Adam8bit", "AdamW8bit", "Lion8bit", "AdEMAMix8bit", "SGD8bit", "RMSprop8bit", "Adagrad8bit"]

QUANT_KEYS = (
    "qmap1",
    "qmap2",
    "max1",
    "max2",
    "new_max1",
    "new_max2",
    "state1",
    "state2",
    "gnorm_vec",
    "absmax1",
    "absmax2",
    "unorm_vec",
)
"""bitsandbytes' state keys kept uncast on load and wrapped under :data:`WRAPPED_KEY` by ``state_dict()``."""
WRAPPED_KEY = "__bnb_optimizer_quant_state__"


# --------------------------------------------------------------------------- one parameter's state and step


def new_state(
    algo: str, shape: tuple, eightbit: bool, zeros: Callable[[tuple, Any], Any], table: Callable[[bool], Any]
) -> dict:
    """A fresh state for a parameter of ``shape`` (bitsandbytes' ``init_state``): ``zeros(shape, dtype)``
    allocates, ``table(signed)`` gives a map. 8-bit: uint8 ``state1`` (AdEMAMix ``(2, *shape)``), ``state2``
    for the 2-state rules, float32 ``absmax*`` of ``ceil(n/256)`` blocks, ``qmap1``/``qmap2``; otherwise
    float32 ``state1``/``state2``."""
    rows = (2,) if algo == "ademamix" else ()
    two = algo in ("adam", "ademamix")
    state: dict = {"step": 0}
    if not eightbit:
        state["state1"] = zeros(rows + tuple(shape), np.float32)
        if two:
            state["state2"] = zeros(tuple(shape), np.float32)
        return state
    blocks = -(-math.prod(shape) // BLOCK)
    state["state1"] = zeros(rows + tuple(shape), np.uint8)
    state["qmap1"] = table(True)
    if two:
        state["state2"] = zeros(tuple(shape), np.uint8)
        state["qmap2"] = table(False)
    state["absmax1"] = zeros(rows + (blocks,), np.float32)
    if two:
        state["absmax2"] = zeros((blocks,), np.float32)
    return state


def step_hyper(algo: str, group: dict, step: int) -> tuple:
    """``(beta1, beta2, beta3, alpha)`` of a step from a group (bitsandbytes' ``get_config``; AdEMAMix's
    schedules ``α_t = min(t·α/t_alpha, α)``, ``β3_t = min(exp(ln β1·ln β3/((1−s)·ln β3 + s·ln β1)), β3)``,
    ``s = t/t_beta3``)."""
    betas = list(group["betas"])
    b1 = float(betas[0])
    b2 = float(betas[1]) if len(betas) > 1 else 0.0
    b3 = float(betas[2]) if len(betas) >= 3 else 0.0
    alpha = float(group.get("alpha", 0.0))
    if algo == "ademamix":
        t_alpha, t_beta3 = group.get("t_alpha"), group.get("t_beta3")
        if t_alpha:
            alpha = min(step * alpha / t_alpha, alpha)
        if t_beta3:
            ln1, ln3 = math.log(b1), math.log(b3)
            s = step / t_beta3
            b3 = min(math.exp((ln1 * ln3) / ((1 - s) * ln3 + s * ln1)), b3)
    return b1, b2, b3, alpha


def blockwise_step(algo: str, state: dict, p: Any, g: Any, group: dict) -> None:
    """One step of one parameter: ``state['step'] += 1``, then the 8-bit kernel (uint8 ``state1``) or the
    32-bit one, with the group's hyper-parameters. ``state``'s arrays, ``p`` and ``g`` are NumPy or CUDA
    arrays (views of torch tensors for :mod:`optkernels.torch.lowbit`)."""
    step = state["step"] + 1
    b1, b2, b3, alpha = step_hyper(algo, group, step)
    lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
    if np.dtype(state["state1"].dtype) == np.uint8:
        optimizer_update_8bit_blockwise(
            algo,
            g,
            p,
            state["state1"],
            state.get("state2"),
            b1,
            b2,
            b3,
            alpha,
            eps,
            step,
            lr,
            state["qmap1"],
            state.get("qmap2"),
            state["absmax1"],
            state.get("absmax2"),
            weight_decay=wd,
        )
    else:
        optimizer_update_32bit(
            algo,
            g,
            p,
            state["state1"],
            b1,
            eps,
            step,
            lr,
            state2=state.get("state2"),
            beta2=b2,
            beta3=b3,
            alpha=alpha,
            weight_decay=wd,
        )
    state["step"] = step


# --------------------------------------------------------------------------- bitsandbytes' constructors


def _check_common(lr: Any, eps: Any, betas: Any, weight_decay: Any) -> list:
    if isinstance(betas, str):  # bitsandbytes accepts "(0.9, 0.999)"
        betas = [float(b) for b in betas.replace("(", "").replace(")", "").strip().split(",")]
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    return betas


def _two_state_defaults(
    lr: Any,
    betas: Any,
    eps: Any,
    weight_decay: Any,
    alpha: Any = 0.0,
    t_alpha: Any = None,
    t_beta3: Any = None,
) -> dict:
    betas = _check_common(lr, eps, betas, weight_decay)
    return dict(
        lr=lr,
        betas=tuple(betas),
        eps=eps,
        weight_decay=weight_decay,
        alpha=alpha,
        t_alpha=t_alpha,
        t_beta3=t_beta3,
    )


def _one_state_defaults(lr: Any, betas: Any, eps: Any, weight_decay: Any) -> dict:
    betas = _check_common(lr, eps, betas, weight_decay)
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)


def _adam_guards(amsgrad: bool, optim_bits: int, args: Any) -> None:
    if amsgrad:
        raise ValueError("amsgrad=True is not supported by the 8-bit Adam (bitsandbytes)")
    if optim_bits != 32:
        raise ValueError(f"optim_bits is kept for signature compatibility and must be 32, got {optim_bits}")
    if args is not None:
        raise ValueError("args (bitsandbytes' GlobalOptimManager config object) is not supported")


class _Args:
    """Base of the constructor argument classes: they validate bitsandbytes' arguments and hand the
    defaults to ``_setup``, defined by the optimizer class they are mixed into (NumPy or torch
    ``Optimizer8bit``)."""

    _setup: Callable[[Any, dict, int], None]  # declared only: the lookup reaches the optimizer's method


class _AdamArgs(_Args):
    algo = "adam"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Any = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        optim_bits: int = 32,
        args: Any = None,
        min_8bit_size: int = 4096,
        is_paged: bool = False,
    ):
        _adam_guards(amsgrad, optim_bits, args)
        self._setup(params, _two_state_defaults(lr, betas, eps, weight_decay), min_8bit_size)


class _AdamWArgs(_AdamArgs):
    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Any = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        optim_bits: int = 32,
        args: Any = None,
        min_8bit_size: int = 4096,
        is_paged: bool = False,
    ):
        super().__init__(
            params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size, is_paged
        )


class _AdEMAMixArgs(_Args):
    algo = "ademamix"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999, 0.9999),
        alpha: float = 5.0,
        t_alpha: Any = None,
        t_beta3: Any = None,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        min_8bit_size: int = 4096,
        is_paged: bool = False,
    ):
        self._setup(
            params, _two_state_defaults(lr, betas, eps, weight_decay, alpha, t_alpha, t_beta3), min_8bit_size
        )


class _LionArgs(_Args):
    algo = "lion"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-4,
        betas: tuple = (0.9, 0.99),
        weight_decay: float = 0,
        args: Any = None,
        min_8bit_size: int = 4096,
        is_paged: bool = False,
    ):
        _adam_guards(False, 32, args)
        self._setup(params, _one_state_defaults(lr, betas, 0.0, weight_decay), min_8bit_size)


class _SGDArgs(_Args):
    algo = "momentum"

    def __init__(
        self,
        params: Any,
        lr: float,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        args: Any = None,
        min_8bit_size: int = 4096,
    ):
        if momentum == 0:
            raise NotImplementedError("SGD without momentum is not supported!")
        _adam_guards(False, 32, args)
        self._setup(params, _one_state_defaults(lr, (momentum, dampening), 0.0, weight_decay), min_8bit_size)


class _RMSpropArgs(_Args):
    algo = "rmsprop"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        args: Any = None,
        min_8bit_size: int = 4096,
    ):
        if alpha == 0:
            raise NotImplementedError("RMSprop with alpha==0.0 is not supported!")
        if centered:
            raise NotImplementedError("Centered RMSprop is not supported!")
        _adam_guards(False, 32, args)
        self._setup(params, _one_state_defaults(lr, (alpha, momentum), eps, weight_decay), min_8bit_size)


class _AdagradArgs(_Args):
    algo = "adagrad"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        optim_bits: int = 8,
        args: Any = None,
        min_8bit_size: int = 4096,
    ):
        if initial_accumulator_value != 0.0:
            raise ValueError("Initial accumulator value != 0.0 not supported!")
        if lr_decay != 0.0:
            raise ValueError("Lr Decay != 0.0 not supported!")
        if optim_bits != 8:
            raise ValueError("Adagrad8bit only supports optim_bits=8 (default value for compatibility)")
        _adam_guards(False, 32, args)
        self._setup(params, _one_state_defaults(lr, (0.0, 0.0), eps, weight_decay), min_8bit_size)


# --------------------------------------------------------------------------- the NumPy optimizers


def _array_of(p: Any, k: int) -> Any:
    data = p.data if isinstance(p, Parameter) else p
    if isinstance(data, np.ndarray) or _cuda.is_device_array(data):
        return data
    raise TypeError(f"params[{k}] must be a NumPy or CUDA array or a Parameter, got {type(p).__name__}")


def _zeros_like_device(p: Any) -> Callable:
    if isinstance(p, np.ndarray):
        return lambda shape, dtype: np.zeros(shape, dtype)
    return lambda shape, dtype: _cuda.to_device(np.zeros(shape, dtype))


class ArrayOptimizer:
    """Parameter groups over NumPy or CUDA arrays, torch-style (the base of the 8-bit optimizers and of
    :class:`~optkernels.optimizers.RowWiseAdagrad`).

    ``params``: a list of NumPy or CUDA arrays (updated in place) or :class:`Parameter` objects, or a list
    of group dicts (``params`` plus any of the constructor's keys). Groups hold parameter indices; the
    arrays are ``self._arrays``; ``self.state[k]`` is parameter ``k``'s state.
    """

    def _groups(self, params: Any, defaults: dict) -> None:
        self.defaults = defaults
        items = list(params)
        if not items:
            raise ValueError("optimizer got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        self.param_groups: list[dict] = []
        self._arrays: list[Any] = []
        for group in groups:
            if not isinstance(group, dict) or "params" not in group:
                raise TypeError("params must be a list of arrays or a list of group dicts with 'params'")
            full = dict(defaults)
            full.update({k: v for k, v in group.items() if k != "params"})
            arrays = [_array_of(p, len(self._arrays) + j) for j, p in enumerate(group["params"])]
            full["params"] = list(range(len(self._arrays), len(self._arrays) + len(arrays)))
            self._arrays += arrays
            self.param_groups.append(full)
        self.state: dict[int, dict] = {}

    def _check_grads(self, grads: list, sparse: Callable[[Any], bool] = lambda g: False) -> None:
        if len(grads) != len(self._arrays):
            raise ValueError(f"expected {len(self._arrays)} gradients, got {len(grads)}")
        for k, (p, g) in enumerate(zip(self._arrays, grads)):
            if g is None or sparse(g):
                continue
            if getattr(g, "shape", None) != p.shape or np.dtype(g.dtype) != np.dtype(p.dtype):
                raise ValueError(
                    f"grads[{k}] ({getattr(g, 'dtype', None)}, {getattr(g, 'shape', None)}) does "
                    f"not match its parameter ({p.dtype}, {p.shape})"
                )

    def _load_groups(self, state_dict: dict) -> dict:
        """Check ``state_dict``'s groups against ours, take its hyper-parameters; returns saved id -> ours."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"]) for a, b in zip(saved, self.param_groups)
        ):
            raise ValueError("loaded state dict has groups that do not match the optimizer's")
        ids = {
            old: new for a, b in zip(saved, self.param_groups) for old, new in zip(a["params"], b["params"])
        }
        for group, new in zip(self.param_groups, saved):
            group.update({key: v for key, v in new.items() if key != "params"})
        return ids

    def _device(self, k: int) -> str:
        return "cpu" if isinstance(self._arrays[k], np.ndarray) else "cuda"


class Optimizer8bit(ArrayOptimizer):
    """Base of the NumPy 8-bit optimizers (bitsandbytes' ``Optimizer8bit`` behaviour, without torch):
    see :class:`ArrayOptimizer` for ``params``. ``step(grads)`` takes one gradient per parameter in order
    (None: skip that parameter); every gradient is checked against its parameter before any array is
    written."""

    algo = ""

    def _setup(self, params: Any, defaults: dict, min_8bit_size: int) -> None:
        if isinstance(min_8bit_size, bool) or not isinstance(min_8bit_size, (int, np.integer)):
            raise TypeError(f"min_8bit_size must be an int, got {type(min_8bit_size).__name__}")
        self.min_8bit_size = int(min_8bit_size)
        self._groups(params, defaults)

    def step(self, grads: Any) -> None:
        """One update of every parameter whose gradient is not None (bitsandbytes' ``step``)."""
        grads = list(grads)
        self._check_grads(grads)
        for group in self.param_groups:
            for k in group["params"]:
                g = grads[k]
                if g is None:
                    continue
                p = self._arrays[k]
                if k not in self.state:
                    eightbit = math.prod(p.shape) >= self.min_8bit_size
                    self.state[k] = new_state(
                        self.algo,
                        p.shape,
                        eightbit,
                        _zeros_like_device(p),
                        functools.partial(_table, device=self._device(k)),
                    )
                blockwise_step(self.algo, self.state[k], p, g, group)

    def state_dict(self) -> dict:
        """bitsandbytes' layout: ``{'state': {k: {'step': int, WRAPPED_KEY: {state1, qmap1, absmax1, ...}}},
        'param_groups': [...]}`` with copies of the host arrays."""
        state = {}
        for k, s in self.state.items():
            wrapped = {key: to_host(v) for key, v in s.items() if key in QUANT_KEYS}
            state[k] = {"step": s["step"], WRAPPED_KEY: wrapped}
        return {
            "state": state,
            "param_groups": [dict(g, params=list(g["params"])) for g in self.param_groups],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` (nested or flat layout, as bitsandbytes accepts; NumPy arrays or anything
        ``np.asarray`` converts, torch CPU tensors included). Groups must have the same sizes."""
        ids = self._load_groups(state_dict)
        state = {}
        for old, s in state_dict["state"].items():
            s = dict(s)
            s.update(s.pop(WRAPPED_KEY, {}))
            k = ids[old]
            state[k] = {
                key: (int(v) if key == "step" else to_device(np.array(v), self._device(k)))
                for key, v in s.items()
            }
        self.state = state


def _table(signed: bool, device: str) -> Any:
    table = dynamic_map(signed)
    return table if device == "cpu" else _cuda.to_device(table)


def to_host(x: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CUDA array."""
    return np.array(x) if isinstance(x, np.ndarray) else _cuda.to_host(x)


def to_device(x: np.ndarray, device: str) -> Any:
    """``x`` itself on the CPU, a device copy for 'cuda'."""
    return x if device == "cpu" else _cuda.to_device(x)


class Adam8bit(_AdamArgs, Optimizer8bit):
    r"""bitsandbytes' ``Adam8bit`` over NumPy arrays: Adam with 8-bit blockwise moments (LOWBIT.md §3.1)::

        m' = m·β1 + (1−β1)·g          v' = v·β2 + ((1−β2)·g)·g
        p ← p − (lr·c2/c1)·m'/(sqrt(v') + c2·ε),   c1 = 1−β1^t, c2 = sqrt(1−β2^t)
        p ← p·(1 − lr·wd)             (if weight_decay > 0: decoupled, after the step)

    Parameters
    ----------
    params : list
        Arrays, :class:`Parameter` objects, or group dicts.
    lr, betas, eps, weight_decay : float, tuple, float, float
        bitsandbytes' defaults 1e-3, (0.9, 0.999), 1e-8, 0.
    amsgrad : bool
        Must be False.
    optim_bits : int
        Must be 32 (kept for signature compatibility, as bitsandbytes).
    args : None
        bitsandbytes' config object: not supported.
    min_8bit_size : int
        Parameters with fewer elements keep float32 states. Default 4096.
    is_paged : bool
        Accepted and ignored (no paged memory here).
    """


class AdamW8bit(_AdamWArgs, Optimizer8bit):
    """bitsandbytes' ``AdamW8bit``: :class:`Adam8bit` with ``weight_decay=1e-2`` by default (the same
    decoupled decay after the step)."""


class AdEMAMix8bit(_AdEMAMixArgs, Optimizer8bit):
    r"""bitsandbytes' ``AdEMAMix8bit`` (LOWBIT.md §3.2): two 8-bit EMAs in ``state1`` (shape ``(2, *p)``) and
    an 8-bit second moment::

        m1' = m1·β1 + (1−β1)·g     m2' = m2·β3 + (1−β3)·g     ν' = ν·β2 + ((1−β2)·g)·g
        p ← p − lr·(m1'/c1 + α·m2')/(sqrt(ν')/c2 + ε);   p ← p·(1 − lr·wd)

    Parameters
    ----------
    params : list
        As :class:`Adam8bit`.
    lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay : float, tuple, float, int, int, float, float
        bitsandbytes' defaults 1e-3, (0.9, 0.999, 0.9999), 5.0, None, None, 1e-8, 1e-2 (``t_alpha``,
        ``t_beta3``: warm-up lengths of α and β3).
    min_8bit_size, is_paged : int, bool
        As :class:`Adam8bit`.
    """


class Lion8bit(_LionArgs, Optimizer8bit):
    r"""bitsandbytes' ``Lion8bit`` (LOWBIT.md §3.3)::

        p ← p·(1 − lr·wd);   p ← p − lr·sgn(m·β1 + (1−β1)·g);   m' = m·β2 + (1−β2)·g

    Parameters: ``params``, ``lr=1e-4``, ``betas=(0.9, 0.99)``, ``weight_decay=0``, ``args=None``,
    ``min_8bit_size=4096``, ``is_paged=False`` (ignored).
    """


class SGD8bit(_SGDArgs, Optimizer8bit):
    r"""bitsandbytes' ``SGD8bit`` (momentum in 8 bits, LOWBIT.md §3.3)::

        g ← g + wd·p;   m' = g (first step) or m·momentum + g;   p ← p − lr·m'

    Parameters: ``params``, ``lr`` (required), ``momentum`` (> 0), ``dampening`` and ``nesterov`` (accepted
    and ignored, as bitsandbytes' kernel does), ``weight_decay=0``, ``args=None``, ``min_8bit_size=4096``.
    """


class RMSprop8bit(_RMSpropArgs, Optimizer8bit):
    r"""bitsandbytes' ``RMSprop8bit`` (LOWBIT.md §3.3)::

        m' = m·α + (1−α)·(g + wd·p)²;   p ← p − lr·g/(sqrt(m') + ε)      (raw g in the numerator)

    Parameters: ``params``, ``lr=1e-2``, ``alpha=0.99`` (> 0), ``eps=1e-8``, ``weight_decay=0``,
    ``momentum=0`` (stored as beta2, unused by the kernel), ``centered=False`` (True: NotImplementedError),
    ``args=None``, ``min_8bit_size=4096``.
    """


class Adagrad8bit(_AdagradArgs, Optimizer8bit):
    r"""bitsandbytes' ``Adagrad8bit`` (LOWBIT.md §3.3)::

        m' = m + (g + wd·p)²;   p ← p − lr·g/(sqrt(m') + ε)      (raw g in the numerator)

    Parameters: ``params``, ``lr=1e-2``, ``lr_decay=0`` and ``initial_accumulator_value=0`` (others:
    ValueError), ``weight_decay=0``, ``eps=1e-10``, ``optim_bits=8``, ``args=None``, ``min_8bit_size=4096``.
    """
