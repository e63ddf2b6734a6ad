"""The demo's report: one table per model, and the loss curves as a PNG (with matplotlib, optional)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._install import install_hint
from .tasks import Task
from .training import RunResult

__all__ = ["MissingMatplotlib", "format_table", "require_matplotlib", "write_plot"]


def format_table(task: Task, results: Sequence[RunResult]) -> str:
    """The task's table: a title, a description, then one row per optimizer::

        optimizer   final loss  accuracy  opt ms/step  step ms/step  settings

    ``final loss`` and the score are measured on the held-out set after training; ``opt ms/step`` is the
    median time of the optimizer step alone and ``step ms/step`` that of the whole step (batch, forward,
    backward, optimizer), both without the first step (compilation). A diverged run shows "diverged".
    """
    initial = results[0].initial_loss if results else math.nan
    initial_score = results[0].initial_score if results else math.nan
    score = task.score_name
    intro = (
        f"{task.describe()}. Initial loss {initial:.4f}, {score} {initial_score:.4f}: the same initial "
        f"weights and batches for every optimizer."
    )
    lines = [f"## {task.title}", textwrap.fill(intro, width=110), ""]
    name_width = max([len("optimizer")] + [len(r.name) for r in results])
    header = (
        f"{'optimizer':<{name_width}}  {'final loss':>10}  {score:>8}  {'opt ms/step':>11}  "
        f"{'step ms/step':>12}  settings"
    )
    lines += [header, "-" * len(header)]
    for r in results:
        if r.diverged:
            numbers = f"{'diverged':>10}  {'':>8}"
        else:
            numbers = f"{r.final_loss:>10.4f}  {r.final_score:>8.4f}"
        lines.append(
            f"{r.name:<{name_width}}  {numbers}  {r.optimizer_ms:>11.3f}  {r.step_ms:>12.3f}  {r.settings}"
        )
    return "\n".join(lines)


class MissingMatplotlib(RuntimeError):
    """``--plot`` was asked for but matplotlib cannot be imported."""


def require_matplotlib() -> None:
    """Check that matplotlib can be imported (before any training), else raise :class:`MissingMatplotlib`
    with a one-line message saying how to install it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingMatplotlib(
            "--plot needs matplotlib, which is not installed: python -m pip install "
            f"matplotlib (or {install_hint('demo')})"
        ) from None


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Running mean of ``values`` over the last ``window`` entries (fewer at the start), same length."""
    if values.size == 0:
        return values
    window = max(1, min(window, values.size))
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, values.size + 1), window)
    return (sums[1:] - sums[np.arange(1, values.size + 1) - counts]) / counts


def write_plot(path: Path, runs: Sequence[tuple[Task, Sequence[RunResult]]]) -> None:
    """Save the training-loss curves to ``path`` (PNG): one panel per task, one curve per optimizer, each the
    running mean over 5% of the steps (at least 1) of the batch losses, on a log scale.

    Args:
        path: the PNG file to write.
        runs: ``(task, results)`` for each task that was trained.

    Raises:
        MissingMatplotlib: matplotlib is not installed.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.5), squeeze=False)
    for ax, (task, results) in zip(axes[0], runs):
        for r in results:
            window = max(1, len(r.losses) // 20)
            ax.plot(np.arange(1, len(r.losses) + 1), smooth(r.losses, window), label=r.name, linewidth=1.2)
        true_loss = getattr(task, "true_loss", None)
        if true_loss is not None:
            ax.axhline(
                true_loss, color="black", linestyle=":", linewidth=1, label="true probabilities (held out)"
            )
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (running mean)")
        ax.set_title(task.title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
