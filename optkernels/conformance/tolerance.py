"""When a kernel's result "equals" the float64 reference: the rule of the tests and of ``verify``.

A float32 kernel computes in float32, so it differs from the float64 reference by rounding. Rounding errors
are relative to the terms that produced a value, not to the value itself when terms cancel (``var − step``,
FTRL's ``sign(linear)·l1 − linear``). The rule therefore measures errors against a *scale*:

* float32, float16 and bfloat16 (each in its own epsilon: 2^-23, 2^-10, 2^-7), normwise:
  ``scale = max(max|expected|, max|before|)`` over the array, where ``before`` holds
  the magnitudes the result is made of (the state's old value, or an op's term magnitudes); the error
  in ulps is ``|actual − expected| / (eps32 · scale)``, and the result passes at ``<= ulps`` (8 for most
  ops).
* float64, element-wise: ``scale_i = max(|expected_i|, |before_i|, 0.01·max|expected|)``; the error in
  ulps is ``|actual − expected| / (eps64 · scale_i)``, and the result passes at a relative 1e-12
  (about 4500 ulps).

Integer and boolean results (counters, flags) must be equal. A wrong formula (a missing bias correction, epsilon on the wrong side of a square root, a sign) makes
errors of 1e-3 and more, millions of ulps.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

FLOAT64_RELATIVE = 1e-12
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@dataclass(frozen=True)
class Comparison:
    """The outcome of one comparison.

    Attributes:
        ok: whether every element is within tolerance.
        worst_ulps: the largest error, in ulps of the scale (see the module docstring).
        allowed_ulps: the tolerance in the same unit.
        bad: number of elements out of tolerance.
        first_bad: (flat index, actual, expected) of the first one, or None.
    """

    ok: bool
    worst_ulps: float
    allowed_ulps: float
    bad: int
    first_bad: tuple | None

    def message(self, what: str) -> str:
        if self.ok:
            return f"{what}: ok, worst {self.worst_ulps:.3g} ulps"
        assert self.first_bad is not None  # set whenever ok is False
        k, actual, expected = self.first_bad
        return (
            f"{what}: {self.bad} elements differ by more than {self.allowed_ulps:g} ulps (worst "
            f"{self.worst_ulps:.3g}); first at flat index {k}: actual {actual!r}, expected {expected!r}"
        )


def compare(actual, expected, dtype, ulps: float, before=None) -> Comparison:
    """Compare a kernel's result with the reference's, by the rule of the module docstring."""
    dtype = np.dtype(dtype)
    half = dtype in _HALF
    if dtype.kind != "f" and not half:  # integers and booleans (counters, flags): exactly equal or not
        actual, expected = np.asarray(actual), np.asarray(expected)
        if actual.shape != expected.shape:
            raise ValueError(f"shapes differ: {actual.shape} vs {expected.shape}")
        bad = actual != expected
        first = (
            (
                int(np.flatnonzero(bad.ravel())[0]),
                actual.ravel()[bad.ravel()][0],
                expected.ravel()[bad.ravel()][0],
            )
            if bad.any()
            else None
        )
        return Comparison(not bad.any(), float("inf") if bad.any() else 0.0, 0.0, int(bad.sum()), first)
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {actual.shape} vs {expected.shape}")
    if expected.size == 0:
        return Comparison(True, 0.0, ulps, 0, None)
    eps = float(ml_dtypes.finfo(dtype).eps)
    before = np.zeros(()) if before is None else np.abs(np.asarray(before, dtype=np.float64))
    largest = max(float(np.max(np.abs(expected))), float(np.max(before, initial=0.0)))
    if dtype == np.float64:
        scale = np.maximum(np.maximum(np.abs(expected), before), 0.01 * largest)
        allowed = FLOAT64_RELATIVE / eps
    else:
        scale = np.full(expected.shape, largest)
        allowed = ulps
    with np.errstate(divide="ignore", invalid="ignore"):
        err_ulps = np.abs(actual - expected) / (eps * scale)
    err_ulps = np.where(actual == expected, 0.0, err_ulps)  # also 0/0 and inf == inf
    bad = ~(err_ulps <= allowed)
    worst = float(np.max(np.where(np.isnan(err_ulps), np.inf, err_ulps)))
    first = None
    if bad.any():
        k = int(np.flatnonzero(bad.ravel())[0])
        first = (k, actual.ravel()[k], expected.ravel()[k])
    return Comparison(not bad.any(), worst, allowed, int(bad.sum()), first)
