"""A whole model's Adam step: the optimizer over 100 tensors vs one apply_adam over one tensor of that size,
and vs torch's fused Adam over the same 100 tensors.

    python bench/optimizer_step.py [--totals 1e6 1e7] [--tensors 100] [--rounds 200]
    (from a clone that is not installed: PYTHONPATH=. python bench/optimizer_step.py)

For each total size N (float32, sizes drawn between 0.2 and 1.8 times the mean) the contenders are:

* ``Adam``: ``optkernels.optimizers.Adam`` stepping the ``--tensors`` parameters, default pipeline (no decay,
  no loss scale): one multi-tensor launch per step;
* ``Adam+wd+ls``: the same with weight decay 0.01 and loss_scale 1024 (the gradient pre-step at work,
  folded into the same launch);
* ``Adam 1-by-1``: ``Adam`` with its multi-tensor path switched off (one launch per parameter, as before
  it existed);
* ``apply_adam 1x``: one ``apply_adam`` call over a single tensor of N elements, the floor;
* ``torch fused``: ``torch.optim.Adam(fused=True)`` over the same tensors, if torch is importable (it is no
  dependency of optkernels; ``pip install torch==2.13.0`` for a CPU build).

Every round calls each contender once, in an order that changes from round to round, so the machine's noise
(other processes, frequency changes) hits all of them alike. Per contender it prints the median and the
minimum time of a step, and the spread ``(p90 − p10)/median`` as a measure of how noisy the run was. Then
the two target ratios, each as the median over rounds of the ratio within a round (robust to slow drift)
and as the ratio of the medians:

* ``Adam / torch fused`` at the smallest total (target: <= 0.5, i.e. at least 2x faster);
* ``Adam / apply_adam 1x`` at the largest total (target: <= 1.15).

The suite (``python -m optkernels bench``) runs the same contenders as its "model" group (:func:`run`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np

from harness import round_orders
from optkernels.kernels import apply_adam
from optkernels.optimizers import Adam, Parameter


def model_sizes(total: int, count: int, rng) -> list[int]:
    """``count`` sizes between 0.2 and 1.8 times the mean, summing to ``total``."""
    raw = rng.uniform(0.2, 1.8, count)
    sizes = np.maximum(1, np.floor(raw / raw.sum() * total)).astype(int)
    sizes[-1] += total - sizes.sum()
    return [int(s) for s in sizes]


def contenders(total: int, count: int, rng, torch) -> dict:
    """name -> a function doing one step."""
    sizes = model_sizes(total, count, rng)
    params = [Parameter(rng.standard_normal(s).astype(np.float32), f"p{k}") for k, s in enumerate(sizes)]
    grads = tuple(rng.standard_normal(s).astype(np.float32) * np.float32(1e-3) for s in sizes)
    opt = Adam(params, learning_rate=1e-3)
    params2 = [Parameter(p.data.copy(), p.name) for p in params]
    opt2 = Adam(params2, learning_rate=1e-3, weight_decay=0.01, loss_scale=1024.0)
    params3 = [Parameter(p.data.copy(), p.name) for p in params]
    opt3 = Adam(params3, learning_rate=1e-3)
    opt3._multi_tensor = False
    var = np.concatenate([p.data for p in params])
    m, v, g = np.zeros_like(var), np.zeros_like(var), np.concatenate(grads)
    out = {
        "Adam": lambda: opt(grads),
        "Adam+wd+ls": lambda: opt2(grads),
        "Adam 1-by-1": lambda: opt3(grads),
        "apply_adam 1x": lambda: apply_adam(var, m, v, 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, g),
    }
    if torch is not None:
        tparams = [torch.tensor(p.data.copy(), requires_grad=True) for p in params]
        for tp, gr in zip(tparams, grads):
            tp.grad = torch.from_numpy(gr.copy())
        out["torch fused"] = torch.optim.Adam(tparams, lr=1e-3, fused=True).step
    return out


def measure(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Per contender, the time of each round's call (seconds); the order changes every round."""
    names = list(fns)
    for fn in fns.values():  # warm up: compile, load caches, allocate
        fn()
        fn()
    times: dict[str, list[float]] = {name: [] for name in names}
    for order in round_orders(names, rounds):
        for name in order:
            fn = fns[name]
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


CASE = "Adam step, 100 tensors"
IMPLS = {"Adam": "optkernels Adam", "Adam+wd+ls": "optkernels Adam, decay + loss scale",
         "Adam 1-by-1": "optkernels Adam, one launch per tensor",
         "apply_adam 1x": "apply_adam, one tensor", "torch fused": "torch Adam(fused=True)"}


def run(suite, totals: list[int] | None = None) -> None:
    """The suite's "model" group: the contenders' medians as rows of ``suite`` (a ``harness.Suite``)."""
    from harness import Row, optional

    totals = totals or ([int(1e5)] if suite.quick else [int(1e6), int(1e7)])
    rng = np.random.default_rng(0)
    torch = optional("torch")
    for total in totals:
        rounds = 20 if suite.quick else max(30, int(400 * min(1.0, 1e6 / total) ** 0.5))
        times = measure(contenders(total, 100, rng, torch), rounds)
        for name, ts in times.items():
            suite.add(Row("model", CASE, IMPLS[name], total, statistics.median(ts), 28.0 * total,
                          f"spread {spread(ts):.0%}"))


def spread(values: list[float]) -> float:
    q = statistics.quantiles(values, n=10)
    return (q[-1] - q[0]) / statistics.median(values)


def paired_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--totals", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--tensors", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=0,
                        help="rounds per total (default: 400 at 1e6, scaled down for larger totals)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    print(f"numba {numba.__version__}, {numba.get_num_threads()} threads, layer "
          f"{numba.config.THREADING_LAYER}; torch: "
          f"{torch.__version__ + f' ({torch.get_num_threads()} threads)' if torch else 'not installed'}")
    rng = np.random.default_rng(0)
    results = {}
    for total in (int(t) for t in args.totals):
        rounds = args.rounds or max(30, int(400 * min(1.0, 1e6 / total) ** 0.5))
        times = measure(contenders(total, args.tensors, rng, torch), rounds)
        results[total] = times
        print(f"\nN = {total:.0e} in {args.tensors} tensors, {rounds} interleaved rounds")
        print(f"  {'':14} {'median':>9} {'min':>9} {'spread':>7}")
        for name, ts in times.items():
            print(f"  {name:14} {statistics.median(ts) * 1e3:6.3f} ms {min(ts) * 1e3:6.3f} ms "
                  f"{spread(ts):6.0%}")
    small, large = min(results), max(results)
    print("\ntargets (ratio: median of per-round ratios; in brackets the ratio of medians)")
    if "torch fused" in results[small]:
        a, t = results[small]["Adam"], results[small]["torch fused"]
        r = paired_ratio(a, t)
        of_medians = statistics.median(a) / statistics.median(t)
        print(f"  Adam / torch fused,   N={small:.0e}: {r:.3f} [{of_medians:.3f}]"
              f"  target <= 0.5: {'met' if r <= 0.5 else 'NOT met'}")
    else:
        print("  Adam / torch fused: torch not installed")
    a, s = results[large]["Adam"], results[large]["apply_adam 1x"]
    r = paired_ratio(a, s)
    of_medians = statistics.median(a) / statistics.median(s)
    print(f"  Adam / apply_adam 1x, N={large:.0e}: {r:.3f} [{of_medians:.3f}]"
          f"  target <= 1.15: {'met' if r <= 1.15 else 'NOT met'}")


if __name__ == "__main__":
    main()
