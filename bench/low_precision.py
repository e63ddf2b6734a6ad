"""bfloat16 Adam against float32 Adam, the bfloat16 memory limit, and torch's CPU Adam on bfloat16 params.

    python bench/low_precision.py [--n 1e8] [--rounds 7] [--out bench/results]

Targets (issue #16): apply_adam on bfloat16 parameter, slots and gradient (14 bytes per element, half of
float32's 28) at least 1.8x the float32 kernel's speed in the same run, and at least 90% of the memory limit
for its bytes (an Adam-shaped kernel on uint16 arrays: 4 reads, 3 writes, one integer add per write, no
conversion). Also: the Adam optimizer on a bfloat16 parameter with float32 master weights, and
optkernels.torch.Adam on a bfloat16 torch parameter (bfloat16 state), next to torch's CPU Adam
(``foreach=False``) on a bfloat16 parameter. Implementations are timed interleaved, in a new
random order each round, and medians reported.

The arithmetic floor: the same kernels on arrays small enough to stay in the L2 cache (N = 1e5, one thread,
best of many calls), where memory costs next to nothing, give each kernel's time per element for its
arithmetic alone (float32 Adam: a square root and a division per element); times N / threads, that is the
least time the kernel can take at N, however fast memory is. And the bound of free rounding: apply_adam's
element function fused for bfloat16 exactly as the package fuses it, except that the write-back truncates
(keeps the high 16 bits: wrong results, never used by the package), timed with the others.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import ml_dtypes
import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import optkernels.kernels as K
from dense import adam_shaped_memory  # on uint16 bits: a bfloat16 Adam step's traffic
from harness import environment, machine_name, round_orders
from optkernels.optimizers import Adam, Parameter

BF16 = ml_dtypes.bfloat16
TRUNCATING = "apply_adam bfloat16, truncating write-back (inexact)"
LIMIT = "bfloat16 limit (14 B/elem)"


def _state(n: int, dtype, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [(rng.standard_normal(n, dtype=np.float32) * np.float32(0.1)) for _ in range(4)]
    arrays[2] = np.abs(arrays[2]) + np.float32(0.1)
    return [a.astype(dtype) for a in arrays]


def _adam_call(arrays):
    var, m, v, g = arrays
    return lambda: K.apply_adam(var, m, v, 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, g)


def truncating_bf16_adam():
    """``run(var, m, v, g)`` on bfloat16 arrays: apply_adam's fused bfloat16 loop with a truncating
    write-back instead of round to nearest even (not exact; the speed of a rounding that costs nothing)."""
    from llvmlite import ir
    from numba import types

    from optkernels.kernels import _lowp
    from optkernels.kernels.adam import _adam

    i16, i32 = ir.IntType(16), ir.IntType(32)
    kinds = ("bf16",) * 4 + (None,) * 6
    name, source = _lowp.fused_element(_adam.py_func, kinds)
    namespace = dict(_adam.py_func.__globals__, **_lowp.ONE)
    def truncate(b, x):
        return b.trunc(b.lshr(b.bitcast(x, i32), ir.Constant(i32, 16)), i16)

    namespace["_store_bf16"] = _lowp._one(truncate, types.float32, types.uint16)
    exec(compile(source, "<truncating bfloat16 adam>", "exec"), namespace)
    element = numba.njit(inline="always", error_model="numpy")(namespace[name])

    @numba.njit(parallel=True, error_model="numpy")
    def loop(n, var, m, v, g, lr_t, beta1, one_minus_beta1, one_minus_beta2, epsilon, nesterov):
        for i in numba.prange(n):
            element(i, var, m, v, g, lr_t, beta1, one_minus_beta1, one_minus_beta2, epsilon, nesterov)

    f = np.float32

    def run(var, m, v, g):
        loop(var.size, *(a.view(np.uint16) for a in (var, m, v, g)), f(1e-3 * np.sqrt(0.001) / 0.1), f(0.9),
             f(0.1), f(0.001), f(1e-8), False)
    return run


def arithmetic_floor(dtype, n: int = 100_000, calls: int = 2000) -> float:
    """Seconds per element of apply_adam on ``dtype`` arrays of ``n`` elements (in cache), one thread, best
    of ``calls`` calls."""
    call = _adam_call(_state(n, dtype, 4))
    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        call()
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
    finally:
        numba.set_num_threads(previous)
    return best / n


def time_interleaved(impls: dict, rounds: int) -> dict[str, float]:
    for f in impls.values():
        f()                                   # compile / warm up
    times: dict[str, list[float]] = {k: [] for k in impls}
    for order in round_orders(list(impls), rounds):
        for name in order:
            t = time.perf_counter()
            impls[name]()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def time_kernels(n: int, rounds: int) -> dict[str, float]:
    """Median seconds of apply_adam on float32 and on bfloat16, of the bfloat16 memory limit and of the
    truncating bfloat16 loop, on ``n`` elements, timed interleaved over ``rounds`` rounds. Their states
    (several GB at N = 1e8) live only here: they are freed before the optimizer comparison."""
    f32, bf16 = _state(n, np.float32, 0), _state(n, BF16, 1)
    bits = [a.view(np.uint16) for a in _state(n, BF16, 2)]
    truncating, trunc_state = truncating_bf16_adam(), _state(n, BF16, 5)
    kernels = {"apply_adam float32": _adam_call(f32), "apply_adam bfloat16": _adam_call(bf16),
               LIMIT: lambda: adam_shaped_memory(*bits),
               TRUNCATING: lambda: truncating(*trunc_state)}
    return time_interleaved(kernels, rounds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--torch-n", type=float, default=1e7, help="size of the optimizer comparison")
    parser.add_argument("--out", type=Path, default=None, help="folder for low-precision-<machine>.md")
    args = parser.parse_args(argv)
    n = int(args.n)

    med = time_kernels(n, args.rounds)
    speedup = med["apply_adam float32"] / med["apply_adam bfloat16"]
    of_limit = med[LIMIT] / med["apply_adam bfloat16"]
    lines = [f"# Low-precision benchmark ({machine_name()})", "", environment(), "",
             f"N = {n:.0e}, {args.rounds} interleaved rounds, medians, {numba.get_num_threads()} threads.",
             "",
             "| implementation | ms | GB/s |", "|---|---|---|"]
    for name, sec in med.items():
        nbytes = 28 if "float32" in name else 14
        lines.append(f"| {name} | {sec * 1e3:.1f} | {nbytes * n / sec / 1e9:.1f} |")
    lines += ["", f"* bfloat16 apply_adam speed / float32 apply_adam speed: **{speedup:.2f}x** "
              f"(target >= 1.8x: "
              f"{'met' if speedup >= 1.8 else 'missed'})",
              f"* bfloat16 apply_adam at **{of_limit:.1%}** of the bfloat16 memory limit (target >= 90%: "
              f"{'met' if of_limit >= 0.9 else 'missed'})"]
    threads = numba.get_num_threads()
    floors = {name: arithmetic_floor(dtype) for name, dtype in (("float32", np.float32), ("bfloat16", BF16))}
    limit = med[LIMIT]
    lines += ["", f"Arithmetic floor (N = 1e5 in cache, 1 thread, best of 2000 calls; times N / {threads} "
              "threads):", "", "| kernel | ns/element, 1 thread | floor at N, ms |", "|---|---|---|"]
    lines += [f"| apply_adam {name} | {sec * 1e9:.3f} | {sec * n / threads * 1e3:.1f} |"
              for name, sec in floors.items()]
    share = floors["float32"] * n / threads / limit
    lines += ["", f"* the float32 kernel's arithmetic alone takes {share:.0%} "
              f"of the bfloat16 memory limit's time; 90% of the limit allows "
              f"{limit / 0.9 * 1e3:.1f} ms, the bfloat16 kernel's arithmetic floor is "
              f"{floors['bfloat16'] * n / threads * 1e3:.1f} ms",
              f"* with a write-back that costs nothing (truncation, inexact) the bfloat16 loop would run at "
              f"{med['apply_adam float32'] / med[TRUNCATING]:.2f}x the float32 kernel's speed and "
              f"{limit / med[TRUNCATING]:.1%} of the memory limit"]

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tn = int(args.torch_n)
        rng = np.random.default_rng(3)
        w0 = rng.standard_normal(tn, dtype=np.float32).astype(BF16)
        grad = (rng.standard_normal(tn, dtype=np.float32) * np.float32(0.1)).astype(BF16)
        ours = Parameter(w0.copy(), "w")
        opt = Adam([ours], learning_rate=1e-3, master_weights=True)
        theirs = torch.nn.Parameter(torch.from_numpy(w0.astype(np.float32)).to(torch.bfloat16))
        theirs.grad = torch.from_numpy(grad.astype(np.float32)).to(torch.bfloat16)
        topt = torch.optim.Adam([theirs], lr=1e-3, foreach=False)
        import optkernels.torch as okt

        drop_in = torch.nn.Parameter(theirs.detach().clone())
        drop_in.grad = theirs.grad.clone()
        dopt = okt.Adam([drop_in], lr=1e-3)
        steps = {"optkernels Adam, bf16 param + fp32 master": lambda: opt((grad,)),
                 "optkernels.torch.Adam, bf16 param (bf16 state, as torch)": dopt.step,
                 "torch Adam (CPU), bf16 param": topt.step}
        tmed = time_interleaved(steps, args.rounds)
        ratio = tmed["torch Adam (CPU), bf16 param"] / tmed["optkernels Adam, bf16 param + fp32 master"]
        same = (tmed["torch Adam (CPU), bf16 param"]
                / tmed["optkernels.torch.Adam, bf16 param (bf16 state, as torch)"])
        lines += ["", f"Optimizer step, N = {tn:.0e} (torch {torch.__version__}, "
                  f"{torch.get_num_threads()} threads):", "", "| step | ms |", "|---|---|"]
        lines += [f"| {k} | {v * 1e3:.1f} |" for k, v in tmed.items()]
        lines += ["", f"* optkernels (float32 masters, bf16 parameter) is **{ratio:.2f}x** torch's speed "
                  "(torch keeps bf16 slots and no master: less work)",
                  f"* optkernels.torch.Adam on the same bf16 parameter and bf16 state as torch's: "
                  f"**{same:.2f}x** torch's speed"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"low-precision-{machine_name()}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
