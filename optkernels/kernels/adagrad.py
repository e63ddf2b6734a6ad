"""Adagrad: MindSpore's ``ops.ApplyAdagrad`` and ``ops.ApplyAdagradV2``."""

from __future__ import annotations

import math
from typing import Any

from ._checks import attr_bool, attr_float, check_arrays, check_range
from ._elementwise import elementwise, scalar_math
from .adam import Scalar


@scalar_math
def adagrad_math(w, accum, g, lr, epsilon, update_slots):
    """One Adagrad(V2) step of one element: returns ``(w, accum)`` new (see :func:`apply_adagrad_v2`;
    ``epsilon = 0`` gives :func:`apply_adagrad`). Shared by the dense and the row-sparse ops."""
    a = accum + g * g if update_slots else accum
    return w - lr * g / (math.sqrt(a) + epsilon), a


@elementwise
def _adagrad(i, var, accum, grad, lr, epsilon, update_slots):
    var[i], accum[i] = adagrad_math(var[i], accum[i], grad[i], lr, epsilon, update_slots)


def _run(var, accum, lr, grad, epsilon, update_slots):
    batch = check_arrays({"var": var, "accum": accum}, {"grad": grad})
    lr_ = batch.scalar("lr", lr)
    check_range("lr", lr_, 0.0)
    _adagrad.launch(batch.device, batch.size, *batch.flat, lr_, batch.dtype.type(epsilon), update_slots)
    return var, accum


def apply_adagrad(
    var: Any, accum: Any, lr: Scalar, grad: Any, *, update_slots: bool = True
) -> tuple[Any, Any]:
    r"""Adagrad update in place (MindSpore ``ops.ApplyAdagrad``, TensorFlow ``ApplyAdagrad``)::

        accum ← accum + g·g          (only if update_slots)
        var   ← var − lr·g / sqrt(accum)

    Follows the documentation and TensorFlow. MindSpore's CPU kernel differs in two ways that are not
    reproduced: it adds a hidden 1e-6 inside the square root, and it updates ``accum`` even when
    ``update_slots=False``. With no epsilon, ``accum == 0`` gives ``g/0`` (inf, or NaN for g = 0).

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accum: accumulated squared gradients, same shape and dtype, updated in place if update_slots.
        lr: learning rate, >= 0.
        grad: the gradient (read only).
        update_slots: whether ``accum`` is updated (it is used either way).

    Returns:
        ``(var, accum)``.

    Raises:
        TypeError: wrong types, dtypes or devices; ``update_slots`` not a bool.
        ValueError: shapes, layout or lr out of range.
    """
    slots = attr_bool("update_slots", update_slots)
    return _run(var, accum, lr, grad, 0.0, slots)


def apply_adagrad_v2(
    var: Any, accum: Any, lr: Scalar, grad: Any, *, epsilon: float, update_slots: bool = True
) -> tuple[Any, Any]:
    r"""Adagrad with epsilon in place (MindSpore ``ops.ApplyAdagradV2``, TensorFlow ``ApplyAdagradV2``)::

        accum ← accum + g·g          (only if update_slots)
        var   ← var − lr·g / (sqrt(accum) + epsilon)

    Follows the documentation and TensorFlow; MindSpore's CPU kernel additionally adds 1e-6 to a
    denominator that is exactly zero, which is not reproduced.

    Args:
        var: parameter, updated in place (float32/float64, C-contiguous, NumPy or CUDA).
        accum: accumulated squared gradients, same shape and dtype, updated in place if update_slots.
        lr: learning rate, >= 0.
        grad: the gradient (read only).
        epsilon: float attribute (required), >= 0, added outside the square root.
        update_slots: whether ``accum`` is updated.

    Returns:
        ``(var, accum)``.

    Raises:
        TypeError: wrong types, dtypes or devices; ``epsilon`` not a float; ``update_slots`` not a bool.
        ValueError: shapes, layout, lr or epsilon out of range.
    """
    eps = attr_float("epsilon", epsilon)
    check_range("epsilon", eps, 0.0)
    slots = attr_bool("update_slots", update_slots)
    return _run(var, accum, lr, grad, eps, slots)
