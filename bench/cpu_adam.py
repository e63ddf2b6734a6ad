"""Host Adam against DeepSpeed's CPUAdam (``deepspeed.ops.adam.DeepSpeedCPUAdam``, ZeRO-Offload's host
kernel), float32 and bfloat16 parameters; part of the dense group.

At each N, interleaved: ``apply_adam`` on NumPy arrays, ``optkernels.torch.Adam`` and DeepSpeed's CPUAdam
on torch tensors, the offload's host part (``adam_no_update_param``), and the memory limits: an Adam-shaped
kernel with the same loads and stores and no arithmetic, with plain stores and with non-temporal stores
(they bypass the caches: no read of the line before it is written); the fastest of them is the physical
limit of the step here, stated in a note. Bytes per element: float32 28 (4 reads, 3 writes). bfloat16: DeepSpeed's
mode is bfloat16 parameter and gradient with float32 moments (``fp32_optimizer_states=True``, its default),
22 bytes; apply_adam runs on the same layout; optkernels.torch.Adam keeps torch.optim.Adam's configuration,
moments of the parameter's dtype (bfloat16): 14 bytes, with torch's for-loop rounding (every operation
rounded to bfloat16); ``optkernels.torch.Adam(fused=True)`` computes torch's fused CPU step (float32 math,
one rounding per stored tensor: torch.optim.Adam(fused=True)'s bits) on the same 14 bytes, and
``torch.optim.Adam(fused=True)`` is torch's own. Sizes 1e4 and up; each speed is also given as the median
over rounds of DeepSpeed's time over its own in the same round (``paired``).

Alone (the dense group runs it with its sizes)::

    python bench/cpu_adam.py [--dtypes bfloat16] [--sizes 1e4 1e5] [--rounds 41]

DeepSpeed is optional: where it does not import (or its op does not build), the group says why and goes on.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optkernels.kernels as K
from dense import adam_shaped_memory
from harness import Row, Suite, optional, paired_ratio

F = np.float32
BF16 = ml_dtypes.bfloat16
BYTES = {"float32": 28, "bfloat16": 22}
CASE = "Adam step vs DeepSpeed CPUAdam, {}"
DEEPSPEED = "DeepSpeed CPUAdam"
FUSED = "optkernels.torch.Adam(fused=True)"


#: Elements per non-temporal block: one 64-byte cache line of float32.
LINE = 16


@intrinsic
def _add_line_nontemporal(typingctx, var, m, v, g, start):
    """For the 16 float32 at ``start`` (64-byte aligned in all four arrays): ``x ← x + g`` for x in var, m, v,
    loaded as one vector each and stored with non-temporal hints (streaming stores: the line is not read
    before it is written)."""
    if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (var, m, v, g)):
        return None

    def codegen(context, builder, signature, args):
        vec = ir.VectorType(ir.FloatType(), LINE)
        hint = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        pointers = []
        for aryty, value in zip(signature.args[:4], args[:4]):
            ary = context.make_array(aryty)(context, builder, value)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[4]], wraparound=False)
            pointers.append(builder.bitcast(ptr, vec.as_pointer()))
        grad = builder.load(pointers[3], align=64)
        for ptr in pointers[:3]:
            total = builder.fadd(builder.load(ptr, align=64), grad)
            store = builder.store(total, ptr, align=64)
            store.set_metadata("nontemporal", hint)
        return context.get_dummy_value()

    return types.void(var, m, v, g, types.intp), codegen


@numba.njit(parallel=True, cache=True)
def _nt_lines(var, m, v, g, head, lines):
    for k in numba.prange(lines):
        _add_line_nontemporal(var, m, v, g, head + k * LINE)


@numba.njit(cache=True)
def _plain_span(var, m, v, g, lo, hi):
    for i in range(lo, hi):
        var[i] += g[i]
        m[i] += g[i]
        v[i] += g[i]


def adam_shaped_memory_nt(var, m, v, g):
    """:func:`dense.adam_shaped_memory` on float32 with non-temporal 64-byte vector stores: plain stores up
    to the first cache-line boundary and after the last, streaming stores between. The four arrays must
    share their offset within a cache line (large NumPy allocations do)."""
    offsets = {a.ctypes.data % 64 for a in (var, m, v, g)}
    if len(offsets) != 1 or offsets.pop() % 4:
        raise ValueError("the arrays do not share their offset within a 64-byte line")
    head = min(var.size, (-var.ctypes.data % 64) // 4)
    lines = (var.size - head) // LINE
    _plain_span(var, m, v, g, 0, head)
    _nt_lines(var, m, v, g, head, lines)
    _plain_span(var, m, v, g, head + lines * LINE, var.size)


def line_aligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose first element starts a 64-byte cache line."""
    raw = np.empty(a.nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start:start + a.nbytes].view(a.dtype)
    out[...] = a
    return out


@numba.njit(parallel=True, cache=True)
def adam_shaped_memory_mixed(var, m, v, g):
    """The traffic of a bfloat16-parameter step (var, g: 16-bit; m, v: float32): 22 bytes per element."""
    for i in numba.prange(var.size):
        a, b, c, d = var[i], m[i], v[i], g[i]
        var[i] = a + d
        m[i] = b + np.float32(d)
        v[i] = c + np.float32(d)


def deepspeed_adam():
    """``(DeepSpeedCPUAdam, None)``, or ``(None, why not)``: deepspeed does not import, or its op does not
    build or load (a first construction builds it)."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as error:  # any failure to import means "not here"
        return None, f"deepspeed does not import ({type(error).__name__}: {error}); pip install deepspeed"
    import torch

    try:  # the op builds (or loads) on the first construction
        DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    except Exception as error:  # a failed build means "not here" too
        return None, f"DeepSpeed's cpu_adam op does not build or load ({type(error).__name__}: {error})"
    return DeepSpeedCPUAdam, None


def _arrays(n: int, dtype, seed: int) -> list[np.ndarray]:
    """var, m, v, g: var and g in ``dtype``, the moments float32 (v positive)."""
    rng = np.random.default_rng(seed)
    var, m, v, g = (rng.standard_normal(n, dtype=F) * F(0.1) for _ in range(4))
    v = np.abs(v) + F(0.1)
    return [var.astype(dtype), m, v, g.astype(dtype)]


def _torch_param(torch, n: int, dtype: str, seed: int):
    var, _, _, g = _arrays(n, np.float32, seed)
    tdtype = getattr(torch, dtype)
    p = torch.nn.Parameter(torch.from_numpy(var).to(tdtype))
    p.grad = torch.from_numpy(g).to(tdtype)
    return p


def implementations(n: int, dtype: str, torch, ds_adam) -> dict:
    """impl name -> (zero-argument step, bytes per element), each with its own state."""
    np_dtype = F if dtype == "float32" else BF16
    ours = _arrays(n, np_dtype, 1)
    host = _arrays(n, np_dtype, 1)
    delta = np.empty(n, F)
    impls = {
        "apply_adam": (lambda: K.apply_adam(*ours[:3], 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, ours[3]),
                       BYTES[dtype]),
        "offload host part (adam_no_update_param)": (
            lambda: K.adam_no_update_param(host[1], host[2], 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, host[3],
                                           out=delta), 24 if dtype == "float32" else 22),
    }
    limit = _arrays(n, np_dtype, 2)
    if dtype == "float32":
        impls["limit (plain stores)"] = (lambda: adam_shaped_memory(*limit), 28)
        streamed = [line_aligned(a) for a in _arrays(n, np_dtype, 2)]
        impls["limit (non-temporal stores)"] = (lambda: adam_shaped_memory_nt(*streamed), 28)
    else:
        bits = [a.view(np.uint16) if a.dtype == BF16 else a for a in limit]
        impls["limit (plain stores)"] = (lambda: adam_shaped_memory_mixed(*bits), 22)
    if torch is not None:
        import optkernels.torch as okt

        moved = BYTES[dtype] if dtype == "float32" else 14  # torch's layout: moments of the parameter's dtype
        mine = _torch_param(torch, n, dtype, 1)
        impls["optkernels.torch.Adam"] = (okt.Adam([mine], lr=1e-3).step, moved)
        fused = _torch_param(torch, n, dtype, 1)
        impls[FUSED] = (okt.Adam([fused], lr=1e-3, fused=True).step, moved)
        torch_fused = _torch_param(torch, n, dtype, 1)
        impls["torch.optim.Adam(fused=True)"] = (torch.optim.Adam([torch_fused], lr=1e-3, fused=True).step,
                                                 moved)
        if ds_adam is not None:
            theirs = _torch_param(torch, n, dtype, 1)
            impls[DEEPSPEED] = (ds_adam([theirs], lr=1e-3, adamw_mode=False).step, BYTES[dtype])
    return impls


def run(suite: Suite, sizes: list[int], dtypes: tuple[str, ...] = ("float32", "bfloat16"),
        rounds: int = 0) -> None:
    """The DeepSpeed comparison at each of ``sizes`` (and 1e4, unless quick), for each of ``dtypes``;
    ``rounds``: interleaved rounds per size (0: the suite's default, 21 up to 1e6, 11 above)."""
    torch = optional("torch")
    ds_adam, why = deepspeed_adam() if torch is not None else (None, "torch is not installed")
    if ds_adam is None:
        suite.note(f"DeepSpeed's CPUAdam anchor skipped: {why}")
    else:
        torch.set_num_threads(numba.get_num_threads())
        suite.note(f"DeepSpeed CPUAdam: torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
                   f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
                   f"{numba.get_num_threads()} Numba threads")
    suite.note("bfloat16: DeepSpeed and apply_adam on bfloat16 parameters and gradients with float32 moments "
               "(22 B/element); optkernels.torch.Adam (torch's for-loop bits), optkernels.torch.Adam(fused=True) "
               "(torch's fused bits) and torch.optim.Adam(fused=True) with torch.optim.Adam's bfloat16 moments "
               "(14 B/element)")
    if not suite.quick:
        sizes = sorted({int(1e4), *sizes})
    for dtype in dtypes:
        for n in sizes:
            repeats = rounds or (3 if suite.quick else (21 if n <= 1e6 else 11))
            inner = max(1, int((3e5 if suite.quick else 3e6) // n))
            impls = implementations(n, dtype, torch, ds_adam)
            steps = {k: f for k, (f, _) in impls.items()}
            samples = suite.samples_interleaved(steps, repeats=repeats, inner=inner)
            anchor = samples.get(DEEPSPEED)
            for impl, values in samples.items():
                seconds = statistics.median(values)
                paired = paired_ratio(anchor, values) if anchor and impl != DEEPSPEED else 0.0
                note = f"{paired:.3f}x DeepSpeed's speed (paired)" if paired else ""
                suite.add(Row("dense", CASE.format(dtype), impl, n, seconds, impls[impl][1] * n, note, paired))
            _note_limit(suite, dtype, n, samples, impls)
            del impls


def _note_limit(suite: Suite, dtype: str, n: int, samples: dict, impls: dict) -> None:
    """At N >= 1e7: the physical limit of the step's bytes here (the fastest memory kernel), and each Adam
    step's share of it."""
    limits = {k: statistics.median(v) for k, v in samples.items() if k.startswith("limit")}
    if n < 1e7 or not limits:
        return
    best = min(limits, key=limits.get)
    per_element = impls[best][1]
    shares = ", ".join(f"{k} {100 * limits[best] / statistics.median(v):.0f}%" for k, v in samples.items()
                       if not k.startswith("limit") and impls[k][1] == per_element)
    suite.note(f"{dtype} N={n:.0e}: the physical limit of {per_element} B/element here is "
               f"{per_element * n / limits[best] / 1e9:.1f} GB/s, {limits[best] * 1e3:.1f} ms a step ({best}); "
               f"share of it: {shares}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"),
                        default=["float32", "bfloat16"])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7, 1e8])
    parser.add_argument("--rounds", type=int, default=0, help="rounds per size (default: the dense group's)")
    args = parser.parse_args(argv)
    run(Suite(), [int(n) for n in args.sizes], tuple(args.dtypes), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
