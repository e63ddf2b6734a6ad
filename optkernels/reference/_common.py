"""Shared helpers of the float64 reference: input conversion, shape checks, IEEE error handling."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ieee", "as_array", "as_scalar", "check_same_shape", "as_indices", "check_sparse"]


def ieee(func: F) -> F:
    """Run ``func`` with NumPy floating-point warnings silenced.

    The reference follows IEEE 754 like the kernels it checks: a division by zero gives ``inf``/``nan``
    and an invalid operation gives ``nan``, silently, rather than a warning or an exception.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def as_array(x: ArrayLike, name: str) -> np.ndarray:
    """A new float64 array holding ``x`` (always a copy, so the caller's array is never aliased)."""
    try:
        return np.array(x, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be convertible to a float64 array: {exc}") from exc


def as_scalar(x: ArrayLike, name: str) -> np.float64:
    """The single element of a Python number, NumPy scalar, 0-d or shape-(1,) array, as ``np.float64``.

    A NumPy scalar (not a Python float) is returned on purpose: scalar division by zero then follows
    IEEE rules (``inf``/``nan``) instead of raising ``ZeroDivisionError``.
    """
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a real scalar: {exc}") from exc
    if a.size != 1:
        raise ValueError(
            f"{name} must hold exactly one element (a scalar, 0-d or shape-(1,) array), got shape {a.shape}"
        )
    return np.float64(a.reshape(-1)[0])


def as_scalars(**named: ArrayLike) -> tuple[np.float64, ...]:
    """:func:`as_scalar` of each keyword argument, in order, each error naming its argument."""
    return tuple(as_scalar(x, name) for name, x in named.items())


def check_same_shape(ref_name: str, ref: np.ndarray, **others: np.ndarray) -> None:
    """Raise ``ValueError`` naming the first array in ``others`` whose shape differs from ``ref``'s."""
    for name, arr in others.items():
        if arr.shape != ref.shape:
            raise ValueError(f"{name} must have the shape of {ref_name} {ref.shape}, got {arr.shape}")


def as_indices(indices: ArrayLike, name: str = "indices") -> np.ndarray:
    """A new 1-D int64 array of row indices (an empty input of any dtype is accepted)."""
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {idx.shape}")
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {idx.dtype}")
    return idx.astype(np.int64, copy=True)


def check_sparse(
    var: np.ndarray, grad: np.ndarray, indices: np.ndarray, var_name: str = "var", grad_name: str = "grad"
) -> None:
    """Validate a row-sparse gradient against ``var``: ``grad.shape == (len(indices),) + var.shape[1:]``."""
    if var.ndim < 1:
        raise ValueError(f"{var_name} must be at least 1-D for a row-sparse update, got a 0-d array")
    expected = (indices.shape[0],) + var.shape[1:]
    if grad.shape != expected:
        raise ValueError(
            f"{grad_name} must have shape (len(indices),) + {var_name}.shape[1:] = {expected}, "
            f"got {grad.shape}"
        )
