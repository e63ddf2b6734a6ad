"""The ``torch`` group: one ``step()`` of Adam over a real 100-tensor torch model (a small transformer built
from ``torch.nn``), optkernels.torch.Adam next to torch's own Adam (fused, foreach and for-loop), next to
optkernels' NumPy ``Adam`` class over the same tensors' memory, and next to a memory kernel moving the
same bytes.

    PYTHONPATH=. python bench/torch_step.py [--rounds 60] [--width small|medium]

The model: ``nn.Embedding(1000, d)``, 8 ``nn.TransformerEncoderLayer(d, 4, ff)``, a final ``nn.LayerNorm``
and an ``nn.Linear(d, 1000)`` head: 101 parameter tensors; "small" (d=64, ff=256: 0.53 million float32
elements) and "medium" (d=128, ff=512: 1.84 million).

Protocol: each contender trains its own copy of the model, and the step is timed where a training loop
runs it: right after that copy's forward and backward pass (gradients zeroed in place, so the NumPy class's
views stay valid). The step then starts as it does in training: the gradients just written, torch's
OpenMP threads just busy with the backward pass. Contenders take turns, a new order every round
(:func:`harness.round_orders`), and medians are reported. The "limit" contender does the same and then
times the Adam-shaped memory kernel (4 reads, 3 writes, one add each: ``dense.adam_shaped_memory``) over
flat float32 arrays of the model's size: the step's bytes at the machine's memory speed. Where torch sees
a CUDA device, optkernels.torch.Adam and torch's fused CUDA Adam are timed the same way there.

``import optkernels.torch`` asks Numba for its OpenMP layer when no kernel has run yet (README, "Threads
and processes"): run the group alone (``--only torch``) to measure that; after other groups it runs under
the layer they started, which the group's note names.

Targets (``bench/targets.py``): optkernels.torch.Adam at least 1.5x faster than torch's fastest CPU Adam,
and within 1.05x of the NumPy ``Adam`` class (the adapter adds under 5%). The group then times every
optkernels.torch class that bears a torch.optim name against torch's paths for it (:mod:`torch_classes`).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np

from harness import round_orders

CASE = "Adam step, torch transformer (101 tensors)"
IMPLS = {
    "okt": "optkernels.torch.Adam",
    "numpy": "optkernels.optimizers.Adam (NumPy views)",
    "fused": "torch Adam(fused=True)",
    "foreach": "torch Adam(foreach=True)",
    "forloop": "torch Adam(foreach=False)",
    "limit": "Adam-shaped memory kernel (same bytes)",
}

#: Model widths (d_model, feed-forward): both give 101 tensors; 0.53 and 1.84 million elements.
WIDTHS = {"small": (64, 256), "medium": (128, 512)}
BATCH = (8, 32)


def build_model(torch, device: str = "cpu", width: str = "medium"):
    """The 101-tensor transformer (seeded)."""
    torch.manual_seed(0)
    d, ff = WIDTHS[width]
    layer = torch.nn.TransformerEncoderLayer(d, 4, ff, dropout=0.0, batch_first=True)
    model = torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(1000, d),
        "encoder": torch.nn.TransformerEncoder(layer, 8, enable_nested_tensor=False),
        "norm": torch.nn.LayerNorm(d),
        "head": torch.nn.Linear(d, 1000),
    }).to(device)
    return model


def backward(torch, model, ids) -> None:
    """One training iteration before the step: gradients zeroed in place, forward, loss, backward."""
    for p in model.parameters():
        p.grad.zero_()
    out = model["head"](model["norm"](model["encoder"](model["embed"](ids))))
    torch.nn.functional.cross_entropy(out.reshape(-1, 1000), ids.reshape(-1)).backward()


def contenders(torch, device: str = "cpu", width: str = "medium") -> tuple[dict, int, int]:
    """name -> (its model, a function doing one step); the tensor count and total size."""
    import optkernels.torch as okt
    from dense import adam_shaped_memory
    from optkernels.optimizers import Adam as NumpyAdam
    from optkernels.optimizers import Parameter

    base = build_model(torch, device, width)
    params = list(base.parameters())
    total = sum(p.numel() for p in params)
    names = list(IMPLS) if device == "cpu" else ["okt", "fused"]
    out = {}
    for name in names:
        model = copy.deepcopy(base)
        own = list(model.parameters())
        for p in own:
            p.grad = torch.zeros_like(p)      # zeroed in place every iteration: the addresses stay
        if name == "okt":
            step = okt.Adam(own, lr=1e-4).step
        elif name == "numpy":
            views = [Parameter(p.detach().numpy(), f"p{k}") for k, p in enumerate(own)]
            grads = tuple(p.grad.numpy() for p in own)
            numpy_opt = NumpyAdam(views, learning_rate=1e-4)
            step = lambda opt=numpy_opt, g=grads: opt(g)  # noqa: E731
        elif name == "limit":
            rng = np.random.default_rng(0)
            flat = [rng.standard_normal(total, dtype=np.float32) for _ in range(4)]
            step = lambda a=flat: adam_shaped_memory(*a)  # noqa: E731
        else:
            kw = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False)}
            step = torch.optim.Adam(own, lr=1e-4, **kw[name]).step
        if device != "cpu":
            step = lambda f=step, sync=torch.cuda.synchronize: (f(), sync())  # noqa: E731
        out[name] = (model, step)
    return out, len(params), total


def measure(torch, runs: dict, rounds: int, device: str = "cpu") -> dict[str, list[float]]:
    """Seconds of each contender's step over ``rounds`` training iterations (see the module docstring)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, BATCH, generator=gen).to(device)
    for model, step in runs.values():
        for _ in range(2):
            backward(torch, model, ids)
            step()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for order in round_orders(list(runs), rounds):
        for name in order:
            model, step = runs[name]
            backward(torch, model, ids)
            if device != "cpu":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return times


def run(suite) -> None:
    """The suite's "torch" group: rows of ``suite`` (a ``harness.Suite``)."""
    from harness import Row, optional

    torch = optional("torch")
    if torch is None:
        suite.note("torch group skipped: torch is not installed (pip install -e '.[torch]')")
        return
    runs = [("cpu", w) for w in WIDTHS] + ([("cuda", "medium")] if torch.cuda.is_available() else [])
    for device, width in runs:
        fns, count, total = contenders(torch, device, width)
        times = measure(torch, fns, 3 if suite.quick else 60, device)
        for name, ts in times.items():
            q = statistics.quantiles(ts, n=10) if len(ts) > 1 else [ts[0]]
            impl = IMPLS[name] + ("" if device == "cpu" else " (cuda)")
            suite.add(Row("torch", CASE, impl, total, statistics.median(ts), 28.0 * total,
                          f"{width}, {count} tensors; spread {(q[-1] - q[0]) / statistics.median(ts):.0%}"))
        if device == "cpu":
            from optkernels.kernels._threading import layer

            ours = times["okt"]
            fastest = min(("fused", "foreach", "forloop"), key=lambda k: statistics.median(times[k]))
            suite.note(f"torch group, {width} transformer ({total:.2e} elements): per-round paired ratios "
                       f"(median): {IMPLS[fastest]} / optkernels.torch.Adam = "
                       f"{paired(times[fastest], ours):.2f}; optkernels.torch.Adam / NumPy class = "
                       f"{paired(ours, times['numpy']):.3f}; memory kernel / optkernels.torch.Adam = "
                       f"{paired(times['limit'], ours):.2f}; Numba threading layer: {layer()}")
    import torch_classes

    torch_classes.run(suite, torch)


def paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of a/b (the two called in the same round)."""
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--width", choices=sorted(WIDTHS), default="medium")
    args = parser.parse_args()
    fns, count, total = contenders(torch, "cpu", args.width)
    times = measure(torch, fns, args.rounds)
    print(f"{count} tensors, {total} elements, {args.rounds} rounds, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, t in medians.items():
        print(f"  {IMPLS[name]:45} {t * 1e3:8.3f} ms  {28.0 * total / t / 1e9:5.1f} GB/s")
    fastest = min(medians[k] for k in ("fused", "foreach", "forloop"))
    print(f"  torch's fastest / optkernels.torch: {fastest / medians['okt']:.2f}x (target >= 1.5)")
    print(f"  optkernels.torch / NumPy class: {medians['okt'] / medians['numpy']:.3f} (target <= 1.05)")
    share = 100 * medians["limit"] / medians["okt"]
    print(f"  optkernels.torch at {share:.1f}% of the memory kernel's speed")


if __name__ == "__main__":
    main()
