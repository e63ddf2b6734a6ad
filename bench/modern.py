"""The modern rules' kernels (float32) against the memory limit of their own bytes.

Each kernel is timed interleaved with a memory kernel that reads and writes the same arrays (one add per
write, no other arithmetic): Lion and Schedule-Free SGD read 3 arrays and write 2 (20 B per element), ADOPT
and Schedule-Free AdamW read 4 and write 3 (28 B), AdEMAMix reads 5 and writes 4 (36 B).
"""
from __future__ import annotations

from typing import Callable, Iterator

import numba
import numpy as np

from dense import adam_shaped_memory
from harness import Row, Suite

import optkernels.kernels as K

F = np.float32
SIZES = (int(1e8),)
QUICK_SIZES = (int(1e5),)


@numba.njit(parallel=True, cache=True)
def two_state_memory(var, m, g):
    """Read var, m, g; write var, m (20 B per float32 element)."""
    for i in numba.prange(var.size):
        d = g[i]
        var[i] = var[i] + d
        m[i] = m[i] + d


@numba.njit(parallel=True, cache=True)
def four_state_memory(var, m1, m2, nu, g):
    """Read var, m1, m2, nu, g; write the first four (36 B per float32 element)."""
    for i in numba.prange(var.size):
        d = g[i]
        var[i] = var[i] + d
        m1[i] = m1[i] + d
        m2[i] = m2[i] + d
        nu[i] = nu[i] + d


def _arrays(n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.abs(rng.standard_normal(n, dtype=np.float32)) * F(0.1) + F(0.01) for _ in range(count)]


def cases(n: int) -> Iterator[tuple[str, int, Callable, Callable]]:
    """(kernel name, bytes per element, the kernel's step, the memory kernel's step) for size n, one at a
    time (each kernel's arrays are allocated when its turn comes; the memory kernels share five)."""
    limit = _arrays(n, 5, 0)
    memory = {20: lambda: two_state_memory(*limit[:3]), 28: lambda: adam_shaped_memory(*limit[:4]),
              36: lambda: four_state_memory(*limit)}
    steps = [
        ("lion", 3, lambda a: K.lion(*a, 1e-4, 0.9, 0.99, 0.1)),
        ("adopt", 4, lambda a: K.adopt(*a, 1e-3, 0.9, 0.9999, 1e-6, 0.0, 5, 5 ** 0.25)),
        ("ademamix", 5, lambda a: K.ademamix(*a, 1e-3, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01, 5)),
        ("schedule_free_adamw", 4, lambda a: K.schedule_free_adamw(*a, 2.5e-3, 0.9, 0.999, 1e-8, 0.0, 0.2, 5)),
        ("schedule_free_sgd", 3, lambda a: K.schedule_free_sgd(*a, 0.1, 0.9, 0.0, 0.2)),
    ]
    for seed, (name, count, step) in enumerate(steps, start=1):
        arrays = _arrays(n, count, seed)
        nbytes = 4 * (2 * count - 1)           # every array read, all but the gradient written
        yield name, nbytes, lambda step=step, arrays=arrays: step(arrays), memory[nbytes]


def run(suite: Suite) -> None:
    for n in (QUICK_SIZES if suite.quick else SIZES):
        repeats = 3 if suite.quick else 11
        inner = max(1, int(3e6 // n))
        for name, nbytes, step, limit in cases(n):
            times = suite.time_interleaved({"optkernels": step, "limit": limit}, repeats=repeats, inner=inner)
            case = f"{name} memory kernel"
            suite.add(Row("modern", case, "limit", n, times["limit"], nbytes * n, ""))
            suite.add(Row("modern", name, "optkernels", n, times["optkernels"], nbytes * n,
                          f"{100 * times['limit'] / times['optkernels']:5.1f}% of limit"))


def targets(rows: list[Row], verdict) -> list[str]:
    """Each kernel at N=1e8 at >= 90% of its memory kernel's speed."""
    out = []
    for r in rows:
        if r.group != "modern" or r.impl != "optkernels" or r.n != int(1e8):
            continue
        limit = next(x for x in rows if x.case == f"{r.case} memory kernel" and x.n == r.n)
        frac = limit.seconds / r.seconds
        out.append(f"{r.case} N=1e8 at >= 90% of its memory limit: {100 * frac:.1f}% ({verdict(frac >= 0.9)})")
    return out or ["modern rules' kernels N=1e8: not measured (group 'modern')"]
