"""Numba's threading layers side by side, as the package uses them: apply_adam (float32) latency at 1e5,
throughput at 1e8, 4 Python threads calling at once, and a process forked after the parent ran kernels.

    python bench/threading_layers.py [--rounds 3] [--layers default tbb omp workqueue]

Each layer runs in processes of its own (Numba settles the layer at the first parallel launch): ``default``
sets nothing (the package's own choice), the others set ``NUMBA_THREADING_LAYER``. The layers' processes
alternate for ``--rounds`` rounds, so a shared machine's noise hits them alike; medians are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

BYTES_PER_ELEMENT = 7 * 4  # float32: read var, m, v, g; write var, m, v


def _arrays(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    var, m, g = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    return [var, m, np.abs(rng.standard_normal(n, dtype=np.float32)), g]


def _per_call(call, calls: int, batches: int) -> float:
    """Median seconds per call over ``batches`` batches of ``calls`` calls."""
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def measure() -> dict:
    """This process's figures (the layer is settled by the first call)."""
    import numba

    from optkernels.kernels import apply_adam

    def adam(arrays):
        return lambda: apply_adam(*arrays[:3], 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, arrays[3])

    small = _arrays(100_000)
    adam(small)()
    out = {"layer": numba.threading_layer(), "threads": numba.get_num_threads()}
    out["latency_1e5_us"] = 1e6 * _per_call(adam(small), 200, 25)

    per_thread = [_arrays(100_000) for _ in range(4)]
    start = time.perf_counter()
    workers = [threading.Thread(target=lambda a=a: [adam(a)() for _ in range(300)]) for a in per_thread]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out["four_threads_1e5_us_per_call"] = 1e6 * (time.perf_counter() - start) / 1200

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        start = time.perf_counter()
        adam(small)()
        first = time.perf_counter() - start
        result = {"forked_first_call_s": first, "forked_latency_1e5_us": 1e6 * _per_call(adam(small), 200, 10)}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    out.update(json.loads(os.read(read, 4096).decode()))
    os.waitpid(pid, 0)

    del small, per_thread
    large = _arrays(100_000_000)
    adam(large)()
    seconds = _per_call(adam(large), 1, 5)
    out["throughput_1e8_ms"] = 1e3 * seconds
    out["throughput_1e8_gbs"] = BYTES_PER_ELEMENT * 1e8 / seconds / 1e9
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", nargs="+", default=["default", "tbb", "omp", "workqueue"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()), flush=True)
        return
    runs: dict[str, list[dict]] = {layer: [] for layer in args.layers}
    base = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    for round_ in range(args.rounds):
        order = args.layers if round_ % 2 == 0 else args.layers[::-1]
        for layer in order:
            env = dict(base, **({} if layer == "default" else {"NUMBA_THREADING_LAYER": layer}))
            done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                print(f"{layer}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            runs[layer].append(json.loads(done.stdout.strip().splitlines()[-1]))
    keys = ["latency_1e5_us", "four_threads_1e5_us_per_call", "forked_latency_1e5_us", "forked_first_call_s",
            "throughput_1e8_ms", "throughput_1e8_gbs"]
    print(f"python {sys.executable}; medians of {args.rounds} processes per layer")
    print(f"{'asked':<10} {'layer':<10} " + " ".join(f"{k:>29}" for k in keys))
    for layer, results in runs.items():
        if not results:
            continue
        med = {k: statistics.median(r[k] for r in results) for k in keys}
        print(f"{layer:<10} {results[0]['layer']:<10} " + " ".join(f"{med[k]:>29.3f}" for k in keys))


if __name__ == "__main__":
    main()
