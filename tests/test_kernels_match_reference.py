"""Every dense kernel equals the float64 reference over random shapes, dtypes, hyper-parameters and steps."""
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from optable import OPS, assert_close, bounds, draw, draw_attrs, run_kernel, run_reference

shapes = st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from([np.float32, np.float64])


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@given(seed=st.integers(0, 2**32 - 1), shape=shapes, dtype=dtypes, steps=st.integers(1, 4))
@example(seed=1446, shape=(), dtype=np.float32, steps=3)  # lars_update: g + wd·w cancels in a 0-d array
def test_kernel_matches_reference(op, seed, shape, dtype, steps):
    rng = np.random.default_rng(seed)
    inputs = draw(op, rng, shape, dtype)
    attrs = draw_attrs(op, rng, dtype)
    for step in range(steps):
        if step:  # new gradient and hyper-parameters; the state carries over from the kernel
            fresh = draw(op, rng, shape, dtype)
            inputs.update({k: v for k, v in fresh.items() if k not in op.states})
        before = bounds(op, inputs, attrs)
        expected = run_reference(op, inputs, attrs)
        actual = run_kernel(op, inputs, attrs)
        for name, value in expected.items():
            assert actual[name].dtype == dtype, f"{op.name}.{name} changed dtype"
            assert_close(actual[name], value, dtype, op.ulps, f"{op.name} step {step} {name} {np.dtype(dtype)}",
                         before.get(name))


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_array_matches_reference(op, dtype):
    """Large enough to be split across threads (and, for Lamb, across several reduction chunks)."""
    rng = np.random.default_rng(7)
    inputs = draw(op, rng, (257, 131), dtype)
    attrs = draw_attrs(op, rng, dtype)
    before = bounds(op, inputs, attrs)
    expected = run_reference(op, inputs, attrs)
    actual = run_kernel(op, inputs, attrs)
    for name, value in expected.items():
        assert_close(actual[name], value, dtype, op.ulps, f"{op.name} {name}", before.get(name))


def test_non_contiguous_gradient_is_read_correctly():
    op = next(o for o in OPS if o.name == "apply_adam")
    rng = np.random.default_rng(3)
    inputs = draw(op, rng, (6, 5), np.float32)
    strided = np.asfortranarray(inputs["gradient"])
    assert not strided.flags.c_contiguous
    before = bounds(op, inputs)
    expected = run_reference(op, inputs, {})
    inputs["gradient"] = strided
    actual = run_kernel(op, inputs, {})
    for name, value in expected.items():
        assert_close(actual[name], value, np.float32, op.ulps, name, before.get(name))
