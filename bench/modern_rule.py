"""One drop-in's rows of the ``modern`` group, repeated: the rule's canonical CPU paths and
``optkernels.torch`` on the bench's transformer, by the group's own protocol (:func:`modern.run_models`:
fresh copies of the model, two warm-up steps each, then ``--rounds`` interleaved rounds of backward + timed
step), ``--repeats`` times in one process.

    PYTHONPATH=. python bench/modern_rule.py [--rule SGDScheduleFree] [--repeats 10] [--rounds 30]

Per repeat it prints each contender's median, the ratio of medians (the fastest canonical path's over
ours) and the paired ratio (the median over rounds of that path's time over ours in the same round: the
group's verdict, ``modern.model_targets``); then the medians and ranges of both over the repeats
(``--rounds 10``: the group's protocol before it took 30 rounds and the paired verdict).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import optional, paired_ratio
from modern import ROUNDS, contenders
from torch_step import build_model, measure

RULES = ("Lion", "ADOPT", "AdEMAMix", "AdamWScheduleFree", "SGDScheduleFree")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rule", default="SGDScheduleFree", choices=RULES)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--width", default="small", choices=("small", "medium"))
    args = parser.parse_args(argv)
    torch = optional("torch")
    if torch is None:
        print("torch is not installed")
        return 1
    import optkernels.torch  # noqa: F401  (its threading layer first, as modern.run does)

    base = build_model(torch, "cpu", args.width)
    ours = f"optkernels.torch.{args.rule}"
    medians_ratio, paired = [], []
    for repeat in range(args.repeats):
        times = measure(torch, contenders(torch, args.rule, base), args.rounds)
        medians = {label: statistics.median(ts) for label, ts in times.items()}
        fastest = min((label for label in medians if label != ours), key=medians.__getitem__)
        medians_ratio.append(medians[fastest] / medians[ours])
        paired.append(paired_ratio(times[fastest], times[ours]))
        shown = "  ".join(f"{label} {1e3 * m:.3f} ms" for label, m in medians.items())
        print(f"{repeat:2d}: {shown}  medians {medians_ratio[-1]:.2f}x  paired {paired[-1]:.2f}x", flush=True)
    for name, values in (("ratio of medians", medians_ratio), ("paired", paired)):
        print(f"{name}: median {statistics.median(values):.2f}x, range {min(values):.2f}-{max(values):.2f}x, "
              f"{sum(v < 3.0 for v in values)} of {len(values)} under 3x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
