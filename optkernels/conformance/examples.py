"""MindSpore's published numeric examples (its API docstrings' printed outputs) as test vectors.

``published_examples.json`` (package data) is the project's transcription of the examples in MindSpore's
docstrings (``mindspore/ops/operations/nn_ops.py`` and the lr-schedule modules, 2.0 era); its ``_note`` says
how each printed value is to be compared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES_FILE = Path(__file__).with_name("published_examples.json")

# MindSpore op name -> (optkernels module, function name)
OP_NAMES = {
    "Adam": ("kernels", "apply_adam"),
    "AdamWeightDecay": ("kernels", "adam_weight_decay"),
    "AdamNoUpdateParam": ("kernels", "adam_no_update_param"),
    "ApplyFtrl": ("kernels", "apply_ftrl"),
    "ApplyProximalAdagrad": ("kernels", "apply_proximal_adagrad"),
    "ApplyAdaMax": ("kernels", "apply_ada_max"),
    "ApplyAdagrad": ("kernels", "apply_adagrad"),
    "ApplyAdagradV2": ("kernels", "apply_adagrad_v2"),
    "ApplyMomentum": ("kernels", "apply_momentum"),
    "SGD": ("kernels", "sgd"),
    "ApplyRMSProp": ("kernels", "apply_rms_prop"),
    "ApplyCenteredRMSProp": ("kernels", "apply_centered_rms_prop"),
    "LARSUpdate": ("kernels", "lars_update"),
    "FusedSparseAdam": ("sparse", "fused_sparse_adam"),
    "FusedSparseLazyAdam": ("sparse", "fused_sparse_lazy_adam"),
    "FusedSparseFtrl": ("sparse", "fused_sparse_ftrl"),
    "FusedSparseProximalAdagrad": ("sparse", "fused_sparse_proximal_adagrad"),
    "SparseApplyProximalAdagrad": ("sparse", "sparse_apply_proximal_adagrad"),
    "SparseApplyFtrl": ("sparse", "sparse_apply_ftrl"),
}


def load_all() -> dict:
    """The whole file: keys "ops", "lr_schedules", "lr_lists", "optimizer_api"."""
    return json.loads(EXAMPLES_FILE.read_text())


def load(module: str) -> list[dict]:
    """The published op examples whose optkernels function lives in ``module`` ('kernels' or 'sparse')."""
    entries = load_all()["ops"]
    return [e for e in entries if OP_NAMES[e["op"]][0] == module]


def build_inputs(entry: dict) -> dict:
    """The example's inputs as float32 arrays (indices as int32) and float32 scalars."""
    out: dict[str, Any] = {}
    for name, value in entry["inputs"].items():
        if isinstance(value, str) and value.startswith("ones["):
            shape = [int(d) for d in re.findall(r"\d+", value)]
            out[name] = np.ones(shape, np.float32)
        elif isinstance(value, list):
            out[name] = np.array(value, np.int32 if name == "indices" else np.float32)
        elif isinstance(value, float):
            out[name] = np.float32(value)  # MindSpore's scalar inputs are float32 tensors
        else:
            out[name] = value
    for name, value in entry["inputs"].items():  # e.g. "sum(weight**2)": sums of squares of other inputs
        match = isinstance(value, str) and re.fullmatch(r"sum\((\w+)\*\*2\)", value)
        if match:
            out[name] = np.sum(out[match.group(1)] ** 2)
    return out


def mismatch(actual, expected, compare: str, what: str) -> str | None:
    """None if a float32 result reproduces the printed value the way it was printed (the JSON's _note), else
    a message: exact equality after the float32 cast ('f32repr', 'e9'), equality at 8 decimals ('dec8')."""
    actual = np.asarray(actual)
    if compare == "dec8":
        diff = np.abs(np.round(actual.astype(np.float64), 8) - np.asarray(expected, dtype=np.float64))
        return None if np.all(diff <= 1.0000001e-8) else f"{what}: {actual} != {expected} (8 decimals)"
    expected = np.asarray(expected, dtype=np.float32)
    if actual.dtype == np.float32 and np.array_equal(actual, expected):
        return None
    return f"{what}: {actual!r} != {expected!r}"


def mismatch_float64(actual64, expected, compare: str, what: str) -> str | None:
    """For a float64 result: None if within two float32 ulps of the printed float32 value (plus the print's
    rounding, 5e-9, for 8-decimal printouts), else a message. The printouts come from float32 arithmetic,
    which is that close to the exact result on these examples (ApplyFtrl's cancellation needs the second
    ulp)."""
    actual64 = np.asarray(actual64, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    bound = np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64) * 2.0000001
    if compare == "dec8":
        bound = bound + 5e-9
    err = np.abs(actual64 - expected)
    if np.all(err <= bound):
        return None
    return f"{what}: {actual64} vs {expected}: error {err.max():.3g} > {bound.max():.3g}"
