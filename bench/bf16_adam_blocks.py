"""torch's bfloat16 Adam loop with and without its register-table blocks, paired in one process.

    python bench/bf16_adam_blocks.py [--sizes 1e5 1e6] [--threads 1 2] [--rounds 21]

Builds the all-bfloat16 split loop of ``torch_rules._torch_adam`` twice, the pair loop alone and with
``_bf16_adam_block.any_target_pair_blocks`` (the blocks wherever the CPU has AVX-512 BW, whatever
``blocks_here`` decides for the package), runs both on the arguments of an ``optkernels.torch.Adam`` step
(bfloat16 parameters, torch's for-loop bits), interleaved, and prints the medians (and minima) in us and the
median ratio of the paired rounds: the measurement behind ``blocks_here``'s choice of processors. Prints
only; nothing is recorded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import optkernels.torch as okt
from cpu_adam import _torch_param
from optkernels.kernels import _elementwise as E
from optkernels.kernels._bf16_adam_block import any_target_pair_blocks, word_permutes
from optkernels.kernels.torch_rules import _torch_adam


def _step_arguments(n: int) -> tuple:
    """``(arguments, keep)``: the arguments of the split loop's launch in a third step of
    ``optkernels.torch.Adam`` over ``n`` bfloat16 elements (captured from the launch), and the parameter and
    optimizer, whose memory some of those arrays view without holding it (the caller keeps them)."""
    captured = []
    launch = E._launch_chunked

    def spy(driver, workspace, size, args, large=None):
        captured.append(args)
        return launch(driver, workspace, size, args, large)

    E._launch_chunked = spy
    try:
        p = _torch_param(torch, n, "bfloat16", 1)
        optimizer = okt.Adam([p], lr=1e-3)
        for _ in range(3):
            optimizer.step()
    finally:
        E._launch_chunked = launch
    return captured[-1], (p, optimizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=21)
    options = parser.parse_args()
    if not word_permutes():
        print("this CPU has no AVX-512 BW: no blocks to compare")
        return
    for n in (int(s) for s in options.sizes):
        args, _keep = _step_arguments(n)
        key = next(k for k in _torch_adam.__dict__["_half_drivers"] if k[0] == "cpu")
        _, kinds, _, flags = key
        loops = {
            name: E._fused_split_driver(
                _torch_adam.py_func, kinds, flags, cache=False, part=_torch_adam.part_scalar, blocks=blocks
            )
            for name, blocks in (("pairs", None), ("blocks", any_target_pair_blocks))
        }
        repeats = max(1, int(2e6 // n))
        for parts in options.threads:
            times: dict = {name: [] for name in loops}
            for loop in loops.values():
                for _ in range(3):
                    loop(parts > 1, parts, n, parts, *args)
            for _ in range(options.rounds):
                for name, loop in loops.items():
                    start = time.perf_counter()
                    for _ in range(repeats):
                        loop(parts > 1, parts, n, parts, *args)
                    times[name].append((time.perf_counter() - start) / repeats * 1e6)
            for name, values in times.items():
                print(
                    f"n={n:.0e} threads={parts} {name:6s} median {statistics.median(values):9.1f} us  "
                    f"min {min(values):9.1f}"
                )
            ratio = statistics.median(b / a for a, b in zip(times["pairs"], times["blocks"]))
            print(f"n={n:.0e} threads={parts} blocks/pairs time, median of paired rounds: {ratio:.3f}")


if __name__ == "__main__":
    main()
