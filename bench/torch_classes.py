"""The ``torch`` group's per-class rows: one ``step()`` of every optkernels.torch class that bears a
torch.optim name, next to torch's own CPU paths for that class (fused, foreach, for-loop: those torch has),
on the 101-tensor transformers of :mod:`torch_step`.

    PYTHONPATH=. python bench/torch_classes.py [--rounds 12] [--width small medium] [--only Adam SGD ...]

Protocol as :mod:`torch_step`'s: each contender trains its own copy of the model and its step is timed right
after that copy's forward and backward pass; contenders take turns in a new order every round and the paired
ratio (torch's fastest path / ours, both timed in the same round) is reported as a median over rounds.
Muon steps the model's 2-D matrices (the only parameters torch's Muon takes); SparseAdam steps the
embedding table, its gradient sparse (``nn.Embedding(sparse=True)``). Target (``bench/targets.py``): each
class at least 1.5x torch's fastest CPU path.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

from harness import round_orders
from torch_step import BATCH, WIDTHS, build_model

CASE = "torch.optim class step, torch transformer"

#: label -> (class name, constructor keywords, the parameters it steps: 'all', '2d' or 'sparse')
CLASSES = {
    "SGD": ("SGD", dict(lr=1e-3), "all"),
    "SGD (momentum)": ("SGD", dict(lr=1e-3, momentum=0.9), "all"),
    "Adam": ("Adam", dict(lr=1e-4), "all"),
    "AdamW": ("AdamW", dict(lr=1e-4), "all"),
    "Adagrad": ("Adagrad", dict(lr=1e-3), "all"),
    "RMSprop": ("RMSprop", dict(lr=1e-4), "all"),
    "Adamax": ("Adamax", dict(lr=1e-4), "all"),
    "NAdam": ("NAdam", dict(lr=1e-4), "all"),
    "RAdam": ("RAdam", dict(lr=1e-4), "all"),
    "Adadelta": ("Adadelta", dict(), "all"),
    "ASGD": ("ASGD", dict(lr=1e-3), "all"),
    "Rprop": ("Rprop", dict(lr=1e-4), "all"),
    "Adafactor": ("Adafactor", dict(lr=1e-3), "all"),
    "Muon": ("Muon", dict(lr=1e-3), "2d"),
    "SparseAdam": ("SparseAdam", dict(lr=1e-4), "sparse"),
}

#: The classes of a quick run (``--quick``).
QUICK = ("SGD (momentum)", "SparseAdam")

#: torch's CPU paths per class (torch 2.13): the keyword that selects each.
FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}
ONE_PATH = {"Muon", "SparseAdam"}


def torch_paths(name: str) -> dict[str, dict]:
    """torch's CPU implementations of class ``name``: path -> constructor keywords."""
    if name in ONE_PATH:
        return {"default": {}}
    paths = {"foreach": dict(foreach=True), "forloop": dict(foreach=False)}
    if name in FUSED:
        paths = {"fused": dict(fused=True), **paths}
    return paths


def impl_name(label: str, path: str | None) -> str:
    """The row's implementation name: ``optkernels.torch.<label>`` or ``torch <label> (<path>)``."""
    return f"optkernels.torch.{label}" if path is None else f"torch {label} ({path})"


def _stepped(model, which: str) -> list:
    params = list(model.parameters())
    if which == "2d":
        return [p for p in params if p.ndim == 2]
    if which == "sparse":
        return [model["embed"].weight]
    return params


def contenders(torch, label: str, width: str) -> tuple[dict, int]:
    """path (None: ours) -> (model, step); the stepped element count."""
    import optkernels.torch as okt

    name, kwargs, which = CLASSES[label]
    base = build_model(torch, "cpu", width)
    if which == "sparse":
        base["embed"].sparse = True
    out = {}
    for path, extra in [(None, {})] + list(torch_paths(name).items()):
        model = copy.deepcopy(base)
        for p in model.parameters():
            if not (which == "sparse" and p is model["embed"].weight):
                p.grad = torch.zeros_like(p)  # zeroed in place every iteration: the addresses stay
        cls = getattr(okt, name) if path is None else getattr(torch.optim, name)
        out[path] = (model, cls(_stepped(model, which), **kwargs, **extra).step)
    return out, sum(p.numel() for p in _stepped(base, which))


def backward(torch, model, ids) -> None:
    """One training iteration before the step: dense gradients zeroed in place, a sparse one dropped."""
    for p in model.parameters():
        if p.grad is not None:
            if p.grad.is_sparse:
                p.grad = None
            else:
                p.grad.zero_()
    out = model["head"](model["norm"](model["encoder"](model["embed"](ids))))
    torch.nn.functional.cross_entropy(out.reshape(-1, 1000), ids.reshape(-1)).backward()


def measure(torch, runs: dict, rounds: int) -> dict:
    """Seconds of each contender's step over ``rounds`` training iterations, in a new order every round."""
    ids = torch.randint(0, 1000, BATCH, generator=torch.Generator().manual_seed(1))
    for model, step in runs.values():
        for _ in range(2):
            backward(torch, model, ids)
            step()
    times: dict = {name: [] for name in runs}
    for order in round_orders(list(runs), rounds):
        for name in order:
            model, step = runs[name]
            backward(torch, model, ids)
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return times


def paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of a/b (the two called in the same round)."""
    return statistics.median(x / y for x, y in zip(a, b))


def fastest_path(times: dict) -> str:
    """torch's path with the smallest median step time."""
    return min((k for k in times if k is not None), key=lambda k: statistics.median(times[k]))


def run(suite, torch, widths=tuple(WIDTHS), labels=tuple(CLASSES), rounds: int | None = None) -> None:
    """Rows of every class and width into ``suite`` (a ``harness.Suite``), one note per width with the
    paired ratios."""
    from harness import Row

    if suite.quick:  # a smoke test: two classes (a dense and a sparse one), the small model, two rounds
        widths, labels, rounds = ("small",), QUICK, 2
    rounds = rounds or 12
    for width in widths:
        ratios = []
        for label in labels:
            runs, total = contenders(torch, label, width)
            times = measure(torch, runs, rounds)
            for path, ts in times.items():
                suite.add(Row("torch", CASE, impl_name(label, path), total, statistics.median(ts), 0.0,
                              f"{width}, {CLASSES[label][0]}"))
            best = fastest_path(times)
            ratios.append(f"{label} {paired(times[best], times[None]):.2f} (vs {best})")
        suite.note(f"torch classes, {width} transformer, {rounds} rounds: per-round paired ratios (median), "
                   f"torch's fastest CPU path / optkernels.torch: " + "; ".join(ratios))


def main() -> None:
    import torch

    from harness import Suite

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--width", nargs="+", choices=sorted(WIDTHS), default=list(WIDTHS))
    parser.add_argument("--only", nargs="+", choices=list(CLASSES), default=list(CLASSES))
    args = parser.parse_args()
    run(Suite(), torch, args.width, args.only, args.rounds)


if __name__ == "__main__":
    main()
