"""Quick look at apply_adam's speed: N = 1e5 and 1e8 (float32), next to NumPy and the memory limit.

    python bench/quick_adam.py [--sizes 1e5 1e8] [--repeats 15]

For each N it prints the median time of: optkernels.kernels.apply_adam; an in-place NumPy Adam (the same
formula with preallocated temporaries); and an "Adam-shaped" memory kernel, a Numba parallel loop that
reads var, m, v, g and writes var, m, v with no arithmetic (4 reads + 3 writes = 28 bytes per element), which
measures the machine's usable memory bandwidth for this access pattern. Runs are interleaved, so the
machine's noise hits all three alike. (The full benchmark suite is ``python -m optkernels bench``, to come.)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dense import adam_shaped_memory, numpy_adam
from optkernels.kernels import apply_adam

BYTES_PER_ELEMENT = 7 * 4  # float32: read var, m, v, g; write var, m, v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e8])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    f = np.float32
    b1p, b2p, lr, b1, b2, eps = f(0.9), f(0.999), f(1e-3), f(0.9), f(0.999), f(1e-8)
    lr_t = lr * np.sqrt(f(1) - b2p) / (f(1) - b1p)
    print(f"numba {numba.__version__}, {numba.get_num_threads()} threads")
    print(f"{'N':<8} {'apply_adam':>12} {'numpy':>12} {'mem limit':>12} {'adam GB/s':>10} {'% of limit':>10}")
    for n in (int(s) for s in args.sizes):
        rng = np.random.default_rng(0)
        var, m, g = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
        v = np.abs(rng.standard_normal(n, dtype=np.float32))
        ours, theirs, limit = ([a.copy() for a in (var, m, v, g)] for _ in range(3))  # one state each
        tmp = np.empty_like(var)
        runs = {  # each bound to this size's arrays
            "apply_adam": lambda a=ours: apply_adam(*a[:3], b1p, b2p, lr, b1, b2, eps, a[3]),
            "numpy": lambda a=theirs, tmp=tmp: numpy_adam(*a, tmp, lr_t, b1, b2, eps),
            "limit": lambda a=limit: adam_shaped_memory(*a),
        }
        for fn in runs.values():  # compile and warm up
            fn()
        times = {k: [] for k in runs}
        repeats = args.repeats if n <= 1e7 else max(5, args.repeats // 3)
        inner = max(1, int(2e6 // n))
        for _ in range(repeats):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                times[name].append((time.perf_counter() - t0) / inner)
        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = BYTES_PER_ELEMENT * n / med["apply_adam"] / 1e9
        print(f"{n:<8.0e} {med['apply_adam'] * 1e3:>10.4f}ms {med['numpy'] * 1e3:>10.4f}ms "
              f"{med['limit'] * 1e3:>10.4f}ms {gbs:>10.1f} {100 * med['limit'] / med['apply_adam']:>9.1f}%")


if __name__ == "__main__":
    main()
