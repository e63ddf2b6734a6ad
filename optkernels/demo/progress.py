"""The demo's progress display on stderr, drawn by ``tqdm``: a bar redrawn in place on a terminal; off a
terminal (a pipe, a file, a CI log), one line as each optimizer starts and one summary line per model."""

from __future__ import annotations

import math
import sys
from typing import TextIO

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """Progress of the demo's training runs.

    On a terminal (``stream.isatty()``) one ``tqdm`` bar per run is redrawn in place, at most every
    ``interval`` seconds, and cleared when the run ends::

        spirals MLP [3/9] Adam             [##########----------] 1000/2000, loss=0.1234

    When the stream is not a terminal (a pipe, a file, a CI log) nothing is drawn: :meth:`begin_run` writes
    one line per optimizer instead (``spirals MLP [3/9] Adam: 2000 steps``); in both cases :meth:`end_task`
    writes one line per model.

    Args:
        stream: where to write (default: ``sys.stderr`` at the time of the call).
        interactive: draw the bar; default ``stream.isatty()``.
        width: characters of the bar itself.
        interval: the least time between two redraws, in seconds.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        width: int = 20,
        interval: float = 0.1,
    ):
        self.stream = sys.stderr if stream is None else stream
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.width = width
        self.interval = interval
        self._task = ""
        self._runs = 0
        self._bar: tqdm | None = None

    def begin_task(self, title: str, runs: int) -> None:
        """A model starts: ``runs`` optimizers will be trained on it."""
        self._task, self._runs = title, runs

    def begin_run(self, index: int, label: str, steps: int) -> None:
        """Run ``index`` (1-based) of the task starts: ``label`` (the optimizer) for ``steps`` steps."""
        self._close_bar()
        if not self.interactive:
            self.stream.write(f"{self._task} [{index}/{self._runs}] {label}: {steps} steps\n")
            self.stream.flush()
            return
        self._bar = tqdm(
            total=max(steps, 1),
            desc=f"{self._task} [{index}/{self._runs}] {label:<16}",
            file=self.stream,
            leave=False,
            mininterval=self.interval,
            ascii="-#",
            bar_format=f"{{desc}} [{{bar:{self.width}}}] {{n_fmt}}/{{total_fmt}}{{postfix}}",
        )

    def update(self, step: int, loss: float) -> None:
        """``step`` steps of the current run are done and ``loss`` is the loss to show (the training loop
        passes the mean of the last 50 batches; NaN shows none). tqdm redraws when ``interval`` has
        passed."""
        if self._bar is None:
            return
        if not math.isnan(loss):
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        self._bar.update(step - self._bar.n)

    def end_task(self, summary: str) -> None:
        """The model is done: clear the bar and write ``summary`` on its own line (also when not
        interactive)."""
        self._close_bar()
        self.stream.write(summary + "\n")
        self.stream.flush()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
