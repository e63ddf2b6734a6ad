"""Golden test vectors: export the reference's results on random cases, and check any implementation.

``export(directory)`` writes, for every op, a few random cases in float32, float64, float16 and bfloat16:

* ``<op>-<k>-<dtype>.npz``: per step s, the step's array inputs ``step<s>.in.<name>``, the reference's
  results ``step<s>.out.<name>``, and the magnitudes the tolerance is relative to ``step<s>.scale.<name>``;
* ``index.json``: per case, the op, its file, dtype, shape, the positional input order, the state names,
  the output name, the scalar inputs of each step, the attributes and the float32 tolerance in ulps;
* ``FORMAT.md``: this format and the tolerance rule, for readers without optkernels.

Each step's inputs are complete (the states are the previous step's expected results, rounded to the
dtype), so an implementation runs each step from the given inputs and errors never accumulate.
``check(directory, kernels)`` does exactly that for a mapping of op name -> function with optkernels'
(MindSpore's) signature.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .cases import (
    CASES,
    CASES_BY_NAME,
    HALF_DTYPES,
    bounds,
    compute_dtype,
    draw_attrs,
    draw_stored,
    run_reference,
)
from .split_vectors import check_split, export_split
from .tolerance import FLOAT64_RELATIVE, compare

FORMAT_VERSION = "optkernels-golden-vectors/1"
STEPS = 3
SPLIT = "MuonWithAdamW"

FORMAT_DOC = f"""# optkernels golden vectors ({FORMAT_VERSION})

Written by `python -m optkernels verify --export DIR`. Each case is one op run for {STEPS} steps on random valid
inputs by `optkernels.reference` (NumPy, float64).

## index.json
`{{"format": "{FORMAT_VERSION}", "cases": [...]}}`; each case has:
- `op`: the op's name (optkernels / MindSpore input order, see its docstring); `module`: kernels or sparse;
- `file`: the npz file of the case; `dtype`: float32, float64, float16 or bfloat16 (`ml_dtypes.bfloat16`);
  `shape`: the arrays' shape;
- `positional`: the op's positional inputs in order; `states`: the inputs updated in place;
- `output`: "states", or the name of the new array the op returns (`delta`, `new_gradient`);
- `scalars`: one object per step, the scalar inputs (numbers already rounded to the dtype; float32 for
  the float16 and bfloat16 cases, whose kernels compute in float32);
- `attrs`: the keyword attributes; `ulps`: the float32 tolerance (see below).

## The npz file
For step `s` (0-based): `step<s>.in.<name>` the step's array inputs (states and gradients, in the dtype;
float16/bfloat16 inputs are stored as the float32 arrays of the same values: round them to the dtype),
`step<s>.out.<name>` the expected results (float64), `step<s>.scale.<name>` the magnitudes the result is
made of (for the tolerance). Run the op on `step<s>.in.*` plus `scalars[s]` and `attrs`, then compare
each result with `step<s>.out.<name>`.

## Tolerance
Let `e = |actual - expected|`.
- float32: normwise. `scale = max(max|expected|, max|scale array|)`; pass if `e <= ulps * 2^-23 * scale`
  for every element. float16 and bfloat16: the same with their epsilons 2^-10 and 2^-7 (a kernel that
  computes in float32 and rounds each result once is within half an ulp).
- float64: element-wise. `scale_i = max(|expected_i|, |scale_i|, 0.01 * max|expected|)`; pass if
  `e_i <= {FLOAT64_RELATIVE:g} * scale_i`.

## MuonWithAdamW (`index.json`'s `optimizers`)
Muon's usual recipe run for {STEPS} steps on a small model by the reference (Muon: `torch_muon`, Newton-Schulz
in float64; AdamW: MindSpore's AdamWeightDecay, no bias correction). Each entry has `optimizer`
("MuonWithAdamW"), `file`, `dtype` (float32 or float64), `split` (the rule, `default_muon_split`),
`parameters` (per parameter: `name`, `shape`, `muon`: the split's decision, true for Muon and false for
AdamW, and `weight_decay`: whether the decay applies, false for names holding 'gamma' or 'beta'),
`hyperparameters` (MuonWithAdamW's keyword arguments), `steps` and `ulps`. The npz file holds
`step<s>.in.<parameter>.<name>` for `param`, `grad` and the parameter's state (`momentum_buffer` for Muon,
`adam_m` and `adam_v` for AdamW), `step<s>.out.<parameter>.<name>` (float64) and
`step<s>.scale.<parameter>.<name>`. Run each step from its inputs and compare as above. float64 is not
bit for bit: a matmul's summation order is the BLAS's, and torch's Muon (and optkernels') fuses
`w - lr*r*O` into one FMA where the reference rounds twice. A bfloat16 Newton-Schulz (torch's) is off by
about 1e-2 of the update and fails.
"""


def _scalars(inputs: dict) -> dict:
    return {
        k: (int(v) if isinstance(v, (int, np.integer)) else float(v))
        for k, v in inputs.items()
        if not isinstance(v, np.ndarray)
    }


def export(directory, cases: int = 2, seed: int = 0, only: list[str] | None = None) -> Path:
    """Write golden vectors for every op (or those in ``only``) and for MuonWithAdamW's split (with every op,
    or when ``only`` names ``"MuonWithAdamW"``) to ``directory``; return the index path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {"format": FORMAT_VERSION, "cases": [], "optimizers": []}
    for number, case in enumerate(CASES):
        if only and case.name not in only:
            continue
        rng = np.random.default_rng([seed, number, 7])
        for k in range(cases):
            for dtype in (np.dtype(np.float32), np.dtype(np.float64)) + HALF_DTYPES:
                shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 3))))
                inputs = draw_stored(case, rng, shape, dtype)
                attrs = {
                    a: (v.item() if isinstance(v, np.generic) else v)
                    for a, v in draw_attrs(case, rng, dtype).items()
                }
                arrays: dict[str, Any] = {}
                scalars: list[dict] = []
                for step in range(STEPS):
                    if step:
                        fresh = draw_stored(case, rng, shape, dtype)
                        inputs.update({n: v for n, v in fresh.items() if n not in case.states})
                    expected = run_reference(case, inputs, attrs)
                    for name, value in inputs.items():
                        if isinstance(value, np.ndarray):  # half arrays stored widened to float32 (exact)
                            wide = value.dtype in HALF_DTYPES
                            arrays[f"step{step}.in.{name}"] = value.astype(np.float32) if wide else value
                    for name, value in expected.items():
                        arrays[f"step{step}.out.{name}"] = value
                    for name, value in bounds(case, inputs, attrs).items():
                        arrays[f"step{step}.scale.{name}"] = np.asarray(value, dtype=np.float64)
                    scalars.append(_scalars(inputs))
                    inputs.update({n: expected[n].astype(dtype) for n in case.states})
                name = np.dtype(dtype).name
                file = f"{case.name}-{k}-{name}.npz"
                np.savez(out / file, **arrays)
                index["cases"].append(
                    dict(
                        op=case.name,
                        module=case.module,
                        file=file,
                        dtype=name,
                        shape=list(shape),
                        positional=case.positional,
                        states=list(case.states),
                        output=case.output,
                        scalars=scalars,
                        attrs=attrs,
                        ulps=case.ulps,
                    )
                )
    if not only or SPLIT in only:
        index["optimizers"] = export_split(out, cases, seed, STEPS)
    (out / "index.json").write_text(json.dumps(index, indent=1))
    (out / "FORMAT.md").write_text(FORMAT_DOC)
    return out / "index.json"


def _storage(name: str) -> np.dtype:
    return next((d for d in HALF_DTYPES if d.name == name), None) or np.dtype(name)


def check(directory, kernels: Mapping[str, Callable] | None = None, muon_with_adamw: Any = None) -> list[str]:
    """Check an implementation against exported vectors; return the failures (empty: all pass).

    Args:
        directory: a folder written by :func:`export`.
        kernels: op name -> function with optkernels' signature (default: optkernels' own kernels). A
            function updates its state arrays in place and returns them, or returns its output array.
        muon_with_adamw: the class the MuonWithAdamW cases replay through (default
            ``optkernels.optimizers.MuonWithAdamW``; see :func:`.split_vectors.check_split`).
    """
    root = Path(directory)
    index = json.loads((root / "index.json").read_text())
    if index.get("format") != FORMAT_VERSION:
        raise ValueError(f"{root / 'index.json'} is not in format {FORMAT_VERSION}")
    failures = []
    for entry in index["cases"]:
        fn = (kernels or {}).get(entry["op"]) or CASES_BY_NAME[entry["op"]].kernel
        data = np.load(root / entry["file"])
        for step, scalars in enumerate(entry["scalars"]):
            inputs = {
                k.split(".", 2)[2]: np.array(data[k]) for k in data.files if k.startswith(f"step{step}.in.")
            }
            dtype = _storage(entry["dtype"])
            if dtype in HALF_DTYPES:
                inputs = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in inputs.items()}
            scalar_type = compute_dtype(dtype).type
            inputs.update({k: scalar_type(v) if isinstance(v, float) else v for k, v in scalars.items()})
            result = fn(*[inputs[name] for name in entry["positional"]], **entry["attrs"])
            results = {n: inputs[n] for n in entry["states"]}
            if entry["output"] != "states":
                results[entry["output"]] = result
            for name, actual in results.items():
                expected = data[f"step{step}.out.{name}"]
                scale = data[f"step{step}.scale.{name}"] if f"step{step}.scale.{name}" in data.files else None
                verdict = compare(np.asarray(actual), expected, dtype, entry["ulps"], scale)
                if not verdict.ok:
                    failures.append(verdict.message(f"{entry['file']} step {step} {name}"))
    return failures + check_split(root, index.get("optimizers", []), muon_with_adamw)
