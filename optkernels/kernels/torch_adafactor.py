"""torch.optim.Adafactor (torch's own variant, MODERN.md §7) for the CPU and CUDA: its element-wise parts as
element functions, and :func:`torch_adafactor`, one tensor's whole step.

A step is: the second-moment estimate (a vector's ``variance``, or a matrix's factored ``row_var`` /
``col_var``) and the update ``U = g/√max(V, ε1²)`` into a scratch array, in one pass that also sums ``w²`` and
``U²``; then ``w ← w·(1 − lr·wd) − α/den·U`` (one fused multiply-add, as torch's ``add_(alpha=…)``). The
row and column mean squares of a matrix's gradient are one element per row / column (a loop over the other
dimension, float64 sums). ``optkernels.torch.Adafactor`` runs the same element functions with its reductions
(the norms and means) taken by torch, for torch's bits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._checks import check_arrays, check_range
from ._elementwise import chunked_sums_of_squares, elementwise, scalar_math
from .torch_family import _decayed_step, lerp_scalars, torch_lerp

__all__ = ["torch_adafactor"]


@scalar_math
def adafactor_update(estimate, g, eps1_sq, one):
    """torch's ``estimate.clamp_(min=ε1²).rsqrt_().mul_(g)``: ``(1/√max(V, ε1²))·g`` (NaN passes the clamp)."""
    if estimate < eps1_sq:
        estimate = eps1_sq
    return (one / math.sqrt(estimate)) * g


@scalar_math
def _vector_element(variance, grad, maximize, bw, bc, bs, eps1_sq, one):
    g = -grad if maximize else grad
    v = torch_lerp(variance, g * g, bw, bc, bs)
    return v, adafactor_update(v, g, eps1_sq, one)


@elementwise
def _adafactor_vector(i, variance, update, grad, maximize, bw, bc, bs, eps1_sq, one):
    v, u = _vector_element(variance[i], grad[i], maximize, bw, bc, bs, eps1_sq, one)
    variance[i] = v
    update[i] = u


@chunked_sums_of_squares
def _adafactor_vector_sums(i, variance, update, param, grad, maximize, bw, bc, bs, eps1_sq, one):
    v, u = _vector_element(variance[i], grad[i], maximize, bw, bc, bs, eps1_sq, one)
    variance[i] = v
    update[i] = u
    return param[i], u


@scalar_math
def _factored_element(row, col, row_mean, grad, maximize, eps1_sq, one):
    g = -grad if maximize else grad
    return adafactor_update((row * col) / row_mean, g, eps1_sq, one)


@elementwise
def _adafactor_factored(i, update, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one):
    r = i // n_cols
    b = r // n_rows
    update[i] = _factored_element(
        row_var[r], col_var[b * n_cols + i % n_cols], row_means[b], grad[i], maximize, eps1_sq, one
    )


@chunked_sums_of_squares
def _adafactor_factored_sums(
    i, update, param, grad, row_var, col_var, row_means, n_rows, n_cols, maximize, eps1_sq, one
):
    r = i // n_cols
    b = r // n_rows
    u = _factored_element(
        row_var[r], col_var[b * n_cols + i % n_cols], row_means[b], grad[i], maximize, eps1_sq, one
    )
    update[i] = u
    return param[i], u


@elementwise
def _row_mean_squares(i, out, grad, n_cols):
    s = 0.0
    for j in range(n_cols):
        x = float(grad[i * n_cols + j])
        s += x * x
    out[i] = s / n_cols


@elementwise
def _col_mean_squares(i, out, grad, n_rows, n_cols):
    b = i // n_cols
    j = i % n_cols
    s = 0.0
    for r in range(n_rows):
        x = float(grad[(b * n_rows + r) * n_cols + j])
        s += x * x
    out[i] = s / n_rows


@elementwise
def _lerp_into(i, x, y, weight, one_minus_weight, small):
    x[i] = torch_lerp(x[i], y[i], weight, one_minus_weight, small)


@elementwise
def _clamped_row_means(i, out, row_var, n_rows, eps1):
    s = 0.0
    for r in range(n_rows):
        s += float(row_var[i * n_rows + r])
    mean = s / n_rows
    out[i] = mean if not mean < eps1 else eps1


def adafactor_host(
    step: int, lr: float, beta2_decay: float, eps2: float, param_norm: float, numel: int
) -> tuple[float, float]:
    """``(w, α)``: the lerp weight ``t^τ`` (β̂2 = 1 − w) and the step size ``max(ε2, RMS(w))·min(lr, 1/√t)``
    from the parameter's norm before the decay."""
    t = float(step)
    return t**beta2_decay, max(eps2, param_norm / (numel**0.5)) * min(lr, 1 / (t**0.5))


def adafactor_denominator(update_norm: float, numel: int, d: float) -> float:
    """torch's clipping ``max(1, RMS(U)/d)``."""
    return max(1.0, update_norm / ((numel**0.5) * d))


def torch_adafactor(
    var: Any,
    grad: Any,
    step: int,
    *,
    lr: float = 1e-2,
    beta2_decay: float = -0.8,
    eps1: float | None = None,
    eps2: float = 1e-3,
    d: float = 1.0,
    weight_decay: float = 0.0,
    maximize: bool = False,
    variance: Any = None,
    row_var: Any = None,
    col_var: Any = None,
    update: Any = None,
) -> tuple[Any, ...]:
    r"""torch.optim.Adafactor's step of one tensor, in place (MODERN.md §7)::

        w_t = t^τ;  ρ = min(lr, 1/√t);  α = max(ε2, ‖w‖/√N)·ρ                  (τ = beta2_decay, N = w.size)
        w ← w·(1 − lr·wd)
        vector:  V = variance ← lerp(variance, g², w_t)
        matrix:  R ← lerp(R, mean_cols(g²), w_t);  C ← lerp(C, mean_rows(g²), w_t)
                 V = R·C/max(mean(R), ε1)                                        (per trailing matrix)
        U = g/√max(V, ε1²);  w ← w − α/max(1, ‖U‖/(√N·d))·U

    Parameters
    ----------
    var : array
        The parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
    grad : array
        Its gradient (read only).
    step : int
        This step's number t, from 1.
    lr, beta2_decay, eps1, eps2, d, weight_decay : float
        torch's arguments (``eps1=None``: the dtype's machine epsilon).
    maximize : bool
        Negate the gradient.
    variance : array, optional
        A vector's (``var.ndim <= 1``) second moment, updated in place.
    row_var, col_var : arrays, optional
        A matrix's factored moments (``var.ndim >= 2``), shapes ``(…, n, 1)`` and ``(…, 1, m)``.
    update : array, optional
        Scratch of ``var``'s shape and dtype for U (allocated when None).

    Returns
    -------
    tuple
        ``(var, variance)`` or ``(var, row_var, col_var)``.

    Raises
    ------
    TypeError, ValueError
        Bad arrays (as the other kernels), the wrong moments for ``var``'s rank, out-of-range arguments.
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    check_range("lr", float(lr), 0.0)
    check_range("beta2_decay", float(beta2_decay), None, 0.0)
    check_range("eps2", float(eps2), 0.0)
    check_range("d", float(d), 1.0)
    check_range("weight_decay", float(weight_decay), 0.0)
    shape = tuple(getattr(var, "shape", ()))
    factored = len(shape) >= 2
    if factored and (row_var is None or col_var is None or variance is not None):
        raise ValueError("a parameter of 2 or more dimensions takes row_var and col_var (not variance)")
    if not factored and (variance is None or row_var is not None or col_var is not None):
        raise ValueError("a parameter of at most 1 dimension takes variance (not row_var/col_var)")
    if factored:
        n, m = shape[-2], shape[-1]
        for name, array, expected in (
            ("row_var", row_var, shape[:-1] + (1,)),
            ("col_var", col_var, shape[:-2] + (1, m)),
        ):
            if tuple(getattr(array, "shape", ())) != expected:
                raise ValueError(
                    f"{name} must have shape {expected}, got {tuple(getattr(array, 'shape', ()))}"
                )
    if update is None:
        update = _like(var)
    states = {"var": var, "update": update}
    states.update({"row_var": row_var, "col_var": col_var} if factored else {"variance": variance})
    batch = check_arrays(states, {"grad": grad}, same_shape=False)
    if batch.storage != batch.dtype:
        raise TypeError("torch_adafactor updates float32 and float64 arrays")
    if tuple(getattr(grad, "shape", ())) != shape or tuple(update.shape) != shape:
        raise ValueError(f"grad and update must have var's shape {shape}")
    if not factored and tuple(variance.shape) != shape:
        raise ValueError(f"variance must have var's shape {shape}")
    dt = batch.dtype
    one = dt.type(1)
    if eps1 is None:
        eps1 = float(np.finfo(dt).eps)
    else:
        eps1 = float(eps1)
        check_range("eps1", eps1, 0.0)
    lerp = lerp_scalars(float(step) ** float(beta2_decay), dt)
    flat_var, flat_update, *moments, flat_grad = batch.flat
    size = batch.size
    if factored:
        rows, cols = moments
        batches = size // (n * m) if n * m else 0
        work = [_empty(batch.device, k, dt) for k in (batches * n, batches * m, batches)]
        _row_mean_squares.launch(batch.device, batches * n, work[0], flat_grad, m)
        _col_mean_squares.launch(batch.device, batches * m, work[1], flat_grad, n, m)
        _lerp_into.launch(batch.device, batches * n, rows, work[0], *lerp)
        _lerp_into.launch(batch.device, batches * m, cols, work[1], *lerp)
        _clamped_row_means.launch(batch.device, batches, work[2], rows, n, dt.type(eps1))
        sums = _adafactor_factored_sums.launch(
            batch.device,
            size,
            flat_update,
            flat_var,
            flat_grad,
            rows,
            cols,
            work[2],
            n,
            m,
            bool(maximize),
            dt.type(eps1 * eps1),
            one,
        )
    else:
        sums = _adafactor_vector_sums.launch(
            batch.device,
            size,
            moments[0],
            flat_update,
            flat_var,
            flat_grad,
            bool(maximize),
            *lerp,
            dt.type(eps1 * eps1),
            one,
        )
    _, alpha = adafactor_host(step, float(lr), float(beta2_decay), float(eps2), math.sqrt(sums[0]), size)
    den = adafactor_denominator(math.sqrt(sums[1]), size, float(d))
    _decayed_step.launch(
        batch.device,
        size,
        flat_var,
        flat_update,
        dt.type(1 - float(lr) * float(weight_decay)),
        dt.type(-alpha / den),
    )
    return (var, row_var, col_var) if factored else (var, variance)


def _like(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np.empty_like(x)
    from . import _cuda

    dtype = (
        x.dtype
        if isinstance(getattr(x, "dtype", None), np.dtype)
        else np.dtype(_cuda.interface(x)["typestr"])
    )
    return _cuda.module().device_array(x.shape, dtype=dtype)  # bfloat16's typestr says only '<V2'


def _empty(device: str, n: int, dtype: np.dtype) -> Any:
    if device == "cpu":
        return np.empty(max(n, 0), dtype)
    from . import _cuda

    return _cuda.module().device_array(max(n, 0), dtype=dtype)
