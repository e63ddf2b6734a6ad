"""Every published MindSpore example of a dense op, reproduced by the float32 kernels and the reference."""
import inspect

import numpy as np
import pytest

import optkernels.kernels as K
import optkernels.reference as R
from optkernels.conformance import examples

DENSE = examples.load("kernels")


def _call(fn, entry):
    inputs = examples.build_inputs(entry)
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    attrs = {k: v for k, v in entry["attrs"].items() if k in keywords}
    return inputs, positional, fn(*[inputs[name] for name in positional], **attrs)


@pytest.mark.parametrize("entry", DENSE, ids=[e["op"] for e in DENSE])
def test_kernel_reproduces_published_example(entry):
    fn = getattr(K, examples.OP_NAMES[entry["op"]][1])
    inputs, positional, result = _call(fn, entry)
    for name, expected in entry["expected"].items():
        actual = result if name == "output" else inputs[name]
        problem = examples.mismatch(actual, expected, entry["compare"], f"{entry['op']}.{name}")
        assert problem is None, problem


@pytest.mark.parametrize("entry", DENSE, ids=[e["op"] for e in DENSE])
def test_reference_reproduces_published_example(entry):
    fn = getattr(R, examples.OP_NAMES[entry["op"]][1])
    inputs, positional, result = _call(fn, entry)
    states = [n for n in positional if isinstance(inputs[n], np.ndarray) and n not in ("grad", "gradient")]
    names = ["output"] if entry["expected"].keys() == {"output"} else states
    produced = dict(zip(names, result))
    for name, expected in entry["expected"].items():
        actual = produced[name]
        assert actual.dtype == np.float64
        problem = examples.mismatch_float64(actual, expected, entry["compare"], f"reference {entry['op']}.{name}")
        assert problem is None, problem
