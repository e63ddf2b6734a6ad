"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an interpolated
momentum, as google/automl's ``lion_pytorch.py`` and lucidrains' ``lion-pytorch`` compute it (MODERN §8)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._checks import check_arrays, check_range, to_scalar
from ._elementwise import elementwise
from .adam import Scalar

__all__ = ["lion", "lion_scalars"]

_FLOAT64 = np.dtype(np.float64)


@elementwise
def _lion(i, var, exp_avg, grad, lr, beta1, one_minus_beta1, beta2, one_minus_beta2, decay_factor):
    g = grad[i]
    m = exp_avg[i]
    c = m * beta1 + g * one_minus_beta1
    w = var[i] * decay_factor
    if c > 0:  # sign(c)·lr is exact; sign(0) = sign(NaN) = 0 leaves w (torch's CPU sign)
        w = w - lr
    elif c < 0:
        w = w + lr
    var[i] = w
    exp_avg[i] = m * beta2 + g * one_minus_beta2


# the loop's arithmetic leaves memory idle between its loads: prefetched, it runs at memory speed
_lion.prefetch = True


def lion_scalars(dtype: np.dtype, lr: Scalar, beta1: Scalar, beta2: Scalar, weight_decay: Scalar) -> tuple:
    """The element function's scalars ``lr, β1, 1 − β1, β2, 1 − β2, 1 − lr·wd`` in ``dtype``, after range
    checks. Each is computed in float64 from the values as given and rounded once, as torch converts the
    Python floats of ``exp_avg.mul_(β).add_(g, alpha=1 - β)`` and ``p.mul_(1 - lr*wd)``."""
    lr_, b1, b2, wd = (
        float(to_scalar(name, value, _FLOAT64))
        for name, value in (("lr", lr), ("beta1", beta1), ("beta2", beta2), ("weight_decay", weight_decay))
    )
    check_range("lr", lr_, 0.0)
    check_range("beta1", b1, 0.0, 1.0)
    check_range("beta2", b2, 0.0, 1.0)
    check_range("weight_decay", wd, 0.0)
    t = np.dtype(dtype).type
    return t(lr_), t(b1), t(1.0 - b1), t(b2), t(1.0 - b2), t(1.0 - lr_ * wd)


def lion(
    var: Any, exp_avg: Any, grad: Any, lr: Scalar, beta1: Scalar, beta2: Scalar, weight_decay: Scalar = 0.0
) -> tuple[Any, Any]:
    r"""One Lion step in place::

        var     ← var·(1 − lr·wd)                                   (decoupled decay of the old var)
        c       = β1·exp_avg + (1 − β1)·g
        var     ← var − lr·sign(c)                                  (sign(0) = 0: no move)
        exp_avg ← β2·exp_avg + (1 − β2)·g

    The interpolation uses β1, the momentum update β2. Arithmetic in the arrays' dtype (float16/bfloat16
    storage: float32, each array rounded once); ``1 − β`` and ``1 − lr·wd`` are computed in float64 and
    rounded once.
    lucidrains' ``decoupled_weight_decay=True`` is this with ``weight_decay = wd/initial_lr``.

    Args:
        var: parameter, updated in place (float16/bfloat16/float32/float64, C-contiguous, NumPy or CUDA).
        exp_avg: momentum, same shape and dtype, updated in place.
        grad: the gradient (read only).
        lr: learning rate, >= 0.
        beta1: interpolation factor of the update, in [0, 1].
        beta2: momentum decay, in [0, 1].
        weight_decay: decoupled decay coefficient, >= 0 (multiplied by ``lr``).

    Returns:
        ``(var, exp_avg)``, the updated arrays themselves.

    Raises:
        TypeError, ValueError: as :func:`optkernels.kernels.apply_adam`.
    """
    batch = check_arrays({"var": var, "exp_avg": exp_avg}, {"grad": grad})
    scalars = lion_scalars(batch.dtype, lr, beta1, beta2, weight_decay)
    _lion.launch(batch.device, batch.size, *batch.flat, *scalars)
    return var, exp_avg
