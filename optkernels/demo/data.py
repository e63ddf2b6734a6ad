"""The demo's data, generated from a seed (nothing is downloaded): two interleaved spirals for the MLP
classifier, and click logs with categorical features and a known click probability for the click-through
model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ClickLogs", "click_logs", "hash_features", "spirals", "batch_order", "FIELD_SIZES"]

# Distinct values per categorical field of the click logs (a user id, an ad id, a site, ..., an hour).
FIELD_SIZES = (20000, 8000, 2000, 500, 100, 50, 24, 7)
# The value v of a field is drawn with probability proportional to 1/(v + 1)**ZIPF_EXPONENT.
ZIPF_EXPONENT = 1.1
# Spread (standard deviation) of each field's true per-value effect on the click log-odds.
EFFECT_SCALE = (0.6, 0.8, 0.5, 0.5, 0.4, 0.3, 0.3, 0.2)
# The true log-odds of a click when every effect is zero (a click rate near 20%).
BASE_LOG_ODDS = -1.5


def spirals(
    n: int,
    rng: np.random.Generator,
    *,
    turns: float = 1.5,
    noise: float = 0.03,
    dtype: npt.DTypeLike = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    r"""``n`` points of two interleaved spirals in the plane, half of each class (in random order).

    A point of class ``c`` (0 or 1) at position ``t ~ U(0.05, 1)`` along its arm is::

        angle = 2π·turns·t + π·c;   (x, y) = t·(cos angle, sin angle) + noise·N(0, I)

    so the two arms wind around each other ``turns`` times within the unit disc: a classic problem that no
    linear model solves (chance is 50%) and a small MLP does.

    Args:
        n: the number of points (>= 2).
        rng: the random generator (the points depend only on its state).
        turns: how many times each arm winds around the origin.
        noise: standard deviation of the Gaussian noise added to each coordinate.
        dtype: the dtype of the points.

    Returns:
        ``(points, labels)``: ``points`` of shape ``(n, 2)`` and ``dtype``, ``labels`` int64 of shape
        ``(n,)``.
    """
    labels = np.arange(n, dtype=np.int64) % 2
    t = rng.uniform(0.05, 1.0, n)
    angle = 2.0 * np.pi * turns * t + np.pi * labels
    points = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) + noise * rng.standard_normal((n, 2))
    order = rng.permutation(n)
    return points[order].astype(dtype), labels[order]


def batch_order(n: int, batch_size: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """The example indices of ``steps`` mini-batches of ``batch_size`` drawn from ``n`` examples: epochs of
    random permutations, read in order (every example once per epoch). Shape ``(steps, batch_size)``, int64.
    Every optimizer gets the same order, so their runs differ by the optimizer alone."""
    needed = steps * batch_size
    epochs = -(-needed // n)
    order = np.concatenate([rng.permutation(n) for _ in range(epochs)])
    return order[:needed].reshape(steps, batch_size)


@dataclass(frozen=True)
class ClickLogs:
    """Generated click logs.

    Attributes:
        values: int64 array ``(n, fields)``: the value of each categorical field, ``0 <= values[:, f] <
            FIELD_SIZES[f]``.
        clicks: float32 array ``(n,)`` of 0.0 (no click) or 1.0 (click), drawn from ``probability``.
        probability: float64 array ``(n,)``: the true click probability of each row.
    """

    values: np.ndarray
    clicks: np.ndarray
    probability: np.ndarray

    def __len__(self) -> int:
        return int(self.clicks.shape[0])


def click_logs(
    n: int, rng: np.random.Generator, effects: list[np.ndarray] | None = None
) -> tuple[ClickLogs, list[np.ndarray]]:
    r"""``n`` rows of click logs with a known click probability.

    Field ``f`` takes the value ``v`` in ``[0, FIELD_SIZES[f])`` with probability proportional to
    ``1/(v + 1)^1.1`` (a few values are frequent, most are rare, as with real users and ads). Each value has
    a true effect ``θ_f[v] ~ N(0, EFFECT_SCALE[f]²)``, and the click probability of a row is::

        p = sigmoid(BASE_LOG_ODDS + Σ_f θ_f[value_f])

    Args:
        n: the number of rows.
        rng: the random generator.
        effects: the true effects ``θ`` of an earlier call (one float64 array per field), so that a test set
            follows the training set's rule; None draws new ones first.

    Returns:
        ``(logs, effects)``.
    """
    if effects is None:
        effects = [scale * rng.standard_normal(size) for size, scale in zip(FIELD_SIZES, EFFECT_SCALE)]
    columns = []
    log_odds = np.full(n, BASE_LOG_ODDS)
    for size, theta in zip(FIELD_SIZES, effects):
        weights = 1.0 / np.arange(1, size + 1) ** ZIPF_EXPONENT
        column = rng.choice(size, size=n, p=weights / weights.sum())
        columns.append(column)
        log_odds += theta[column]
    probability = 1.0 / (1.0 + np.exp(-log_odds))
    clicks = (rng.random(n) < probability).astype(np.float32)
    return ClickLogs(np.stack(columns, axis=1).astype(np.int64), clicks, probability), effects


_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # 2^64 divided by the golden ratio, odd (Fibonacci hashing)


def hash_features(values: np.ndarray, rows: int) -> np.ndarray:
    r"""The embedding-table row of each (field, value) pair: the hashing trick.

    ``key = (field << 32) | value`` is multiplied by an odd 64-bit constant (mod 2^64) and the top
    ``log2(rows)`` bits are kept (Fibonacci hashing), so different fields' values land in one shared table
    of ``rows`` rows; a few pairs collide, as in any hashed table.

    Args:
        values: int64 array ``(n, fields)`` of non-negative values below 2^32.
        rows: the number of table rows, a power of two between 2 and 2^32.

    Returns:
        int64 array ``(n, fields)`` of rows in ``[0, rows)``.
    """
    bits = int(rows).bit_length() - 1
    if rows < 2 or rows != 1 << bits or bits > 32:
        raise ValueError(f"rows must be a power of two between 2 and 2**32, got {rows}")
    fields = np.arange(values.shape[1], dtype=np.uint64)
    keys = (fields << np.uint64(32)) | values.astype(np.uint64)
    return ((keys * _HASH_MULTIPLIER) >> np.uint64(64 - bits)).astype(np.int64)
