"""Cold start of every kernel: the first call with an empty Numba cache, and what it compiles.

    python bench/cold_start.py [--ops apply_adam fused_sparse_lazy_adam ...] [--commands]

Each op runs in a fresh process with an empty ``NUMBA_CACHE_DIR``: Numba's own start (its first compile of
a trivial function) is timed apart, then the op's first call on float32 inputs of the conformance cases
(``optkernels.conformance.cases``), wall and CPU time (compiling is single-threaded, so CPU time is the
figure that a loaded machine disturbs least), and the functions it wrote to the cache (one per compiled
dispatcher). ``--commands`` also times ``python -m optkernels demo`` and ``verify`` on an empty cache.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

_PROBE = r"""
import json, os, sys, time
import numpy as np
import numba
start = time.process_time(), time.perf_counter()
numba.njit(lambda x: x + 1)(1)
numba_start = time.process_time() - start[0], time.perf_counter() - start[1]
from optkernels.conformance.cases import CASES_BY_NAME, draw, draw_attrs, run_kernel
case = CASES_BY_NAME[sys.argv[1]]
rng = np.random.default_rng(0)
shape = (64, 8) if case.module == "sparse" else (256,)
inputs, attrs = draw(case, rng, shape, np.float32), draw_attrs(case, rng, np.float32)
start = time.process_time(), time.perf_counter()
run_kernel(case, inputs, attrs)
first = time.process_time() - start[0], time.perf_counter() - start[1]
print(json.dumps({"numba_cpu": numba_start[0], "numba_wall": numba_start[1], "cpu": first[0], "wall": first[1]}))
"""


def _saved(cache: str) -> list[str]:
    """The functions compiled into ``cache`` (one index file per dispatcher)."""
    found = []
    for _, _, files in os.walk(cache):
        found += [name.split("-")[0] for name in files if name.endswith(".nbi")]
    return sorted(found)


def first_call(op: str) -> dict:
    """One op's first call in a fresh process with an empty cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", _PROBE, op], env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            return {"op": op, "error": done.stderr.strip().splitlines()[-1]}
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result.update(op=op, compiled=_saved(cache))
    return result


def command(args: list[str]) -> dict:
    """``python -m optkernels <args>`` with an empty cache: wall and CPU seconds (children included)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "optkernels", *args], env=env, capture_output=True,
                              text=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"command": " ".join(args), "wall": wall, "cpu": cpu, "exit": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", nargs="+", help="only these ops (default: every conformance case)")
    parser.add_argument("--commands", action="store_true", help="also demo and verify on an empty cache")
    args = parser.parse_args()
    from optkernels.conformance.cases import CASES

    ops = args.ops or [case.name for case in CASES]
    modules = {case.name: case.module for case in CASES}
    print(f"{'op':<34} {'kind':<7} {'numba start cpu s':>17} {'first call cpu s':>16} {'wall s':>7}  compiled")
    for op in ops:
        r = first_call(op)
        if "error" in r:
            print(f"{op:<34} error: {r['error']}")
            continue
        print(f"{op:<34} {modules.get(op, '?'):<7} {r['numba_cpu']:>17.2f} {r['cpu']:>16.2f} {r['wall']:>7.2f}  "
              f"{', '.join(r['compiled'])}", flush=True)
    if args.commands:
        for cmd in (["demo"], ["verify"]):
            r = command(cmd)
            print(f"python -m optkernels {r['command']}: {r['cpu']:.1f} s CPU, {r['wall']:.1f} s wall, "
                  f"exit {r['exit']}", flush=True)


if __name__ == "__main__":
    main()
