"""Timing harness of the benchmark suite: interleaved runs, medians, a printed table, results files.

Every benchmark times several implementations of the same work *interleaved* (A, B, C, then C, A, B, then
B, C, A, ...: a new random order each round, see :func:`round_orders`), so a noisy, shared machine slows
them alike, and reports medians. Memory-bound work also reports its effective
bandwidth (bytes read + written per element, over the median time) and its fraction of the "limit": an
Adam-shaped memory kernel measured in the same run.
"""
from __future__ import annotations

import os
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Row:
    """One measured implementation at one size."""

    group: str
    case: str
    impl: str
    n: int
    seconds: float
    bytes_moved: float = 0.0
    note: str = ""
    #: against an anchor timed in the same rounds: the median over rounds of anchor time / this time
    paired: float = 0.0

    @property
    def gbs(self) -> float:
        return self.bytes_moved / self.seconds / 1e9 if self.bytes_moved and self.seconds else 0.0


@dataclass
class Suite:
    """Collects rows, prints them as they come, and writes the results file."""

    quick: bool = False
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def time_interleaved(self, impls: dict[str, Callable[[], object]], *, repeats: int, inner: int = 1,
                         warmup: int = 1) -> dict[str, float]:
        """Median seconds per call of each implementation, their calls interleaved.

        The order changes every round (:func:`round_orders`)."""
        samples = self.samples_interleaved(impls, repeats=repeats, inner=inner, warmup=warmup)
        return {name: statistics.median(values) for name, values in samples.items()}

    def samples_interleaved(self, impls: dict[str, Callable[[], object]], *, repeats: int, inner: int = 1,
                            warmup: int = 1) -> dict[str, list[float]]:
        """Seconds per call of each implementation in each round (as :meth:`time_interleaved`)."""
        for fn in impls.values():
            for _ in range(warmup):
                fn()
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for order in round_orders(list(impls), repeats):
            for name in order:
                fn = impls[name]
                start = time.perf_counter()
                for _ in range(inner):
                    fn()
                samples[name].append((time.perf_counter() - start) / inner)
        return samples

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        bandwidth = f"{row.gbs:7.1f} GB/s" if row.gbs else " " * 12
        print(f"  {row.group:<8} {row.case:<28} {row.impl:<30} n={row.n:<10.0e} "
              f"{row.seconds * 1e3:10.4f} ms {bandwidth} {row.note}", flush=True)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)


def paired_ratio(anchor: list[float], samples: list[float]) -> float:
    """The median over rounds of ``anchor / this`` (times of the same rounds): this implementation's speed
    in units of the anchor's, each round compared with itself, so that a slow spell of a loaded machine
    that hits one round hits both sides of its ratio."""
    return statistics.median(a / s for a, s in zip(anchor, samples))


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of the calls in each round: a permutation per round, chosen so that each implementation
    follows each other one about equally often over the run (the last call of a round precedes the first
    of the next), and what the previous call leaves behind (caches full of its data, a thread pool still
    spinning or gone to sleep) hits all alike. Each round takes, of 64 random permutations, the one whose
    predecessor pairs have been used least so far (seeded: a run is repeatable). Plain random permutations
    leave that to chance (over 21 rounds of 6 implementations a pair may come 0 or 9 times), and a rotation
    of one fixed order keeps each implementation behind the same neighbour every round."""
    rng = random.Random(len(names) * 1000 + rounds)
    used: dict[tuple[str, str], int] = {}
    orders: list[list[str]] = []
    last: list[str] = []
    for _ in range(rounds):
        best: tuple[int, list[str]] | None = None
        for _ in range(64):
            order = rng.sample(names, len(names))
            cost = sum(used.get(pair, 0) for pair in _successions(last + order))
            if best is None or cost < best[0]:
                best = (cost, order)
        assert best is not None
        order = best[1]
        for pair in _successions(last + order):
            used[pair] = used.get(pair, 0) + 1
        orders.append(order)
        last = order[-1:]
    return orders


def _successions(calls: list[str]) -> list[tuple[str, str]]:
    """The (predecessor, call) pairs of a sequence of calls."""
    return list(zip(calls, calls[1:]))


def machine_name() -> str:
    """A file-name slug for this machine: CPU model and core count."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1] for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower().replace("(r)", "").replace("(tm)", "")).strip("-")
    return f"{slug}-{os.cpu_count()}cpu"


def environment() -> str:
    """Versions of everything measured."""
    parts = [f"Python {sys.version.split()[0]}", platform.platform()]
    for name in ("numpy", "numba", "torch", "tensorflow"):
        module = sys.modules.get(name)
        if module is not None:
            parts.append(f"{name} {getattr(module, '__version__', '?')}")
    try:
        import numba

        parts.append(f"{numba.get_num_threads()} Numba threads")
    except ImportError:
        pass
    return ", ".join(parts)


def optional(module: str):
    """Import an optional anchor (torch, tensorflow), or None if it is not installed."""
    try:
        return __import__(module)
    except ImportError:
        return None
