"""Argument checks of the optimizer constructors, with MindSpore's (``_checkparam``) exception kinds.

A "float" argument must be a ``float`` (TypeError otherwise: an ``int`` such as ``0`` is rejected, and a
``bool`` never counts as a number) and finite (ValueError); range checks raise ValueError. Each message
names the argument and the optimizer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def check_bool(name: str, value: Any, owner: str) -> bool:
    """``value`` must be a bool (TypeError)."""
    if not _is_bool(value):
        raise TypeError(f"For '{owner}', '{name}' must be a bool, got {type(value).__name__}")
    return bool(value)


def check_float(name: str, value: Any, owner: str, *, allow_int: bool = False) -> float:
    """``value`` must be a float (or an int when ``allow_int``, converted), finite.

    Raises:
        TypeError: not a float (not an int either when allowed), or a bool.
        ValueError: NaN or infinite.
    """
    if _is_bool(value):
        raise TypeError(f"For '{owner}', '{name}' must be a float, got bool")
    if allow_int and isinstance(value, (int, np.integer)):
        value = float(value)
    if not isinstance(value, (float, np.floating)):
        kind = "an int or a float" if allow_int else "a float"
        raise TypeError(f"For '{owner}', '{name}' must be {kind}, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"For '{owner}', '{name}' must be finite, got {value}")
    return value


def check_range(
    name: str,
    value: float,
    owner: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Raise ValueError unless ``value`` lies in the interval (open ends where asked)."""
    ok = True
    if low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        interval = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        raise ValueError(f"For '{owner}', '{name}' must be in {interval}, got {value}")
    return value


def check_betas_eps(beta1: Any, beta2: Any, eps: Any, owner: str, eps_name: str = "eps") -> tuple:
    """Adam-family hyper-parameters: float betas in the open interval (0, 1), a float eps > 0."""
    open_ = dict(low_open=True, high_open=True)
    b1 = check_range("beta1", check_float("beta1", beta1, owner), owner, 0.0, 1.0, **open_)
    b2 = check_range("beta2", check_float("beta2", beta2, owner), owner, 0.0, 1.0, **open_)
    e = check_range(eps_name, check_float(eps_name, eps, owner), owner, 0.0, low_open=True)
    return b1, b2, e


# torch.optim's keyword names that MindSpore's (and so this package's NumPy classes) spell otherwise.
_TORCH_NAMES = {
    "lr": "the argument here is 'learning_rate'",
    "betas": "the arguments here are 'beta1' and 'beta2'",
    "amsgrad": "the argument here is 'use_amsgrad'",
    "nesterov": "the argument here is 'use_nesterov'",
    "foreach": None,
    "fused": None,
    "capturable": None,
    "differentiable": None,
    "maximize": None,
}


def check_torch_keywords(cls: type[object], keywords: dict) -> None:
    """A TypeError naming this package's argument for a torch.optim-style keyword (``lr``, ``betas``...)
    that ``cls``'s constructor does not take, and pointing to the torch.optim drop-ins in optkernels.torch;
    nothing for other keywords (the constructor itself rejects those)."""
    import inspect

    names = [k for k in keywords if k in _TORCH_NAMES]
    if not names:
        return
    accepted = inspect.signature(cls.__init__).parameters
    for name in names:
        if name in accepted:
            continue
        ours = _TORCH_NAMES[name]
        here = f"{ours} (MindSpore's names)" if ours else "it has no counterpart here"
        raise TypeError(
            f"For '{cls.__name__}', unexpected keyword argument '{name}': {here}. "
            f"The classes with torch.optim's arguments live in optkernels.torch "
            f"(for example optkernels.torch.Adam(model.parameters(), lr=1e-3))"
        )
