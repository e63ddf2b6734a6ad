"""What the collective steps do with non-finite gradients (an inf or a NaN on any rank), decided alike on
every rank after the agreement record showed which ranks found them (:mod:`._agree`).

Modes: ``"skip"`` (every rank skips the step: nothing changes anywhere, a RuntimeWarning names the ranks;
MindSpore's overflow rule under loss scaling), ``"raise"`` (FloatingPointError on every rank), ``"warn"``
(the step is applied, as one process would, with a RuntimeWarning), ``"off"`` (not checked: no pass over
the gradients).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["MODES", "check_mode", "default_mode", "handle"]

MODES = ("skip", "raise", "warn", "off")


def check_mode(owner: str, mode: Any) -> str:
    """``mode`` if it is one of :data:`MODES`, else TypeError/ValueError naming ``owner``."""
    if not isinstance(mode, str):
        raise TypeError(f"For '{owner}', 'nonfinite' must be a str, got {type(mode).__name__}")
    if mode not in MODES:
        raise ValueError(f"For '{owner}', 'nonfinite' must be one of {list(MODES)}, got {mode!r}")
    return mode


def default_mode(loss_scaled: bool) -> str:
    """``"skip"`` where MindSpore's loss-scale semantics apply (the optimizer divides by a loss scale), else
    ``"warn"``."""
    return "skip" if loss_scaled else "warn"


def handle(mode: str, message: str) -> bool:
    """Act on non-finite gradients found by some rank (the same ``message`` on every rank): True if the
    step goes on, False if it is skipped.

    Raises:
        FloatingPointError: ``mode == "raise"``.
    """
    if mode == "raise":
        raise FloatingPointError(message)
    what = "applied anyway" if mode == "warn" else "skipped on every rank (nothing changed)"
    warnings.warn(f"{message}; the step was {what}", RuntimeWarning, stacklevel=4)
    return mode == "warn"
