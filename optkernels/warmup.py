"""Compile every kernel into Numba's on-disk cache ahead of use: ``python -m optkernels warmup``.

For images and clusters: after a warm-up, a process's first call of a kernel loads its machine code from the
cache instead of compiling it. Each kernel module's ops run once per dtype of ``verify`` (float32, float64,
float16, bfloat16) on tiny inputs of the conformance cases, in worker processes (one kernel module per
task, so that no two processes write the same function's cache index at once). The optimizer classes'
multi-tensor loops are compiled by their first step, not here.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def _groups(only: list[str] | None) -> dict[str, list[str]]:
    """The ops to warm, by the module that defines their kernel."""
    from optkernels.conformance.cases import CASES

    groups: dict[str, list[str]] = {}
    for case in CASES:
        if only is None or case.name in only:
            groups.setdefault(case.kernel.__module__, []).append(case.name)
    return groups


def _compile(ops: list[str]) -> tuple[list[str], float]:
    """Run each op of ``ops`` once per dtype (in this worker process); return them and the seconds taken."""
    import numpy as np

    from optkernels.conformance.cases import CASES_BY_NAME, draw_attrs, draw_stored, run_kernel
    from optkernels.conformance.verify import DTYPES

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    for op in ops:
        case = CASES_BY_NAME[op]
        shape = (6, 3) if case.module == "sparse" else (6,)
        for dtype in DTYPES:
            run_kernel(case, draw_stored(case, rng, shape, dtype), draw_attrs(case, rng, dtype))
    return ops, time.perf_counter() - start


def warm_up(
    jobs: int | None = None, only: list[str] | None = None, progress=None
) -> list[tuple[list[str], float]]:
    """Compile every kernel (or the ops named in ``only``) into the cache, in ``jobs`` worker processes.

    Parameters
    ----------
    jobs : int, optional
        Worker processes (default: the CPUs this process may use).
    only : list of str, optional
        Op names (as ``verify --ops``); default: all.
    progress : callable, optional
        Called with ``(ops, seconds)`` as each module's ops are compiled.

    Returns
    -------
    list of (list of str, float)
        Each task's ops and its seconds, in the order they finished.
    """
    groups = _groups(only)
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    done = []
    # spawn: the workers start clean (a fork would copy this process's Numba state and threads)
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn")) as pool:
        for result in pool.map(_compile, sorted(groups.values(), key=len, reverse=True)):
            done.append(result)
            if progress is not None:
                progress(*result)
    return done
