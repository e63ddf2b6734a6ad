"""torch.optim's element-wise rules that MindSpore has no op for: NAdam, RAdam, Adadelta, ASGD, Rprop, the
element-wise parts of torch's Adafactor and of Muon (MODERN.md §1-7), for the CPU and CUDA.

Each element function follows torch's single-tensor code op by op in the arrays' dtype and rounds as torch's
CPU kernels do (MODERN.md §0.2): an explicit :func:`fma` where torch fuses (``lerp_``, ``addcmul_``,
``add_(alpha=a)``), a plain operation elsewhere. The gradient pre-step is part of each function: ``g = −grad``
(maximize), then ``g = fma(w, wd, g)`` (coupled weight decay) or ``w = w·(1 − lr·wd)`` (decoupled).

Square roots are IEEE here. torch's CPU ``sqrt`` is not (MKL's vector sqrt): the rules that take one
(NAdam, RAdam, Adadelta) are also given as two phases around it (``*_moments`` writes the root's argument
into scratch arrays, ``*_apply`` reads its root back), which ``optkernels.torch`` runs with torch's own
``sqrt_`` in between; every piece is shared with the one-pass function, so only the root can differ.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from ._checks import check_arrays, check_range
from ._elementwise import (
    _CPU_LOOP,
    _JIT_OPTIONS,
    ZERO,
    Elementwise,
    _generate,
    _half_kinds,
    elementwise,
    scalar_math,
)
from ._intrinsics import fma as _fma
from ._threading import parallel_launch
from .adam import Scalar

__all__ = [
    "torch_adadelta",
    "torch_asgd",
    "torch_muon_momentum",
    "torch_nadam",
    "torch_radam",
    "torch_rprop",
    "lerp_scalars",
]


# ---------------------------------------------------------------------------------------------- shared math


@intrinsic
def _narrowest(typingctx, x, like_a, like_b):
    """``x`` converted to the narrowest float type among the three arguments (the identity in compiled
    kernels, whose operands share one type)."""
    target = min((t for t in (x, like_a, like_b) if isinstance(t, types.Float)), key=lambda t: t.bitwidth)

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], signature.return_type)

    return target(x, like_a, like_b), codegen


@scalar_math
def fma(a, b, c):
    """``a*b + c`` rounded once (:func:`._intrinsics.fma`). Under the CUDA simulator an element function runs
    as Python and a compiled helper returns a float32 as a Python float: the operands are brought to their
    narrowest type first (exact for such a value; a no-op when they share one type, as in every compiled
    kernel)."""
    return _fma(_narrowest(a, b, c), _narrowest(b, a, c), _narrowest(c, a, b))


@scalar_math
def torch_gradient(w, grad, wd, maximize, coupled):
    """torch's gradient pre-step: ``g = −grad`` (maximize), then ``g = fma(w, wd, g)`` (coupled decay)."""
    g = -grad if maximize else grad
    if coupled:
        g = fma(w, wd, g)
    return g


@scalar_math
def torch_lerp(x, y, weight, one_minus_weight, small):
    """torch CPU's ``x.lerp_(y, weight)``: ``fma(weight, y − x, x)`` when ``|weight| < 0.5`` (``small``),
    else ``fma(−(1 − weight), y − x, y)``."""
    d = y - x
    if small:
        return fma(weight, d, x)
    return fma(-one_minus_weight, d, y)


@scalar_math
def torch_ema_square(v, g, beta2, one_minus_beta2):
    """torch's ``v.mul_(β2).addcmul_(g, g, value=1 − β2)``: ``fma((1 − β2)·g, g, v·β2)``."""
    return fma(one_minus_beta2 * g, g, v * beta2)


@scalar_math
def ieee_sqrt(x):
    """The IEEE square root in ``x``'s dtype (a compiled function: under the CUDA simulator too, where a bare
    ``math.sqrt`` of a float32 would return a Python float)."""
    return math.sqrt(x)


def lerp_scalars(weight: float, dtype: Any) -> tuple:
    """``(S(w), 1 − S(w), |w| < 0.5)`` for :func:`torch_lerp`, in ``dtype`` (torch converts the weight to the
    tensor's dtype first, then computes ``1 − w`` in it)."""
    w = np.dtype(dtype).type(weight)
    return w, np.dtype(dtype).type(1) - w, bool(abs(float(weight)) < 0.5)


#: Below this many elements a per-tensor launch runs serially on the calling thread (torch's own grain size):
#: waking a parallel region costs more than the loop, and much more on a loaded machine.
SERIAL_BELOW = 32768

_SERIAL_LOOPS: dict = {}


def launch_small(kernel: Elementwise, device: str, n: int, *args: Any) -> None:
    """``kernel.launch(device, n, *args)``, except that a CPU launch over fewer than :data:`SERIAL_BELOW`
    float32/float64 elements runs the same element function in a serial compiled loop (the same bits: each
    element is independent)."""
    if device != "cpu" or n >= SERIAL_BELOW or _half_kinds(args) is not None:
        kernel.launch(device, n, *args)
        return
    if kernel.chunked_cpu:  # the parallel launch's own compiled code, on the calling thread
        with parallel_launch():
            kernel.chunked(False, n, *args)
        return
    loop = _SERIAL_LOOPS.get(kernel)
    if loop is None:
        element = numba.njit(inline="always", **_JIT_OPTIONS)(kernel.py_func)
        source = _generate(_CPU_LOOP, "serial", kernel.py_func, {"prange": range, "element": element})
        loop = _SERIAL_LOOPS[kernel] = numba.njit(cache=True, **_JIT_OPTIONS)(source)
    loop(n, *args)


# ---------------------------------------------------------------------------------------------- NAdam


@scalar_math
def _nadam_moments_of(
    w, m, v, grad, wd, decay, maximize, coupled, decoupled, b1w, b1c, b1s, beta2, one_minus_beta2
):
    g = torch_gradient(w, grad, wd, maximize, coupled)
    if decoupled:
        w = w * decay
    return w, g, torch_lerp(m, g, b1w, b1c, b1s), torch_ema_square(v, g, beta2, one_minus_beta2)


@scalar_math
def _nadam_step(w, g, m, root, eps, c_grad, c_avg):
    den = root + eps
    w = w + (c_grad * g) / den
    return w + (c_avg * m) / den


@elementwise
def _nadam(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction2,
    eps,
    c_grad,
    c_avg,
):
    w, g, m, v = _nadam_moments_of(
        param[i],
        exp_avg[i],
        exp_avg_sq[i],
        grad[i],
        wd,
        decay,
        maximize,
        coupled,
        decoupled,
        b1w,
        b1c,
        b1s,
        beta2,
        one_minus_beta2,
    )
    exp_avg[i] = m
    exp_avg_sq[i] = v
    param[i] = _nadam_step(w, g, m, ieee_sqrt(v / bias_correction2), eps, c_grad, c_avg)


@elementwise
def _nadam_moments(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    root,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction2,
    eps,
    c_grad,
    c_avg,
):
    w, g, m, v = _nadam_moments_of(
        param[i],
        exp_avg[i],
        exp_avg_sq[i],
        grad[i],
        wd,
        decay,
        maximize,
        coupled,
        decoupled,
        b1w,
        b1c,
        b1s,
        beta2,
        one_minus_beta2,
    )
    param[i] = w
    exp_avg[i] = m
    exp_avg_sq[i] = v
    root[i] = v / bias_correction2


@elementwise
def _nadam_apply(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    root,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction2,
    eps,
    c_grad,
    c_avg,
):
    w = param[i]
    g = torch_gradient(w, grad[i], wd, maximize, coupled)  # w is unchanged by _nadam_moments when coupled
    param[i] = _nadam_step(w, g, exp_avg[i], root[i], eps, c_grad, c_avg)


def nadam_host(
    lr: float, beta1: float, beta2: float, momentum_decay: float, step: int, mu_product: float
) -> dict:
    """torch NAdam's host scalars for step ``step`` given the stored ``mu_product`` (already multiplied by
    this step's μ_t, as torch does before using it): ``mu``, ``mu_next``, ``bias_correction2``, ``c_grad``
    (``−lr(1 − μ_t)/(1 − Π)``) and ``c_avg`` (``−lr·μ_{t+1}/(1 − Π·μ_{t+1})``)."""
    mu, mu_next = nadam_mu(beta1, momentum_decay, step), nadam_mu(beta1, momentum_decay, step + 1)
    return dict(
        mu=mu,
        mu_next=mu_next,
        bias_correction2=1 - beta2**step,
        c_grad=(-lr * (1.0 - mu)) / (1.0 - mu_product),
        c_avg=(-lr * mu_next) / (1.0 - mu_product * mu_next),
    )


def nadam_mu(beta1: float, momentum_decay: float, step: int) -> float:
    """NAdam's momentum coefficient μ_t = β1·(1 − 0.5·0.96^(t·ψ))."""
    return beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))


def nadam_scalars(
    dtype: Any,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    momentum_decay: float,
    step: int,
    mu_product: float,
    *,
    decoupled: bool = False,
    maximize: bool = False,
) -> tuple:
    """The NAdam element functions' scalars (after the arrays) for one step, in ``dtype``."""
    t = np.dtype(dtype).type
    h = nadam_host(lr, beta1, beta2, momentum_decay, step, mu_product)
    coupled = weight_decay != 0 and not decoupled
    return (
        t(weight_decay),
        t(1 - lr * weight_decay),
        bool(maximize),
        bool(coupled),
        bool(decoupled and weight_decay != 0),
        *lerp_scalars(1 - beta1, dtype),
        t(beta2),
        t(1 - beta2),
        t(h["bias_correction2"]),
        t(eps),
        t(h["c_grad"]),
        t(h["c_avg"]),
    )


def torch_nadam(
    var: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    step: int,
    mu_product: float,
    *,
    weight_decay: Scalar = 0.0,
    momentum_decay: Scalar = 4e-3,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
) -> tuple[Any, Any, Any]:
    r"""torch.optim.NAdam's update of one tensor, in place (MODERN.md §2)::

        g = −grad (maximize);  g = w·wd + g (coupled)  or  w = w·(1 − lr·wd) (decoupled)
        μ_t = β1(1 − ½·0.96^(tψ));  Π = mu_product (the product μ_1…μ_t, as torch keeps it)
        m = lerp(m, g, 1 − β1);  v = β2·v + (1 − β2)·g²
        d = √(v/(1 − β2^t)) + ε
        w = w − lr(1 − μ_t)/(1 − Π)·g/d − lr·μ_{t+1}/(1 − Π·μ_{t+1})·m/d

    Parameters
    ----------
    var, exp_avg, exp_avg_sq : arrays
        Parameter and moments, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    grad : array
        The gradient (read only).
    lr, beta1, beta2, epsilon : float
        torch's ``lr`` (>= 0), ``betas`` (in [0, 1)) and ``eps`` (>= 0).
    step : int
        This step's number t, from 1.
    mu_product : float
        Π after this step's multiplication (torch's ``state['mu_product']``).
    weight_decay, momentum_decay : float
        >= 0.
    decoupled_weight_decay, maximize : bool
        torch's flags.

    Returns
    -------
    tuple
        ``(var, exp_avg, exp_avg_sq)``.
    """
    batch = check_arrays({"var": var, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}, {"grad": grad})
    values = _checked(
        step,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        epsilon=epsilon,
        weight_decay=weight_decay,
        momentum_decay=momentum_decay,
    )
    scalars = nadam_scalars(
        batch.dtype,
        values["lr"],
        values["beta1"],
        values["beta2"],
        values["epsilon"],
        values["weight_decay"],
        values["momentum_decay"],
        step,
        float(mu_product),
        decoupled=decoupled_weight_decay,
        maximize=maximize,
    )
    _nadam.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, exp_avg, exp_avg_sq


def _checked(step: int, **values: Any) -> dict:
    """Hyper-parameters as floats, range-checked (``beta*`` in [0, 1), the rest >= 0), and ``step >= 1``."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    out = {}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"'{name}' must be a real number, got {type(value).__name__}")
        value = float(value)
        if name.startswith("beta"):
            check_range(name, value, 0.0, 1.0, high_open=True)
        else:
            check_range(name, value, 0.0)
        out[name] = value
    return out


# ---------------------------------------------------------------------------------------------- RAdam


@scalar_math
def _radam_moments_of(
    w, m, v, grad, wd, decay, maximize, coupled, decoupled, b1w, b1c, b1s, beta2, one_minus_beta2
):
    g = torch_gradient(w, grad, wd, maximize, coupled)
    if decoupled:
        w = w * decay
    return w, torch_lerp(m, g, b1w, b1c, b1s), torch_ema_square(v, g, beta2, one_minus_beta2)


@scalar_math
def _radam_step(w, m, root, bias_correction1, lr, rectified, eps, sqrt_bc2, rect, one):
    m_hat = m / bias_correction1
    if rectified:
        adaptive = (one / (root + eps)) * sqrt_bc2
        return w - ((m_hat * lr) * adaptive) * rect
    return w - m_hat * lr


@elementwise
def _radam(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction1,
    lr,
    rectified,
    eps,
    sqrt_bc2,
    rect,
    one,
):
    w, m, v = _radam_moments_of(
        param[i],
        exp_avg[i],
        exp_avg_sq[i],
        grad[i],
        wd,
        decay,
        maximize,
        coupled,
        decoupled,
        b1w,
        b1c,
        b1s,
        beta2,
        one_minus_beta2,
    )
    exp_avg[i] = m
    exp_avg_sq[i] = v
    root = ieee_sqrt(v) if rectified else v
    param[i] = _radam_step(w, m, root, bias_correction1, lr, rectified, eps, sqrt_bc2, rect, one)


@elementwise
def _radam_moments(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    root,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction1,
    lr,
    rectified,
    eps,
    sqrt_bc2,
    rect,
    one,
):
    w, m, v = _radam_moments_of(
        param[i],
        exp_avg[i],
        exp_avg_sq[i],
        grad[i],
        wd,
        decay,
        maximize,
        coupled,
        decoupled,
        b1w,
        b1c,
        b1s,
        beta2,
        one_minus_beta2,
    )
    param[i] = w
    exp_avg[i] = m
    exp_avg_sq[i] = v
    root[i] = v


@elementwise
def _radam_apply(
    i,
    param,
    exp_avg,
    exp_avg_sq,
    root,
    grad,
    wd,
    decay,
    maximize,
    coupled,
    decoupled,
    b1w,
    b1c,
    b1s,
    beta2,
    one_minus_beta2,
    bias_correction1,
    lr,
    rectified,
    eps,
    sqrt_bc2,
    rect,
    one,
):
    param[i] = _radam_step(
        param[i], exp_avg[i], root[i], bias_correction1, lr, rectified, eps, sqrt_bc2, rect, one
    )


def radam_rectification(beta2: float, step: int) -> tuple[float, float]:
    """``(ρ_t, r)``: RAdam's SMA length and rectification term (``r`` is 0 when ``ρ_t <= 5``)."""
    rho_inf = 2 / (1 - beta2) - 1
    bc2 = 1 - beta2**step
    rho_t = rho_inf - ((2 * step) * (beta2**step)) / bc2
    if rho_t <= 5.0:
        return rho_t, 0.0
    return rho_t, ((((rho_t - 4) * (rho_t - 2)) * rho_inf) / (((rho_inf - 4) * (rho_inf - 2)) * rho_t)) ** 0.5


def radam_scalars(
    dtype: Any,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    step: int,
    *,
    decoupled: bool = False,
    maximize: bool = False,
) -> tuple:
    """The RAdam element functions' scalars (after the arrays) for one step, in ``dtype``."""
    t = np.dtype(dtype).type
    rho_t, rect = radam_rectification(beta2, step)
    coupled = weight_decay != 0 and not decoupled
    return (
        t(weight_decay),
        t(1 - lr * weight_decay),
        bool(maximize),
        bool(coupled),
        bool(decoupled and weight_decay != 0),
        *lerp_scalars(1 - beta1, dtype),
        t(beta2),
        t(1 - beta2),
        t(1 - beta1**step),
        t(lr),
        bool(rho_t > 5.0),
        t(eps),
        t((1 - beta2**step) ** 0.5),
        t(rect),
        t(1),
    )


def torch_radam(
    var: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    step: int,
    *,
    weight_decay: Scalar = 0.0,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
) -> tuple[Any, Any, Any]:
    r"""torch.optim.RAdam's update of one tensor, in place (MODERN.md §3)::

        g = −grad (maximize);  g = w·wd + g (coupled)  or  w = w·(1 − lr·wd) (decoupled)
        m = lerp(m, g, 1 − β1);  v = β2·v + (1 − β2)·g²;  m̂ = m/(1 − β1^t)
        ρ∞ = 2/(1 − β2) − 1;  ρ_t = ρ∞ − 2tβ2^t/(1 − β2^t)
        ρ_t > 5:  w = w − m̂·lr·(√(1 − β2^t)/(√v + ε))·r_t,  r_t = √((ρ_t−4)(ρ_t−2)ρ∞/((ρ∞−4)(ρ∞−2)ρ_t))
        else:     w = w − m̂·lr

    Parameters
    ----------
    var, exp_avg, exp_avg_sq : arrays
        Parameter and moments, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    grad : array
        The gradient (read only).
    lr, beta1, beta2, epsilon : float
        torch's ``lr`` (>= 0), ``betas`` (in [0, 1)) and ``eps`` (>= 0).
    step : int
        This step's number t, from 1.
    weight_decay : float
        >= 0.
    decoupled_weight_decay, maximize : bool
        torch's flags.

    Returns
    -------
    tuple
        ``(var, exp_avg, exp_avg_sq)``.
    """
    batch = check_arrays({"var": var, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}, {"grad": grad})
    v = _checked(step, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon, weight_decay=weight_decay)
    scalars = radam_scalars(
        batch.dtype,
        v["lr"],
        v["beta1"],
        v["beta2"],
        v["epsilon"],
        v["weight_decay"],
        step,
        decoupled=decoupled_weight_decay,
        maximize=maximize,
    )
    _radam.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, exp_avg, exp_avg_sq


# ---------------------------------------------------------------------------------------------- Adadelta


@scalar_math
def _adadelta_step(w, acc, g, std, acc_root, rho, one_minus_rho, neg_lr):
    delta = (acc_root / std) * g
    acc = fma(one_minus_rho * delta, delta, acc * rho)
    return fma(delta, neg_lr, w), acc


@elementwise
def _adadelta(i, param, square_avg, acc_delta, grad, wd, maximize, coupled, rho, one_minus_rho, eps, neg_lr):
    w = param[i]
    g = torch_gradient(w, grad[i], wd, maximize, coupled)
    sq = fma(one_minus_rho * g, g, square_avg[i] * rho)
    square_avg[i] = sq
    w, acc = _adadelta_step(
        w, acc_delta[i], g, ieee_sqrt(sq + eps), ieee_sqrt(acc_delta[i] + eps), rho, one_minus_rho, neg_lr
    )
    acc_delta[i] = acc
    param[i] = w


@elementwise
def _adadelta_moments(
    i,
    param,
    square_avg,
    acc_delta,
    std,
    acc_root,
    grad,
    wd,
    maximize,
    coupled,
    rho,
    one_minus_rho,
    eps,
    neg_lr,
):
    g = torch_gradient(param[i], grad[i], wd, maximize, coupled)
    sq = fma(one_minus_rho * g, g, square_avg[i] * rho)
    square_avg[i] = sq
    std[i] = sq + eps
    acc_root[i] = acc_delta[i] + eps


@elementwise
def _adadelta_apply(
    i,
    param,
    square_avg,
    acc_delta,
    std,
    acc_root,
    grad,
    wd,
    maximize,
    coupled,
    rho,
    one_minus_rho,
    eps,
    neg_lr,
):
    w = param[i]
    g = torch_gradient(w, grad[i], wd, maximize, coupled)
    w, acc = _adadelta_step(w, acc_delta[i], g, std[i], acc_root[i], rho, one_minus_rho, neg_lr)
    acc_delta[i] = acc
    param[i] = w


def adadelta_scalars(
    dtype: Any, lr: float, rho: float, eps: float, weight_decay: float, *, maximize: bool = False
) -> tuple:
    """The Adadelta element functions' scalars (after the arrays), in ``dtype``."""
    t = np.dtype(dtype).type
    return (t(weight_decay), bool(maximize), bool(weight_decay != 0), t(rho), t(1 - rho), t(eps), t(-lr))


def torch_adadelta(
    var: Any,
    square_avg: Any,
    acc_delta: Any,
    grad: Any,
    lr: Scalar,
    rho: Scalar,
    epsilon: Scalar,
    *,
    weight_decay: Scalar = 0.0,
    maximize: bool = False,
) -> tuple[Any, Any, Any]:
    r"""torch.optim.Adadelta's update of one tensor, in place (MODERN.md §4)::

        g = −grad (maximize);  g = w·wd + g (weight_decay)
        s = ρ·s + (1 − ρ)·g²
        δ = √(a + ε)/√(s + ε)·g;  a = ρ·a + (1 − ρ)·δ²;  w = w − lr·δ

    Parameters
    ----------
    var, square_avg, acc_delta : arrays
        Parameter, ``s`` and ``a``, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    grad : array
        The gradient (read only).
    lr : float
        >= 0.
    rho : float
        In [0, 1].
    epsilon, weight_decay : float
        >= 0.
    maximize : bool
        torch's flag.

    Returns
    -------
    tuple
        ``(var, square_avg, acc_delta)``.
    """
    batch = check_arrays({"var": var, "square_avg": square_avg, "acc_delta": acc_delta}, {"grad": grad})
    v = _checked(1, lr=lr, epsilon=epsilon, weight_decay=weight_decay, rho=rho)
    check_range("rho", v["rho"], 0.0, 1.0)
    scalars = adadelta_scalars(
        batch.dtype, v["lr"], v["rho"], v["epsilon"], v["weight_decay"], maximize=maximize
    )
    _adadelta.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, square_avg, acc_delta


# ---------------------------------------------------------------------------------------------- ASGD


@elementwise
def _asgd(i, param, ax, grad, wd, maximize, coupled, decay, neg_eta, mu, averaging):
    w = param[i]
    g = torch_gradient(w, grad[i], wd, maximize, coupled)
    w = fma(g, neg_eta, w * decay)
    param[i] = w
    if averaging:
        a = ax[i]
        ax[i] = a + (w - a) * mu
    else:
        ax[i] = w


def asgd_scalars(
    dtype: Any, eta: float, mu: float, lambd: float, weight_decay: float, *, maximize: bool = False
) -> tuple:
    """The ASGD element function's scalars (after the arrays), in ``dtype``; ``eta`` and ``mu`` as torch's
    0-d state holds them for this step."""
    t = np.dtype(dtype).type
    return (
        t(weight_decay),
        bool(maximize),
        bool(weight_decay != 0),
        t(1 - lambd * eta),
        t(-eta),
        t(mu),
        bool(mu != 1),
    )


def asgd_next(lr: float, lambd: float, alpha: float, t0: float, step: int) -> tuple[float, float]:
    """ASGD's ``(eta, mu)`` for the step after step ``step`` (before torch rounds them to its state dtype)."""
    return lr / ((1 + (lambd * lr) * step) ** alpha), 1 / max(1, step - t0)


def torch_asgd(
    var: Any,
    ax: Any,
    grad: Any,
    eta: Scalar,
    mu: Scalar,
    *,
    lambd: Scalar = 1e-4,
    weight_decay: Scalar = 0.0,
    maximize: bool = False,
) -> tuple[Any, Any]:
    r"""torch.optim.ASGD's update of one tensor, in place (MODERN.md §5)::

        g = −grad (maximize);  g = w·wd + g (weight_decay)
        w = w·(1 − λη) − η·g
        ax = ax + (w − ax)·μ  if μ ≠ 1,  else  ax = w

    Parameters
    ----------
    var, ax : arrays
        Parameter and its average, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    grad : array
        The gradient (read only).
    eta, mu : float
        This step's ``η`` and ``μ`` (torch's ``state['eta']``, ``state['mu']``; see :func:`asgd_next`).
    lambd, weight_decay : float
        λ (any real) and the coupled decay (>= 0).
    maximize : bool
        torch's flag.

    Returns
    -------
    tuple
        ``(var, ax)``.
    """
    batch = check_arrays({"var": var, "ax": ax}, {"grad": grad})
    v = _checked(1, eta=eta, weight_decay=weight_decay)
    for name, value in (("mu", mu), ("lambd", lambd)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"'{name}' must be a real number, got {type(value).__name__}")
    scalars = asgd_scalars(
        batch.dtype, v["eta"], float(mu), float(lambd), v["weight_decay"], maximize=maximize
    )
    _asgd.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, ax


# ---------------------------------------------------------------------------------------------- Rprop


@scalar_math
def torch_sign(x, one):
    """torch's ``sign``: ±1 for nonzero x, 0 for ±0 and NaN."""
    if x > ZERO:
        return one
    if x < ZERO:
        return -one
    return one * ZERO


@elementwise
def _rprop(i, param, prev, step_size, grad, maximize, eta_plus, eta_minus, step_min, step_max, one):
    g = -grad[i] if maximize else grad[i]
    s = torch_sign(g * prev[i], one)
    factor = eta_plus if s > ZERO else (eta_minus if s < ZERO else one)
    size = step_size[i] * factor
    if size < step_min:
        size = step_min
    if size > step_max:
        size = step_max
    step_size[i] = size
    if factor == eta_minus:
        g = one * ZERO
    param[i] = fma(-torch_sign(g, one), size, param[i])
    prev[i] = g


def rprop_scalars(dtype: Any, etas: tuple, step_sizes: tuple, *, maximize: bool = False) -> tuple:
    """The Rprop element function's scalars (after the arrays), in ``dtype``."""
    t = np.dtype(dtype).type
    return (bool(maximize), t(etas[1]), t(etas[0]), t(step_sizes[0]), t(step_sizes[1]), t(1))


def torch_rprop(
    var: Any,
    prev: Any,
    step_size: Any,
    grad: Any,
    *,
    etas: tuple = (0.5, 1.2),
    step_sizes: tuple = (1e-6, 50.0),
    maximize: bool = False,
) -> tuple[Any, Any, Any]:
    r"""torch.optim.Rprop's update of one tensor, in place (MODERN.md §6)::

        g = −grad (maximize);  s = sign(g·prev)
        f = η+ (s > 0), η− (s < 0), 1 (s = 0);  step_size = clamp(step_size·f, min, max)
        g = 0 where f = η−;  w = w − sign(g)·step_size;  prev = g

    ``sign`` is torch's (0 for NaN): a NaN gradient element leaves ``w`` and ``step_size`` as they are.

    Parameters
    ----------
    var, prev, step_size : arrays
        Parameter, previous gradient and per-element step sizes, updated in place (float32/float64,
        C-contiguous, NumPy or CUDA).
    grad : array
        The gradient (read only).
    etas : tuple
        ``(η−, η+)`` with ``0 < η− < 1 < η+``.
    step_sizes : tuple
        ``(min, max)``.
    maximize : bool
        torch's flag.

    Returns
    -------
    tuple
        ``(var, prev, step_size)``.
    """
    batch = check_arrays({"var": var, "prev": prev, "step_size": step_size}, {"grad": grad})
    minus, plus = (float(e) for e in etas)
    if not 0.0 < minus < 1.0 < plus:
        raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
    lo, hi = (float(s) for s in step_sizes)
    _rprop.launch(
        batch.device,
        batch.size,
        *batch.flat,
        *rprop_scalars(batch.dtype, (minus, plus), (lo, hi), maximize=maximize),
    )
    return var, prev, step_size


# ---------------------------------------------------------------------------------------------- Muon


@elementwise
def _decayed_step(i, param, update, decay, neg_step):
    """torch's ``param.mul_(decay)`` then ``param.add_(update, alpha=neg_step)`` (Muon, Adafactor)."""
    param[i] = fma(update[i], neg_step, param[i] * decay)


@elementwise
def _muon_momentum(i, momentum_buffer, update, grad, mw, mc, ms, nw, nc, ns, nesterov):
    g = grad[i]
    buf = torch_lerp(momentum_buffer[i], g, mw, mc, ms)
    momentum_buffer[i] = buf
    update[i] = torch_lerp(g, buf, nw, nc, ns) if nesterov else buf


def muon_momentum_scalars(dtype: Any, momentum: float, nesterov: bool) -> tuple:
    """The scalars of Muon's momentum element function (after the arrays), in ``dtype``."""
    return (*lerp_scalars(1 - momentum, dtype), *lerp_scalars(momentum, dtype), bool(nesterov))


def torch_muon_momentum(
    momentum_buffer: Any, update: Any, grad: Any, *, momentum: Scalar = 0.95, nesterov: bool = True
) -> tuple[Any, Any]:
    r"""The element-wise part of torch.optim.Muon before Newton–Schulz (MODERN.md §1.1), in place::

        buf = lerp(buf, g, 1 − μ)                     (μ·buf + (1 − μ)·g)
        update = lerp(g, buf, μ)  (nesterov)  or  buf

    Parameters
    ----------
    momentum_buffer : array
        ``buf``, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    update : array
        Receives the matrix that Newton–Schulz orthogonalises.
    grad : array
        The gradient (read only).
    momentum : float
        μ, >= 0.
    nesterov : bool
        Blend the gradient and the buffer.

    Returns
    -------
    tuple
        ``(momentum_buffer, update)``.
    """
    batch = check_arrays({"momentum_buffer": momentum_buffer, "update": update}, {"grad": grad})
    v = _checked(1, momentum=momentum)
    _muon_momentum.launch(
        batch.device, batch.size, *batch.flat, *muon_momentum_scalars(batch.dtype, v["momentum"], nesterov)
    )
    return momentum_buffer, update
