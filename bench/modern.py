"""The modern rules: their kernels (float32) against the memory limit of their own bytes, and their torch
drop-ins against the canonical packages on the bench's transformer.

Each kernel is timed interleaved with a memory kernel that reads and writes the kernel's own arrays (one add
per write, no other arithmetic): Lion and Schedule-Free SGD read 3 arrays and write 2 (20 B per element), ADOPT
and Schedule-Free AdamW read 4 and write 3 (28 B), AdEMAMix reads 5 and writes 4 (36 B).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator

import numba
import numpy as np

import optkernels.kernels as K
from dense import adam_shaped_memory
from harness import Row, Suite, optional, paired_ratio

F = np.float32
SIZES = (int(1e8),)
QUICK_SIZES = (int(1e5),)


@numba.njit(parallel=True, cache=True)
def two_state_memory(var, m, g):
    """Read var, m, g; write var, m (20 B per float32 element)."""
    for i in numba.prange(var.size):
        d = g[i]
        var[i] = var[i] + d
        m[i] = m[i] + d


@numba.njit(parallel=True, cache=True)
def four_state_memory(var, m1, m2, nu, g):
    """Read var, m1, m2, nu, g; write the first four (36 B per float32 element)."""
    for i in numba.prange(var.size):
        d = g[i]
        var[i] = var[i] + d
        m1[i] = m1[i] + d
        m2[i] = m2[i] + d
        nu[i] = nu[i] + d


def _arrays(n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.abs(rng.standard_normal(n, dtype=np.float32)) * F(0.1) + F(0.01) for _ in range(count)]


def cases(n: int) -> Iterator[tuple[str, int, Callable, Callable]]:
    """(kernel name, bytes per element, the kernel's step, the memory kernel's step) for size n, one at a
    time (each kernel's arrays are allocated when its turn comes). The memory kernel runs on the kernel's
    own arrays (the gradient last in both): the same pages and the same offsets between the arrays, so
    that the ratio compares the kernel's work with the traffic alone, not two sets of arrays."""
    memory = {3: two_state_memory, 4: adam_shaped_memory, 5: four_state_memory}
    steps = [
        ("lion", 3, lambda a: K.lion(*a, 1e-4, 0.9, 0.99, 0.1)),
        ("adopt", 4, lambda a: K.adopt(*a, 1e-3, 0.9, 0.9999, 1e-6, 0.0, 5, 5 ** 0.25)),
        ("ademamix", 5, lambda a: K.ademamix(*a, 1e-3, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01, 5)),
        ("schedule_free_adamw", 4, lambda a: K.schedule_free_adamw(*a, 2.5e-3, 0.9, 0.999, 1e-8, 0.0, 0.2, 5)),
        ("schedule_free_sgd", 3, lambda a: K.schedule_free_sgd(*a, 0.1, 0.9, 0.0, 0.2)),
    ]
    for seed, (name, count, step) in enumerate(steps, start=1):
        arrays = _arrays(n, count, seed)
        nbytes = 4 * (2 * count - 1)           # every array read, all but the gradient written
        yield (name, nbytes, lambda step=step, arrays=arrays: step(arrays),
               lambda kernel=memory[count], arrays=arrays: kernel(*arrays))


def run(suite: Suite) -> None:
    """The kernels at N=1e8 (quick: 1e5) against their memory limits, then the drop-ins on the transformer.
    With torch installed, ``optkernels.torch`` is imported first: the layer the kernel rows start is then
    the one it asks for (OpenMP, on torch's runtime), as in a training script and in the full run, not the
    TBB layer that the drop-ins would otherwise inherit (its worker competes with torch's spinning threads)."""
    if optional("torch") is not None:
        import optkernels.torch  # noqa: F401
    run_kernels(suite)
    run_models(suite)


def run_kernels(suite: Suite) -> None:
    for n in (QUICK_SIZES if suite.quick else SIZES):
        repeats = 3 if suite.quick else 11
        inner = max(1, int(3e6 // n))
        for name, nbytes, step, limit in cases(n):
            times = suite.time_interleaved({"optkernels": step, "limit": limit}, repeats=repeats, inner=inner)
            case = f"{name} memory kernel"
            suite.add(Row("modern", case, "limit", n, times["limit"], nbytes * n, ""))
            suite.add(Row("modern", name, "optkernels", n, times["optkernels"], nbytes * n,
                          f"{100 * times['limit'] / times['optkernels']:5.1f}% of limit"))


def targets(rows: list[Row], verdict) -> list[str]:
    """Each kernel at N=1e8 at >= 90% of its memory kernel's speed."""
    out = []
    for r in rows:
        if r.group != "modern" or r.impl != "optkernels" or r.n != int(1e8):
            continue
        limit = next(x for x in rows if x.case == f"{r.case} memory kernel" and x.n == r.n)
        frac = limit.seconds / r.seconds
        out.append(f"{r.case} N=1e8 at >= 90% of its memory limit: {100 * frac:.1f}% ({verdict(frac >= 0.9)})")
    return (out or ["modern rules' kernels N=1e8: not measured (group 'modern')"]) + model_targets(rows, verdict)


# ------------------------------------------------------------------------ the drop-ins on a torch model

MODEL_CASE = "{} step, torch transformer (101 tensors)"
#: Rounds of the drop-ins' protocol: the verdict is a median of per-round ratios, and the canonical paths'
#: steps (hundreds of OpenMP regions each) swing with any other work on the host; 10 rounds left the
#: Schedule-Free SGD verdict swinging by +-8% between reruns.
ROUNDS = 30


def _canonical(torch, rule: str) -> dict:
    """label -> constructor(params) of the canonical package's CPU paths for ``rule`` (those installed)."""
    out = {}
    if rule == "Lion":
        lion = optional("lion_pytorch")
        if lion is not None:
            from lion_pytorch.foreach import Lion as ForeachLion

            out["lion_pytorch.Lion"] = lambda ps: lion.Lion(ps, lr=1e-4, weight_decay=0.1)
            out["lion_pytorch.foreach.Lion"] = lambda ps: ForeachLion(ps, lr=1e-4, weight_decay=0.1)
    elif rule == "ADOPT":
        adopt = optional("adopt")
        if adopt is not None:
            for flag in (False, True):
                out[f"adopt.ADOPT(foreach={flag})"] = lambda ps, f=flag: adopt.ADOPT(ps, lr=1e-3, foreach=f)
    elif rule == "AdEMAMix":
        bnb = optional("bitsandbytes")
        if bnb is not None:
            out["bitsandbytes AdEMAMix"] = lambda ps: bnb.optim.AdEMAMix(ps, lr=1e-3, t_alpha=100, t_beta3=100)
    else:
        sf = optional("schedulefree")
        if sf is not None:
            for flag in (False, True):
                out[f"schedulefree.{rule}(foreach={flag})"] = (
                    lambda ps, f=flag: getattr(sf, rule)(ps, foreach=f))
    return out


def _ours(rule: str):
    import optkernels.torch as okt

    kwargs = {"Lion": dict(lr=1e-4, weight_decay=0.1), "ADOPT": dict(lr=1e-3),
              "AdEMAMix": dict(lr=1e-3, t_alpha=100, t_beta3=100)}.get(rule, {})
    return lambda ps: getattr(okt, rule)(ps, **kwargs)


def contenders(torch, rule: str, base) -> dict:
    """label -> (model, step) of ``rule``'s canonical CPU paths and our drop-in, each over its own copy of
    ``base`` (gradients allocated, Schedule-Free optimizers in train mode)."""
    import copy

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


def run_models(suite: Suite, width: str = "small") -> None:
    """Each drop-in against its canonical package's CPU paths, one step after each backward pass of its own
    copy of the bench's transformer (protocol of ``torch_step``, :data:`ROUNDS` rounds); target: 3x the
    fastest canonical path (by median), judged by the median over rounds of its time over ours in the same
    round (``paired``)."""
    from torch_step import build_model, measure

    torch = optional("torch")
    if torch is None:
        suite.note("modern drop-ins skipped: torch is not installed")
        return
    base = build_model(torch, "cpu", width)
    total = sum(p.numel() for p in base.parameters())
    for rule in ("Lion", "ADOPT", "AdEMAMix", "AdamWScheduleFree", "SGDScheduleFree"):
        times = measure(torch, contenders(torch, rule, base), 3 if suite.quick else ROUNDS)
        medians = {label: statistics.median(ts) for label, ts in times.items()}
        ours = f"optkernels.torch.{rule}"
        fastest = min((label for label in medians if label != ours), key=medians.__getitem__, default=None)
        for label, ts in times.items():
            paired = paired_ratio(times[fastest], ts) if label == ours and fastest is not None else 0.0
            note = f"{width}; {paired:.2f}x {fastest} (paired)" if paired else width
            suite.add(Row("modern", MODEL_CASE.format(rule), label, total, medians[label], 0, note, paired))
    from optkernels.kernels._threading import layer

    suite.note(f"modern drop-ins on the {width} transformer: Numba threading layer {layer()}, torch threads "
               f"{torch.get_num_threads()}")


def model_targets(rows: list[Row], verdict) -> list[str]:
    out = []
    for rule in ("Lion", "ADOPT", "AdEMAMix", "AdamWScheduleFree", "SGDScheduleFree"):
        case = MODEL_CASE.format(rule)
        ours = next((r for r in rows if r.case == case and r.impl.startswith("optkernels")), None)
        theirs = [r for r in rows if r.case == case and not r.impl.startswith("optkernels")]
        if ours is None or not theirs:
            continue
        fastest = min(theirs, key=lambda r: r.seconds)
        ratio = ours.paired or fastest.seconds / ours.seconds
        out.append(f"optkernels.torch.{rule} on the transformer ({ours.n:.2e} elements) >= 3x the fastest "
                   f"canonical CPU path ({fastest.impl}): {ratio:.2f}x{' (paired)' if ours.paired else ''} "
                   f"({verdict(ratio >= 3.0)})")
    return out
