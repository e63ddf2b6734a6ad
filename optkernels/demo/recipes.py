"""Which optimizers the demo trains, with hyper-parameters chosen for its two problems.

Each :class:`Recipe` builds a fresh optimizer of :mod:`optkernels.optimizers` over a model's parameters.
Names are matched case-insensitively; ``Adam`` is in both lists (dense on the MLP, row-sparse on the
click-through model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import optimizers as optim
from ..optimizers import Optimizer, Parameter

__all__ = ["CLICK_RECIPES", "MLP_RECIPES", "Recipe", "all_names", "canonical_name", "select"]


@dataclass(frozen=True)
class Recipe:
    """An optimizer with its demo settings.

    Attributes:
        name: the optimizer's name as shown (``"AdamWeightDecay"``).
        settings: the hyper-parameters in words, for the report (``"lr=0.01, weight_decay=1e-4"``).
        build: ``parameters -> optimizer``, a new optimizer each call.
    """

    name: str
    settings: str
    build: Callable[[Sequence[Parameter]], Optimizer]


# The spirals MLP (dense gradients). Learning rates: the best of a few values tried on seeds 0 to 2 with
# 1,000 and 2,000 steps (RMSProp's epsilon keeps its late steps from blowing up as gradients vanish).
MLP_RECIPES: tuple[Recipe, ...] = (
    Recipe("SGD", "lr=0.5", lambda ps: optim.SGD(ps, learning_rate=0.5)),
    Recipe(
        "Momentum", "lr=0.05, momentum=0.9", lambda ps: optim.Momentum(ps, learning_rate=0.05, momentum=0.9)
    ),
    Recipe("Adam", "lr=0.02", lambda ps: optim.Adam(ps, learning_rate=0.02)),
    Recipe(
        "AdamWeightDecay",
        "lr=0.01, weight_decay=1e-4",
        lambda ps: optim.AdamWeightDecay(ps, learning_rate=0.01, weight_decay=1e-4),
    ),
    Recipe("AdaMax", "lr=0.05", lambda ps: optim.AdaMax(ps, learning_rate=0.05)),
    Recipe(
        "RMSProp",
        "lr=0.02, decay=0.9, epsilon=1e-6",
        lambda ps: optim.RMSProp(ps, learning_rate=0.02, decay=0.9, epsilon=1e-6),
    ),
    Recipe("Lamb", "lr=0.01", lambda ps: optim.Lamb(ps, learning_rate=0.01)),
    Recipe(
        "LARS",
        "Momentum(lr=0.05, momentum=0.9), coefficient=0.05",
        lambda ps: optim.LARS(optim.Momentum(ps, learning_rate=0.05, momentum=0.9), coefficient=0.05),
    ),
    Recipe("AdaFactor", "relative step (MindSpore's defaults)", lambda ps: optim.AdaFactor(ps)),
)

# The click-through model: the embedding table's gradient is row-sparse, the head's dense.
CLICK_RECIPES: tuple[Recipe, ...] = (
    Recipe(
        "Adam", "lr=0.01 (sparse: every row's moments decay)", lambda ps: optim.Adam(ps, learning_rate=0.01)
    ),
    Recipe(
        "LazyAdam",
        "lr=0.01 (sparse: only the batch's rows)",
        lambda ps: optim.LazyAdam(ps, learning_rate=0.01),
    ),
    Recipe("FTRL", "lr=0.5, l1=0.001", lambda ps: optim.FTRL(ps, learning_rate=0.5, l1=0.001)),
    Recipe(
        "ProximalAdagrad",
        "lr=0.5, l2=0.001",
        lambda ps: optim.ProximalAdagrad(ps, learning_rate=0.5, l2=0.001),
    ),
)


def all_names() -> list[str]:
    """Every optimizer name the demo knows, in report order, without repeats."""
    names: list[str] = []
    for recipe in MLP_RECIPES + CLICK_RECIPES:
        if recipe.name not in names:
            names.append(recipe.name)
    return names


def canonical_name(text: str) -> str | None:
    """The demo's spelling of an optimizer name given in any case (``"adamweightdecay"`` →
    ``"AdamWeightDecay"``), or None if the demo has no such optimizer."""
    for name in all_names():
        if name.lower() == text.strip().lower():
            return name
    return None


def select(recipes: Sequence[Recipe], names: Sequence[str] | None) -> list[Recipe]:
    """The recipes whose names are in ``names`` (case-insensitive), in the recipes' order; all of them if
    ``names`` is None."""
    if names is None:
        return list(recipes)
    wanted = {name.lower() for name in names}
    return [recipe for recipe in recipes if recipe.name.lower() in wanted]
