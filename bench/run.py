"""The benchmark suite: ``python -m optkernels bench`` (from a clone) or ``python bench/run.py``.

Prints each measurement as it is taken, then writes ``bench/results/<machine>.md`` (environment, table,
targets with their measured ratios) and, when matplotlib is installed, a PNG plot of effective GB/s
against N (one line per implementation and op).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cold  # noqa: E402
import dense  # noqa: E402
import distributed  # noqa: E402
import gpu  # noqa: E402
import lowbit  # noqa: E402
import modern  # noqa: E402
import optimizer_step  # noqa: E402
import sparse  # noqa: E402
import torch_step  # noqa: E402
from harness import Suite, environment, machine_name  # noqa: E402
from targets import check_targets  # noqa: E402

GROUPS = {"dense": dense.run, "model": optimizer_step.run, "sparse": sparse.run, "cold": cold.run,
          "gpu": gpu.run, "distributed": distributed.run, "torch": torch_step.run, "modern": modern.run,
          "lowbit": lowbit.run}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m optkernels bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke test")
    parser.add_argument("--only", nargs="+", choices=sorted(GROUPS), help="run only these groups")
    parser.add_argument("--sizes", nargs="+", type=float, help="dense sizes (default 1e5 1e6 1e7 1e8)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder for <machine>.md/.png")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = [int(s) for s in args.sizes] if args.sizes else ([int(1e4), int(1e5)] if args.quick else
                                                              [int(1e5), int(1e6), int(1e7), int(1e8)])
    suite = Suite(quick=args.quick)
    print(f"optkernels benchmarks on {machine_name()} ({'quick' if args.quick else 'full'})", flush=True)
    start = time.perf_counter()
    for name, run in GROUPS.items():
        if args.only and name not in args.only:
            continue
        print(f"[{name}]", flush=True)
        if name == "dense":
            run(suite, sizes)
        else:
            run(suite)
    print(f"done in {time.perf_counter() - start:.0f} s; {environment()}", flush=True)
    targets = check_targets(suite.rows)
    for line in targets:
        print("  " + line)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = machine_name() + ("-quick" if args.quick else "")
    report = args.out / f"{stem}.md"
    report.write_text(markdown(suite, targets))
    print(f"wrote {report}")
    if not args.no_plot:
        png = plot(suite, args.out / f"{stem}.png")
        print(f"wrote {png}" if png else "matplotlib is not installed: no plot (pip install 'optkernels[bench]')")
    return 0


def markdown(suite: Suite, targets: list[str]) -> str:
    lines = [f"# Benchmarks on {machine_name()}", "", f"Measured {time.strftime('%Y-%m-%d')}; {environment()}.",
             "Medians of interleaved runs; GB/s counts bytes read + written per element.", "",
             "## Targets", "", *[f"- {t}" for t in targets], "",
             "## Measurements", "", "| group | case | implementation | N | time (ms) | GB/s | |",
             "|---|---|---|---|---|---|---|"]
    for r in suite.rows:
        n = f"{r.n:.0e}" if r.n else ""
        gbs = f"{r.gbs:.1f}" if r.gbs else ""
        lines.append(f"| {r.group} | {r.case} | {r.impl} | {n} | {r.seconds * 1e3:.4f} | {gbs} | {r.note} |")
    if suite.notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in suite.notes]]
    return "\n".join(lines) + "\n"


def plot(suite: Suite, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series: dict[str, list[tuple[int, float]]] = {}
    for r in suite.rows:
        if r.group == "dense" and r.gbs:
            label = "limit (Adam-shaped memory)" if r.impl == "limit" else f"{r.case}: {r.impl}"
            series.setdefault(label, []).append((r.n, r.gbs))
    fig, ax = plt.subplots(figsize=(10, 6))
    for label, points in sorted(series.items()):
        seen = dict(points)  # the limit is measured once per op: keep one point per N
        xs = sorted(seen)
        ax.plot(xs, [seen[x] for x in xs], marker="o", label=label,
                linewidth=3 if label.startswith("limit") else 1.2)
    ax.set_xscale("log")
    ax.set_xlabel("elements (float32)")
    ax.set_ylabel("effective GB/s")
    ax.set_title(f"optkernels dense kernels on {machine_name()}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
