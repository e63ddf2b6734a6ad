"""AdaFactor: MindSpore's ``FusedAdaFactor`` (the per-parameter update of ``nn.AdaFactor``), CPU and CUDA.

The update needs whole-tensor and per-row/per-column reductions, so it runs as a few passes, each a
per-element (or per-row, per-column, per-slice) function compiled for both targets by :mod:`._elementwise`:

1. statistics: the row and column running averages (factored, rank >= 2; one loop iteration per row or
   column, which sums its elements in a fixed order) or the element-wise running average (rank < 2), and the
   factors ``1/sqrt(.)`` of each row/column (or element);
2. sums of squares of the unscaled update ``U`` and of the old parameter, over fixed chunks
   (:class:`._elementwise.ChunkedSumsOfSquares`), combined exactly with ``math.fsum`` (unfactored, in the
   same pass as the statistic);
3. the element-wise update of the parameter and of the first moment.

Every sum is taken in float64 in an order fixed by the shape alone (never by the thread count), so the result
is the same bits with any number of threads and from run to run.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from . import _checks, _cuda
from ._checks import attr_bool, check_arrays, check_range, to_scalar
from ._elementwise import chunked_sums_of_squares, elementwise, scalar_math
from ._upcast import via_float32

Scalar = Any  # a Python/NumPy number, or a 0-d or shape-(1,) array

TINY = 1e-30
"""Lower clamp of the row mean, of the normalised row and column statistics and of the unfactored
statistic before their inverse square roots (MindSpore's CPU kernel uses the same 1e-30)."""


@scalar_math
def _at_least(x, floor):
    """Python's ``max(x, floor)``: ``floor`` where it is larger, else ``x`` (a NaN ``x`` stays NaN), in the
    type of both; inlined (the builtin ``max`` is compiled as a function of its own)."""
    return floor if floor > x else x


@elementwise
def _row_statistic(k, row, grad, n_cols, eps1, beta2t, one_minus_beta2t):
    # Row k of all trailing 2-D slices: R[k] <- beta2t*R[k] + (1 - beta2t)*mean_j(g[k, j]^2 + eps1).
    start = k * n_cols
    total = 0.0
    for j in range(start, start + n_cols):
        g = grad[j]
        total += float(g * g + eps1)
    row[k] = beta2t * row[k] + one_minus_beta2t * (total / n_cols)


@elementwise
def _column_statistic(k, col, col_factor, grad, n_rows, n_cols, eps1, beta2t, one_minus_beta2t):
    # Column k (slice b, column j): C[k] <- max(beta2t*C[k] + (1 - beta2t)*mean_i(g[b, i, j]^2 + eps1), TINY),
    # and its factor 1/sqrt(C) from the stored value.
    b = k // n_cols
    first = b * n_rows * n_cols + (k - b * n_cols)
    total = 0.0
    for r in range(n_rows):
        g = grad[first + r * n_cols]
        total += float(g * g + eps1)
    col[k] = _at_least(beta2t * col[k] + one_minus_beta2t * (total / n_rows), 1e-30)
    col_factor[k] = 1.0 / math.sqrt(float(col[k]))


@elementwise
def _row_factors(b, row_factor, row, n_rows):
    # Slice b: 1/sqrt(max(R_i / max(mean_i R, TINY), TINY)) for each of its rows.
    start = b * n_rows
    total = 0.0
    for r in range(start, start + n_rows):
        total += float(row[r])
    mean = _at_least(total / n_rows, 1e-30)
    for r in range(start, start + n_rows):
        row_factor[r] = 1.0 / math.sqrt(_at_least(float(row[r]) / mean, 1e-30))


@elementwise
def _vector_statistic_half(i, half_bits, factor, grad, half_values, eps1, beta2t, one_minus_beta2t):
    # The statistic of _vector_statistic_sums with V stored as IEEE binary16 bit patterns: decode through the
    # table of all 65536 values (exact, in the arrays' dtype), round the new value to the nearest binary16
    # (ties to even), store its bits, and take the factor from the stored value.
    g = grad[i]
    v = beta2t * half_values[half_bits[i]] + one_minus_beta2t * (g * g + eps1)
    a = float(v)  # MindSpore's clamp to 1e-30 is not needed: 0 <= v < 1e-30 rounds to +0 either way
    sign = 0
    if math.copysign(1.0, a) < 0.0:
        sign = 0x8000
        a = -a
    if a != a:
        bits = 0x7E00
    elif a >= 65520.0:  # halfway between 65504 (the largest binary16) and 65536 rounds (to even) to inf
        bits = sign | 0x7C00
    else:
        scale = 16777216.0  # 2^24: one unit of the last place of subnormals (and of [2^-14, 2^-13))
        exponent = 1
        while exponent < 30 and a >= 2.0 * (1024.0 / scale):
            scale *= 0.5
            exponent += 1
        y = a * scale  # exact: a power-of-two scaling
        q = float(math.floor(y))
        rest = y - q
        if rest > 0.5 or (rest == 0.5 and q % 2.0 == 1.0):
            q += 1.0
        if exponent == 1:  # subnormal or smallest binade: bits = quotient (1024 carries into the exponent)
            bits = sign | int(q)
        else:
            bits = sign | ((exponent << 10) + int(q) - 1024)
    half_bits[i] = bits
    factor[i] = 1.0 / math.sqrt(_at_least(float(half_values[bits]), 1e-30))


@elementwise
def _scaled(i, out, grad, reciprocal):
    # The gradient divided by the global norm, as MindSpore does it: g * (1/global_norm).
    out[i] = grad[i] * reciprocal


@chunked_sums_of_squares
def _vector_statistic_sums(i, exp_avg_sq, factor, grad, param, eps1, beta2t, one_minus_beta2t, col_factor):
    # Unfactored, in one pass: V <- max(beta2t*V + (1 - beta2t)*(g^2 + eps1), TINY) and its factor 1/sqrt(V),
    # then _update_sums' (U, X) of element i from the stored factor (col_factor: the column factor, 1).
    g = grad[i]
    exp_avg_sq[i] = _at_least(beta2t * exp_avg_sq[i] + one_minus_beta2t * (g * g + eps1), 1e-30)
    factor[i] = 1.0 / math.sqrt(float(exp_avg_sq[i]))
    return g * factor[i] * col_factor, param[i]


@chunked_sums_of_squares
def _update_sums(i, grad, param, row_factor, col_factor, n_rows, n_cols):
    # (U, X) of element i, U = g * row_factor * col_factor (unclipped, unscaled).
    r = i // n_cols
    c = (r // n_rows) * n_cols + (i - r * n_cols)
    return grad[i] * row_factor[r] * col_factor[c], param[i]


@elementwise
def _apply(
    i,
    param,
    exp_avg,
    grad,
    row_factor,
    col_factor,
    n_rows,
    n_cols,
    clip,
    alpha,
    beta1,
    one_minus_beta1,
    decay_alpha,
    first_moment,
    weight_decay,
):
    r = i // n_cols
    c = (r // n_rows) * n_cols + (i - r * n_cols)
    u = alpha * (grad[i] * row_factor[r] * col_factor[c] / clip)
    if first_moment:
        u = beta1 * exp_avg[i] + one_minus_beta1 * u
        exp_avg[i] = u
    x = param[i]
    if weight_decay:
        x = x - decay_alpha * x
    param[i] = x - u


@functools.cache
def _half_table(dtype_str: str, device: str) -> Any:
    """All 65536 binary16 values (by bit pattern) in ``dtype`` (exact), on ``device``."""
    table = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(dtype_str)
    return table if device == "cpu" else _cuda.to_device(table)


def _epsilon_pair(epsilon: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """``(eps1, eps2)`` in ``dtype`` from a 2-sequence or a shape-(2,) array (NumPy or CUDA)."""
    if not isinstance(epsilon, np.ndarray) and _cuda.is_device_array(epsilon):
        epsilon = _cuda.to_host(epsilon)
    if isinstance(epsilon, np.ndarray):
        if epsilon.shape != (2,):
            raise ValueError(f"epsilon must hold two values (eps1, eps2), got shape {epsilon.shape}")
        pair = list(epsilon)
    elif isinstance(epsilon, (list, tuple)):
        if len(epsilon) != 2:
            raise ValueError(f"epsilon must hold two values (eps1, eps2), got {len(epsilon)}")
        pair = list(epsilon)
    else:
        raise TypeError(
            f"epsilon must be a pair (eps1, eps2) as a list, tuple or shape-(2,) array, "
            f"got {type(epsilon).__name__}"
        )
    eps1 = to_scalar("epsilon[0]", pair[0], dtype)
    eps2 = to_scalar("epsilon[1]", pair[1], dtype)
    check_range("epsilon[0]", eps1, 0.0)
    check_range("epsilon[1]", eps2, 0.0)
    return eps1, eps2


def _check_unused(name: str, value: Any) -> None:
    """An unused slot may be None or any array (MindSpore passes a shape-(1,) dummy); it is not touched."""
    if value is not None:
        _checks._array_facts(name, value)


def _check_shape(name: str, facts_shape: tuple, expected: tuple) -> None:
    if tuple(facts_shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(facts_shape)}")


def _check_half_slot(exp_avg_sq: Any, shape: tuple, others: dict[str, Any], device: str) -> None:
    """Validate a float16 ``exp_avg_sq`` (compression) against the call's other arrays."""
    facts = {name: _checks._array_facts(name, a) for name, a in others.items()}
    dev, shp, _, contiguous, writeable, span = _checks._array_facts("exp_avg_sq", exp_avg_sq)
    if dev != device:
        where = "NumPy (CPU)" if device == "cpu" else "CUDA"
        raise TypeError(f"arrays on different devices: param is a {where} array but exp_avg_sq is not")
    _check_shape("exp_avg_sq", shp, shape)
    if not writeable:
        raise ValueError("exp_avg_sq is read-only; it is updated in place")
    if not contiguous:
        raise ValueError("exp_avg_sq must be C-contiguous")
    spans = [("exp_avg_sq", True, span)] + [(n, True, f[5]) for n, f in facts.items()]
    _checks._check_no_overlap(spans)


@via_float32(("exp_avg_sq",))
def fused_ada_factor(
    epsilon: Any,
    clip_threshold: Scalar,
    beta1: Scalar,
    beta2t: Scalar,
    weight_decay: Scalar,
    learning_rate: Scalar,
    grad: Any,
    param: Any,
    exp_avg: Any,
    exp_avg_sq_row: Any,
    exp_avg_sq_col: Any,
    exp_avg_sq: Any,
    global_norm: Scalar | None = None,
    *,
    enable_scale_parameter: bool = False,
    enable_first_moment: bool = False,
    enable_weight_decay: bool = False,
) -> tuple[Any, Any, Any, Any, Any]:
    r"""One AdaFactor step for one parameter, in place (MindSpore ``FusedAdaFactor``, its input order; with
    ``global_norm``, ``FusedAdaFactorWithGlobalNorm``).

    With ``X = param``, ``G = grad`` (``grad · (1/global_norm)`` when a global norm is given, see below),
    ``(eps1, eps2) = epsilon``, ``d = clip_threshold``, ``rho = learning_rate``, ``lambda = weight_decay``
    and ``RMS(x) = sqrt(mean(x²))`` over the whole tensor::

        U0 = G² + eps1                                                      (element-wise)
        factored (X.ndim >= 2; R = exp_avg_sq_row, C = exp_avg_sq_col, per trailing 2-D slice):
            R ← beta2t·R + (1 − beta2t)·mean(U0, axis=−1)                   shape X.shape[:-1]
            C ← max(beta2t·C + (1 − beta2t)·mean(U0, axis=−2), 1e-30)       shape X.shape[:-2] + X.shape[-1:]
            U = G · r[..., :, None] · c[..., None, :],
                r = 1/sqrt(max(R / max(mean(R, axis=−1), 1e-30), 1e-30)),  c = 1/sqrt(C)
        not factored (X.ndim < 2; V = exp_avg_sq):
            V ← max(beta2t·V + (1 − beta2t)·U0, 1e-30);   U = G · 1/sqrt(V)
        U ← U / max(1, RMS(U)/d)                                            (clip; U = 0 stays 0)
        alpha = rho·max(eps2, RMS(X_old)) if enable_scale_parameter else rho
        U ← alpha·U
        if enable_first_moment:  exp_avg ← beta1·exp_avg + (1 − beta1)·U;  U ← exp_avg
        if enable_weight_decay:  X ← X − lambda·alpha·X_old
        X ← X − U

    ``beta2t`` is the step's ``1 − t^(−decay_rate)`` (0 on the first step, so the running averages start
    at the first statistic). The 1e-30 clamps are those of MindSpore's CPU kernel, which also stores the
    clamped ``C`` and ``V``; they only matter when ``eps1 = 0`` and a row, column or element of the gradient
    is zero (then ``U = 0`` there, not NaN).

    Global norm (MindSpore's ``FusedAdaFactorWithGlobalNorm``, the 13th input): the gradient is multiplied
    by ``1/global_norm`` (computed in the arrays' dtype) before everything above, when ``global_norm >=
    1e-30``; a smaller value, zero and a negative one included, leaves the gradient as it is, as in
    MindSpore's kernel (which raises no error for them). ``grad`` itself is never written: the scaled copy
    is a temporary array.

    Arithmetic: the element-wise math is in the parameter's dtype (float32 or float64). The row, column and
    whole-tensor sums are taken in float64 in a fixed order (one loop iteration per row, per column, per
    fixed-size chunk; chunks combined with ``math.fsum``), the row/column running averages are formed in
    float64 from those means and rounded once when stored, and the factors ``1/sqrt(.)`` are computed in
    float64 and rounded once to the dtype. Results are the same bits with any thread count. On CUDA the same
    order is used, but a GPU may fuse multiply-adds: CUDA and CPU results can differ in the last bits.

    Compression: the unfactored ``exp_avg_sq`` may be stored as float16 (``nn.AdaFactor(compression=True)``);
    the new value is then rounded to the nearest float16 (ties to even) and ``U`` uses the stored value.

    Args:
        epsilon: ``(eps1, eps2)``, a 2-sequence or a shape-(2,) array, each >= 0: eps1 is added to G², eps2
            is the floor of RMS(X) in the parameter scaling.
        clip_threshold: ``d`` >= 0 (0 makes every update 0, as ``U/inf``); not -0.0 (nor a negative number
            that rounds to -0.0 in the arrays' dtype).
        beta1: first-moment decay in [0, 1] (used with ``enable_first_moment``).
        beta2t: this step's second-moment decay in [0, 1].
        weight_decay: ``lambda`` >= 0 (used with ``enable_weight_decay``).
        learning_rate: ``rho`` >= 0.
        grad: gradient, the shape and dtype of ``param`` (read only).
        param: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        exp_avg: first moment, the shape and dtype of ``param``, updated in place with
            ``enable_first_moment``; otherwise not touched (any array, e.g. MindSpore's shape-(1,) dummy,
            or None).
        exp_avg_sq_row: ``R``, shape ``param.shape[:-1]``, the dtype of ``param``; not touched (array or
            None) when ``param.ndim < 2``.
        exp_avg_sq_col: ``C``, shape ``param.shape[:-2] + param.shape[-1:]``; not touched (array or None)
            when ``param.ndim < 2``.
        exp_avg_sq: ``V``, the shape of ``param`` and its dtype or float16; not touched (array or None)
            when ``param.ndim >= 2``.
        global_norm: optional global gradient norm (a scalar, or a 0-d/shape-(1,) array); None (the
            default, ``FusedAdaFactor``) does not scale the gradient.
        enable_scale_parameter: scale the step by ``max(eps2, RMS(X_old))``.
        enable_first_moment: keep the first moment ``exp_avg``.
        enable_weight_decay: apply the decoupled weight decay.

    Returns:
        ``(param, exp_avg, exp_avg_sq_row, exp_avg_sq_col, exp_avg_sq)``: the arrays passed in (updated in
        place where used). MindSpore's primitive returns nothing.

    Raises:
        TypeError: non-array arrays, wrong dtypes or devices, flags not bool, a bad ``epsilon`` type.
        ValueError: shapes, layout, overlapping arrays, a scalar out of range.
    """
    scale_parameter = attr_bool("enable_scale_parameter", enable_scale_parameter)
    first_moment = attr_bool("enable_first_moment", enable_first_moment)
    decay = attr_bool("enable_weight_decay", enable_weight_decay)
    _, shape, _, _, _, _ = _checks._array_facts("param", param)
    shape = tuple(shape)
    factored = len(shape) >= 2
    state: dict[str, Any] = {"param": param}
    if first_moment:
        state["exp_avg"] = exp_avg
    else:
        _check_unused("exp_avg", exp_avg)
    half = False
    if factored:
        state["exp_avg_sq_row"] = exp_avg_sq_row
        state["exp_avg_sq_col"] = exp_avg_sq_col
        _check_unused("exp_avg_sq", exp_avg_sq)
    else:
        _check_unused("exp_avg_sq_row", exp_avg_sq_row)
        _check_unused("exp_avg_sq_col", exp_avg_sq_col)
        half = _checks._array_facts("exp_avg_sq", exp_avg_sq)[2] == np.float16
        if not half:
            state["exp_avg_sq"] = exp_avg_sq
    batch = check_arrays(state, {"grad": grad}, same_shape=False)
    arrays = {**state, "grad": grad}
    expected = {"exp_avg_sq_row": shape[:-1], "exp_avg_sq_col": shape[:-2] + shape[-1:]}
    for name, array in arrays.items():
        _check_shape(name, _checks._array_facts(name, array)[1], expected.get(name, shape))
    if half:
        _check_half_slot(exp_avg_sq, shape, arrays, batch.device)
    flat = dict(zip(arrays, batch.flat))

    dtype = batch.dtype
    eps1, eps2 = _epsilon_pair(epsilon, dtype)
    d = batch.scalar("clip_threshold", clip_threshold)
    check_range("clip_threshold", d, 0.0)
    if d == 0 and math.copysign(1.0, d) < 0:  # -0.0 passes ">= 0", but U/max(1, RMS(U)/d) is then U
        raise ValueError(
            f"clip_threshold must be in [0, inf], got {clip_threshold!r}, which is -0.0 in "
            f"{dtype} (a negative zero, or a negative number that rounds to it)"
        )
    b1 = batch.scalar("beta1", beta1)
    check_range("beta1", b1, 0.0, 1.0)
    b2t = batch.scalar("beta2t", beta2t)
    check_range("beta2t", b2t, 0.0, 1.0)
    wd = batch.scalar("weight_decay", weight_decay)
    check_range("weight_decay", wd, 0.0)
    lr = batch.scalar("learning_rate", learning_rate)
    check_range("learning_rate", lr, 0.0)
    reciprocal = None
    if global_norm is not None:
        norm = batch.scalar("global_norm", global_norm)
        if not norm < dtype.type(TINY):  # MindSpore: below 1e-30 means no scaling; NaN scales to NaN
            reciprocal = dtype.type(1) / norm
    result = (param, exp_avg, exp_avg_sq_row, exp_avg_sq_col, exp_avg_sq)
    n = batch.size
    if n == 0:
        return result

    device, one = batch.device, dtype.type(1)
    empty = np.empty if device == "cpu" else _cuda.module().device_array
    g, x = flat["grad"], flat["param"]
    if reciprocal is not None:
        scaled = empty(n, dtype)
        _scaled.launch(device, n, scaled, g, reciprocal)
        g = scaled
    m = flat.get("exp_avg", x)  # never read or written without the first moment
    if factored:
        n_rows, n_cols = shape[-2], shape[-1]
        slices = n // (n_rows * n_cols)
        row_factor, col_factor = empty(slices * n_rows, dtype), empty(slices * n_cols, dtype)
        row, col = flat["exp_avg_sq_row"], flat["exp_avg_sq_col"]
        _row_statistic.launch(device, slices * n_rows, row, g, n_cols, eps1, b2t, one - b2t)
        _column_statistic.launch(
            device, slices * n_cols, col, col_factor, g, n_rows, n_cols, eps1, b2t, one - b2t
        )
        _row_factors.launch(device, slices, row_factor, flat["exp_avg_sq_row"], n_rows)
    else:
        n_rows, n_cols = n, 1
        row_factor = empty(n, dtype)
        col_factor = np.ones(1, dtype) if device == "cpu" else _cuda.to_device(np.ones(1, dtype))
    if factored or half:
        if half:
            bits = _checks._flatten(exp_avg_sq, device).view(np.uint16)
            _vector_statistic_half.launch(
                device, n, bits, row_factor, g, _half_table(dtype.str, device), eps1, b2t, one - b2t
            )
        sum_u2, sum_x2 = _update_sums.launch(device, n, g, x, row_factor, col_factor, n_rows, n_cols)
    else:  # the statistic and the sums in one pass (one loop fewer to compile and to run)
        sum_u2, sum_x2 = _vector_statistic_sums.launch(
            device, n, flat["exp_avg_sq"], row_factor, g, x, eps1, b2t, one - b2t, one
        )
    rms_u = math.sqrt(sum_u2 / n)
    if rms_u == 0.0:
        clip = 1.0
    elif float(d) == 0.0:
        clip = math.inf
    else:
        clip = max(1.0, rms_u / float(d))
    alpha = float(lr) * max(float(eps2), math.sqrt(sum_x2 / n)) if scale_parameter else float(lr)
    alpha_t = dtype.type(alpha)
    _apply.launch(
        device,
        n,
        x,
        m,
        g,
        row_factor,
        col_factor,
        n_rows,
        n_cols,
        dtype.type(clip),
        alpha_t,
        b1,
        one - b1,
        wd * alpha_t,
        first_moment,
        decay,
    )
    return result


@via_float32(("exp_avg_sq",))
def fused_ada_factor_with_global_norm(
    epsilon: Any,
    clip_threshold: Scalar,
    beta1: Scalar,
    beta2t: Scalar,
    weight_decay: Scalar,
    learning_rate: Scalar,
    grad: Any,
    param: Any,
    exp_avg: Any,
    exp_avg_sq_row: Any,
    exp_avg_sq_col: Any,
    exp_avg_sq: Any,
    global_norm: Scalar,
    *,
    enable_scale_parameter: bool = False,
    enable_first_moment: bool = False,
    enable_weight_decay: bool = False,
) -> tuple[Any, Any, Any, Any, Any]:
    r"""MindSpore's ``FusedAdaFactorWithGlobalNorm``: :func:`fused_ada_factor` on ``grad · (1/global_norm)``.

    The gradient is scaled when ``global_norm >= 1e-30`` (otherwise used as it is), then the AdaFactor
    step runs exactly as :func:`fused_ada_factor` documents (same inputs, same order, ``global_norm`` the
    13th), in place.

    Every argument but ``global_norm`` is as in :func:`fused_ada_factor`.

    Args:
        global_norm: the global gradient norm (a scalar, or a 0-d/shape-(1,) array).

    Returns:
        ``(param, exp_avg, exp_avg_sq_row, exp_avg_sq_col, exp_avg_sq)``, the arrays passed in.

    Raises:
        TypeError, ValueError: as :func:`fused_ada_factor`; TypeError also for a ``global_norm`` of None.
    """
    if global_norm is None:
        raise TypeError("global_norm must be a real scalar (FusedAdaFactorWithGlobalNorm), got None")
    return fused_ada_factor(
        epsilon,
        clip_threshold,
        beta1,
        beta2t,
        weight_decay,
        learning_rate,
        grad,
        param,
        exp_avg,
        exp_avg_sq_row,
        exp_avg_sq_col,
        exp_avg_sq,
        global_norm,
        enable_scale_parameter=enable_scale_parameter,
        enable_first_moment=enable_first_moment,
        enable_weight_decay=enable_weight_decay,
    )
