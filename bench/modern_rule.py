"""One drop-in's rows of the ``modern`` group, repeated: the rule's canonical CPU paths and
``optkernels.torch`` on the bench's transformer, by the group's own protocol (:func:`modern.run_models`:
fresh copies of the model, two warm-up steps each, then ``--rounds`` interleaved rounds of backward + timed
step), ``--repeats`` times in one process.

    PYTHONPATH=. python bench/modern_rule.py [--rule SGDScheduleFree] [--repeats 10] [--rounds 10]

Per repeat it prints each contender's median, the group's verdict ratio (the fastest canonical median over
ours, as ``modern.model_targets`` computes it) and the paired ratio (the median over rounds of that
canonical path's time over ours in the same round); then the medians and ranges of both over the repeats.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import optional, paired_ratio  # noqa: E402
from modern import _canonical, _ours  # noqa: E402
from torch_step import build_model, measure  # noqa: E402

RULES = ("Lion", "ADOPT", "AdEMAMix", "AdamWScheduleFree", "SGDScheduleFree")


def runs(torch, rule: str, base) -> dict:
    """label -> (model, step) of each contender, as :func:`modern.run_models` builds them."""
    builders = dict(_canonical(torch, rule), **{f"optkernels.torch.{rule}": _ours(rule)})
    out = {}
    for label, build in builders.items():
        model = copy.deepcopy(base)
        params = list(model.parameters())
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = build(params)
        if hasattr(opt, "train") and callable(opt.train):
            opt.train()
        out[label] = (model, opt.step)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rule", default="SGDScheduleFree", choices=RULES)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--width", default="small", choices=("small", "medium"))
    args = parser.parse_args(argv)
    torch = optional("torch")
    if torch is None:
        print("torch is not installed")
        return 1
    import optkernels.torch  # noqa: F401  (its threading layer first, as modern.run does)

    base = build_model(torch, "cpu", args.width)
    ours = f"optkernels.torch.{args.rule}"
    verdicts, paired = [], []
    for repeat in range(args.repeats):
        times = measure(torch, runs(torch, args.rule, base), args.rounds)
        medians = {label: statistics.median(ts) for label, ts in times.items()}
        fastest = min((label for label in medians if label != ours), key=medians.__getitem__)
        verdicts.append(medians[fastest] / medians[ours])
        paired.append(paired_ratio(times[fastest], times[ours]))
        shown = "  ".join(f"{label} {1e3 * m:.3f} ms" for label, m in medians.items())
        print(f"{repeat:2d}: {shown}  verdict {verdicts[-1]:.2f}x  paired {paired[-1]:.2f}x", flush=True)
    for name, values in (("verdict", verdicts), ("paired", paired)):
        print(f"{name}: median {statistics.median(values):.2f}x, range {min(values):.2f}-{max(values):.2f}x, "
              f"{sum(v < 3.0 for v in values)} of {len(values)} under 3x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
