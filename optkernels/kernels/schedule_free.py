"""Schedule-Free AdamW and SGD (Defazio et al. 2024, "The Road Less Scheduled") as facebookresearch's
``schedulefree`` package (v1.3 onward) computes them: the parameter holds y, the state z; the average x is
never stored (MODERN §11)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import check_arrays, check_range, to_scalar
from ._divide import constant_inverse
from ._elementwise import elementwise, scalar_math
from ._torch_lerp import lerp, lerp_scalars
from .adam import Scalar

__all__ = [
    "schedule_free_adamw",
    "schedule_free_eval",
    "schedule_free_sgd",
    "schedule_free_train",
    "schedule_free_weight",
]

_FLOAT64 = np.dtype(np.float64)


@elementwise
def _schedule_free_adamw(
    i,
    y,
    z,
    exp_avg_sq,
    grad,
    lr,
    y_step,
    c,
    one_minus_c,
    small,
    beta2,
    one_minus_beta2,
    bias_correction2,
    inv_bias_correction2,
    epsilon,
    weight_decay,
):
    g = grad[i]
    v = exp_avg_sq[i] * beta2 + (one_minus_beta2 * g) * g
    exp_avg_sq[i] = v
    if inv_bias_correction2 is None:  # float64: a division
        corrected = v / bias_correction2
    else:  # float32: divide_by_constant's product, written here so that the single-array loop vectorises
        corrected = np.float32(np.float64(v) * inv_bias_correction2)
    h = g / (math.sqrt(corrected) + epsilon)
    w = y[i]
    if weight_decay != 0:  # decay at y, folded into the step
        h = h + w * weight_decay
    zi = z[i]
    y[i] = lerp(w, zi, c, one_minus_c, small) + h * y_step
    z[i] = zi - h * lr


@elementwise
def _schedule_free_sgd(i, y, z, grad, lr, y_step, c, one_minus_c, small, weight_decay):
    g = grad[i]
    w = y[i]
    if weight_decay != 0:
        g = g + w * weight_decay
    zi = z[i]
    y[i] = lerp(w, zi, c, one_minus_c, small) + g * y_step
    z[i] = zi - g * lr


# the loops' arithmetic (AdamW's root and division) holds their loads back: prefetched, they run at memory
# speed
_schedule_free_adamw.prefetch = _schedule_free_sgd.prefetch = True


@elementwise
def _lerp_towards(i, x, end, weight, one_minus_weight, small):
    x[i] = lerp(x[i], end[i], weight, one_minus_weight, small)


def schedule_free_weight(
    k: int, lr: float, warmup_steps: int, r: float, weight_lr_power: float, lr_max: float, weight_sum: float
) -> tuple[float, float, float, float]:
    """The host side of step ``k`` (0, 1, ...), as the package computes it per parameter group::

        lr_t   = lr·(k + 1)/warmup_steps if k < warmup_steps else lr
        lr_max = max(lr_t, lr_max)                          (lr_max starts at −1)
        weight = (k + 1)^r · lr_max^weight_lr_power;  weight_sum += weight
        c      = weight/weight_sum  (0 if weight_sum is 0)

    Returns ``(lr_t, lr_max, weight_sum, c)``."""
    lr_t = lr * ((k + 1) / warmup_steps if k < warmup_steps else 1.0)
    lr_max = max(lr_t, lr_max)
    weight = ((k + 1) ** r) * (lr_max**weight_lr_power)
    weight_sum = weight_sum + weight
    c = weight / weight_sum if weight_sum != 0 else 0.0
    return lr_t, lr_max, weight_sum, c


_PLAIN = (float, int)
_FLOAT_MAX = float(np.finfo(np.float64).max)


def _host_head(lr: Scalar, beta: Scalar, weight_decay: Scalar, c: Scalar, beta_name: str) -> tuple:
    """``(lr, lr·(beta·(1 − c) − 1), c, wd)`` as Python floats, after range checks."""
    if (
        type(lr) in _PLAIN
        and type(beta) in _PLAIN
        and type(weight_decay) in _PLAIN
        and type(c) in _PLAIN
        and 0.0 <= lr <= _FLOAT_MAX
        and 0.0 <= beta < 1.0
        and 0.0 <= weight_decay <= _FLOAT_MAX
        and 0.0 <= c <= 1.0
    ):  # the common case, checked in a few comparisons: Python numbers in range (an int within float range)
        lr_, b, wd, c_ = float(lr), float(beta), float(weight_decay), float(c)
    else:
        lr_, b, wd, c_ = (
            float(to_scalar(name, value, _FLOAT64))
            for name, value in (("lr", lr), (beta_name, beta), ("weight_decay", weight_decay), ("c", c))
        )
        check_range("lr", lr_, 0.0)
        check_range(beta_name, b, 0.0, 1.0, high_open=True)
        check_range("weight_decay", wd, 0.0)
        check_range("c", c_, 0.0, 1.0)
    return lr_, lr_ * (b * (1.0 - c_) - 1.0), c_, wd


def _rounded(dtype: Any, host: tuple) -> tuple:
    """The element function's scalars from host values ``(lr, y_step, c, *rest)``: each rounded once to
    ``dtype``, ``c`` as :func:`lerp_scalars` (the compiled twin: :func:`sgd_rounding`)."""
    t = np.dtype(dtype).type
    lr, y_step, c, *rest = host
    return (t(lr), t(y_step), *lerp_scalars(dtype, c), *(t(v) for v in rest))


def _rounded_adamw(dtype: Any, host: tuple) -> tuple:
    """:func:`_rounded` with the inverse of ``1 − β2^step`` after it (:func:`constant_inverse`; the compiled
    twin: :func:`adamw_rounding`)."""
    head = _rounded(dtype, host)
    bias_correction2 = head[7]
    return (*head[:8], constant_inverse(bias_correction2, np.dtype(dtype)), *head[8:])


@scalar_math
def _lerp_rounded(c, like):
    t = like.dtype.type
    w = t(c)
    return w, t(1) - w, abs(w) < 0.5


@scalar_math
def sgd_rounding(host, like):
    """:func:`schedule_free_sgd_scalars` from :func:`schedule_free_sgd_host`'s values, in compiled code
    (the dtype of the array ``like``)."""
    lr, y_step, c, weight_decay = host
    t = like.dtype.type
    return (t(lr), t(y_step)) + _lerp_rounded(c, like) + (t(weight_decay),)


@scalar_math
def adamw_rounding(host, like):
    """:func:`schedule_free_adamw_scalars` from :func:`schedule_free_adamw_host`'s values, in compiled
    code (the dtype of the array ``like``)."""
    lr, y_step, c, beta2, one_minus_beta2, bias_correction2, epsilon, weight_decay = host
    t = like.dtype.type
    head = (t(lr), t(y_step)) + _lerp_rounded(c, like)
    bc2 = t(bias_correction2)
    return head + (
        t(beta2),
        t(one_minus_beta2),
        bc2,
        constant_inverse(bc2, like),
        t(epsilon),
        t(weight_decay),
    )


def schedule_free_adamw_host(
    lr: Scalar, beta1: Scalar, beta2: Scalar, epsilon: Scalar, weight_decay: Scalar, c: Scalar, step: Scalar
) -> tuple:
    """The AdamW element function's scalars as Python floats, after range checks: ``lr``, the y step
    ``lr·(β1·(1 − c) − 1)``, ``c``, ``β2, 1 − β2, 1 − β2^step, ε, wd`` (each rounded once to the arrays'
    dtype by :func:`schedule_free_adamw_scalars` or, in compiled code, :func:`adamw_rounding`)."""
    lr_, y_step, c_, wd = _host_head(lr, beta1, weight_decay, c, "beta1")
    b2, eps, t_ = (
        float(to_scalar(name, value, _FLOAT64))
        for name, value in (("beta2", beta2), ("epsilon", epsilon), ("step", step))
    )
    check_range("beta2", b2, 0.0, 1.0, high_open=True)
    check_range("epsilon", eps, 0.0)
    check_range("step", t_, 1.0)
    return lr_, y_step, c_, b2, 1.0 - b2, 1.0 - b2**t_, eps, wd


def schedule_free_adamw_scalars(
    dtype: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    c: Scalar,
    step: Scalar,
) -> tuple:
    """The AdamW element function's scalars in ``dtype``, after range checks: ``lr``, the y step
    ``lr·(β1·(1 − c) − 1)``, the lerp scalars of ``c``, ``β2, 1 − β2, 1 − β2^step, ε, wd`` (host values
    in float64, rounded once), then the float64 inverse of ``1 − β2^step`` for float32 arithmetic (None for
    float64: the kernel divides; :func:`~optkernels.kernels._divide.divide_by_constant`)."""
    return _rounded_adamw(dtype, schedule_free_adamw_host(lr, beta1, beta2, epsilon, weight_decay, c, step))


def schedule_free_sgd_host(lr: Scalar, momentum: Scalar, weight_decay: Scalar, c: Scalar) -> tuple:
    """The SGD element function's scalars as Python floats, after range checks: ``lr``, the y step
    ``lr·(momentum·(1 − c) − 1)``, ``c``, ``wd`` (each rounded once to the arrays' dtype by
    :func:`schedule_free_sgd_scalars` or, in compiled code, :func:`sgd_rounding`)."""
    return _host_head(lr, momentum, weight_decay, c, "momentum")


def schedule_free_sgd_scalars(
    dtype: Any, lr: Scalar, momentum: Scalar, weight_decay: Scalar, c: Scalar
) -> tuple:
    """The SGD element function's scalars in ``dtype``, after range checks: ``lr``, the y step
    ``lr·(momentum·(1 − c) − 1)``, the lerp scalars of ``c``, ``wd``."""
    return _rounded(dtype, schedule_free_sgd_host(lr, momentum, weight_decay, c))


def schedule_free_adamw(
    y: Any,
    z: Any,
    exp_avg_sq: Any,
    grad: Any,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    weight_decay: Scalar,
    c: Scalar,
    step: Scalar,
) -> tuple[Any, Any, Any]:
    r"""One Schedule-Free AdamW step in place (train mode: ``y`` is the parameter; ``lr`` is this step's
    warmed-up rate and ``c`` its averaging weight, see :func:`schedule_free_weight`)::

        v ← β2·v + (1 − β2)·g²;   ĝ = g/(√(v/(1 − β2^step)) + ε) + wd·y
        y ← lerp(y, z, c) + lr·(β1·(1 − c) − 1)·ĝ;   z ← z − lr·ĝ

    The two y lines are the closed form of ``z' = z − lr·ĝ; x' = (1 − c)·x + c·z'; y' = β1·x' + (1 − β1)·z'``.
    Arithmetic in the arrays' dtype (float16/bfloat16 storage: float32).

    Args:
        y: the parameter (train mode), updated in place (float16/bfloat16/float32/float64, C-contiguous).
        z: the base sequence, same shape and dtype, updated in place.
        exp_avg_sq: second moment, same shape and dtype, updated in place.
        grad: the gradient at y (read only).
        lr: this step's learning rate (after warmup), >= 0.
        beta1: interpolation between x and z, in [0, 1).
        beta2: second-moment decay, in [0, 1).
        epsilon: added to the corrected root, >= 0.
        weight_decay: decay at y, >= 0.
        c: averaging weight of this step, in [0, 1].
        step: k + 1, this step's number from 1 (bias correction).

    Returns:
        ``(y, z, exp_avg_sq)``, the updated arrays themselves.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    batch = check_arrays({"y": y, "z": z, "exp_avg_sq": exp_avg_sq}, {"grad": grad})
    scalars = schedule_free_adamw_scalars(batch.dtype, lr, beta1, beta2, epsilon, weight_decay, c, step)
    _schedule_free_adamw.launch(batch.device, batch.size, *batch.flat, *scalars)
    return y, z, exp_avg_sq


def schedule_free_sgd(
    y: Any, z: Any, grad: Any, lr: Scalar, momentum: Scalar, weight_decay: Scalar, c: Scalar
) -> tuple[Any, Any]:
    r"""One Schedule-Free SGD step in place (train mode)::

        g ← g + wd·y;   y ← lerp(y, z, c) + lr·(momentum·(1 − c) − 1)·g;   z ← z − lr·g

    Args:
        y: the parameter (train mode), updated in place (float16/bfloat16/float32/float64, C-contiguous).
        z: the base sequence, same shape and dtype, updated in place.
        grad: the gradient at y (read only).
        lr: this step's learning rate (after warmup), >= 0.
        momentum: interpolation between x and z, in [0, 1).
        weight_decay: >= 0.
        c: averaging weight of this step, in [0, 1].

    Returns:
        ``(y, z)``, the updated arrays themselves.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    batch = check_arrays({"y": y, "z": z}, {"grad": grad})
    scalars = schedule_free_sgd_scalars(batch.dtype, lr, momentum, weight_decay, c)
    _schedule_free_sgd.launch(batch.device, batch.size, *batch.flat, *scalars)
    return y, z


def _swap(param: Any, z: Any, weight: float) -> Any:
    batch = check_arrays({"param": param}, {"z": z})
    _lerp_towards.launch(batch.device, batch.size, *batch.flat, *lerp_scalars(batch.dtype, weight))
    return param


def schedule_free_eval(param: Any, z: Any, beta: float) -> Any:
    """Train → eval: ``param ← lerp(param, z, 1 − 1/beta)``, i.e. y → x = (y − (1 − beta)·z)/beta, in place
    (``beta``: β1 or momentum, in (0, 1)). Returns ``param``."""
    check_range("beta", beta, 0.0, 1.0, low_open=True, high_open=True)
    return _swap(param, z, 1.0 - 1.0 / beta)


def schedule_free_train(param: Any, z: Any, beta: float) -> Any:
    """Eval → train: ``param ← lerp(param, z, 1 − beta)``, i.e. x → y = beta·x + (1 − beta)·z, in place.
    Returns ``param``."""
    check_range("beta", beta, 0.0, 1.0, low_open=True, high_open=True)
    return _swap(param, z, 1.0 - beta)
