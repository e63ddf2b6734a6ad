"""The training loop: one optimizer on one task, timed step by step."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .progress import Progress
from .recipes import Recipe
from .tasks import Task

__all__ = ["RunResult", "train"]


@dataclass
class RunResult:
    """One optimizer's run on one task.

    Attributes:
        name, settings: the recipe's.
        losses: the training loss of each step's batch (before that step's update), float64 ``(steps,)``;
            shorter if the run diverged.
        initial_loss, initial_score: held-out loss and score of the initial model.
        final_loss, final_score: held-out loss and score after training (NaN if the run diverged).
        optimizer_ms: median time of the optimizer step alone (``opt(gradients)``), in milliseconds.
        step_ms: median time of the whole step (batch, forward, backward and optimizer), in milliseconds.
        first_step_s: the whole first step in seconds (it includes Numba's compilation or cache loading).
        seconds: wall time of the run, evaluations included.
        diverged: a batch loss was not finite; the run stopped there.
    """

    name: str
    settings: str
    losses: np.ndarray
    initial_loss: float
    initial_score: float
    final_loss: float
    final_score: float
    optimizer_ms: float
    step_ms: float
    first_step_s: float
    seconds: float
    diverged: bool


def train(task: Task, recipe: Recipe, progress: Progress | None = None) -> RunResult:
    """Train a fresh model of ``task`` with ``recipe``'s optimizer for ``task.steps`` steps.

    Each step: take the step's batch, compute the loss and the gradients (``model.loss_and_gradients``),
    call the optimizer once with every gradient, in the optimizer's parameter order. The medians of the step
    times leave out the first step, which compiles (or loads from Numba's cache) the kernels, unless it is
    the only one.

    Args:
        task: the problem (data, model, evaluation).
        recipe: the optimizer and its settings.
        progress: where to show progress (None: nowhere); it is given the mean loss of the last 50
            batches.

    Returns:
        The :class:`RunResult`.
    """
    start = time.perf_counter()
    model = task.new_model()
    initial_loss, initial_score = task.evaluate(model)
    optimizer = recipe.build(model.parameters)
    position = {param.name: k for k, param in enumerate(model.parameters)}
    order = [position[param.name] for param in optimizer.parameters]
    steps = task.steps
    losses = np.empty(steps)
    optimizer_s = np.empty(steps)
    step_s = np.empty(steps)
    done = 0
    diverged = False
    for step in range(steps):
        t0 = time.perf_counter()
        inputs, targets = task.batch(step)
        loss, grads = model.loss_and_gradients(inputs, targets)
        if not math.isfinite(loss):
            diverged = True
            break
        t1 = time.perf_counter()
        optimizer(tuple(grads[k] for k in order))
        t2 = time.perf_counter()
        losses[step], optimizer_s[step], step_s[step] = loss, t2 - t1, t2 - t0
        done = step + 1
        if progress is not None:
            progress.update(done, float(losses[max(0, done - 50) : done].mean()))
    if diverged:
        final_loss = final_score = math.nan
    else:
        final_loss, final_score = task.evaluate(model)
    timed = slice(1, done) if done > 1 else slice(0, done)
    return RunResult(
        name=recipe.name,
        settings=recipe.settings,
        losses=losses[:done],
        initial_loss=initial_loss,
        initial_score=initial_score,
        final_loss=final_loss,
        final_score=final_score,
        optimizer_ms=float(np.median(optimizer_s[timed]) * 1e3) if done else math.nan,
        step_ms=float(np.median(step_s[timed]) * 1e3) if done else math.nan,
        first_step_s=float(step_s[0]) if done else math.nan,
        seconds=time.perf_counter() - start,
        diverged=diverged,
    )
