"""Memory-lean optimizer state: 8-bit blockwise Adam and row-wise Adagrad against their full-size rivals.

    python bench/lowbit.py [--n 1e8] [--torch-n 1e7] [--rss-n 1e8] [--rounds 5] [--out bench/results]

Measured side by side in one run (interleaved rounds, medians): state bytes per parameter (Adam8bit: codes
and absmax, against float32 Adam's 8 B); the 8-bit Adam step (``optimizer_update_8bit_blockwise``)
against float32 ``apply_adam`` at ``--n``; ``optkernels.torch.Adam8bit`` against
``bitsandbytes.optim.Adam8bit`` (its CPU path) and torch's Adam at ``--torch-n``; ``optkernels.torch.
RowWiseAdagrad`` against ``torch.optim.Adagrad`` on the same sparse gradient of a 1e6 x 64 embedding table
with 16 384 Zipf-distributed indices; peak RSS of one training step of a ``--rss-n`` parameter model with
Adam8bit against float32 Adam, each in a fresh process. Also run as the ``lowbit`` group of bench/run.py.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import optkernels.kernels as K  # noqa: E402
from harness import Row, Suite, environment, machine_name, optional, paired_ratio  # noqa: E402
from optkernels.kernels._intrinsics import prefetch_write  # noqa: E402
from optkernels.optimizers import Adam8bit  # noqa: E402

F = np.float32


def state_bytes_per_parameter(n: int = 1_000_000) -> dict[str, float]:
    """Bytes of optimizer state per parameter: Adam8bit's arrays after a step, float32 Adam's two moments."""
    p = np.zeros(n, F)
    opt = Adam8bit([p])
    opt.step([np.ones(n, F)])
    eight = sum(v.nbytes for k, v in opt.state[0].items() if k in ("state1", "state2", "absmax1", "absmax2"))
    return {"Adam8bit (codes + absmax)": eight / n, "float32 Adam (m, v)": 8.0}


def kernel_steps(suite: Suite, n: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    g = (rng.standard_normal(n, dtype=F) * F(0.01))
    p32, m, v = rng.standard_normal(n, dtype=F), np.zeros(n, F), np.zeros(n, F)
    p8 = p32.copy()
    blocks = -(-n // 256)
    s1, s2, a1, a2 = np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(blocks, F), np.zeros(blocks, F)
    q1, q2 = K.dynamic_map(True), K.dynamic_map(False)
    impls = {
        APPLY_ADAM: lambda: K.apply_adam(p32, m, v, 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, g),
        STEP_8BIT: lambda: K.optimizer_update_8bit_blockwise(
            "adam", g, p8, s1, s2, 0.9, 0.999, 0.0, 0.0, 1e-8, 10, 1e-3, q1, q2, a1, a2),
    }
    med = suite.time_interleaved(impls, repeats=rounds)
    for name, sec in med.items():
        nbytes = 28 if name == APPLY_ADAM else 16 + 16 / 256  # p r/w, g, two codes r/w, two absmax r/w
        suite.add(Row("lowbit", STEP_CASE, name, n, sec, nbytes * n))


def torch_steps(suite: Suite, n: int, rounds: int) -> None:
    torch = optional("torch")
    if torch is None:
        suite.note("lowbit: torch not installed, optimizer comparison skipped")
        return
    import optkernels.torch as okt

    torch.manual_seed(0)
    w0, grad = torch.randn(n), torch.randn(n) * 0.01

    def make(cls, **kw):
        p = torch.nn.Parameter(w0.clone())
        p.grad = grad.clone()
        return cls([p], **kw).step

    impls = {"optkernels.torch.Adam8bit": make(okt.Adam8bit),
             "torch.optim.Adam (float32, foreach=False)": make(torch.optim.Adam, foreach=False)}
    bnb = optional("bitsandbytes")
    if bnb is not None:
        impls[BNB] = make(bnb.optim.Adam8bit)
    else:
        suite.note("lowbit: bitsandbytes not installed, its Adam8bit skipped")
    med = suite.time_interleaved(impls, repeats=rounds)
    for name, sec in med.items():
        suite.add(Row("lowbit", TORCH_CASE, name, n, sec))


def zipf_indices(rows: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` Zipf(1.1)-distributed row indices in ``[0, rows)`` (popular rows repeat)."""
    rng = np.random.default_rng(seed)
    return ((rng.zipf(1.1, count) - 1) % rows).astype(np.int64)


#: The row-wise Adagrad comparison: its case label's prefix, our two implementations and torch's.
ROWWISE_CASE = "row-wise Adagrad"
ROWWISE_TORCH = "optkernels.torch.RowWiseAdagrad"
ROWWISE_KERNEL = "optkernels.sparse.rowwise_adagrad (NumPy views)"
TORCH_ADAGRAD = "torch.optim.Adagrad (sparse)"
ROWWISE_LIMIT = "memory limit (the same rows and bytes, no merge)"

#: Chunks of the memory-limit loop: its threads take them from the parallel loop's schedule.
LIMIT_CHUNKS = 64


@numba.njit(parallel=True, cache=True, error_model="numpy")
def rowwise_memory_limit(table, acc, rows, grad, zero, sums):
    """The memory traffic of a row-wise Adagrad step without its merge or math: the gradient read once, in
    order, and each distinct row ``rows`` of the table and of its accumulator read and written once (the
    table's rows prefetched four ahead, as the kernel does); ``zero`` (0, unknown to the compiler) keeps the
    values; ``sums`` (``LIMIT_CHUNKS`` floats) receives each chunk's gradient sum, so no read is dropped."""
    n, width = rows.shape[0], table.shape[1]
    for t in numba.prange(LIMIT_CHUNKS):
        total = zero
        for k in range(grad.shape[0] * t // LIMIT_CHUNKS, grad.shape[0] * (t + 1) // LIMIT_CHUNKS):
            for c in range(width):
                total += grad[k, c]
        sums[t] = total
        first, last = n * t // LIMIT_CHUNKS, n * (t + 1) // LIMIT_CHUNKS
        for j in range(first, last):
            if j + 4 < last:
                c = 0
                while c < width:
                    prefetch_write(table, rows[j + 4], c)
                    c += 16
            r = rows[j]
            square = zero
            for c in range(width):
                square += table[r, c] * table[r, c]
            acc[r] += square * zero
            for c in range(width):
                table[r, c] = table[r, c] + zero


def rowwise_steps(suite: Suite, rows: int, dim: int, count: int, rounds: int) -> None:
    """``optkernels.torch.RowWiseAdagrad``, and the kernel it calls on NumPy views of a table allocated the
    same way (by torch), against ``torch.optim.Adagrad`` on the same uncoalesced sparse gradient; each
    round's ratio to torch's time in that round (``paired``); beside them the step's memory limit
    (:func:`rowwise_memory_limit` over the same distinct rows, on a table allocated the same way). A step
    takes about a millisecond, so the rounds are four times ``rounds``."""
    torch = optional("torch")
    if torch is None:
        return
    import optkernels.torch as okt
    from optkernels.sparse import rowwise_adagrad

    idx = torch.from_numpy(zipf_indices(rows, count))
    values = torch.randn(count, dim) * 0.01
    grad = torch.sparse_coo_tensor(idx[None], values, (rows, dim))     # uncoalesced, as nn.Embedding gives
    table = torch.randn(rows, dim) * 0.1

    def make(cls, **kw):
        p = torch.nn.Parameter(table.clone())
        p.grad = grad
        return cls([p], **kw).step

    w, h = table.clone().numpy(), torch.zeros(rows).numpy()
    indices, grad_rows = idx.numpy(), values.numpy()
    distinct_rows = np.unique(indices)
    limit_table, limit_acc = table.clone().numpy(), torch.zeros(rows).numpy()
    sums = np.zeros(LIMIT_CHUNKS, F)
    impls = {ROWWISE_TORCH: make(okt.RowWiseAdagrad, lr=0.01),
             ROWWISE_KERNEL: lambda: rowwise_adagrad(w, h, grad_rows, indices, lr=0.01),
             TORCH_ADAGRAD: make(torch.optim.Adagrad, lr=0.01),
             ROWWISE_LIMIT: lambda: rowwise_memory_limit(limit_table, limit_acc, distinct_rows, grad_rows,
                                                         F(0), sums)}
    samples = suite.samples_interleaved(impls, repeats=4 * rounds)
    distinct = len(distinct_rows)
    case = f"{ROWWISE_CASE} {rows:.0e}x{dim}, {count} Zipf indices"
    for name, times in samples.items():
        paired = paired_ratio(samples[TORCH_ADAGRAD], times) if name != TORCH_ADAGRAD else 0.0
        note = f"{paired:.2f}x torch's speed (paired); {distinct} distinct rows" if paired else ""
        suite.add(Row("lowbit", case, name, rows * dim, statistics.median(times), note=note, paired=paired))
    limit = paired_ratio(samples[TORCH_ADAGRAD], samples[ROWWISE_LIMIT])
    of_limit = paired_ratio(samples[ROWWISE_LIMIT], samples[ROWWISE_KERNEL])
    suite.note(f"lowbit: row-wise Adagrad's memory limit (its rows and bytes, no merge) is {limit:.2f}x torch's "
               f"sparse Adagrad (paired); the kernel on NumPy views runs at {of_limit:.0%} of the limit's speed")
    suite.note(f"lowbit: FBGEMM's CPU row-wise Adagrad not measured: {fbgemm_unavailable(torch)}")


def fbgemm_unavailable(torch) -> str:
    """Why FBGEMM's CPU row-wise Adagrad is not in the run: fbgemm-gpu-cpu is not installed, or it does not
    load against this torch (each release is built against one torch: its training ops then miss libtorch
    symbols, seen with 1.9.0 and the 2026.10.16 nightly against torch 2.13.0)."""
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:
        return "fbgemm-gpu-cpu not installed"
    except OSError as error:
        return f"fbgemm-gpu-cpu does not load against torch {torch.__version__} ({str(error)[:120]})"
    return "no FBGEMM row in this bench yet (fbgemm-gpu-cpu loads: add its TBE row-wise Adagrad)"


STEP_CASE = "Adam step"
APPLY_ADAM = "apply_adam float32 (28 B/elem)"
STEP_8BIT = "8-bit Adam step (16 B/elem)"
TORCH_CASE = "Adam8bit optimizer step (torch)"
BNB = "bitsandbytes.optim.Adam8bit (CPU)"


def step_targets(rows: list[Row], verdict) -> list[str]:
    """The 8-bit Adam step at --n at least as fast as float32 apply_adam (it moves 16 bytes per element
    against 28), and optkernels.torch.Adam8bit at least 10x bitsandbytes' Adam8bit on the CPU."""
    def find(case: str, impl: str) -> Row | None:
        return next((r for r in rows if r.group == "lowbit" and r.case == case and r.impl == impl), None)

    out = []
    ours, theirs = find(STEP_CASE, STEP_8BIT), find(STEP_CASE, APPLY_ADAM)
    if ours and theirs:
        ratio = theirs.seconds / ours.seconds
        out.append(f"8-bit Adam step N={ours.n:.0e} at least as fast as float32 apply_adam: {ratio:.2f}x its "
                   f"speed ({verdict(ratio >= 1.0)})")
    ours, theirs = find(TORCH_CASE, "optkernels.torch.Adam8bit"), find(TORCH_CASE, BNB)
    if ours and theirs:
        ratio = theirs.seconds / ours.seconds
        out.append(f"optkernels.torch.Adam8bit N={ours.n:.0e} >= 10x faster than {BNB}: {ratio:.2f}x "
                   f"({verdict(ratio >= 10.0)})")
    elif ours:
        out.append(f"optkernels.torch.Adam8bit vs {BNB}: not measured (bitsandbytes not installed)")
    return out


def rowwise_targets(rows: list[Row], verdict) -> list[str]:
    """Row-wise Adagrad (the torch drop-in, and its kernel on NumPy views) >= 8x torch's sparse Adagrad:
    the paired ratio of the run's rounds."""
    theirs = [r for r in rows
              if r.group == "lowbit" and r.case.startswith(ROWWISE_CASE) and r.impl == TORCH_ADAGRAD]
    if not theirs:
        return [f"{ROWWISE_TORCH} vs {TORCH_ADAGRAD}: not measured (needs torch; group 'lowbit')"]
    out = []
    for ours in (r for r in rows if r.case == theirs[0].case and r.impl in (ROWWISE_TORCH, ROWWISE_KERNEL)):
        ratio = ours.paired or theirs[0].seconds / ours.seconds
        out.append(f"{ours.impl}, {ours.case}, >= 8x faster than {TORCH_ADAGRAD}: {ratio:.2f}x (paired, "
                   f"{verdict(ratio >= 8.0)})")
    return out


def _rss_child(kind: str, n: int) -> None:
    """One training step of an n-parameter model (parameter, gradient, optimizer state) after a warm-up
    step on 5000 parameters (compilation), then print the peak RSS (VmHWM: ``ru_maxrss`` survives
    ``exec`` from the parent) before and after, in bytes."""
    def hwm() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM in /proc/self/status")

    def step(size: int) -> None:
        rng = np.random.default_rng(0)
        p = rng.standard_normal(size, dtype=F)
        g = rng.standard_normal(size, dtype=F) * F(0.01)
        if kind == "adam8bit":
            Adam8bit([p]).step([g])
        else:
            m, v = np.zeros(size, F), np.zeros(size, F)
            K.apply_adam(p, m, v, 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, g)

    step(5000)
    warm = hwm()
    step(n)
    peak = hwm()
    print(json.dumps({"warm": warm, "peak": peak}))


def peak_rss(suite: Suite, n: int) -> dict[str, dict]:
    out = {}
    for kind in ("adam8bit", "adam32"):
        res = subprocess.run([sys.executable, __file__, "--rss-child", kind, "--rss-n", str(n)],
                             capture_output=True, text=True, check=True)
        out[kind] = json.loads(res.stdout.strip().splitlines()[-1])
    mib = {k: ((v["peak"]) / 2**20, (v["peak"] - v["warm"]) / 2**20) for k, v in out.items()}
    suite.note(f"lowbit: peak RSS of one training step (parameter, gradient, state), {n:.0e} parameters: "
               f"Adam8bit {mib['adam8bit'][0]:.0f} MiB ({mib['adam8bit'][1]:.0f} MiB above the warmed-up "
               f"process), float32 Adam {mib['adam32'][0]:.0f} MiB ({mib['adam32'][1]:.0f} MiB above)")
    return out


def run(suite: Suite, n: int | None = None, torch_n: int | None = None, rss_n: int | None = None,
        rounds: int | None = None) -> None:
    """The ``lowbit`` group of bench/run.py."""
    quick = suite.quick
    n = n or (int(1e5) if quick else int(1e8))
    torch_n = torch_n or (int(1e5) if quick else int(1e7))
    rss_n = rss_n or (int(1e5) if quick else int(1e8))
    rounds = rounds or (2 if quick else 5)
    for name, b in state_bytes_per_parameter().items():
        suite.note(f"lowbit: state bytes per parameter, {name}: {b:.4f}")
    kernel_steps(suite, n, rounds)
    torch_steps(suite, torch_n, rounds)
    rowwise_steps(suite, int(1e4) if quick else int(1e6), 64, 16384, rounds)
    peak_rss(suite, rss_n)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--torch-n", type=float, default=1e7)
    parser.add_argument("--rss-n", type=float, default=1e8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rss-child", choices=("adam8bit", "adam32"))
    parser.add_argument("--out", type=Path, default=None, help="folder for lowbit-<machine>.md")
    args = parser.parse_args(argv)
    if args.rss_child:
        _rss_child(args.rss_child, int(args.rss_n))
        return 0
    suite = Suite()
    run(suite, int(args.n), int(args.torch_n), int(args.rss_n), args.rounds)
    lines = [f"# Low-bit state benchmark ({machine_name()})", "", environment(), "",
             f"{args.rounds} interleaved rounds, medians.", "", "| case | implementation | N | ms | GB/s |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.case} | {r.impl} | {r.n:.0e} | {r.seconds * 1e3:.1f} | {r.gbs:.1f} |" for r in suite.rows]
    lines += ["", *[f"* {t}" for t in suite.notes]]
    def verdict(met: bool) -> str:
        return "MET" if met else "MISSED"

    lines += ["", "Targets:", "", *[f"* {t}" for t in step_targets(suite.rows, verdict)
                                     + rowwise_targets(suite.rows, verdict)]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"lowbit-{machine_name()}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
