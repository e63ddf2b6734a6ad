"""Sparse Adam: MindSpore's ``ops.FusedSparseAdam`` (non-lazy) and ``ops.FusedSparseLazyAdam`` (lazy).

The moment updates of these two ops differ from the dense ``apply_adam`` (which uses the delta form
``m + (g - m)(1 - beta1)``), so their per-element math is written here, once, in MindSpore's CPU kernels'
order of operations:

* FusedSparseAdam, two steps: ``m = beta1*m`` on every row, then ``m += (1 - beta1)*g`` on the indexed rows
  (likewise ``v = beta2*v``, then ``v += (1 - beta2)*g*g``);
* FusedSparseLazyAdam, one step on the indexed rows: ``m = beta1*m + (1 - beta1)*g``,
  ``v = beta2*v + (1 - beta2)*g*g``.

Both then take ``var -= lr_t*M / (sqrt(v) + epsilon)``, with ``(1 - beta2)*g*g`` evaluated left to right
and ``lr_t*M`` before the division, as the C++ kernels do.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import attr_bool
from ..kernels._elementwise import scalar_math
from ..kernels._upcast import via_float32
from ..kernels._workers import run_parts
from ..kernels.adam import Scalar, _betas_epsilon, _bias_corrected_lr, plain_adam_scalars
from ._call import SparseCall, check_sparse_call, plain_numpy_call
from ._half_rows import half_rows
from ._rows import RowUpdate, generate, launch_config

FLT_EPSILON = float(np.finfo(np.float32).eps)

#: Elements of the table per CPU task of the non-lazy update.
ELEMENTS_PER_TASK = 16384


@scalar_math
def lazy_adam_math(w, m, v, g, lr_t, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon, use_nesterov):
    """FusedSparseLazyAdam on one element of an indexed row: returns ``(w, m, v)`` new."""
    m_new = beta1 * m + one_minus_beta1 * g
    v_new = beta2 * v + one_minus_beta2 * g * g
    numerator = m_new * beta1 + one_minus_beta1 * g if use_nesterov else m_new
    return w - lr_t * numerator / (math.sqrt(v_new) + epsilon), m_new, v_new


@scalar_math
def fused_adam_indexed_math(
    w, m, v, g, lr_t, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon, use_nesterov
):
    """FusedSparseAdam on one element of an indexed row: decay, then add the gradient term (two roundings,
    as MindSpore's CPU kernel); returns ``(w, m, v)`` new."""
    m_new = beta1 * m
    m_new = m_new + one_minus_beta1 * g
    v_new = beta2 * v
    v_new = v_new + one_minus_beta2 * g * g
    numerator = m_new * beta1 + one_minus_beta1 * g if use_nesterov else m_new
    return w - lr_t * numerator / (math.sqrt(v_new) + epsilon), m_new, v_new


@scalar_math
def fused_adam_decay_math(w, m, v, lr_t, beta1, beta2, epsilon, use_nesterov):
    """FusedSparseAdam on one element of a row without gradient: the moments decay and var still moves
    (Nesterov numerator ``beta1*m``, the Nesterov form with g = 0); returns ``(w, m, v)`` new."""
    m_new = beta1 * m
    v_new = beta2 * v
    numerator = m_new * beta1 if use_nesterov else m_new
    return w - lr_t * numerator / (math.sqrt(v_new) + epsilon), m_new, v_new


_lazy_adam = RowUpdate(lazy_adam_math)


def _fused_adam_task(
    task,
    rows_per_task,
    rows,
    starts,
    order,
    grad,
    var,
    m,
    v,
    flat_var,
    flat_m,
    flat_v,
    lr_t,
    beta1,
    one_minus_beta1,
    beta2,
    one_minus_beta2,
    epsilon,
    use_nesterov,
):
    """One task of the non-lazy update: the block of ``rows_per_task`` table rows from ``task *
    rows_per_task`` (2-D ``(rows, row_len)`` views): the indexed rows (sorted ``rows``) get their summed
    gradient; the runs of rows in between only decay (through ``flat_var``, ``flat_m``, ``flat_v``: the same
    memory, 1-D, so that a run is one contiguous loop). Run by :func:`~optkernels.kernels._workers.run_parts`,
    compiled into a packed C worker."""
    n_table, row_len = var.shape
    n_hit = rows.shape[0]
    first = task * rows_per_task
    last = first + rows_per_task if first + rows_per_task < n_table else n_table
    # j = the first distinct row >= first (np.searchsorted, which costs a second's compile on first use)
    j = 0
    hi = n_hit
    while j < hi:
        mid = (j + hi) >> 1
        if rows[mid] < first:
            j = mid + 1
        else:
            hi = mid
    g = np.empty(row_len, grad.dtype)
    r = first
    while r < last:
        if j < n_hit and rows[j] == r:
            src = order[starts[j]]
            for c in range(row_len):
                g[c] = grad[src, c]
            for k in range(starts[j] + 1, starts[j + 1]):
                src = order[k]
                for c in range(row_len):
                    g[c] += grad[src, c]
            for c in range(row_len):
                var[r, c], m[r, c], v[r, c] = fused_adam_indexed_math(
                    var[r, c],
                    m[r, c],
                    v[r, c],
                    g[c],
                    lr_t,
                    beta1,
                    one_minus_beta1,
                    beta2,
                    one_minus_beta2,
                    epsilon,
                    use_nesterov,
                )
            j += 1
            r += 1
        else:
            stop = rows[j] if j < n_hit and rows[j] < last else last
            # an unsigned index: no negative-index wraparound, which would keep the loop from vectorising
            for i in range(np.uint64(r * row_len), np.uint64(stop * row_len)):
                flat_var[i], flat_m[i], flat_v[i] = fused_adam_decay_math(
                    flat_var[i], flat_m[i], flat_v[i], lr_t, beta1, beta2, epsilon, use_nesterov
                )
            r = stop


_CUDA_FUSED_ADAM = """
def {name}(n, rows, starts, order, grad, row_len, var, m, v, lr_t, beta1, one_minus_beta1, beta2,
           one_minus_beta2, epsilon, use_nesterov):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    n_hit = rows.shape[0]
    while t < n:
        r = t // row_len
        c = t - r * row_len
        lo = 0
        hi = n_hit
        while lo < hi:
            mid = (lo + hi) // 2
            if rows[mid] < r:
                lo = mid + 1
            else:
                hi = mid
        if lo < n_hit and rows[lo] == r:
            g = grad[order[starts[lo]] * row_len + c]
            for k in range(starts[lo] + 1, starts[lo + 1]):
                g += grad[order[k] * row_len + c]
            var[t], m[t], v[t] = indexed(var[t], m[t], v[t], g, lr_t, beta1, one_minus_beta1, beta2,
                                         one_minus_beta2, epsilon, use_nesterov)
        else:
            var[t], m[t], v[t] = decay(var[t], m[t], v[t], lr_t, beta1, beta2, epsilon, use_nesterov)
        t += stride
"""


@functools.cache
def _fused_adam_cuda() -> Any:
    """The CUDA kernel of the non-lazy update: one thread per element of the table; each finds its row
    among the sorted distinct rows by binary search."""
    cuda = _cuda.module()
    namespace = {"cuda": cuda, "indexed": fused_adam_indexed_math, "decay": fused_adam_decay_math}
    return _cuda.kernel(
        generate(_CUDA_FUSED_ADAM, "_cuda_fused_sparse_adam", fused_adam_indexed_math.py_func, namespace)
    )


def _adam_scalars(
    call: SparseCall,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
) -> tuple:
    """(lr_t, beta1, 1 - beta1, beta2, 1 - beta2, epsilon) in the arrays' dtype, after range checks."""
    b1p = call.scalar("beta1_power", beta1_power)
    if abs(float(b1p) - 1.0) <= FLT_EPSILON:
        raise ValueError(
            f"beta1_power must not be 1 (|beta1_power - 1| <= FLT_EPSILON, as MindSpore checks), got {b1p}"
        )
    lr_t = _bias_corrected_lr(call, beta1_power, beta2_power, lr)
    b1, b2, eps = _betas_epsilon(call, beta1, beta2, epsilon)
    one = call.dtype.type(1)
    return lr_t, b1, one - b1, b2, one - b2, eps


_ADAM_ARGS = """
    Args:
        var: parameter, updated in place (float32/float64, at least 1-D, C-contiguous, NumPy or CUDA).
        m: first moment, same shape and dtype, updated in place.
        v: second moment, same shape and dtype, updated in place.
        beta1_power: ``beta1**t`` for the current step t (t starts at 1; global, not per row); in [0, 1),
            and ``|beta1_power - 1| > FLT_EPSILON`` (MindSpore's check).
        beta2_power: ``beta2**t``; in [0, 1].
        lr: learning rate, >= 0.
        beta1: first-moment decay, in (0, 1).
        beta2: second-moment decay, in (0, 1).
        epsilon: added to ``sqrt(v)``, >= 0.
        grad: gradient rows, shape ``(len(indices),) + var.shape[1:]``, same dtype (read only); or a
            :class:`~optkernels.sparse.RowSparse` with ``dense_shape == var.shape`` and ``indices=None``.
        indices: 1-D int32/int64 row indices on var's device; duplicates allowed (summed).
        use_locking: accepted for MindSpore compatibility.
        use_nesterov: use the Nesterov numerator.
        out_of_range: ``"raise"`` (default): an index outside ``[0, var.shape[0])`` (negative ones too) raises
            IndexError naming its value and position, before anything is written; ``"drop"``: such indices
            are skipped silently, as MindSpore's fused ops do.

    Returns:
        ``(var, m, v)``, the updated arrays themselves (MindSpore returns shape-(1,) dummies).

    Raises:
        TypeError: wrong types, dtypes (float32/float64 arrays, int32/int64 indices) or devices.
        ValueError: shapes, layout, 2-D indices, or a scalar out of range (``beta1_power`` near 1).
        IndexError: an out-of-range index with ``out_of_range="raise"``.
"""


@via_float32()
def fused_sparse_adam(
    var: Any,
    m: Any,
    v: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    grad: Any,
    indices: Any = None,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    attr_bool("use_locking", use_locking)
    nesterov = attr_bool("use_nesterov", use_nesterov)
    call = check_sparse_call({"var": var, "m": m, "v": v}, grad, indices, out_of_range)
    scalars = _adam_scalars(call, beta1_power, beta2_power, lr, beta1, beta2, epsilon) + (nesterov,)
    plan = call.plan  # an out-of-range index raises here, before anything is written
    total = call.num_rows * call.row_len
    if total == 0:
        return var, m, v
    if call.device == "cpu":
        rows_per_task = max(1, ELEMENTS_PER_TASK // call.row_len)
        n_tasks = -(-call.num_rows // rows_per_task)
        grad, *states = call.rows_2d()
        flat = [a.reshape(-1) for a in states]
        run_parts(n_tasks, _fused_adam_task, (rows_per_task, *plan, grad, *states, *flat, *scalars))
    else:
        blocks, threads = launch_config(total)
        _fused_adam_cuda()[blocks, threads](
            total, *call.device_plan(), call.grad, call.row_len, *call.states, *scalars
        )
    return var, m, v


fused_sparse_adam.__doc__ = (
    r"""Non-lazy sparse Adam in place (MindSpore ``ops.FusedSparseAdam``): every row
    of m, v and var changes.

    Duplicate indices are merged first: their gradient rows are summed (in order of appearance, in the
    arrays' dtype; see :func:`~optkernels.sparse.merge_duplicates`), then each distinct row r with summed
    gradient g_r gets one update, as MindSpore's fused CPU kernel does (TensorFlow's SparseApply ops instead
    apply repeats one after another, an order-dependent result)::

        lr_t = lr · sqrt(1 − beta2_power) / (1 − beta1_power)
        every row:     m ← beta1·m;   v ← beta2·v
        indexed rows:  m[r] ← m[r] + (1 − beta1)·g_r;   v[r] ← v[r] + (1 − beta2)·g_r·g_r
        numerator:     M = m                                       (plain)
                       M[r] = beta1·m[r] + (1 − beta1)·g_r         (Nesterov, indexed rows)
                       M    = beta1·m                              (Nesterov, other rows)
        every row:     var ← var − lr_t·M / (sqrt(v) + epsilon)

    Rows without gradient still move: their decayed m is generally non-zero. With no indices at all the
    moments decay and every row moves. Reproduces MindSpore's published example bit for bit (float32).

    Deliberate differences from MindSpore's CPU kernel: for Nesterov on rows without gradient that kernel
    reads an uninitialised scratch buffer; this one uses ``beta1·m`` (KERNELS.md §3, what the device path
    of nn.Adam computes). The state is updated in place and returned; out-of-range indices raise unless
    ``out_of_range="drop"``. Beyond MindSpore's documentation (float32 arrays, int32 indices): float64,
    float16 and bfloat16 arrays and int64 indices (which MindSpore's CPU kernel also registers) are accepted.

    CPU: one parallel pass over the table (each task walks a block of rows, updating indexed rows with their
    summed gradient and the runs between them with the decay). CUDA: one thread per element, which finds its
    row among the sorted distinct rows by binary search; the index array is grouped on the host.
"""
    + _ADAM_ARGS
)


@half_rows("var", "m", "v")
def _checked_lazy_adam(
    var: Any,
    m: Any,
    v: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    grad: Any,
    indices: Any = None,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    """:func:`fused_sparse_lazy_adam` with every check (float16/bfloat16 arrays on their indexed rows)."""
    attr_bool("use_locking", use_locking)
    nesterov = attr_bool("use_nesterov", use_nesterov)
    call = check_sparse_call({"var": var, "m": m, "v": v}, grad, indices, out_of_range)
    scalars = _adam_scalars(call, beta1_power, beta2_power, lr, beta1, beta2, epsilon) + (nesterov,)
    _lazy_adam.launch(call, *scalars)
    return var, m, v


def fused_sparse_lazy_adam(
    var: Any,
    m: Any,
    v: Any,
    beta1_power: Scalar,
    beta2_power: Scalar,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    epsilon: Scalar,
    grad: Any,
    indices: Any = None,
    *,
    use_locking: bool = False,
    use_nesterov: bool = False,
    out_of_range: str = "raise",
) -> tuple[Any, Any, Any]:
    call = scalars = None
    if type(use_locking) is bool and type(use_nesterov) is bool and type(out_of_range) is str:
        drop = out_of_range == "drop"
        if drop or out_of_range == "raise":
            call = plain_numpy_call({"var": var, "m": m, "v": v}, grad, indices, drop)
        if call is not None:
            scalars = plain_adam_scalars(call.dtype, beta1_power, beta2_power, lr, beta1, beta2, epsilon)
    if call is None or scalars is None:  # anything but the common call: every check, in order
        return _checked_lazy_adam(
            var,
            m,
            v,
            beta1_power,
            beta2_power,
            lr,
            beta1,
            beta2,
            epsilon,
            grad,
            indices,
            use_locking=use_locking,
            use_nesterov=use_nesterov,
            out_of_range=out_of_range,
        )
    _lazy_adam.launch(call, *scalars, use_nesterov)
    return var, m, v


# the kernel it runs (no check, no half-precision path), as the decorated functions name theirs
functools.update_wrapper(fused_sparse_lazy_adam, _checked_lazy_adam.__wrapped__, assigned=(), updated=())
fused_sparse_lazy_adam.__doc__ = (
    r"""Lazy sparse Adam in place (MindSpore ``ops.FusedSparseLazyAdam``): only
    the rows in ``indices`` change.

    Duplicate indices are merged first: their gradient rows are summed (in order of appearance, in the
    arrays' dtype; see :func:`~optkernels.sparse.merge_duplicates`), then each distinct row r with summed
    gradient g_r gets one update, as MindSpore's fused CPU kernel does (TensorFlow's SparseApply ops instead
    apply repeats one after another, an order-dependent result)::

        lr_t   = lr · sqrt(1 − beta2_power) / (1 − beta1_power)       (global beta powers, not per row)
        m[r]   ← beta1·m[r] + (1 − beta1)·g_r
        v[r]   ← beta2·v[r] + (1 − beta2)·g_r·g_r
        M      = m[r]   (plain)   or   beta1·m[r] + (1 − beta1)·g_r   (Nesterov, new m)
        var[r] ← var[r] − lr_t·M / (sqrt(v[r]) + epsilon)
        other rows: var, m, v unchanged (bit for bit); no indices: nothing changes.

    Reproduces MindSpore's published example bit for bit (float32). CPU: a parallel loop over the distinct
    rows; CUDA: one thread per element of the distinct rows (the index array is grouped on the host).
"""
    + _ADAM_ARGS
)
