"""A one-line progress bar on stderr (no dependency): redrawn in place with ``\\r`` on a terminal; off a
terminal, one line as each optimizer starts and one summary line per model."""
from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Progress of the demo's training runs.

    On a terminal (``stream.isatty()``) one line is redrawn in place, at most every ``interval`` seconds::

        spirals MLP [3/9] Adam             [##########----------]  1000/2000  loss 0.1234

    When the stream is not a terminal (a pipe, a file, a CI log) nothing is drawn: :meth:`begin_run` writes
    one line per optimizer instead (``spirals MLP [3/9] Adam: 2000 steps``); in both cases :meth:`end_task`
    writes one line per model.

    Args:
        stream: where to write (default: ``sys.stderr`` at the time of the call).
        interactive: draw the bar; default ``stream.isatty()``.
        width: characters of the bar itself.
        interval: the least time between two redraws, in seconds.
    """

    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None, width: int = 20,
                 interval: float = 0.1):
        self.stream = sys.stderr if stream is None else stream
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.width = width
        self.interval = interval
        self._task = ""
        self._runs = 0
        self._prefix = ""
        self._steps = 1
        self._last_draw = 0.0
        self._drawn = 0

    def begin_task(self, title: str, runs: int) -> None:
        """A model starts: ``runs`` optimizers will be trained on it."""
        self._task, self._runs = title, runs

    def begin_run(self, index: int, label: str, steps: int) -> None:
        """Run ``index`` (1-based) of the task starts: ``label`` (the optimizer) for ``steps`` steps."""
        self._prefix = f"{self._task} [{index}/{self._runs}] {label:<16}"
        self._steps = max(steps, 1)
        self._last_draw = 0.0
        if not self.interactive:
            self._write(f"{self._task} [{index}/{self._runs}] {label}: {steps} steps\n")
            return
        self.update(0, float("nan"), force=True)

    def update(self, step: int, loss: float, force: bool = False) -> None:
        """``step`` steps of the current run are done and ``loss`` is the loss to show (the training loop
        passes the mean of the last 50 batches). Redraws if the bar is interactive and ``interval`` has passed
        (or ``force``)."""
        if not self.interactive:
            return
        now = time.perf_counter()
        if not force and step < self._steps and now - self._last_draw < self.interval:
            return
        self._last_draw = now
        filled = self.width * step // self._steps
        digits = len(str(self._steps))
        loss_text = "" if loss != loss else f"  loss {loss:.4f}"   # nothing before the first step (NaN)
        line = (f"{self._prefix} [{'#' * filled}{'-' * (self.width - filled)}] "
                f"{step:>{digits}}/{self._steps}{loss_text}")
        self._write("\r" + line + " " * max(self._drawn - len(line), 0))
        self._drawn = len(line)

    def end_task(self, summary: str) -> None:
        """The model is done: clear the bar and write ``summary`` on its own line (also when not
        interactive)."""
        if self.interactive and self._drawn:
            self._write("\r" + " " * self._drawn + "\r")
            self._drawn = 0
        self._write(summary + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
