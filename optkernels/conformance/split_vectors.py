"""Golden vectors of Muon's usual recipe (``optkernels.optimizers.MuonWithAdamW``): a small model's named
parameters, which of them the split rule gives to Muon and which to AdamW, and a few steps of each part by
the float64 reference (``reference.torch_muon``, Newton–Schulz in float64; ``reference.adam_weight_decay``).

:func:`export_split` writes the cases (``index.json``'s ``"optimizers"`` list, one npz file per case) and
:func:`check_split` replays them through the NumPy class, step by step from each step's given inputs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..reference import adam_weight_decay, newton_schulz, torch_muon
from .tolerance import compare

__all__ = ["SPLIT_ULPS", "check_split", "export_split", "split_case"]

#: The float32 tolerance of a replay (normwise ulps, as the ops' ``ulps``): a float32 Newton–Schulz through
#: BLAS stays within about one ulp of the update's scale (MODERN.md §1.2), the rest is element-wise.
SPLIT_ULPS = 8.0

#: The model of every case: names that exercise the split (embeddings, heads, biases, norms, a convolution,
#: tall and wide hidden matrices) and the decay filter ('gamma'/'beta' are not decayed). ``None`` dims are
#: drawn per case.
_MODEL = (
    ("embed.weight", ("V", "d")),
    ("layers.0.attn.in_proj.weight", ("h", "d")),
    ("layers.0.attn.in_proj.bias", ("h",)),
    ("layers.0.mlp.fc.weight", ("d", "h")),
    ("layers.0.norm.gamma", ("d",)),
    ("layers.0.norm.beta", ("d",)),
    ("conv.weight", (2, "d", 2)),
    ("lm_head.weight", ("V", "d")),
)
_MUON_STATES = ("momentum_buffer",)
_ADAMW_STATES = ("adam_m", "adam_v")


def _hyper(rng: np.random.Generator) -> dict[str, Any]:
    """``MuonWithAdamW``'s keyword arguments of one case (valid ranges)."""
    return dict(
        learning_rate=float(rng.uniform(1e-3, 0.05)),
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        momentum=float(rng.uniform(0.8, 0.99)),
        nesterov=bool(rng.integers(2)),
        ns_steps=int(rng.choice([3, 5])),
        adjust_lr_fn=[None, "match_rms_adamw"][int(rng.integers(2))],
        adamw_learning_rate=float(rng.uniform(1e-4, 1e-2)),
        adamw_beta1=float(rng.uniform(0.8, 0.95)),
        adamw_beta2=float(rng.uniform(0.9, 0.999)),
        adamw_eps=float(10.0 ** rng.uniform(-8, -4)),
        adamw_weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
    )


def _muon_step(w, buf, g, hyper: dict, decay: bool) -> tuple[dict, dict]:
    """The reference's Muon step: results, and the magnitudes each is made of (for the tolerance)."""
    lr, wd = hyper["learning_rate"], hyper["weight_decay"] if decay else 0.0
    kw = dict(momentum=hyper["momentum"], nesterov=hyper["nesterov"], ns_steps=hyper["ns_steps"])
    w_new, buf_new = torch_muon(w, buf, g, lr=lr, weight_decay=wd, adjust_lr_fn=hyper["adjust_lr_fn"], **kw)
    mu = hyper["momentum"]
    u = mu * buf_new + (1 - mu) * g if hyper["nesterov"] else buf_new
    ortho = newton_schulz(u, steps=hyper["ns_steps"])  # O's rounding is normwise: its largest element
    rows, cols = w.shape
    ratio = 0.2 * math.sqrt(max(rows, cols)) if hyper["adjust_lr_fn"] else math.sqrt(max(1, rows / cols))
    scale_w = np.abs(w) * abs(1 - lr * wd) + lr * ratio * np.max(np.abs(ortho))
    results = {"param": w_new, "momentum_buffer": buf_new}
    scales = {"param": scale_w, "momentum_buffer": np.maximum(np.abs(buf), np.abs(g))}
    return results, scales


def _adamw_step(w, m, v, g, hyper: dict, decay: bool) -> tuple[dict, dict]:
    """The reference's AdamWeightDecay step (MindSpore's AdamW: no bias correction), with its magnitudes."""
    wd = hyper["adamw_weight_decay"] if decay else 0.0
    lr, b1, b2, eps = (hyper[k] for k in ("adamw_learning_rate", "adamw_beta1", "adamw_beta2", "adamw_eps"))
    w_new, m_new, v_new = adam_weight_decay(w, m, v, lr, b1, b2, eps, wd, g)
    results = {"param": w_new, "adam_m": m_new, "adam_v": v_new}
    scales = {
        "param": np.abs(w) + lr * (np.abs(m_new) / (np.sqrt(v_new) + eps) + wd * np.abs(w)),
        "adam_m": np.maximum(np.abs(m), np.abs(g)),
        "adam_v": np.maximum(np.abs(v), g * g),
    }
    return results, scales


def split_case(rng: np.random.Generator, dtype: Any, steps: int) -> tuple[dict, dict[str, Any]]:
    """One case: its index entry (without ``file``) and its npz arrays.

    Arrays: ``step<s>.in.<parameter>.<name>`` (``param``, ``grad`` and the state: ``momentum_buffer`` for
    Muon, ``adam_m``/``adam_v`` for AdamW) in ``dtype``, ``step<s>.out.<parameter>.<name>`` (float64) and
    ``step<s>.scale.<parameter>.<name>``. Each step's inputs are the previous step's results rounded to
    ``dtype``."""
    from ..optimizers import Parameter
    from ..optimizers.muon import default_muon_split
    from ..optimizers.optimizer import default_decay_filter

    dtype = np.dtype(dtype)
    dims = dict(V=int(rng.integers(5, 9)), d=int(rng.integers(2, 6)), h=int(rng.integers(3, 8)))
    hyper = _hyper(rng)
    params: list[dict[str, Any]] = []
    state: dict[str, dict[str, np.ndarray]] = {}
    for name, spec in _MODEL:
        shape = tuple(d if isinstance(d, int) else dims[d] for d in spec)
        muon = bool(default_muon_split(name, shape))
        decay = bool(default_decay_filter(Parameter(np.zeros(shape, dtype), name)))
        params.append(dict(name=name, shape=list(shape), muon=muon, weight_decay=decay))
        state[name] = {"param": rng.standard_normal(shape).astype(dtype)}
        for s in _MUON_STATES if muon else _ADAMW_STATES:
            state[name][s] = np.zeros(shape, dtype)
    arrays: dict[str, Any] = {}
    for step in range(steps):
        for entry in params:
            name, now = entry["name"], state[entry["name"]]
            now["grad"] = rng.standard_normal(tuple(entry["shape"])).astype(dtype)
            f = {k: v.astype(np.float64) for k, v in now.items()}
            if entry["muon"]:
                out, scales = _muon_step(
                    f["param"], f["momentum_buffer"], f["grad"], hyper, entry["weight_decay"]
                )
            else:
                out, scales = _adamw_step(
                    f["param"], f["adam_m"], f["adam_v"], f["grad"], hyper, entry["weight_decay"]
                )
            for key, value in now.items():
                arrays[f"step{step}.in.{name}.{key}"] = value.copy()
            for key, value in out.items():
                arrays[f"step{step}.out.{name}.{key}"] = value
                arrays[f"step{step}.scale.{name}.{key}"] = scales[key]
            state[name] = {k: v.astype(dtype) for k, v in out.items()}
    entry = dict(
        optimizer="MuonWithAdamW",
        dtype=dtype.name,
        split="default_muon_split",
        parameters=params,
        hyperparameters=hyper,
        steps=steps,
        ulps=SPLIT_ULPS,
    )
    return entry, arrays


def export_split(out: Path, cases: int, seed: int, steps: int) -> list[dict]:
    """Write ``cases`` MuonWithAdamW cases per dtype (float32, float64) to ``out``; return their index
    entries (``index.json``'s ``"optimizers"``)."""
    entries = []
    for k in range(cases):
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            rng = np.random.default_rng([seed, k, 24, dtype.itemsize])
            entry, arrays = split_case(rng, dtype, steps)
            entry["file"] = f"muon_with_adamw-{k}-{dtype.name}.npz"
            np.savez(out / entry["file"], **arrays)
            entries.append(entry)
    return entries


def check_split(root: Path, entries: list[dict], optimizer: Any = None) -> list[str]:
    """Replay MuonWithAdamW cases through ``optimizer`` (default ``optkernels.optimizers.MuonWithAdamW``; a
    class taking ``(params, **hyperparameters)`` with its ``state_dict`` keys), each step from the step's
    inputs; return the failures (empty: all pass). The split is checked first: the optimizer's Muon part
    must hold exactly the parameters the case gives to Muon."""
    from ..optimizers import MuonWithAdamW, Parameter

    cls = optimizer or MuonWithAdamW
    failures = []
    for entry in entries:
        data = np.load(root / entry["file"])
        dtype = np.dtype(entry["dtype"])
        for step in range(entry["steps"]):
            given = {
                p["name"]: {
                    k.rsplit(".", 1)[1]: np.array(data[k])
                    for k in data.files
                    if k.startswith(f"step{step}.in.{p['name']}.")
                }
                for p in entry["parameters"]
            }
            params = [Parameter(given[p["name"]]["param"].copy(), p["name"]) for p in entry["parameters"]]
            opt = cls(params, **entry["hyperparameters"])
            muon = [p.name for p in opt.muon.parameters] if opt.muon is not None else []
            wanted = [p["name"] for p in entry["parameters"] if p["muon"]]
            if muon != wanted:
                failures.append(f"{entry['file']}: Muon got {muon}, the split gives it {wanted}")
                break
            loaded = opt.state_dict()
            for p in entry["parameters"]:
                prefix = "muon" if p["muon"] else "adamw"
                for s in _MUON_STATES if p["muon"] else _ADAMW_STATES:
                    loaded[f"{prefix}/{s}.{p['name']}"] = given[p["name"]][s]
            opt.load_state_dict(loaded)
            opt([given[p["name"]]["grad"] for p in entry["parameters"]])
            after = opt.state_dict()
            for p, param in zip(entry["parameters"], params):
                prefix = "muon" if p["muon"] else "adamw"
                actual = {"param": param.data}
                actual.update(
                    {
                        s: after[f"{prefix}/{s}.{p['name']}"]
                        for s in (_MUON_STATES if p["muon"] else _ADAMW_STATES)
                    }
                )
                for key, value in actual.items():
                    tag = f"step{step}.{{}}.{p['name']}.{key}"
                    verdict = compare(
                        value, data[tag.format("out")], dtype, entry["ulps"], data[tag.format("scale")]
                    )
                    if not verdict.ok:
                        failures.append(verdict.message(f"{entry['file']} step {step} {p['name']} {key}"))
    return failures
