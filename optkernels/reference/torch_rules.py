"""float64 reference of the ``torch.optim`` update rules that have their own kernels
(:mod:`optkernels.kernels.torch_rules`): Adam/AdamW, Adamax, Adagrad, RMSprop, SGD and SparseAdam, one
step of torch's single-tensor algorithm on one tensor, in plain float64 arithmetic (the kernels reproduce
torch's own rounding; this reference states the math they round)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["torch_adagrad", "torch_adam", "torch_adamax", "torch_rms_prop", "torch_sgd", "torch_sparse_adam"]


@ieee
def torch_rms_prop(
    var: ArrayLike,
    square_avg: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    alpha: ArrayLike,
    epsilon: ArrayLike,
    *,
    momentum: ArrayLike = 0.0,
    momentum_buffer: ArrayLike | None = None,
    grad_avg: ArrayLike | None = None,
) -> tuple[np.ndarray, ...]:
    """torch.optim.RMSprop on one tensor::

        square_avg = alpha*square_avg + (1 - alpha)*g*g
        grad_avg   = grad_avg + (g - grad_avg)*(1 - alpha)          (centered)
        avg        = sqrt(square_avg - grad_avg**2) + eps  (centered)  or  sqrt(square_avg) + eps
        buf = momentum*buf + g/avg;  var = var - lr*buf            (momentum_buffer given)
        var = var - lr*g/avg                                        (otherwise)

    Returns new float64 arrays: var, square_avg[, grad_avg][, momentum_buffer].
    """
    w, sa, g = as_array(var, "var"), as_array(square_avg, "square_avg"), as_array(grad, "grad")
    check_same_shape("var", w, square_avg=sa, grad=g)
    lr_, a, eps = as_scalar(lr, "lr"), as_scalar(alpha, "alpha"), as_scalar(epsilon, "epsilon")
    sa = a * sa + (1.0 - a) * g * g
    out = [None, sa]
    if grad_avg is not None:
        ga = as_array(grad_avg, "grad_avg")
        check_same_shape("var", w, grad_avg=ga)
        ga = ga + (g - ga) * (1.0 - a)
        avg = np.sqrt(sa - ga * ga) + eps
        out.append(ga)
    else:
        avg = np.sqrt(sa) + eps
    if momentum_buffer is not None:
        buf = as_array(momentum_buffer, "momentum_buffer")
        check_same_shape("var", w, momentum_buffer=buf)
        buf = as_scalar(momentum, "momentum") * buf + g / avg
        out[0] = w - lr_ * buf
        out.append(buf)
    else:
        out[0] = w - lr_ * g / avg
    return tuple(out)


@ieee
def torch_adamax(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_inf: ArrayLike,
    grad: ArrayLike,
    lr: ArrayLike,
    beta1: ArrayLike,
    beta2: ArrayLike,
    epsilon: ArrayLike,
    step: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch.optim.Adamax on one tensor::

        exp_avg = beta1*exp_avg + (1 - beta1)*g
        exp_inf = max(beta2*exp_inf, |g| + eps)
        var     = var - lr/(1 - beta1**step) * exp_avg/exp_inf

    Returns ``(var, exp_avg, exp_inf)``, new float64 arrays.
    """
    w, m, u, g = (
        as_array(x, n) for x, n in ((var, "var"), (exp_avg, "exp_avg"), (exp_inf, "exp_inf"), (grad, "grad"))
    )
    check_same_shape("var", w, exp_avg=m, exp_inf=u, grad=g)
    lr_, b1, b2 = as_scalar(lr, "lr"), as_scalar(beta1, "beta1"), as_scalar(beta2, "beta2")
    eps = as_scalar(epsilon, "epsilon")
    m = b1 * m + (1.0 - b1) * g
    u = np.maximum(b2 * u, np.abs(g) + eps)
    return w - lr_ / (1.0 - b1**step) * (m / u), m, u


def _pre_step(w: np.ndarray, g: np.ndarray, weight_decay: float, maximize: bool) -> np.ndarray:
    """torch's gradient pre-step: ``g = -g`` (maximize), then ``g = g + wd*w``."""
    g = -g if maximize else g
    return g + weight_decay * w if weight_decay != 0 else g


@ieee
def torch_adam(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    grad: ArrayLike,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    step: int,
    *,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
    max_exp_avg_sq: ArrayLike | None = None,
) -> tuple[np.ndarray, ...]:
    """torch.optim.Adam (AdamW: ``decoupled_weight_decay=True``) on one tensor, step number ``step``::

        var     = var*(1 - lr*wd)                        (decoupled)   or   g = g + wd*var (coupled)
        exp_avg = exp_avg + (1 - beta1)*(g - exp_avg)
        exp_avg_sq = beta2*exp_avg_sq + (1 - beta2)*g*g
        max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)  (amsgrad: max_exp_avg_sq given, used below)
        var = var - lr/(1 - beta1**step) * exp_avg/(sqrt(exp_avg_sq)/sqrt(1 - beta2**step) + eps)

    Returns new float64 arrays: var, exp_avg, exp_avg_sq[, max_exp_avg_sq].
    """
    w, m, v, g = (
        as_array(x, n)
        for x, n in ((var, "var"), (exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq"), (grad, "grad"))
    )
    check_same_shape("var", w, exp_avg=m, exp_avg_sq=v, grad=g)
    if decoupled_weight_decay:
        w = w * (1.0 - lr * weight_decay)
        g = _pre_step(w, g, 0.0, maximize)
    else:
        g = _pre_step(w, g, weight_decay, maximize)
    m = m + (1.0 - beta1) * (g - m)
    v = beta2 * v + (1.0 - beta2) * g * g
    out = [None, m, v]
    denominator_v = v
    if max_exp_avg_sq is not None:
        vmax = np.maximum(as_array(max_exp_avg_sq, "max_exp_avg_sq"), v)
        out.append(vmax)
        denominator_v = vmax
    denominator = np.sqrt(denominator_v) / np.sqrt(1.0 - beta2**step) + eps
    out[0] = w - lr / (1.0 - beta1**step) * m / denominator
    return tuple(out)


@ieee
def torch_adagrad(
    var: ArrayLike,
    state_sum: ArrayLike,
    grad: ArrayLike,
    lr: float,
    eps: float,
    step: int,
    *,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """torch.optim.Adagrad (dense gradient) on one tensor, step number ``step``::

        clr = lr/(1 + (step - 1)*lr_decay)
        state_sum = state_sum + g*g;   var = var - clr*g/(sqrt(state_sum) + eps)

    Returns ``(var, state_sum)``, new float64 arrays.
    """
    w, s, g = as_array(var, "var"), as_array(state_sum, "state_sum"), as_array(grad, "grad")
    check_same_shape("var", w, state_sum=s, grad=g)
    g = _pre_step(w, g, weight_decay, maximize)
    s = s + g * g
    return w - lr / (1.0 + (step - 1) * lr_decay) * g / (np.sqrt(s) + eps), s


@ieee
def torch_sgd(
    var: ArrayLike,
    grad: ArrayLike,
    lr: float,
    *,
    momentum: float = 0.0,
    momentum_buffer: ArrayLike | None = None,
    dampening: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[np.ndarray, ...]:
    """torch.optim.SGD on one tensor::

        buf = g  (momentum_buffer None: the first step)   or   buf = momentum*buf + (1 - dampening)*g
        g = g + momentum*buf (nesterov)   or   g = buf;   var = var - lr*g        (momentum != 0)
        var = var - lr*g                                                          (momentum == 0)

    Returns new float64 arrays: ``(var,)``, or ``(var, momentum_buffer)`` when ``momentum != 0``.
    """
    w, g = as_array(var, "var"), as_array(grad, "grad")
    check_same_shape("var", w, grad=g)
    g = _pre_step(w, g, weight_decay, maximize)
    if momentum == 0:
        return (w - lr * g,)
    if momentum_buffer is None:
        buf = g.copy()
    else:
        buf = as_array(momentum_buffer, "momentum_buffer")
        check_same_shape("var", w, momentum_buffer=buf)
        buf = momentum * buf + (1.0 - dampening) * g
    g = g + momentum * buf if nesterov else buf
    return w - lr * g, buf


@ieee
def torch_sparse_adam(
    var: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    rows: ArrayLike,
    values: ArrayLike,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    step: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch.optim.SparseAdam on one 2-D tensor: the gradient ``values[k]`` of row ``rows[k]`` (duplicates
    summed first, torch's ``coalesce``); only those rows change::

        exp_avg[r] += (1 - beta1)*(g - exp_avg[r]);  exp_avg_sq[r] += (1 - beta2)*(g*g - exp_avg_sq[r])
        var[r] -= lr*sqrt(1 - beta2**step)/(1 - beta1**step) * exp_avg[r]/(sqrt(exp_avg_sq[r]) + eps)

    Returns ``(var, exp_avg, exp_avg_sq)``, new float64 arrays.
    """
    w, m, v = as_array(var, "var"), as_array(exp_avg, "exp_avg"), as_array(exp_avg_sq, "exp_avg_sq")
    check_same_shape("var", w, exp_avg=m, exp_avg_sq=v)
    r = np.asarray(rows, dtype=np.int64).reshape(-1)
    x = as_array(values, "values").reshape((len(r),) + w.shape[1:])
    unique, inverse = np.unique(r, return_inverse=True)
    g = np.zeros((len(unique),) + w.shape[1:])
    np.add.at(g, inverse, x)
    m[unique] = m[unique] + (1.0 - beta1) * (g - m[unique])
    v[unique] = v[unique] + (1.0 - beta2) * (g * g - v[unique])
    step_size = lr * np.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
    w[unique] = w[unique] - step_size * m[unique] / (np.sqrt(v[unique]) + eps)
    return w, m, v
