"""Concurrency scenarios of tests/test_threading.py, run as a script in a fresh process (Numba's threading
layer is chosen at the first parallel launch, so each layer needs its own process):

    python tests/threading_scenarios.py [--prefer-openmp] threads fork pool:fork pool:forkserver pool:spawn

``--prefer-openmp`` asks for OpenMP first, as ``import optkernels.torch`` does
(``_threading.prefer_openmp``). It prints the layer in use (or ``layer unavailable``), then one line per scenario: ``<scenario> ok``,
``<scenario> refused: <RuntimeError>``, or ``<scenario> MISMATCH``. The repository root must be on
PYTHONPATH (worker processes of the pools import this file and optkernels again).
"""
from __future__ import annotations

import multiprocessing
import sys
import threading

import ml_dtypes
import numpy as np

from optkernels.kernels import _threading, apply_adam, lamb
from optkernels.optimizers import Adam, Parameter
from optkernels.sparse import fused_sparse_adam

SEEDS = range(4)


def step(seed: int) -> bytes:
    """Several kinds of parallel launch (element-wise in float32 and bfloat16, sums of squares, sparse rows
    with their merge, one multi-tensor optimizer step) on inputs drawn from ``seed``; the results' bytes."""
    rng = np.random.default_rng(seed)
    var, m, v, g = (rng.standard_normal(20_000).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    apply_adam(var, m, v, 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, g)
    half = [a.astype(ml_dtypes.bfloat16) for a in (var, m, v, g)]
    apply_adam(*half[:3], 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, half[3])
    lamb(var, m, v, 0.01, 0.9, 0.999, 1e-6, 0.01, 3, g)
    table = rng.standard_normal((300, 16))
    tm, tv = np.zeros_like(table), np.zeros_like(table)
    rows = rng.integers(0, 300, 64)
    fused_sparse_adam(table, tm, tv, 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, rng.standard_normal((64, 16)), rows)
    params = [Parameter(rng.standard_normal(s).astype(np.float32), f"p{k}")
              for k, s in enumerate([(64, 32), (32,), (10, 3)])]
    Adam(params, learning_rate=0.01)(tuple(np.ones(p.shape, np.float32) for p in params))
    return b"".join(a.tobytes() for a in (var, m, v, *half, table, tm, tv, *(p.data for p in params)))


def threads(expected: dict) -> str:
    """4 Python threads, each running every seed 3 times, at once."""
    results: dict = {}

    def work(k: int) -> None:
        for _ in range(3):
            for seed in SEEDS:
                results[(k, seed)] = step(seed)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    same = len(results) == 16 and all(results[(k, s)] == expected[s] for k in range(4) for s in SEEDS)
    return "ok" if same else "MISMATCH"


def pool(method: str, expected: dict) -> str:
    """A pool of 2 worker processes started by ``method`` after this process ran every kernel."""
    context = multiprocessing.get_context(method)
    with context.Pool(2) as workers:
        try:
            got = workers.map_async(step, SEEDS).get(timeout=120)
        except RuntimeError as error:
            return f"refused: {error}"
    return "ok" if got == [expected[s] for s in SEEDS] else "MISMATCH"


def fork(expected: dict) -> str:
    """One child made by ``os.fork`` after this process ran every kernel, running every seed."""
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into the parent's code
        try:
            same = all(step(seed) == expected[seed] for seed in SEEDS)
            os.write(write, b"ok" if same else b"MISMATCH")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        got = answer.read().decode()
    os.waitpid(pid, 0)
    return got or "no answer"


def main(scenarios: list[str]) -> None:
    if scenarios[:1] == ["--prefer-openmp"]:
        scenarios = scenarios[1:]
        _threading.prefer_openmp()
    try:
        layer = _threading.layer()
    except ValueError as error:  # the layer asked for cannot be loaded here
        print(f"layer unavailable: {error}".replace("\n", " "), flush=True)
        return
    print(f"layer {layer}", flush=True)
    expected = {seed: step(seed) for seed in SEEDS}  # the parent runs every kernel before any fork
    for scenario in scenarios:
        if scenario == "threads":
            outcome = threads(expected)
        elif scenario == "fork":
            outcome = fork(expected)
        else:
            outcome = pool(scenario.split(":", 1)[1], expected)
        print(f"{scenario} {outcome}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
