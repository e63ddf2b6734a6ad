"""Proximal Adagrad: ``mindspore.ops.ApplyProximalAdagrad`` (KERNELS.md section 13); row math shared with
the sparse ops."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._common import as_array, as_scalar, check_same_shape, ieee

__all__ = ["apply_proximal_adagrad"]


def _proximal_adagrad_math(
    var: np.ndarray, accum: np.ndarray, lr: np.float64, l1: np.float64, l2: np.float64, g: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise proximal Adagrad on float64 arrays (shared with the sparse ops). Returns new arrays."""
    accum_new = accum + g * g
    alpha = lr / np.sqrt(accum_new)
    prox = var - g * alpha
    if l1 > 0:
        var_new = np.sign(prox) * np.maximum(np.abs(prox) - alpha * l1, 0.0) / (1.0 + alpha * l2)
    else:
        var_new = prox / (1.0 + alpha * l2)
    return var_new, accum_new


@ieee
def apply_proximal_adagrad(
    var: ArrayLike,
    accum: ArrayLike,
    lr: ArrayLike,
    l1: ArrayLike,
    l2: ArrayLike,
    grad: ArrayLike,
    *,
    use_locking: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Proximal Adagrad step of ``mindspore.ops.ApplyProximalAdagrad`` (TF ``ApplyProximalAdagrad``).

    Update rule (element-wise, g = grad)::

        accum = accum + g * g
        alpha = lr / sqrt(accum)                          # adaptive learning rate, new accum
        prox  = var - g * alpha
        if l1 > 0: var = sign(prox) * max(|prox| - alpha * l1, 0) / (1 + alpha * l2)
        else:      var = prox / (1 + alpha * l2)

    ``sign(0) = 0``. Deliberate difference from MindSpore's docstring: the docs write the shrinkage with
    the raw ``lr`` (``lr*l1``, ``1 + lr*l2``); every kernel (MindSpore CPU scalar and SIMD, GPU, and
    TensorFlow) uses the adaptive ``alpha``, and so does this reference. ``accum == 0`` after the update
    gives ``inf``/``nan`` (no guard, as in the kernels). ``np.sign`` and ``np.maximum`` propagate NaN, so
    NaN in var, accum or grad, an infinite grad or ``lr = inf`` give NaN, never 0 (the kernels agree).

    Args:
        var: parameter tensor.
        accum: accumulator of squared gradients, same shape as ``var``.
        lr: learning rate (scalar).
        l1: L1 strength (scalar).
        l2: L2 strength (scalar).
        grad: gradient, same shape as ``var``.
        use_locking: MindSpore attribute; no effect here.

    Returns:
        ``(var, accum)``: new float64 arrays.
    """
    var_ = as_array(var, "var")
    accum_ = as_array(accum, "accum")
    g = as_array(grad, "grad")
    check_same_shape("var", var_, accum=accum_, grad=g)
    return _proximal_adagrad_math(
        var_, accum_, as_scalar(lr, "lr"), as_scalar(l1, "l1"), as_scalar(l2, "l2"), g
    )
