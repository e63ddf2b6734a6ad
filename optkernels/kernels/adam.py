"""Adam: MindSpore's ``ops.Adam`` (TF ApplyAdam), ``ApplyAdamWithAmsgrad`` and ``AdamNoUpdateParam``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import attr_bool, attr_float, check_arrays, check_range, output_like, plain_batch
from ._elementwise import elementwise
from ._ieee import nan_max

Scalar = Any  # a Python/NumPy number, or a 0-d or shape-(1,) array


@elementwise
def _adam(i, var, m, v, gradient, lr_t, beta1, one_minus_beta1, one_minus_beta2, epsilon, use_nesterov):
    g = gradient[i]
    m_new = m[i] + (g - m[i]) * one_minus_beta1
    v_new = v[i] + (g * g - v[i]) * one_minus_beta2
    m[i] = m_new
    v[i] = v_new
    numerator = beta1 * m_new + one_minus_beta1 * g if use_nesterov else m_new
    var[i] = var[i] - lr_t * numerator / (math.sqrt(v_new) + epsilon)


# its root and division hold the loop's loads back: its large launches are prefetched ahead (float32, and
# the fused loop of bfloat16/float16 parameters and gradients)
_adam.prefetch_large = True
_adam.prefetch_large_half = True


@elementwise
def _adam_amsgrad(i, var, m, v, vhat, grad, lr_t, one_minus_beta1, one_minus_beta2, epsilon):
    g = grad[i]
    m_new = m[i] + (g - m[i]) * one_minus_beta1
    v_new = v[i] + (g * g - v[i]) * one_minus_beta2
    vhat_new = nan_max(vhat[i], v_new)
    m[i] = m_new
    v[i] = v_new
    vhat[i] = vhat_new
    var[i] = var[i] - lr_t * m_new / (math.sqrt(vhat_new) + epsilon)


# the same root and division over five arrays: its large launches are prefetched ahead too (half ones too)
_adam_amsgrad.prefetch_large = True
_adam_amsgrad.prefetch_large_half = True


@elementwise
def _adam_delta(
    i, delta, m, v, gradient, lr_t, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon, use_nesterov
):
    g = gradient[i]
    m_new = beta1 * m[i] + one_minus_beta1 * g
    v_new = beta2 * v[i] + one_minus_beta2 * (g * g)
    m[i] = m_new
    v[i] = v_new
    numerator = beta1 * m_new + one_minus_beta1 * g if use_nesterov else m_new
    delta[i] = -(lr_t * numerator) / (math.sqrt(v_new) + epsilon)


# the offload's host step: the same root and division, its large launches prefetched ahead (half ones too)
_adam_delta.prefetch_large = True
_adam_delta.prefetch_large_half = True


def _step_size(one: Any, b1p: Any, b2p: Any, lr: Any) -> Any:
    """``lr·sqrt(1 − b2p)/(1 − b1p)`` in the dtype of the NumPy scalars given (``one``: 1 in it)."""
    # math.sqrt of the widened value, rounded back once, is the correctly rounded sqrt in float32 too.
    return lr * type(one)(math.sqrt(one - b2p)) / (one - b1p)


def _bias_corrected_lr(batch, beta1_power: Scalar, beta2_power: Scalar, lr: Scalar):
    """``lr_t = lr·sqrt(1 − beta2_power)/(1 − beta1_power)`` in the arrays' dtype, after range checks."""
    b1p = batch.scalar("beta1_power", beta1_power)
    b2p = batch.scalar("beta2_power", beta2_power)
    lr_ = batch.scalar("lr", lr)
    check_range("beta1_power", b1p, 0.0, 1.0, high_open=True)
    check_range("beta2_power", b2p, 0.0, 1.0)
    check_range("lr", lr_, 0.0)
    return _step_size(batch.dtype.type(1), b1p, b2p, lr_)


def _betas_epsilon(batch, beta1: Scalar, beta2: Scalar, epsilon: Scalar):
    b1 = batch.scalar("beta1", beta1)
    b2 = batch.scalar("beta2", beta2)
    eps = batch.scalar("epsilon", epsilon)
    check_range("beta1", b1, 0.0, 1.0, low_open=True, high_open=True)
    check_range("beta2", b2, 0.0, 1.0, low_open=True, high_open=True)
    check_range("epsilon", eps, 0.0)
    return b1, b2, eps


#: The scalar types :func:`plain_adam_scalars` takes, and the float dtypes it converts to.
_PLAIN_SCALARS = (float, np.float32, np.float64)
_ONES = {np.dtype(np.float32): np.float32(1), np.dtype(np.float64): np.float64(1)}
#: Bounds that hold for the value converted to float32 or float64 whenever they hold for the value (rounding
#: is monotonic and keeps these exactly): beta1_power at most 1 − 2⁻²² stays more than FLT_EPSILON below 1
#: (the sparse ops' check); betas in [2⁻¹²⁶, 1 − 2⁻²⁴] stay inside (0, 1).
_POWER_MAX = 1.0 - 2.0**-22
_BETA_MIN = 2.0**-126
_BETA_MAX = 1.0 - 2.0**-24


def plain_adam_scalars(
    dtype: np.dtype,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
) -> tuple | None:
    """``(lr_t, beta1, 1 − beta1, beta2, 1 − beta2, epsilon)`` in ``dtype`` (float32 or float64), as
    :func:`_bias_corrected_lr` and :func:`_betas_epsilon` compute them, for the common call (Python or
    NumPy floats, each well inside its range: the beta powers in [0, 1 − 2⁻²²] and [0, 1], the betas in
    [2⁻¹²⁶, 1 − 2⁻²⁴], lr and epsilon >= 0); None for anything else, which the checked helpers then take
    (they word the errors)."""
    one = _ONES.get(dtype)
    kinds = _PLAIN_SCALARS
    if (
        one is None
        or type(beta1_power) not in kinds
        or type(beta2_power) not in kinds
        or type(lr) not in kinds
        or type(beta1) not in kinds
        or type(beta2) not in kinds
        or type(epsilon) not in kinds
    ):
        return None
    if not (
        0.0 <= float(beta1_power) <= _POWER_MAX
        and 0.0 <= float(beta2_power) <= 1.0
        and float(lr) >= 0.0
        and _BETA_MIN <= float(beta1) <= _BETA_MAX
        and _BETA_MIN <= float(beta2) <= _BETA_MAX
        and float(epsilon) >= 0.0
    ):
        return None
    t = dtype.type
    b1, b2 = t(beta1), t(beta2)
    return _step_size(one, t(beta1_power), t(beta2_power), t(lr)), b1, one - b1, b2, one - b2, t(epsilon)


def apply_adam(
    var: Any,
    m: Any,
    v: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    gradient: Any,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
) -> tuple[Any, Any, Any]:
    r"""Adam update in place (MindSpore ``ops.Adam``, TensorFlow ``ApplyAdam``).

    With the bias correction folded into the step size, as MindSpore's and TensorFlow's kernels do::

        lr_t = lr · sqrt(1 − beta2_power) / (1 − beta1_power)
        m    ← m + (g − m)·(1 − beta1)
        v    ← v + (g·g − v)·(1 − beta2)
        var  ← var − lr_t·m / (sqrt(v) + epsilon)                              (plain)
        var  ← var − lr_t·(beta1·m + (1 − beta1)·g) / (sqrt(v) + epsilon)      (use_nesterov, new m)

    ``v`` itself is never bias-corrected and epsilon stays outside the square root, so compared with the
    textbook ``m̂/(sqrt(v̂)+ε)`` the effective epsilon is ``ε/sqrt(1 − beta2^t)``. Arithmetic is in the
    arrays' dtype (float32 or float64); ``lr_t`` is computed once per call.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        m: first moment, same shape and dtype, updated in place.
        v: second moment, same shape and dtype, updated in place.
        beta1_power: ``beta1**t`` for the current step t (t starts at 1); in [0, 1).
        beta2_power: ``beta2**t``; in [0, 1].
        lr: learning rate, >= 0.
        beta1: first-moment decay, in (0, 1).
        beta2: second-moment decay, in (0, 1).
        epsilon: added to ``sqrt(v)``, >= 0.
        gradient: the gradient, same shape and dtype (read only; any layout on the CPU).
        use_locking: accepted for MindSpore compatibility (a call never races with itself).
        use_nesterov: use the Nesterov numerator (MindSpore's GPU kernel ignores this flag; its CPU kernel
            and TensorFlow implement it, as here).

    Returns:
        ``(var, m, v)``, the updated arrays themselves.

    Raises:
        TypeError: an argument of the wrong type, dtypes that differ or are not float32/float64, or arrays
            on different devices.
        ValueError: shapes differ, a state array is read-only or not contiguous, or a scalar is out of range.
    """
    batch = scalars = None
    if type(use_locking) is bool and type(use_nesterov) is bool:
        batch = plain_batch([var, m, v, gradient], 3)
        if batch is not None:
            scalars = plain_adam_scalars(batch.dtype, beta1_power, beta2_power, lr, beta1, beta2, epsilon)
    if batch is None or scalars is None:  # anything but the common call: every check, in order
        attr_bool("use_locking", use_locking)
        attr_bool("use_nesterov", use_nesterov)
        batch = check_arrays({"var": var, "m": m, "v": v}, {"gradient": gradient})
        lr_t = _bias_corrected_lr(batch, beta1_power, beta2_power, lr)
        b1, b2, eps = _betas_epsilon(batch, beta1, beta2, epsilon)
        one = batch.dtype.type(1)
        scalars = (lr_t, b1, one - b1, b2, one - b2, eps)
    lr_t, b1, one_minus_b1, _, one_minus_b2, eps = scalars
    _adam.launch(
        batch.device, batch.size, *batch.flat, lr_t, b1, one_minus_b1, one_minus_b2, eps, bool(use_nesterov)
    )
    return var, m, v


def apply_adam_with_amsgrad(
    var: Any,
    m: Any,
    v: Any,
    vhat: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    grad: Any,
    *,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    use_locking: bool = False,
) -> tuple[Any, Any, Any, Any]:
    r"""Adam with the AMSGrad maximum, in place (MindSpore ``ops.ApplyAdamWithAmsgrad``)::

        lr_t = lr · sqrt(1 − beta2_power) / (1 − beta1_power)
        m    ← m + (g − m)·(1 − beta1)
        v    ← v + (g·g − v)·(1 − beta2)
        vhat ← max(vhat, v)
        var  ← var − lr_t·m / (sqrt(vhat) + epsilon)

    The maximum propagates NaN (``np.maximum``'s rule, README "Non-finite values"): a NaN in v makes vhat
    and var NaN. TensorFlow's Eigen ``cwiseMax`` may keep vhat there instead.

    Args:
        var, m, v, vhat: parameter, moments and running maximum of v, updated in place (same shape and
            dtype, float32/float64, C-contiguous).
        beta1_power: ``beta1**t`` (t starts at 1), in [0, 1).
        beta2_power: ``beta2**t``, in [0, 1].
        lr: learning rate, >= 0.
        grad: the gradient (read only).
        beta1, beta2: moment decays (float attributes), in (0, 1).
        epsilon: float attribute, >= 0.
        use_locking: accepted for MindSpore compatibility.

    Returns:
        ``(var, m, v, vhat)``.

    Raises:
        TypeError, ValueError: as :func:`apply_adam`; a non-float ``beta1``/``beta2``/``epsilon`` is a
        TypeError (MindSpore's attribute check).
    """
    attr_bool("use_locking", use_locking)
    attrs = {
        name: attr_float(name, value)
        for name, value in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon))
    }
    batch = check_arrays({"var": var, "m": m, "v": v, "vhat": vhat}, {"grad": grad})
    lr_t = _bias_corrected_lr(batch, beta1_power, beta2_power, lr)
    b1, b2, eps = _betas_epsilon(batch, attrs["beta1"], attrs["beta2"], attrs["epsilon"])
    one = batch.dtype.type(1)
    _adam_amsgrad.launch(batch.device, batch.size, *batch.flat, lr_t, one - b1, one - b2, eps)
    return var, m, v, vhat


def adam_no_update_param(
    m: Any,
    v: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    gradient: Any,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    out: Any = None,
) -> Any:
    r"""Adam's moments in place and the parameter step returned, not applied (MindSpore
    ``AdamNoUpdateParam``, used by AdamOffload)::

        lr_t  = lr · sqrt(1 − beta2_power) / (1 − beta1_power)
        m     ← beta1·m + (1 − beta1)·g
        v     ← beta2·v + (1 − beta2)·g²
        delta = −lr_t·m / (sqrt(v) + epsilon)        (use_nesterov: numerator beta1·m + (1 − beta1)·g)

    The caller applies ``param += delta``. Note this kernel uses the plain ``beta·m + (1 − beta)·g`` form,
    not Adam's delta form, as MindSpore's does.

    Args:
        m, v: moments, updated in place (same shape and dtype, float32/float64, C-contiguous).
        beta1_power, beta2_power, lr, beta1, beta2, epsilon: as :func:`apply_adam`.
        gradient: the gradient (read only).
        use_locking: accepted for MindSpore compatibility.
        use_nesterov: use the Nesterov numerator.
        out: optional array (shape and dtype of ``m``) to receive delta; a new one is allocated if None.
            An optkernels extension, for allocation-free use.

    Returns:
        ``delta``, the step to add to the parameter.

    Raises:
        TypeError, ValueError: as :func:`apply_adam`.
    """
    attr_bool("use_locking", use_locking)
    nesterov = attr_bool("use_nesterov", use_nesterov)
    batch = check_arrays({"m": m, "v": v}, {"gradient": gradient})
    lr_t = _bias_corrected_lr(batch, beta1_power, beta2_power, lr)
    b1, b2, eps = _betas_epsilon(batch, beta1, beta2, epsilon)
    delta, flat_delta = output_like("out", out, m, batch)
    one = batch.dtype.type(1)
    _adam_delta.launch(
        batch.device, batch.size, flat_delta, *batch.flat, lr_t, b1, one - b1, b2, one - b2, eps, nesterov
    )
    return delta
