"""Cost of each part of the 8-bit Adam step's block of 256, one thread, data in L1/L2 (48 blocks).

    python bench/lowbit_parts.py [--rounds 7] [--reps 200] [--only requantize ...]

Each part runs alone over the same blocks, from the kernel's own helpers (``blockwise_optim``): both
states dequantized, the Adam rule with the parameter and both block maxima (one loop, as in the kernel),
the requantization of state 1 and of state 2, then the whole block (``_block_8bit``). Interleaved rounds, medians (and minima) in ns
per element; the parts do not add up exactly to the whole (no part pays the block's own overhead). The
searches leave keys in place of their values, so each requantization part first copies its block's
values in again (a copy of 1 KiB per block that its time includes).
Prints only; nothing is recorded.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optkernels.kernels import blockwise_optim as B
from optkernels.kernels import quantization as Q

F = np.float32
NB = 48
N = NB * 256
Q1, Q2 = Q.dynamic_map(True), Q.dynamic_map(False)
PLANES = Q.table_planes(Q1, Q2)
MIDS1, START1 = Q.search_tables(Q1, "cpu", sign_fix=True)
MIDS2, START2 = Q.search_tables(Q2, "cpu")
KEYS = Q.step_register_tables(Q1, Q2)
NEG = Q.sign_split(Q1)
FIRST, DECAYED, H = B.step_scalars(B.ADAM, 10, 1e-3, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.0)
OPTIONS = dict(error_model="numpy")


@numba.njit(**OPTIONS)
def dequantize(reps, p, g, c1, c2, a1, a2, scratch, fresh):
    for _ in range(reps):
        for b in range(NB):
            B._dequantize_into(scratch, b * 1024, c1, b * 256, 256, Q1, PLANES, 0, a1[b])
            B._dequantize_into(scratch, b * 1024 + 512, c2, b * 256, 256, Q2, PLANES, 1024, a2[b])


@numba.njit(**OPTIONS)
def rule(reps, p, g, c1, c2, a1, a2, scratch, fresh):
    for _ in range(reps):
        for b in range(NB):
            most1, most2 = B._magnitude(B.NAN), B._magnitude(B.NAN)
            for k in range(256):
                i, m, v = np.uint64(b * 256 + k), np.uint64(b * 1024 + k), np.uint64(b * 1024 + 512 + k)
                x, m1, _, v1 = B._rule_call(
                    B.ADAM, p[i], g[i], scratch[m], B.ZERO, scratch[v], FIRST, DECAYED, H[0], H[1], H[2],
                    H[3], H[4], H[5], H[6], H[7], H[8], H[9], H[10], H[11], H[12], H[13], H[14], False, True,
                )
                p[i] = x
                scratch[m] = m1
                scratch[v] = v1
                h1, h2 = B._abs_bits(m1), B._abs_bits(v1)
                most1 = h1 if h1 > most1 else most1
                most2 = h2 if h2 > most2 else most2
            a1[b] = B._merge_top(most1, B.NEG_MAX)
            a2[b] = B._merge_top(most2, B.NEG_MAX)


@numba.njit(**OPTIONS)
def requantize_1(reps, p, g, c1, c2, a1, a2, scratch, fresh):
    for _ in range(reps):
        for b in range(NB):
            for k in range(256):
                scratch[b * 1024 + k] = fresh[b * 1024 + k]
            if not B._requantize_dynamic(c1, b * 256, scratch, b * 1024, 256, a1[b], KEYS, 0, True, False, True):
                B._requantize(c1, b * 256, scratch, b * 1024, 256, a1[b], Q1, MIDS1, START1, NEG, True,
                              b * 1024 + 768, KEYS, 0, False)


@numba.njit(**OPTIONS)
def requantize_2(reps, p, g, c1, c2, a1, a2, scratch, fresh):
    for _ in range(reps):
        for b in range(NB):
            for k in range(256):
                scratch[b * 1024 + 512 + k] = fresh[b * 1024 + 512 + k]
            if not B._requantize_dynamic(c2, b * 256, scratch, b * 1024 + 512, 256, a2[b], KEYS, Q.REGISTER_WORDS,
                                         False, a2[b] >= 0, False):
                B._requantize(c2, b * 256, scratch, b * 1024 + 512, 256, a2[b], Q2, MIDS2, START2, NEG, False,
                              b * 1024 + 768, KEYS, Q.REGISTER_WORDS, a2[b] >= 0)


@numba.njit(**OPTIONS)
def whole_block(reps, p, g, c1, c2, a1, a2, scratch, fresh):
    for _ in range(reps):
        for b in range(NB):
            B._block_8bit(B.ADAM, b, p, g, c1, c2, c1, a1, a2, a1, Q1, Q2, PLANES, MIDS1, START1, MIDS2,
                          START2, KEYS, NEG, N, FIRST, DECAYED, H, scratch, 0)


PARTS = {"dequantize both": dequantize, "rule + p + absmax": rule,
         "requantize m": requantize_1, "requantize v": requantize_2, "whole block": whole_block}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--only", nargs="*", default=None, help="parts whose name contains one of these")
    args = parser.parse_args()
    parts = {k: f for k, f in PARTS.items() if not args.only or any(w in k for w in args.only)}
    rng = np.random.default_rng(0)
    g = rng.standard_normal(N, dtype=F) * F(0.01)
    arrays = [rng.standard_normal(N, dtype=F), g, np.zeros(N, np.uint8), np.zeros(N, np.uint8),
              np.zeros(NB, F), np.zeros(NB, F), np.zeros(NB * 1024, F)]
    whole_block(3, *arrays[:6], arrays[6][:1024], arrays[6])  # a few steps: realistic codes and maxima
    dequantize(1, *arrays, arrays[6])  # the states each part starts from: dequantized, one step of the rule
    rule(1, *arrays, arrays[6])
    start = [a.copy() for a in arrays]
    start.append(start[6].copy())  # the requantization parts' fresh values
    for f in parts.values():
        f(1, *[a.copy() for a in start])
    results: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(args.rounds):
        for name, f in parts.items():
            work = [a.copy() for a in start]
            t0 = time.perf_counter()
            f(args.reps, *work)
            results[name].append((time.perf_counter() - t0) / (args.reps * N) * 1e9)
    print(f"{'part':18s} {'median':>8s} {'min':>8s}  ns/element, one thread")
    for name, values in results.items():
        print(f"{name:18s} {statistics.median(values):8.3f} {min(values):8.3f}")


if __name__ == "__main__":
    main()
