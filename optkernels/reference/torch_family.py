"""float64 reference of torch.optim's NAdam, RAdam, Adadelta, ASGD, Rprop, Adafactor and Muon, one tensor per
call, written from MODERN.md §1-7 as plain arithmetic (no fused multiply-adds; torch's ``lerp`` in its two
branches). The spec's worked examples are this arithmetic in float64 and are reproduced exactly."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = [
    "torch_adadelta",
    "torch_adafactor",
    "torch_asgd",
    "torch_muon",
    "torch_nadam",
    "torch_radam",
    "torch_rprop",
    "newton_schulz",
]


def _lerp(x: np.ndarray, y: np.ndarray, w: float) -> np.ndarray:
    """torch's ``lerp``: ``x + w(y − x)`` for ``|w| < 0.5``, else ``y − (y − x)(1 − w)``."""
    return x + w * (y - x) if abs(w) < 0.5 else y - (y - x) * (1.0 - w)


def _arrays(**named: ArrayLike) -> list[np.ndarray]:
    arrays = [as_array(x, name) for name, x in named.items()]
    first = next(iter(named))
    check_same_shape(first, arrays[0], **dict(zip(list(named)[1:], arrays[1:])))
    return arrays


def _gradient(w: np.ndarray, grad: np.ndarray, wd: float, maximize: bool, coupled: bool) -> np.ndarray:
    g = -grad if maximize else grad
    return g + w * wd if coupled and wd != 0 else g


@ieee
def torch_nadam(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    grad: ArrayLike,
    lr: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    step: int,
    mu_product: float,
    *,
    weight_decay: float = 0.0,
    momentum_decay: float = 4e-3,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NAdam (MODERN.md §2); ``mu_product`` is Π after this step's multiplication. Returns new
    ``(var, exp_avg, exp_avg_sq)``."""
    w, m, v, grad = _arrays(var=var, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, grad=grad)
    lr, b1, b2, eps = (
        float(as_scalar(x, n))
        for x, n in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (epsilon, "epsilon"))
    )
    wd, psi, prod = float(weight_decay), float(momentum_decay), float(mu_product)
    g = _gradient(w, grad, wd, maximize, not decoupled_weight_decay)
    if decoupled_weight_decay and wd != 0:
        w = w * (1 - lr * wd)
    mu = b1 * (1.0 - 0.5 * 0.96 ** (step * psi))
    mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * psi))
    m = _lerp(m, g, 1 - b1)
    v = v * b2 + (1 - b2) * g * g
    den = np.sqrt(v / (1 - b2**step)) + eps
    w = w + ((-lr * (1.0 - mu)) / (1.0 - prod)) * g / den
    w = w + ((-lr * mu_next) / (1.0 - prod * mu_next)) * m / den
    return w, m, v


@ieee
def torch_radam(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    grad: ArrayLike,
    lr: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    step: int,
    *,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RAdam (MODERN.md §3). Returns new ``(var, exp_avg, exp_avg_sq)``."""
    w, m, v, grad = _arrays(var=var, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, grad=grad)
    lr, b1, b2, eps, wd = float(lr), float(beta1), float(beta2), float(epsilon), float(weight_decay)
    g = _gradient(w, grad, wd, maximize, not decoupled_weight_decay)
    if decoupled_weight_decay and wd != 0:
        w = w * (1 - lr * wd)
    m = _lerp(m, g, 1 - b1)
    v = v * b2 + (1 - b2) * g * g
    m_hat = m / (1 - b1**step)
    bc2 = 1 - b2**step
    rho_inf = 2 / (1 - b2) - 1
    rho = rho_inf - 2 * step * b2**step / bc2
    if rho > 5.0:
        r = np.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        return w - m_hat * lr * (np.sqrt(bc2) / (np.sqrt(v) + eps)) * r, m, v
    return w - m_hat * lr, m, v


@ieee
def torch_adadelta(
    var: ArrayLike,
    square_avg: ArrayLike,
    acc_delta: ArrayLike,
    grad: ArrayLike,
    lr: float,
    rho: float,
    epsilon: float,
    *,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adadelta (MODERN.md §4). Returns new ``(var, square_avg, acc_delta)``."""
    w, s, a, grad = _arrays(var=var, square_avg=square_avg, acc_delta=acc_delta, grad=grad)
    lr, rho, eps = float(lr), float(rho), float(epsilon)
    g = _gradient(w, grad, float(weight_decay), maximize, True)
    s = s * rho + (1 - rho) * g * g
    delta = np.sqrt(a + eps) / np.sqrt(s + eps) * g
    a = a * rho + (1 - rho) * delta * delta
    return w - lr * delta, s, a


@ieee
def torch_asgd(
    var: ArrayLike,
    ax: ArrayLike,
    grad: ArrayLike,
    eta: float,
    mu: float,
    *,
    lambd: float = 1e-4,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """ASGD (MODERN.md §5) with this step's ``eta`` and ``mu``. Returns new ``(var, ax)``."""
    w, a, grad = _arrays(var=var, ax=ax, grad=grad)
    eta, mu = float(eta), float(mu)
    g = _gradient(w, grad, float(weight_decay), maximize, True)
    w = w * (1 - float(lambd) * eta) - eta * g
    return w, (a + (w - a) * mu if mu != 1 else w.copy())


@ieee
def torch_rprop(
    var: ArrayLike,
    prev: ArrayLike,
    step_size: ArrayLike,
    grad: ArrayLike,
    *,
    etas: tuple = (0.5, 1.2),
    step_sizes: tuple = (1e-6, 50.0),
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rprop (MODERN.md §6; ``sign(NaN) = 0`` as torch's). Returns new ``(var, prev, step_size)``."""
    w, prev, size, grad = _arrays(var=var, prev=prev, step_size=step_size, grad=grad)
    g = -grad if maximize else grad
    sign = np.nan_to_num(np.sign(g * prev), nan=0.0)
    factor = np.where(sign > 0, etas[1], np.where(sign < 0, etas[0], 1.0))
    size = np.minimum(np.maximum(size * factor, step_sizes[0]), step_sizes[1])
    g = np.where(sign < 0, 0.0, g)
    return w - np.nan_to_num(np.sign(g), nan=0.0) * size, g, size


@ieee
def torch_adafactor(
    var: ArrayLike,
    grad: ArrayLike,
    step: int,
    *,
    lr: float = 1e-2,
    beta2_decay: float = -0.8,
    eps1: float | None = None,
    eps2: float = 1e-3,
    d: float = 1.0,
    weight_decay: float = 0.0,
    maximize: bool = False,
    variance: ArrayLike | None = None,
    row_var: ArrayLike | None = None,
    col_var: ArrayLike | None = None,
) -> tuple[np.ndarray, ...]:
    """torch's Adafactor (MODERN.md §7): a vector takes ``variance``; a tensor of 2+ dims ``row_var`` (shape
    ``(…, n, 1)``) and ``col_var`` (``(…, 1, m)``). ``eps1=None``: float64's machine epsilon. Returns new
    ``(var, variance)`` or ``(var, row_var, col_var)``."""
    w, grad = _arrays(var=var, grad=grad)
    g = -grad if maximize else grad
    eps1 = np.finfo(np.float64).eps if eps1 is None else float(eps1)
    t = float(step)
    beta = t**beta2_decay
    rho = min(lr, 1 / t**0.5)
    alpha = max(eps2, np.sqrt(np.sum(w * w)) / w.size**0.5) * rho
    if weight_decay != 0:
        w = w * (1 - lr * weight_decay)
    states: tuple[np.ndarray, ...]
    if g.ndim > 1:
        if row_var is None or col_var is None:
            raise TypeError("row_var and col_var are required for a var of 2 or more dimensions")
        r, c = as_array(row_var, "row_var"), as_array(col_var, "col_var")
        # torch's mean squares: torch.norm, then squared (not bit-equal to a mean of g²)
        r = _lerp(r, np.sqrt(np.sum(g * g, axis=-1, keepdims=True)) ** 2 / g.shape[-1], beta)
        c = _lerp(c, np.sqrt(np.sum(g * g, axis=-2, keepdims=True)) ** 2 / g.shape[-2], beta)
        v = (r @ c) / np.maximum(np.mean(r, axis=-2, keepdims=True), eps1)
        states = (r, c)
    else:
        if variance is None:
            raise TypeError("variance is required for a var of fewer than 2 dimensions")
        v = _lerp(as_array(variance, "variance"), g * g, beta)
        states = (v,)
    u = (1 / np.sqrt(np.maximum(v, eps1 * eps1))) * g
    den = max(1.0, np.sqrt(np.sum(u * u)) / (u.size**0.5 * d))
    return (w - alpha / den * u, *states)


def newton_schulz(
    u: ArrayLike, coefficients: tuple = (3.4445, -4.7750, 2.0315), steps: int = 5, eps: float = 1e-7
) -> np.ndarray:
    """torch Muon's Newton–Schulz iteration (MODERN.md §1.2) in float64: ``X = u/max(‖u‖_F, eps)`` (as
    ``(min, max)``), then ``steps`` times ``X ← aX + (bG + cG²)X`` with ``G = XXᵀ``. Returns the new
    float64 matrix ``X``, of ``u``'s shape."""
    x = as_array(u, "u")
    a, b, c = (float(k) for k in coefficients)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / max(np.linalg.norm(x), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if tall else x


@ieee
def torch_muon(
    var: ArrayLike,
    momentum_buffer: ArrayLike,
    grad: ArrayLike,
    *,
    lr: float = 1e-3,
    weight_decay: float = 0.1,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_coefficients: tuple = (3.4445, -4.7750, 2.0315),
    eps: float = 1e-7,
    ns_steps: int = 5,
    adjust_lr_fn: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """torch's Muon (MODERN.md §1.1) on a 2-D parameter, Newton–Schulz in float64. Returns new
    ``(var, momentum_buffer)``."""
    w, buf, g = _arrays(var=var, momentum_buffer=momentum_buffer, grad=grad)
    if w.ndim != 2:
        raise ValueError(f"var must be 2-D, got shape {w.shape}")
    buf = _lerp(buf, g, 1 - momentum)
    u = _lerp(g, buf, momentum) if nesterov else buf
    o = newton_schulz(u, ns_coefficients, ns_steps, eps)
    rows, cols = w.shape
    ratio = 0.2 * max(rows, cols) ** 0.5 if adjust_lr_fn == "match_rms_adamw" else max(1, rows / cols) ** 0.5
    w = w * (1 - lr * weight_decay)
    return w - (lr * ratio) * o, buf
