"""``AnyPrecisionAdamW`` (torchdistx; LOWBIT.md §9.3): AdamW over bfloat16 (or float32) parameters and
states with an optional Kahan-compensated parameter update, over NumPy arrays.

The step is the kernel :func:`optkernels.kernels.any_precision.any_precision_adamw`: every operation computes
in float32 and rounds to its output array's dtype, as torch's bfloat16 CPU ops do;
with ``use_kahan_summation`` a compensation buffer keeps what the rounding of the parameter lost, so that
small updates are not swallowed by bfloat16's 8-bit significand (the deterministic alternative to
stochastic rounding).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..kernels.any_precision import any_precision_adamw
from .lowbit import ArrayOptimizer

__all__ = ["AnyPrecisionAdamW"]

_F32 = np.float32
_DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16))


def _dtype_arg(name: str, value: Any) -> np.dtype:
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{name} must be a dtype, got {value!r}") from None
    if dtype not in _DTYPES:
        raise ValueError(f"{name} must be float32 or bfloat16, got {dtype}")
    return dtype


def _float_arg(name: str, value: Any, low: float, high: float = float("inf")) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not low <= float(value) < high:
        raise ValueError(f"{name} must be in [{low}, {high}), got {value}")
    return float(value)


class AnyPrecisionAdamW(ArrayOptimizer):
    r"""AdamW with states and update in any precision, optionally Kahan-compensated
    (``torchdistx.optimizers.AnyPrecisionAdamW``, same constructor).

    Per step :math:`t`, each operation in float32 rounded to its output's dtype (:math:`p`: the parameter's
    dtype; :math:`m`, :math:`v`, :math:`c`: ``momentum_dtype``, ``variance_dtype``,
    ``compensation_buffer_dtype``):

    .. math::

        p \leftarrow p(1-\mathrm{lr}\cdot\mathrm{wd}) \ (\mathrm{wd} > 0), \quad
        m \leftarrow m\beta_1 + (1-\beta_1)g, \quad v \leftarrow v\beta_2 + ((1-\beta_2)g)g,

        d = \sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon, \quad
        u = \frac{-\mathrm{lr}/(1-\beta_1^t)\cdot m}{d}

    Kahan summation: :math:`c \leftarrow c + u`, :math:`p' = p + c`, :math:`c \leftarrow c + (p - p')`
    (the part of :math:`c` the rounding of :math:`p'` lost), :math:`p \leftarrow p'`. Without it,
    :math:`p \leftarrow p + u`.

    Parameters
    ----------
    params : list
        NumPy arrays (float32 or bfloat16, updated in place), :class:`Parameter` objects, or group dicts.
    lr : float
        Learning rate, >= 0.
    betas : tuple of float
        :math:`(\beta_1, \beta_2)`, each in [0, 1).
    eps : float
        >= 0.
    weight_decay : float
        Decoupled weight decay, >= 0.
    use_kahan_summation : bool
        Compensate the parameter's rounding (state ``compensation``).
    momentum_dtype, variance_dtype, compensation_buffer_dtype : numpy.dtype or type
        float32 or bfloat16 (torchdistx's defaults: float32, bfloat16, bfloat16).

    Notes
    -----
    State per parameter: ``step`` (int), ``exp_avg``, ``exp_avg_sq`` and, with Kahan, ``compensation``.
    The roundings are those of torch's CPU ops (see
    :func:`optkernels.kernels.any_precision_adamw`). Departures from torchdistx: NumPy arrays on the CPU
    only (the CUDA-and-NCCL check of the original is not made).
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Any = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        use_kahan_summation: bool = False,
        momentum_dtype: Any = np.float32,
        variance_dtype: Any = ml_dtypes.bfloat16,
        compensation_buffer_dtype: Any = ml_dtypes.bfloat16,
    ) -> None:
        if not isinstance(use_kahan_summation, (bool, np.bool_)):
            raise TypeError(f"use_kahan_summation must be a bool, got {type(use_kahan_summation).__name__}")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair of floats, got {betas!r}")
        defaults = dict(
            lr=_float_arg("lr", lr, 0.0),
            betas=(_float_arg("betas[0]", betas[0], 0.0, 1.0), _float_arg("betas[1]", betas[1], 0.0, 1.0)),
            eps=_float_arg("eps", eps, 0.0),
            weight_decay=_float_arg("weight_decay", weight_decay, 0.0),
            use_kahan_summation=bool(use_kahan_summation),
            momentum_dtype=_dtype_arg("momentum_dtype", momentum_dtype),
            variance_dtype=_dtype_arg("variance_dtype", variance_dtype),
            compensation_buffer_dtype=_dtype_arg("compensation_buffer_dtype", compensation_buffer_dtype),
        )
        self._groups(params, defaults)
        for k, p in enumerate(self._arrays):
            if not isinstance(p, np.ndarray):
                raise TypeError(f"params[{k}] must be a NumPy array (AnyPrecisionAdamW runs on the CPU)")
            if p.dtype not in _DTYPES:
                raise TypeError(f"params[{k}] must be float32 or bfloat16, got {p.dtype}")
            if not p.flags.writeable:
                raise ValueError(f"params[{k}] is read-only")

    def _state_of(self, k: int, group: dict) -> dict:
        state = self.state.get(k)
        if state is None:
            shape = self._arrays[k].shape
            state = {
                "step": 0,
                "exp_avg": np.zeros(shape, group["momentum_dtype"]),
                "exp_avg_sq": np.zeros(shape, group["variance_dtype"]),
            }
            if group["use_kahan_summation"]:
                state["compensation"] = np.zeros(shape, group["compensation_buffer_dtype"])
            self.state[k] = state
        return state

    def step(self, grads: Any) -> None:
        """One update of every parameter whose gradient (its parameter's shape and dtype) is not None."""
        grads = list(grads)
        self._check_grads(grads)
        for group in self.param_groups:
            for k in group["params"]:
                if grads[k] is not None:
                    grad = np.ascontiguousarray(grads[k])
                    self._update(self._arrays[k], grad, self._state_of(k, group), group)

    @staticmethod
    def _update(param: np.ndarray, g: np.ndarray, state: dict, group: dict) -> None:
        b1, b2 = group["betas"]
        any_precision_adamw(
            param,
            state["exp_avg"],
            state["exp_avg_sq"],
            g,
            state["step"] + 1,
            state.get("compensation"),
            lr=group["lr"],
            beta1=b1,
            beta2=b2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
        )
        state["step"] += 1
