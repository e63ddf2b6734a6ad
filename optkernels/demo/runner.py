"""``python -m optkernels demo``: its options, and the run that trains every chosen optimizer on both tasks
and prints the report."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from .progress import Progress
from .recipes import CLICK_RECIPES, MLP_RECIPES, all_names, canonical_name

if TYPE_CHECKING:
    from .tasks import Task
    from .training import RunResult

__all__ = ["DEFAULT_STEPS", "build_parser", "main", "run"]

DEFAULT_STEPS = 2000
PROG = "python -m optkernels demo"


class _OneLineErrors(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _optimizer_name(text: str) -> str:
    name = canonical_name(text)
    if name is None:
        raise argparse.ArgumentTypeError(
            f"unknown optimizer {text!r}; choose from {', '.join(all_names())} (any case)"
        )
    return name


def _png_path(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"the plot is a PNG: give a file name ending in .png, got {text!r}")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {str(path.parent)!r} of {text!r} does not exist")
    return path


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``demo``'s options (errors are one line on stderr and exit code 2)."""
    parser = _OneLineErrors(
        prog=PROG,
        description="Train two small models on generated data with optkernels' optimizers and compare them: "
        "an MLP classifier of two interleaved spirals (dense gradients: "
        + ", ".join(r.name for r in MLP_RECIPES)
        + ") and a click-through model with a "
        "hashed embedding table (row-sparse gradients: "
        + ", ".join(r.name for r in CLICK_RECIPES)
        + "). Prints one table per model: "
        "held-out loss and accuracy or AUC, and the median ms of the optimizer step and of the "
        "whole step. Progress goes to stderr, the tables to stdout.",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"training steps per optimizer and model (default {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--seed",
        type=_seed,
        default=0,
        metavar="S",
        help="seed of the data, the initial weights and the batch order (default 0)",
    )
    parser.add_argument(
        "--optimizers",
        type=_optimizer_name,
        nargs="+",
        metavar="NAME",
        help="only these optimizers, case-insensitive (default: all); Adam trains both "
        "models; a model none of them trains is skipped",
    )
    parser.add_argument(
        "--plot",
        type=_png_path,
        metavar="FILE.png",
        help="also save the training-loss curves to FILE.png (needs matplotlib)",
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        metavar="N",
        help="Numba threads for the optimizer kernels (default 1: these models are small, "
        "and waking a thread pool on every step costs more than it saves, far more on a "
        "busy machine; the results are the same bits with any number)",
    )
    return parser


def run(
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    optimizers: Sequence[str] | None = None,
    plot: Path | None = None,
    out: TextIO | None = None,
    progress: Progress | None = None,
) -> list[tuple[Task, list[RunResult]]]:
    """Train the chosen optimizers on both tasks and print the report.

    For each task (the spirals MLP, then the click-through model) that at least one chosen optimizer
    trains: generate the data from ``seed``, train each optimizer from the same initial weights with the
    same batches (:func:`~optkernels.demo.training.train`), then print the task's table to ``out`` and
    save the plot if asked.

    Args:
        steps: training steps per optimizer and task.
        seed: the seed of everything random.
        optimizers: names (any case) of the optimizers to run; None runs all.
        plot: a PNG file for the loss curves, or None.
        out: where the tables go (default ``sys.stdout``).
        progress: the progress display (default: a :class:`Progress` on stderr).

    Returns:
        ``[(task, [RunResult, ...]), ...]`` for the tasks that were trained.

    Raises:
        MissingMatplotlib: ``plot`` is given but matplotlib is not installed (checked before training).
    """
    from .recipes import select
    from .report import format_table, require_matplotlib, write_plot
    from .tasks import ClickTask, SpiralsTask
    from .training import train

    out = sys.stdout if out is None else out
    progress = Progress() if progress is None else progress
    if plot is not None:
        require_matplotlib()
    done: list[tuple[Task, list[RunResult]]] = []
    for task_class in (SpiralsTask, ClickTask):
        recipes = select(task_class.recipes, optimizers)
        if not recipes:
            continue
        start = time.perf_counter()
        task = task_class(steps, seed)
        progress.begin_task(task.title, len(recipes))
        results = []
        for index, recipe in enumerate(recipes, start=1):
            progress.begin_run(index, recipe.name, steps)
            results.append(train(task, recipe, progress))
        progress.end_task(
            f"{task.title}: {len(results)} optimizer(s) x {_steps(steps)} in "
            f"{time.perf_counter() - start:.1f} s"
        )
        done.append((task, results))
    if done:
        import numba

        timing = (
            "times are medians over the steps after the first"
            if steps > 1
            else "times are of the only step, which loads (or compiles) the kernels"
        )
        print(
            f"optkernels demo: seed {seed}, {_steps(steps)} per optimizer, float32, Numba threads "
            f"{numba.get_num_threads()}; {timing}",
            file=out,
        )
    for trained, results in done:
        print(file=out)
        print(format_table(trained, results), file=out)
    out.flush()
    if plot is not None and done:
        write_plot(plot, done)
        print(f"\nwrote the loss curves to {plot}", file=out)
    return done


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m optkernels demo [options]``: parse ``argv`` and run; returns the exit code (0; 2 for bad
    arguments or a missing matplotlib with ``--plot``; 130 if interrupted)."""
    args = build_parser().parse_args(argv)
    import numba

    from .report import MissingMatplotlib

    if args.threads > numba.config.NUMBA_NUM_THREADS:
        print(
            f"{PROG}: error: argument --threads: at most {numba.config.NUMBA_NUM_THREADS} (the size of "
            f"Numba's thread pool; NUMBA_NUM_THREADS sets it)",
            file=sys.stderr,
        )
        return 2
    from ..kernels import _threading

    _threading.layer()  # settle the package's threading layer before set_num_threads starts Numba's
    numba.set_num_threads(args.threads)
    names = None if args.optimizers is None else list(dict.fromkeys(args.optimizers))
    try:
        run(args.steps, args.seed, names, args.plot)
    except MissingMatplotlib as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0
