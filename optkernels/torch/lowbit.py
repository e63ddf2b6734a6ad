"""Drop-ins for bitsandbytes' 8-bit optimizers: ``Adam8bit``, ``AdamW8bit``, ``Lion8bit``, ``AdEMAMix8bit``,
``SGD8bit``, ``RMSprop8bit``, ``Adagrad8bit`` with bitsandbytes' constructor arguments, state and
``state_dict`` layout (keys ``state1``/``state2``/``absmax1``/``absmax2``/``qmap1``/``qmap2`` wrapped under
``__bnb_optimizer_quant_state__``, ``step`` an int; LOWBIT.md §4), so a state saved by
``bitsandbytes.optim.Adam8bit`` loads and continues. The step is optkernels' 8-bit kernel with bitsandbytes'
CUDA semantics, on CPU and CUDA tensors (the tensors' own memory, no copy); float16/bfloat16 CPU parameters
are computed in float32 and rounded once.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np
import torch

from ..optimizers import lowbit as _lowbit
from . import _views
from ._base import KernelOptimizer, _contiguous, _Work

__all__ = ["Adam8bit", "AdamW8bit", "Lion8bit", "AdEMAMix8bit", "SGD8bit", "RMSprop8bit", "Adagrad8bit"]

_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


def _zeros_on(device: torch.device) -> Callable[[tuple, Any], torch.Tensor]:
    """``zeros(shape, dtype)`` for :func:`~optkernels.optimizers.lowbit.new_state`: a torch tensor of zeros of
    the NumPy ``dtype``'s torch dtype on ``device``."""
    return lambda shape, dtype: torch.zeros(shape, dtype=_TORCH_DTYPES[np.dtype(dtype)], device=device)


class Optimizer8bit(KernelOptimizer):
    """Base of the torch 8-bit optimizers: per parameter with a gradient, bitsandbytes' state on its first
    step, then :func:`optkernels.optimizers.lowbit.blockwise_step` on views of the tensors."""

    algo = ""
    counts_steps = False

    def _setup(self, params: Any, defaults: dict, min_8bit_size: int) -> None:
        if isinstance(min_8bit_size, bool) or not isinstance(min_8bit_size, int):
            raise TypeError(f"min_8bit_size must be an int, got {type(min_8bit_size).__name__}")
        self.min_8bit_size = min_8bit_size
        self._qmaps: dict = {}
        KernelOptimizer.__init__(self, params, defaults)

    def _kernel(self, group: dict) -> tuple:
        return None, ()

    def _table(self, signed: bool, device: torch.device) -> torch.Tensor:
        """The map, one tensor per (variant, device) shared by the parameters, as bitsandbytes keeps it."""
        key = (signed, str(device))
        if key not in self._qmaps:
            self._qmaps[key] = torch.from_numpy(_lowbit.dynamic_map(signed)).to(device)
        return self._qmaps[key]

    def _dense_step(self, work: _Work) -> None:
        group, params, grads = work.group, work.dense, work.grads
        for p, g in zip(params, grads):
            state = self.state[p]
            if "state1" not in state:
                state.update(
                    _lowbit.new_state(
                        self.algo,
                        tuple(p.shape),
                        p.numel() >= self.min_8bit_size,
                        _zeros_on(p.device),
                        functools.partial(self._table, device=p.device),
                    )
                )
            kind = _views.device_kind(p)
            views = {k: _views.view(v, kind) for k, v in state.items() if isinstance(v, torch.Tensor)}
            views["step"] = int(state["step"])
            _lowbit.blockwise_step(
                self.algo, views, _views.view(p, kind), _views.view(_contiguous(g), kind), group
            )
            state["step"] = views["step"]

    def state_dict(self) -> dict:
        """torch's ``state_dict`` in bitsandbytes' (>= 0.49.2) layout: each parameter's quantization
        tensors under ``__bnb_optimizer_quant_state__``."""
        sd = super().state_dict()
        state = {}
        for k, s in sd["state"].items():
            s = dict(s)
            wrapped = {key: s.pop(key) for key in list(s) if key in _lowbit.QUANT_KEYS}
            if wrapped:
                s[_lowbit.WRAPPED_KEY] = wrapped
            state[k] = s
        sd["state"] = state
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state in either of bitsandbytes' layouts (nested or flat). As bitsandbytes does, the
        quantization tensors are moved to their parameter's device but never cast."""
        sd = {"state": {}, "param_groups": copy.deepcopy(state_dict["param_groups"])}
        for k, s in state_dict["state"].items():
            s = dict(s)
            s.update(s.pop(_lowbit.WRAPPED_KEY, {}))
            sd["state"][k] = s
        super().load_state_dict(sd)
        saved = chain.from_iterable(g["params"] for g in sd["param_groups"])
        ours = chain.from_iterable(g["params"] for g in self.param_groups)
        for old, p in zip(saved, ours):
            s = sd["state"].get(old)
            if s is None:
                continue
            for key, value in s.items():
                if key in _lowbit.QUANT_KEYS:
                    self.state[p][key] = value.detach().to(p.device).clone()
            self.state[p]["step"] = int(s["step"])


class Adam8bit(_lowbit._AdamArgs, Optimizer8bit):
    __doc__ = (_lowbit.Adam8bit.__doc__ or "").replace("over NumPy arrays", "over torch tensors")


class AdamW8bit(_lowbit._AdamWArgs, Optimizer8bit):
    __doc__ = _lowbit.AdamW8bit.__doc__


class AdEMAMix8bit(_lowbit._AdEMAMixArgs, Optimizer8bit):
    __doc__ = _lowbit.AdEMAMix8bit.__doc__


class Lion8bit(_lowbit._LionArgs, Optimizer8bit):
    __doc__ = _lowbit.Lion8bit.__doc__


class SGD8bit(_lowbit._SGDArgs, Optimizer8bit):
    __doc__ = _lowbit.SGD8bit.__doc__


class RMSprop8bit(_lowbit._RMSpropArgs, Optimizer8bit):
    __doc__ = _lowbit.RMSprop8bit.__doc__


class Adagrad8bit(_lowbit._AdagradArgs, Optimizer8bit):
    __doc__ = _lowbit.Adagrad8bit.__doc__
