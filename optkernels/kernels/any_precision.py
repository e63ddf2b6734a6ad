"""``any_precision_adamw``: torchdistx's ``AnyPrecisionAdamW`` step (LOWBIT.md §9.3) as one element function
for the CPU and CUDA, with the optional Kahan-compensated parameter update over bfloat16 parameters.

Each operation of the step is computed in float32 and rounded to its output array's dtype (float32, or
bfloat16 to nearest even), as torch's bfloat16 CPU ops do; the roundings between operations are explicit
(:func:`round_to_bf16`), the final store of each array is the launch's own rounding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import check_arrays, check_range
from ._elementwise import elementwise, scalar_math
from ._intrinsics import fma
from ._lowp import BFLOAT16, f32_bits, f32_from_bits

__all__ = ["any_precision_adamw", "kahan_add", "kahan_write_back", "round_to_bf16"]

_U32 = np.uint32
_F32 = np.float32
_DTYPES = (np.dtype(np.float32), BFLOAT16)


@scalar_math
def round_to_bf16(x, to_bf16):
    """The float32 ``x`` rounded to bfloat16 (to nearest even; NaN -> the quiet NaN with x's sign) and
    widened back to float32 when ``to_bf16`` is true; ``x`` unchanged otherwise."""
    if not to_bf16:
        return x
    b = f32_bits(x)
    sign = b & _U32(0x80000000)
    a = b & _U32(0x7FFFFFFF)
    h = (a + _U32(0x7FFF) + ((a >> _U32(16)) & _U32(1))) & _U32(0xFFFF0000)
    if a > _U32(0x7F800000):
        h = _U32(0x7FC00000)
    return f32_from_bits(sign | h)


@scalar_math
def _moments_update(
    p, m, v, g, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, corr2, eps, kinds
):
    """(p after decay, m', v', u): the step up to the parameter update; ``kinds`` bit 0/1/2: p/m/v are
    bfloat16 (decay 1 skips the decay, as torchdistx does for weight_decay 0)."""
    p_bf16, m_bf16, v_bf16 = (kinds & 1) != 0, (kinds & 2) != 0, (kinds & 4) != 0
    if decay != _F32(1):
        p = round_to_bf16(p * decay, p_bf16)
    m = round_to_bf16(fma(one_minus_beta1, g, round_to_bf16(m * beta1, m_bf16)), m_bf16)
    v = round_to_bf16(fma(one_minus_beta2 * g, g, round_to_bf16(v * beta2, v_bf16)), v_bf16)
    d = round_to_bf16(round_to_bf16(round_to_bf16(math.sqrt(v), v_bf16) / corr2, v_bf16) + eps, v_bf16)
    return p, m, v, (neg_step_size * m) / d


@scalar_math
def _plain_step(
    p, m, v, g, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, corr2, eps, kinds
):
    """(p', m', v'): the whole step without compensation (p' rounded by the store)."""
    p, m, v, u = _moments_update(
        p, m, v, g, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, corr2, eps, kinds
    )
    return p + u, m, v


@scalar_math
def _kahan_step(
    p, m, v, c, g, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, corr2, eps, kinds
):
    """(p', m', v', c'): the step with ``c ← c + u``, ``p' = p + c``, ``c ← c + (p − p')`` (``kinds`` bit
    3: c is bfloat16)."""
    p, m, v, u = _moments_update(
        p, m, v, g, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, corr2, eps, kinds
    )
    new, c = kahan_add(p, c, u, (kinds & 1) != 0, (kinds & 8) != 0)
    return new, m, v, c


@scalar_math
def kahan_add(p, c, u, p_bf16, c_bf16):
    """(p', c'): the Kahan-compensated ``p + u`` of LOWBIT.md §9.3, ``c ← c + u``, ``p' = p + c``,
    ``c' = c + (p − p')``, each operation in float32 rounded to its output's dtype (bfloat16 where
    ``p_bf16`` / ``c_bf16``); ``c'``'s own rounding is left to its store."""
    c = round_to_bf16(c + u, c_bf16)
    new = round_to_bf16(p + c, p_bf16)
    return new, c + round_to_bf16(p - new, p_bf16)


# The element functions only load and store: the arithmetic is in the compiled scalar functions, so that it
# is float32 on every target (the CUDA simulator runs element functions as Python, where a compiled
# function's float32 results come back as Python floats).


@elementwise
def _any_precision_adamw(
    i, param, exp_avg, exp_avg_sq, grad, decay, b1, omb1, b2, omb2, nss, corr2, eps, kinds
):
    p, m, v = _plain_step(
        param[i], exp_avg[i], exp_avg_sq[i], grad[i], decay, b1, omb1, b2, omb2, nss, corr2, eps, kinds
    )
    param[i] = p
    exp_avg[i] = m
    exp_avg_sq[i] = v


@elementwise
def _any_precision_adamw_kahan(
    i, param, exp_avg, exp_avg_sq, compensation, grad, decay, b1, omb1, b2, omb2, nss, corr2, eps, kinds
):
    p, m, v, c = _kahan_step(
        param[i],
        exp_avg[i],
        exp_avg_sq[i],
        compensation[i],
        grad[i],
        decay,
        b1,
        omb1,
        b2,
        omb2,
        nss,
        corr2,
        eps,
        kinds,
    )
    param[i] = p
    exp_avg[i] = m
    exp_avg_sq[i] = v
    compensation[i] = c


@elementwise
def _kahan_write_back(i, param, work, compensation):
    p = param[i]
    new, c = kahan_add(p, compensation[i], work[i] - p, True, True)
    param[i] = new
    compensation[i] = c


def kahan_write_back(param: Any, work: Any, compensation: Any) -> None:
    r"""The bfloat16 ``param`` moved to its float32 update ``work`` through the compensation buffer, in
    place (LOWBIT.md §9.3 with :math:`u = w - p`, in float32):

    .. math::

        c \leftarrow c + u, \quad p' = p + c, \quad c \leftarrow c + (p - p'), \quad p \leftarrow p'

    each operation rounded to bfloat16 (to nearest even).

    Parameters
    ----------
    param : array
        The bfloat16 parameter (flat, C-contiguous, NumPy or CUDA), updated in place.
    work : array
        float32, param's size: the parameter after its update, computed in float32 from ``param``.
    compensation : array
        bfloat16, param's size: the Kahan compensation buffer, updated in place.
    """
    device = "cpu" if isinstance(param, np.ndarray) else "cuda"
    _kahan_write_back.launch(device, param.size, param, work, compensation)


def step_scalars(step: int, lr: float, beta1: float, beta2: float, weight_decay: float) -> tuple:
    """float32 ``(decay, β1, 1−β1, β2, 1−β2, −step_size, sqrt(1−β2^t))`` of step ``t`` as torchdistx gets
    them: ``decay = 1 − lr·wd`` and ``1−β`` computed in float64 (Python floats) and rounded to float32;
    ``step_size = lr/(1 − β1^t)`` as torch's ``float / tensor`` computes it (``lr·(1/(1 − β1^t))``) and
    ``sqrt(1 − β2^t)``, in float32 (``β^t`` of the float32 ``β``, correctly rounded)."""
    lr32, b1, b2 = _F32(lr), _F32(beta1), _F32(beta2)
    one = np.float64(1.0)
    decay = _F32(one - float(lr) * float(weight_decay))
    step_size = _F32(_F32(_F32(1) / _F32(one - _F32(np.float64(b1) ** step))) * lr32)  # torch's lr / tensor
    corr2 = _F32(np.sqrt(_F32(one - _F32(np.float64(b2) ** step))))
    return decay, b1, _F32(one - float(beta1)), b2, _F32(one - float(beta2)), -step_size, corr2


def any_precision_adamw(
    param: Any,
    exp_avg: Any,
    exp_avg_sq: Any,
    grad: Any,
    step: int,
    compensation: Any = None,
    *,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> tuple[Any, Any, Any, Any]:
    r"""One ``AnyPrecisionAdamW`` step in place (torchdistx; LOWBIT.md §9.3). Each operation is computed in
    float32 and rounded to its output array's dtype (float32 or bfloat16):

    .. math::

        p \leftarrow p(1-\mathrm{lr}\cdot\mathrm{wd}) \ (\mathrm{wd} > 0), \quad
        m \leftarrow m\beta_1 + (1-\beta_1)g, \quad v \leftarrow v\beta_2 + ((1-\beta_2)g)g,

        d = \sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon, \quad u = (-\mathrm{lr}/(1-\beta_1^t)\cdot m)/d

    With ``compensation`` (Kahan summation): :math:`c \leftarrow c + u`, :math:`p' = p + c`,
    :math:`c \leftarrow c + (p - p')` (the difference rounded to p's dtype), :math:`p \leftarrow p'`;
    without it :math:`p \leftarrow p + u`.

    Parameters
    ----------
    param : array
        The parameter (float32 or bfloat16, C-contiguous, NumPy or CUDA), updated in place.
    exp_avg, exp_avg_sq : array
        First and second moments (float32 or bfloat16 each, param's shape), updated in place.
    grad : array
        The gradient (float32 or bfloat16, param's shape), read only.
    step : int
        The step number :math:`t` >= 1 (the bias corrections' exponent).
    compensation : array or None
        The Kahan compensation buffer (float32 or bfloat16), updated in place; None: plain update.
    lr, beta1, beta2, eps, weight_decay : float
        Learning rate (>= 0), moment decays (in [0, 1)), epsilon (>= 0), decoupled weight decay (>= 0).

    Notes
    -----
    The roundings are those of torchdistx's torch ops on the CPU (checked bit for bit against them):
    ``1−β`` and ``1 − lr·wd`` from Python floats rounded to float32 (see :func:`step_scalars`); the moments'
    last multiply-add fused (``fma((1−β1), g, m·β1)``, ``fma((1−β2)·g, g, v·β2)``), as torch's vector loops
    on x86-64 with FMA compute ``add(alpha=)`` and ``addcmul``; an add's scalar in bfloat16 when
    all its arrays are bfloat16 (``1−β1`` with bfloat16 ``exp_avg`` and ``grad``, ``eps`` with bfloat16
    ``exp_avg_sq``), as torch converts it to the op's dtype. Not followed: torch's scalar tail loop of an
    all-bfloat16 ``add`` (the elements of a thread's range that do not fill a vector), which rounds
    ``(1−β1)·g`` to bfloat16 before adding.

    Returns
    -------
    tuple
        ``(param, exp_avg, exp_avg_sq, compensation)``.

    Raises
    ------
    TypeError
        Arrays of other dtypes (float16, float64) or devices; a non-integer step.
    ValueError
        Shapes, layout, a step < 1 or a hyper-parameter out of range.
    """
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step must be an int, got {type(step).__name__}")
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    state = {"param": param, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    if compensation is not None:
        state["compensation"] = compensation
    batch = check_arrays(state, {"grad": grad})
    named = list(state.items()) + [("grad", grad)]
    for name, a in named:
        if np.dtype(a.dtype) not in _DTYPES:
            raise TypeError(f"{name} must be float32 or bfloat16, got {np.dtype(a.dtype)}")
    for name, value, high in (("lr", lr, None), ("beta1", beta1, 1.0), ("beta2", beta2, 1.0)):
        check_range(name, batch.scalar(name, value), 0.0, high, high_open=True)
    for name, value in (("eps", eps), ("weight_decay", weight_decay)):
        check_range(name, batch.scalar(name, value), 0.0)
    kinds = sum(1 << k for k, (_, a) in enumerate(named[:4]) if np.dtype(a.dtype) == BFLOAT16)
    if compensation is None:
        kinds &= 7
    decay, b1, omb1, b2, omb2, neg_step_size, corr2 = step_scalars(int(step), lr, beta1, beta2, weight_decay)
    eps32 = _F32(eps)
    # torch converts an add's scalar (``alpha``, an added number) to the op's dtype: bfloat16 when all its
    # tensors are bfloat16 (a multiplier stays float32)
    if kinds & 3 == 3 and np.dtype(grad.dtype) == BFLOAT16:
        omb1 = _F32(np.asarray(omb1).astype(BFLOAT16))
    if kinds & 4:
        eps32 = _F32(np.asarray(eps32).astype(BFLOAT16))
    scalars = (decay, b1, omb1, b2, omb2, neg_step_size, corr2, eps32, int(kinds))
    if compensation is None:
        _any_precision_adamw.launch(batch.device, batch.size, *batch.flat, *scalars)
    else:
        _any_precision_adamw_kahan.launch(batch.device, batch.size, *batch.flat, *scalars)
    return param, exp_avg, exp_avg_sq, compensation
