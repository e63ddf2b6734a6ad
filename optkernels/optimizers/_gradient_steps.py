"""The gradient steps every optimizer composes around its kernel, written once (OPTIMIZERS §1.4-1.6).

In MindSpore's order, for one parameter ``w`` and its gradient ``g`` (dense array or row-sparse)::

    decay:        g ← w·wd + g                     (wd already multiplied by loss_scale; sparse: the rows
                                                     w[indices]·wd are added to the values)
    centralize:   g ← g − mean(g, axes 1..rank−1)  (per first-axis slice; sparse: on the values)
    unscale:      g ← g·(1/loss_scale)             (the reciprocal rounded to the gradient's dtype)

Each function returns a new gradient and never modifies the caller's (``owned=True`` lets it reuse an
array the optimizer made itself). NumPy gradients use NumPy's operators (one rounding per operation);
CUDA gradients use the in-place ``axpy``/``scal`` kernels on a device copy, and centralization goes
through the host (a copy each way).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import _flatten
from ..kernels.axpy import _axpy_scal, axpy, scal


def _device_copy(x: Any) -> Any:
    cuda = _cuda.module()
    src = _cuda.as_device_array(x)
    out = cuda.device_array(src.shape, dtype=src.dtype)
    out.copy_to_device(src)
    return out


def decay_unscale_into(out: Any, grad: Any, weight: Any, wd: Any, reciprocal: Any, device: str) -> Any:
    """``out ← (weight·wd + grad)·reciprocal`` in one pass (either step skipped when ``wd``/``reciprocal`` is
    None): the same bits as :func:`decay` then :func:`unscale`, into a buffer the optimizer keeps."""
    add, scale = wd is not None, reciprocal is not None
    zero = out.dtype.type(0)
    flat = [_flatten(a, device) for a in (out, weight, grad)]
    _axpy_scal.launch(
        device,
        out.size,
        *flat,
        zero if wd is None else wd,
        zero if reciprocal is None else reciprocal,
        add,
        scale,
    )
    return out


def decay(grad: Any, weight: Any, wd: Any) -> Any:
    """``weight·wd + grad`` as a new array (``wd`` a scalar of the arrays' dtype)."""
    if isinstance(grad, np.ndarray):
        return weight * wd + grad
    return axpy(wd, weight, _device_copy(grad))


def unscale(grad: Any, reciprocal: Any, owned: bool) -> Any:
    """``grad·reciprocal`` (in place when ``owned``)."""
    if isinstance(grad, np.ndarray):
        if owned:
            grad *= reciprocal
            return grad
        return grad * reciprocal
    return scal(reciprocal, grad if owned else _device_copy(grad))


def _centralize_host(g: np.ndarray) -> np.ndarray:
    return g - g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)


def centralize(grad: Any) -> Any:
    """``grad − mean(grad over every axis but the first)`` (only called for rank >= 2)."""
    if isinstance(grad, np.ndarray):
        return _centralize_host(grad)
    return _cuda.to_device(_centralize_host(_cuda.to_host(grad)))


def centralizes(shape: tuple) -> bool:
    """MindSpore's real filter for gradient centralization: rank >= 2 and ``shape[1] % 16 == 0``."""
    return len(shape) >= 2 and shape[1] % 16 == 0


# ---------------------------------------------------------------------------------- row-sparse gradients


def _rebuild(grad: Any, values: Any) -> Any:
    return type(grad)(grad.indices, values, grad.dense_shape)


def decay_sparse(grad: Any, weight: Any, wd: Any) -> Any:
    """Row-sparse decay: ``values ← weight[indices]·wd + values`` (every occurrence of an index, before
    duplicates are merged, as MindSpore's Gather + Add)."""
    if not isinstance(weight, np.ndarray):
        raise TypeError("weight decay of a row-sparse gradient needs a NumPy parameter")
    rows = np.asarray(grad.indices)
    n = weight.shape[0]
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise IndexError(
            f"row-sparse gradient indices must be in [0, {n}) for weight decay, got "
            f"{rows.min() if rows.min() < 0 else rows.max()}"
        )
    return _rebuild(grad, weight[rows] * wd + grad.values)


def centralize_sparse(grad: Any) -> Any:
    """Centralization of a row-sparse gradient's values (each row minus its mean)."""
    values = grad.values
    if isinstance(values, np.ndarray):
        return _rebuild(grad, _centralize_host(values))
    return _rebuild(grad, _cuda.to_device(_centralize_host(_cuda.to_host(values))))


def unscale_sparse(grad: Any, reciprocal: Any, owned: bool) -> Any:
    """Loss-scale division of a row-sparse gradient's values."""
    values = grad.values
    if not isinstance(values, np.ndarray):
        return _rebuild(grad, unscale(values, reciprocal, owned))
    if owned:
        values *= reciprocal
        return grad
    return _rebuild(grad, values * reciprocal)
