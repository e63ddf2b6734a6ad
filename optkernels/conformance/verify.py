"""Run every kernel against :mod:`optkernels.reference` on random cases and the published examples.

This is what ``python -m optkernels verify`` prints: per op, the number of compared steps, the worst error
in float32 and float64 ulps (see :mod:`.tolerance` for the unit and the pass rule), the published examples
reproduced, and a verdict.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import examples
from .cases import CASES, HALF_DTYPES, OpCase, bounds, draw_attrs, draw_stored, run_kernel, run_reference
from .tolerance import compare

STEPS = 3
#: The dtypes of the random cases, in turn: float32, float64, float16, bfloat16 (the half ones computed in
#: float32, each updated array rounded once; their tolerance is in their own ulps).
DTYPES = (np.dtype(np.float32), np.dtype(np.float64)) + HALF_DTYPES
DTYPE_NAMES = tuple(d.name for d in DTYPES)


@dataclass
class OpReport:
    """Conformance of one op."""

    op: str
    steps: int = 0
    worst_ulps: dict = field(default_factory=lambda: {name: 0.0 for name in DTYPE_NAMES})
    examples_passed: int = 0
    examples_total: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _shape(rng: np.random.Generator) -> tuple:
    return tuple(int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4))))


def _to_target(inputs: dict, target: str) -> dict:
    if target == "cpu":
        return inputs
    from optkernels.kernels import _cuda

    return {k: _cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _to_host(value):
    if isinstance(value, np.ndarray):
        return value
    from optkernels.kernels import _cuda

    return _cuda.to_host(value)


def verify_case(case: OpCase, rng: np.random.Generator, dtype, target: str, report: OpReport) -> None:
    """One random case: STEPS steps, state carried over from the kernel; each step against the reference."""
    shape = _shape(rng)
    inputs = draw_stored(case, rng, shape, dtype)
    attrs = draw_attrs(case, rng, dtype)
    key = np.dtype(dtype).name
    for step in range(STEPS):
        if step:
            fresh = draw_stored(case, rng, shape, dtype)
            inputs.update({k: v for k, v in fresh.items() if k not in case.states})
        before = bounds(case, inputs, attrs)
        expected = run_reference(case, inputs, attrs)
        on_target = _to_target(inputs, target)
        actual = run_kernel(case, on_target, attrs)
        for name, value in expected.items():
            result = compare(_to_host(actual[name]), value, dtype, case.ulps, before.get(name))
            report.worst_ulps[key] = max(report.worst_ulps[key], result.worst_ulps)
            if not result.ok:
                report.failures.append(result.message(f"{case.name} {key} shape {shape} step {step} {name}"))
        inputs.update({name: _to_host(on_target[name]) for name in case.states})
        report.steps += 1


def verify_examples(case: OpCase, report: OpReport) -> None:
    """The op's published MindSpore examples, by the float32 kernel (CPU)."""
    for entry in examples.load(case.module):
        if examples.OP_NAMES[entry["op"]][1] != case.name:
            continue
        inputs = examples.build_inputs(entry)
        params = inspect.signature(case.kernel).parameters.values()
        keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
        attrs = {k: v for k, v in entry["attrs"].items() if k in keywords}
        if "out_of_range" in keywords:  # MindSpore's examples rely on its ops dropping out-of-range indices
            attrs["out_of_range"] = "drop"
        result = case.kernel(*case.args(inputs), **attrs)
        report.examples_total += 1
        problems = [
            examples.mismatch(
                result if name == "output" else inputs[name],
                value,
                entry["compare"],
                f"{entry['op']} example {name}",
            )
            for name, value in entry["expected"].items()
        ]
        failed = [p for p in problems if p is not None]
        report.failures.extend(failed)
        report.examples_passed += not failed


def verify(
    target: str = "cpu",
    cases: int = 20,
    seed: int = 0,
    only: list[str] | None = None,
    progress: Callable[[OpReport], None] | None = None,
) -> list[OpReport]:
    """Verify every op (or those named in ``only``) on ``target`` ('cpu' or 'cuda').

    Args:
        target: where the kernels run; 'cuda' needs numba-cuda and a GPU (or NUMBA_ENABLE_CUDASIM=1).
        cases: random cases per op (float32, float64, float16 and bfloat16 in turn), each of several steps.
        seed: seed of the random cases.
        only: op names to verify (default: all).
        progress: called with each op's report as it completes.

    Returns:
        One :class:`OpReport` per op.
    """
    if target not in ("cpu", "cuda"):
        raise ValueError(f"target must be 'cpu' or 'cuda', got {target!r}")
    known = {case.name for case in CASES}
    unknown = sorted(set(only or ()) - known)
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    reports: list[OpReport] = []
    for case in CASES:
        if only and case.name not in only:
            continue
        report = OpReport(case.name)
        rng = np.random.default_rng([seed, len(reports)])
        for k in range(cases):
            verify_case(case, rng, DTYPES[k % len(DTYPES)], target, report)
        if target == "cpu":
            verify_examples(case, report)
        reports.append(report)
        if progress is not None:
            progress(report)
    return reports


def table_row(report: OpReport) -> str:
    examples_cell = f"{report.examples_passed}/{report.examples_total}" if report.examples_total else "-"
    w = report.worst_ulps
    verdict = "pass" if report.ok else "FAIL"
    return (
        f"{report.op:<30} {report.steps:>6} {w['float32']:>12.3g} {w['float64']:>12.3g} "
        f"{w['float16']:>8.3g} {w['bfloat16']:>8.3g} {examples_cell:>9}  {verdict}"
    )


TABLE_HEADER = (
    f"{'op':<30} {'steps':>6} {'float32 ulps':>12} {'float64 ulps':>12} {'f16 ulps':>8} "
    f"{'bf16 ulps':>8} {'examples':>9}  result\n" + "-" * 98
)
