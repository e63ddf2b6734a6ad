"""The demo's two learning problems, each a data set, a model factory, a batch order and an evaluation:
:class:`SpiralsTask` (the MLP classifier) and :class:`ClickTask` (the click-through model)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .click import ClickModel
from .data import FIELD_SIZES, batch_order, click_logs, hash_features, spirals
from .metrics import logistic_loss, roc_auc
from .mlp import MLP
from .recipes import CLICK_RECIPES, MLP_RECIPES, Recipe

__all__ = ["ClickTask", "SpiralsTask", "Task"]


class Task(Protocol):
    """What the training loop needs from a problem.

    Attributes:
        title: a short name (``"spirals MLP"``).
        score_name: the name of the score :meth:`evaluate` returns (``"accuracy"``, ``"AUC"``).
        chance: the score of a model that has learnt nothing.
        steps: the number of training steps.
        recipes: the optimizers that can train it.
    """

    title: str
    score_name: str
    chance: float
    steps: int
    recipes: tuple[Recipe, ...]

    def new_model(self) -> Any:
        """A model with the task's initial weights (the same on every call)."""

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The inputs and targets of training step ``step`` (the same for every optimizer)."""

    def evaluate(self, model: Any) -> tuple[float, float]:
        """``(loss, score)`` of ``model`` on the held-out set."""

    def describe(self) -> str:
        """One or two lines on the problem, the model and the data, for the report."""


def _seeds(seed: int, task: int) -> list[np.random.SeedSequence]:
    """Independent seeds for a task's data, initial weights and batch order."""
    return np.random.SeedSequence([seed, task]).spawn(3)


class SpiralsTask:
    """Two interleaved spirals (:func:`~optkernels.demo.data.spirals`, 1.5 turns) classified by a
    2-32-32-2 tanh :class:`~optkernels.demo.mlp.MLP` in float32, trained on mini-batches of 64 of 4,000
    points and scored on 2,000 held-out points (loss and accuracy; chance is 50%).

    Args:
        steps: training steps (>= 1).
        seed: the seed of the data, the initial weights and the batch order.
    """

    title = "spirals MLP"
    score_name = "accuracy"
    chance = 0.5
    recipes = MLP_RECIPES
    sizes = (2, 32, 32, 2)
    batch_size = 64
    train_points = 4000
    test_points = 2000
    input_gain = 3.0

    def __init__(self, steps: int, seed: int):
        data_seed, init_seed, order_seed = _seeds(seed, 0)
        rng = np.random.default_rng(data_seed)
        self.steps = steps
        self.x, self.y = spirals(self.train_points, rng)
        self.test_x, self.test_y = spirals(self.test_points, rng)
        self._init_seed = init_seed
        self.order = batch_order(self.train_points, self.batch_size, steps, np.random.default_rng(order_seed))

    def new_model(self) -> MLP:
        """A fresh MLP with the task's initial weights (the same on every call)."""
        return MLP(self.sizes, np.random.default_rng(self._init_seed), input_gain=self.input_gain)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The points and labels of training step ``step`` (0-based)."""
        rows = self.order[step]
        return self.x[rows], self.y[rows]

    def evaluate(self, model: MLP) -> tuple[float, float]:
        """``(loss, accuracy)`` on the held-out points."""
        return model.evaluate(self.test_x, self.test_y)

    def describe(self) -> str:
        """The problem, the model and the data, in one sentence."""
        sizes = "-".join(map(str, self.sizes))
        return (
            f"two interleaved spirals, a {sizes} tanh MLP in float32, softmax cross-entropy; "
            f"{self.steps} steps of {self.batch_size} of {self.train_points} points; loss and accuracy "
            f"on {self.test_points} held-out points (chance 50%)"
        )


class ClickTask:
    """Click logs with 8 categorical fields (:func:`~optkernels.demo.data.click_logs`) hashed into a
    2^16 x 8 float32 embedding table, scored by a :class:`~optkernels.demo.click.ClickModel`; every training
    row is seen once (``steps`` batches of 256), the score is the loss and ROC AUC on 16,384 held-out rows.

    The true click probabilities are known, so the report also gives the loss and AUC of the generating
    model itself: the best any model can expect.

    Args:
        steps: training steps (>= 1).
        seed: the seed of the data, the initial weights (the batch order is the data's).
    """

    title = "click-through"
    score_name = "AUC"
    chance = 0.5
    recipes = CLICK_RECIPES
    rows = 2**16
    dim = 8
    batch_size = 256
    test_rows = 2**14

    def __init__(self, steps: int, seed: int):
        data_seed, init_seed, _ = _seeds(seed, 1)
        rng = np.random.default_rng(data_seed)
        self.steps = steps
        test, effects = click_logs(self.test_rows, rng)  # first: the same for any number of steps
        train, _ = click_logs(steps * self.batch_size, rng, effects)
        self.train_rows = hash_features(train.values, self.rows)
        self.train_clicks = train.clicks
        self.test_rows_hashed = hash_features(test.values, self.rows)
        self.test_clicks = test.clicks
        log_odds = np.log(test.probability) - np.log1p(-test.probability)
        self.true_loss = logistic_loss(log_odds, test.clicks.astype(np.float64))[0]
        self.true_auc = roc_auc(test.probability, test.clicks)
        self._init_seed = init_seed

    def new_model(self) -> ClickModel:
        """A fresh click model with the task's initial weights (the same on every call)."""
        return ClickModel(self.rows, self.dim, np.random.default_rng(self._init_seed))

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The table rows ``(256, fields)`` and clicks of training step ``step`` (0-based)."""
        rows = slice(step * self.batch_size, (step + 1) * self.batch_size)
        return self.train_rows[rows], self.train_clicks[rows]

    def evaluate(self, model: ClickModel) -> tuple[float, float]:
        """``(loss, AUC)`` on the held-out rows."""
        return model.evaluate(self.test_rows_hashed, self.test_clicks)

    def describe(self) -> str:
        """The problem, the model and the data, in one sentence."""
        return (
            f"{len(FIELD_SIZES)} categorical fields hashed into a {self.rows} x {self.dim} float32 "
            f"embedding table (row-sparse gradients), logistic regression on the summed embeddings; "
            f"{self.steps} steps of {self.batch_size} new rows; loss and AUC on {self.test_rows} "
            f"held-out rows (chance AUC 0.5; the true click probabilities score loss "
            f"{self.true_loss:.4f}, AUC {self.true_auc:.4f})"
        )
