"""AdaFactor: the per-parameter math of ``nn.AdaFactor`` / the ``FusedAdaFactor`` primitive
(KERNELS.md section 17)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, ieee

__all__ = ["fused_ada_factor"]

_TINY = 1e-30


def _rms(x: np.ndarray) -> np.float64:
    """Root mean square over the whole tensor."""
    return np.sqrt(np.mean(x * x)) if x.size else np.float64(0.0)


def _copy_or_none(x: Any, name: str) -> Any:  # a float64 copy, or None
    return None if x is None else as_array(x, name)


def _expect_shape(name: str, x: np.ndarray | None, shape: tuple) -> np.ndarray:
    if x is None:
        raise ValueError(f"{name} is required here (shape {shape}), got None")
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    return x


@ieee
def fused_ada_factor(
    epsilon: ArrayLike,
    clip_threshold: ArrayLike,
    beta1: ArrayLike,
    beta2t: ArrayLike,
    weight_decay: ArrayLike,
    learning_rate: ArrayLike,
    grad: ArrayLike,
    param: ArrayLike,
    exp_avg: ArrayLike | None,
    exp_avg_sq_row: ArrayLike | None,
    exp_avg_sq_col: ArrayLike | None,
    exp_avg_sq: ArrayLike | None,
    global_norm: ArrayLike | None = None,
    *,
    enable_scale_parameter: bool = False,
    enable_first_moment: bool = False,
    enable_weight_decay: bool = False,
) -> tuple:
    """One AdaFactor step for one parameter (``FusedAdaFactor`` input order), in float64.

    Update rule (X = param, G = grad, (eps1, eps2) = epsilon, d = clip_threshold, rho = learning_rate,
    lambda = weight_decay; RMS(x) = sqrt(mean(x*x)) over the whole tensor)::

        G = G * (1/global_norm)     if global_norm is given and >= 1e-30 (FusedAdaFactorWithGlobalNorm)
        U0 = G*G + eps1
        if X.ndim >= 2 (factored; R = exp_avg_sq_row, C = exp_avg_sq_col):
            R = beta2t*R + (1 - beta2t)*mean(U0, axis=-1)
            C = max(beta2t*C + (1 - beta2t)*mean(U0, axis=-2), 1e-30)
            Rn = R / max(mean(R, axis=-1, keepdims=True), 1e-30)
            U = G * (1/sqrt(max(Rn, 1e-30)))[..., :, None] * (1/sqrt(C))[..., None, :]
        else (V = exp_avg_sq):
            V = max(beta2t*V + (1 - beta2t)*U0, 1e-30)   (rounded to float16 when exp_avg_sq is float16)
            U = G / sqrt(max(V, 1e-30))
        U = U / max(1, RMS(U)/d)                (U all zero: unchanged; d = 0: U = 0)
        alpha = rho * max(eps2, RMS(X)) if enable_scale_parameter else rho
        U = alpha * U
        if enable_first_moment: exp_avg = beta1*exp_avg + (1 - beta1)*U;  U = exp_avg
        X_new = X - lambda*alpha*X if enable_weight_decay else X
        X_new = X_new - U

    The 1e-30 clamps are those of MindSpore's CPU kernel, which also stores the clamped C and V. A float16
    ``exp_avg_sq`` models ``nn.AdaFactor(compression=True)``: the stored slot is float16, so the new V is
    rounded to float16 (the returned array is float64 holding those values) and U is computed from the
    rounded value. An empty parameter returns copies of its inputs.

    Args:
        epsilon: ``(eps1, eps2)``.
        clip_threshold, beta1, beta2t, weight_decay, learning_rate: scalars (see the rule).
        grad: gradient, shape of ``param``.
        param: parameter.
        exp_avg: first moment (shape of ``param``); used only with ``enable_first_moment`` (else copied, or
            None).
        exp_avg_sq_row: R, shape ``param.shape[:-1]`` (factored only; else copied, or None).
        exp_avg_sq_col: C, shape ``param.shape[:-2] + param.shape[-1:]`` (factored only; else copied, or
            None).
        exp_avg_sq: V, shape of ``param`` (unfactored only; else copied, or None).
        global_norm: optional global gradient norm (None: the gradient is not scaled).
        enable_scale_parameter, enable_first_moment, enable_weight_decay: the primitive's flags.

    Returns:
        ``(param, exp_avg, exp_avg_sq_row, exp_avg_sq_col, exp_avg_sq)``: new float64 arrays (None where
        None was given for an unused slot).
    """
    x = as_array(param, "param")
    g = as_array(grad, "grad")
    _expect_shape("grad", g, x.shape)
    if global_norm is not None:
        norm = as_scalar(global_norm, "global_norm")
        if not norm < _TINY:
            g = g * (1.0 / norm)
    eps = np.asarray(epsilon, dtype=np.float64).reshape(-1)
    if eps.shape != (2,):
        raise ValueError(f"epsilon must hold two values, got {eps.size}")
    eps1, eps2 = np.float64(eps[0]), np.float64(eps[1])
    d = as_scalar(clip_threshold, "clip_threshold")
    b1 = as_scalar(beta1, "beta1")
    b2t = as_scalar(beta2t, "beta2t")
    lam = as_scalar(weight_decay, "weight_decay")
    rho = as_scalar(learning_rate, "learning_rate")
    m = _copy_or_none(exp_avg, "exp_avg")
    r = _copy_or_none(exp_avg_sq_row, "exp_avg_sq_row")
    c = _copy_or_none(exp_avg_sq_col, "exp_avg_sq_col")
    v = _copy_or_none(exp_avg_sq, "exp_avg_sq")
    factored = x.ndim >= 2
    if enable_first_moment:
        m = _expect_shape("exp_avg", m, x.shape)
    if factored:
        r = _expect_shape("exp_avg_sq_row", r, x.shape[:-1])
        c = _expect_shape("exp_avg_sq_col", c, x.shape[:-2] + x.shape[-1:])
    else:
        v = _expect_shape("exp_avg_sq", v, x.shape)
    if x.size == 0:
        return x, m, r, c, v

    u0 = g * g + eps1
    if factored:
        r = b2t * r + (1.0 - b2t) * np.mean(u0, axis=-1)
        c = np.maximum(b2t * c + (1.0 - b2t) * np.mean(u0, axis=-2), _TINY)
        r_norm = r / np.maximum(np.mean(r, axis=-1, keepdims=True), _TINY)
        r_factor = 1.0 / np.sqrt(np.maximum(r_norm, _TINY))
        c_factor = 1.0 / np.sqrt(np.maximum(c, _TINY))
        u = g * r_factor[..., :, None] * c_factor[..., None, :]
    else:
        v = np.maximum(b2t * v + (1.0 - b2t) * u0, _TINY)
        if np.asarray(exp_avg_sq).dtype == np.float16:
            v = v.astype(np.float16).astype(np.float64)
        u = g / np.sqrt(np.maximum(v, _TINY))

    rms_u = _rms(u)
    if rms_u > 0:
        u = u / max(np.float64(1.0), rms_u / d)
    alpha = rho * max(eps2, _rms(x)) if enable_scale_parameter else rho
    u = alpha * u
    if enable_first_moment:
        m = b1 * m + (1.0 - b1) * u
        u = m
    x_new = x - lam * alpha * x if enable_weight_decay else x
    x_new = x_new - u
    return x_new, m, r, c, v
