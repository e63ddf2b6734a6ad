"""An optimizer step checks every gradient before it writes anything (issue #13): a step whose LAST
gradient is bad leaves every parameter, slot and counter (global_step, step, beta powers) bit-identical,
for the per-parameter optimizers (Lamb, AdaFactor: their kernels refuse a gradient sharing memory with the
arrays they update) and the offload ones (AdamOffload, Adam(use_offload=True)) as for the others."""
from __future__ import annotations

import numpy as np
import pytest

from optkernels.optimizers import AdaFactor, Adam, AdamOffload, Lamb, Parameter

BUILDERS = {
    "Lamb": lambda ps: Lamb(ps, learning_rate=0.01, weight_decay=0.01),
    "AdaFactor": lambda ps: AdaFactor(ps, beta1=0.9),
    "AdamOffload": lambda ps: AdamOffload(ps, learning_rate=0.01),
    "Adam-offload": lambda ps: Adam(ps, learning_rate=0.01, use_offload=True),
}
REFUSES_ALIASING = {"Lamb", "AdaFactor"}
SHAPES = [(4, 5), (6,), (3, 4)]


def _setup(name: str):
    rng = np.random.default_rng(1)
    params = [Parameter(rng.standard_normal(s).astype(np.float32), f"p{k}") for k, s in enumerate(SHAPES)]
    opt = BUILDERS[name](params)
    opt(tuple(rng.standard_normal(s).astype(np.float32) for s in SHAPES))  # non-trivial state first
    good = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    return opt, params, good


def _snapshot(opt, params) -> dict:
    state = {k: np.array(v, copy=True) for k, v in opt.state_dict().items()}
    state.update({f"param {p.name}": p.data.copy() for p in params})
    state["global_step"] = np.array(opt.global_step)
    return state


def _assert_unchanged(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for key in before:
        assert before[key].tobytes() == after[key].tobytes(), f"{key} changed by a step that raised"


def _bad_last(kind: str, opt, params):
    last = params[-1]
    if kind == "aliases its parameter":
        return last.data
    if kind == "aliases a slot":
        return next(np.asarray(s) for s in _slots_of(opt, len(params) - 1) if np.shape(s) == last.shape)
    if kind == "wrong shape":
        return np.ones(last.shape[::-1], np.float32)
    if kind == "wrong dtype":
        return np.ones(last.shape, np.float64)
    if kind == "masked":
        return np.ma.masked_array(np.ones(last.shape, np.float32))
    raise AssertionError(kind)


def _slots_of(opt, k: int) -> list:
    names = [n for n in ("lamb_m", "lamb_v", "exp_avg", "moment1", "moment2") if hasattr(opt, n)]
    return [getattr(opt, n)[k].data for n in names if getattr(opt, n)[k] is not None]


@pytest.mark.parametrize("kind", ["aliases its parameter", "aliases a slot", "wrong shape", "wrong dtype",
                                  "masked"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_bad_last_gradient_leaves_everything_as_it_was(name, kind):
    opt, params, good = _setup(name)
    grads = good[:-1] + [_bad_last(kind, opt, params)]
    before = _snapshot(opt, params)
    refused = kind not in ("aliases its parameter", "aliases a slot") or name in REFUSES_ALIASING
    if not refused:
        # Element-wise offload kernels read each gradient element before writing it: aliasing is
        # well-defined there, and the step equals one with a copy of the gradient.
        twin, twin_params, _ = _setup(name)
        copy = np.array(grads[-1], copy=True)
        assert opt(tuple(grads)) is True
        twin(tuple(good[:-1] + [copy]))
        for p, q in zip(params, twin_params):
            np.testing.assert_array_equal(p.data, q.data)
        return
    expected = TypeError if kind in ("wrong dtype", "masked") else ValueError
    with pytest.raises(expected, match="p2"):
        opt(tuple(grads))
    _assert_unchanged(before, _snapshot(opt, params))
    assert opt(tuple(good)) is True  # and the next good step works
