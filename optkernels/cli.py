"""The command line: ``python -m optkernels <command> [options]``.

Commands:
    verify  every kernel against the float64 reference and MindSpore's published examples
    bench   the benchmark suite (bench/run.py of a clone of the repository)
    demo    train small models on generated data with the optimizers (see optkernels.demo)
    info    the threading layer, threads, Numba cache folder, CUDA and the versions this install uses
    warmup  compile every kernel into Numba's cache, in parallel processes (for images)
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path
from typing import Any

from ._install import install_hint

BENCH_RUNNER = Path(__file__).resolve().parents[1] / "bench" / "run.py"


def _bench(rest: list[str]) -> int:
    if not BENCH_RUNNER.is_file():
        print(
            f"error: the benchmark suite runs from a clone of the repository (no {BENCH_RUNNER})",
            file=sys.stderr,
        )
        return 2
    runner = runpy.run_path(str(BENCH_RUNNER), run_name="optkernels_bench")
    return runner["main"](rest)


def _bad_request(jobs: int | None, ops: list[str] | None) -> bool:
    """Print an error and return True if ``jobs`` is below 1 or ``ops`` names an op without a conformance
    case."""
    from optkernels.conformance.cases import CASES_BY_NAME

    if jobs is not None and jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return True
    unknown = sorted(set(ops or ()) - set(CASES_BY_NAME))
    if unknown:
        print(
            f"error: unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(CASES_BY_NAME))}",
            file=sys.stderr,
        )
    return bool(unknown)


def _warmup(args: argparse.Namespace) -> int:
    import time

    from optkernels.warmup import warm_up

    if _bad_request(args.jobs, args.ops):
        return 2
    start = time.perf_counter()
    warm_up(args.jobs, args.ops, progress=lambda ops, s: print(f"{s:6.1f} s  {', '.join(ops)}", flush=True))
    print(f"compiled into the cache in {time.perf_counter() - start:.1f} s")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from optkernels.conformance.verify import TABLE_HEADER, table_row, verify

    if args.cases < 1:
        print("error: --cases must be at least 1", file=sys.stderr)
        return 2
    if args.target == "cuda":
        from optkernels.kernels import _cuda

        if not _cuda.installed():
            print(f"error: --target cuda needs numba-cuda: {install_hint('cuda')}", file=sys.stderr)
            return 2
        if not (_cuda.simulator_enabled() or _cuda.module().is_available()):
            print(
                "error: no CUDA GPU found (set NUMBA_ENABLE_CUDASIM=1 to use Numba's simulator)",
                file=sys.stderr,
            )
            return 2
    if _bad_request(args.jobs, args.ops):
        return 2
    if args.jobs and args.jobs > 1 and args.target == "cpu":
        from optkernels.warmup import warm_up

        print(f"compiling the kernels in {args.jobs} processes first", flush=True)
        warm_up(args.jobs, args.ops)
    print(
        f"verifying against optkernels.reference on {args.target}: {args.cases} random cases per op "
        f"(seed {args.seed}), published examples",
        flush=True,
    )
    print(TABLE_HEADER, flush=True)
    try:
        reports = verify(
            args.target, args.cases, args.seed, args.ops, progress=lambda r: print(table_row(r), flush=True)
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    failed = [r for r in reports if not r.ok]
    for report in failed:
        for failure in report.failures[:5]:
            print(f"  {failure}")
    if args.export:
        from optkernels.conformance.vectors import export

        index = export(args.export, cases=min(args.cases, 4), seed=args.seed, only=args.ops)
        print(f"wrote golden vectors: {index}")
    print(f"{len(reports) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


_DISTRIBUTIONS = ("numpy", "numba", "llvmlite", "scipy", "ml_dtypes", "tbb", "numba-cuda", "torch", "mpi4py")


def _version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "-"


def _cuda_line() -> str:
    from optkernels.kernels import _cuda

    if not _cuda.installed():
        return f"no (numba-cuda is not installed: {install_hint('cuda')})"
    if _cuda.simulator_enabled():
        return "Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    cuda = _cuda.module()
    try:
        if not cuda.is_available():
            return "no GPU found"
        names = [gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name) for gpu in cuda.gpus]
    except Exception as error:
        return f"no ({type(error).__name__}: {error})"
    return f"yes: {', '.join(names)}"


def info_lines() -> list[str]:
    """What ``python -m optkernels info`` prints: versions, the threading layer the package's launches use
    (settled now, as by a first kernel call), Numba's thread count, where compiled kernels are cached, and
    whether a CUDA GPU can be used."""
    import os
    import platform

    import numba

    import optkernels
    from optkernels.kernels import _threading

    layer = _threading.layer()
    if _threading.chosen_by_user:
        chosen = ", ".join(f"{k}={os.environ[k]}" for k in _threading._USER_VARIABLES if k in os.environ)
        how = f"chosen outside optkernels ({chosen or 'numba.config, or a layer started before'})"
    else:
        how = "the package's choice (see docs/guide/install_and_threads.rst)"
    if _threading.tbb_loaded_from:
        how += f"; TBB runtime loaded from {_threading.tbb_loaded_from}"
    from optkernels.kernels.adam import _adam

    dispatcher: Any = _adam.cpu  # a Numba dispatcher (typed as a plain callable), not compiled here
    cache = os.path.dirname(dispatcher._cache._cache_path)
    versions = ", ".join(f"{name} {_version(name)}" for name in _DISTRIBUTIONS)
    return [
        f"optkernels {optkernels.__version__} ({os.path.dirname(optkernels.__file__)})",
        f"python {platform.python_version()} ({sys.executable}), {platform.system()} {platform.machine()}",
        f"packages: {versions}",
        f"threading layer: {layer}, {how}",
        f"threads: {numba.get_num_threads()} (NUMBA_NUM_THREADS={numba.config.NUMBA_NUM_THREADS})",
        f"kernel cache: {cache} (and beside it, one folder per source folder; NUMBA_CACHE_DIR moves it)",
        f"CUDA: {_cuda_line()}",
    ]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]) and run the command; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m optkernels", description="optkernels: optimizer update kernels for NumPy and CUDA."
    )
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    verify = commands.add_parser(
        "verify",
        help="check every kernel against the float64 reference",
        description="Run every kernel against optkernels.reference on random cases and "
        "MindSpore's published examples; print a conformance table. Exit "
        "code 1 if any op fails.",
    )
    verify.add_argument("--target", choices=("cpu", "cuda"), default="cpu", help="where the kernels run")
    verify.add_argument("--cases", type=int, default=20, help="random cases per op (default 20)")
    verify.add_argument("--seed", type=int, default=0, help="seed of the random cases")
    verify.add_argument("--ops", nargs="+", metavar="OP", help="only these ops (e.g. apply_adam apply_ftrl)")
    verify.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="compile the kernels in this many processes first (an empty cache: less wall time)",
    )
    verify.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="also write golden test vectors (npz + index.json + FORMAT.md) to DIR",
    )
    commands.add_parser("info", help="print the threading layer, threads, kernel cache, CUDA and versions")
    warmup = commands.add_parser(
        "warmup",
        help="compile every kernel into Numba's on-disk cache",
        description="Compile every kernel (float32, float64, float16, bfloat16) into "
        "Numba's on-disk cache in worker processes, so that later "
        "processes load them instead of compiling.",
    )
    warmup.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPUs)")
    warmup.add_argument("--ops", nargs="+", metavar="OP", help="only these ops (as verify --ops)")
    commands.add_parser("bench", help="run the benchmark suite (pass --help for its options)", add_help=False)
    commands.add_parser(
        "demo",
        help="train small models on generated data with the optimizers (pass --help for its options)",
        add_help=False,
    )
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("bench", "demo"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "verify":
        return _verify(args)
    if args.command == "warmup":
        return _warmup(args)
    if args.command == "info":
        print("\n".join(info_lines()))
        return 0
    if args.command == "demo":
        from optkernels.demo.runner import main as demo_main

        return demo_main(rest)
    return _bench(rest)
