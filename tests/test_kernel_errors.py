"""Each kind of bad input raises the documented error, names the argument, and leaves every array as it was."""
import re

import numpy as np
import pytest

from optable import OPS, draw, draw_attrs

SHAPE = (4, 3)


def _valid(op, dtype=np.float32):
    rng = np.random.default_rng(11)
    return draw(op, rng, SHAPE, dtype), draw_attrs(op, rng, dtype)


def _first_array(op, inputs):
    return op.states[0] if op.states else next(k for k in op.positional if isinstance(inputs[k], np.ndarray))


def _read_only_input(op, inputs):
    return next(k for k in op.positional if isinstance(inputs[k], np.ndarray) and k not in op.states)


def assert_raises_and_unchanged(op, inputs, attrs, exc, name):
    """Call the kernel; it must raise ``exc`` with ``name`` in the message and write nothing."""
    snapshot = {k: np.copy(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    with pytest.raises(exc, match=re.escape(name)):
        op.kernel(*op.args(inputs), **attrs)
    for k, before in snapshot.items():
        assert np.array_equal(inputs[k], before), f"{op.name}: {k} was modified by a failed call"


ids = [op.name for op in OPS]


@pytest.mark.parametrize("op", OPS, ids=ids)
@pytest.mark.parametrize("bad_dtype", [np.uint16, np.int32, np.complex64])
def test_unsupported_dtype_is_a_type_error(op, bad_dtype):
    inputs, attrs = _valid(op)
    name = _first_array(op, inputs)
    inputs[name] = inputs[name].astype(bad_dtype)
    assert_raises_and_unchanged(op, inputs, attrs, TypeError, name)


@pytest.mark.parametrize("op", OPS, ids=ids)
def test_mixed_dtypes_are_a_type_error(op):
    inputs, attrs = _valid(op)
    name = _read_only_input(op, inputs)
    inputs[name] = inputs[name].astype(np.float64)
    assert_raises_and_unchanged(op, inputs, attrs, TypeError, name)


@pytest.mark.parametrize("op", OPS, ids=ids)
def test_mismatched_shape_is_a_value_error(op):
    inputs, attrs = _valid(op)
    name = _read_only_input(op, inputs)
    inputs[name] = np.concatenate([inputs[name], inputs[name][:1]])
    assert_raises_and_unchanged(op, inputs, attrs, ValueError, name)


@pytest.mark.parametrize("op", [op for op in OPS if op.states], ids=lambda op: op.name)
def test_non_contiguous_state_is_a_value_error(op):
    inputs, attrs = _valid(op)
    name = op.states[-1]
    wide = np.zeros((SHAPE[0], 2 * SHAPE[1]), dtype=inputs[name].dtype)
    wide[:, ::2] = inputs[name]
    inputs[name] = wide[:, ::2]
    assert_raises_and_unchanged(op, inputs, attrs, ValueError, name)


@pytest.mark.parametrize("op", [op for op in OPS if op.states], ids=lambda op: op.name)
def test_read_only_state_is_a_value_error(op):
    inputs, attrs = _valid(op)
    name = op.states[-1]
    inputs[name].flags.writeable = False
    assert_raises_and_unchanged(op, inputs, attrs, ValueError, name)


@pytest.mark.parametrize("op", [op for op in OPS if len(op.states) >= 2], ids=lambda op: op.name)
def test_aliased_states_are_a_value_error(op):
    inputs, attrs = _valid(op)
    first, second = op.states[0], op.states[1]
    inputs[second] = inputs[first]
    assert_raises_and_unchanged(op, inputs, attrs, ValueError, second)


@pytest.mark.parametrize("op", OPS, ids=ids)
def test_non_array_is_a_type_error(op):
    inputs, attrs = _valid(op)
    name = _first_array(op, inputs)
    inputs[name] = inputs[name].tolist()
    assert_raises_and_unchanged(op, inputs, attrs, TypeError, name)


def _scalar_names(op, inputs):
    return [k for k in op.positional if not isinstance(inputs[k], np.ndarray)]


@pytest.mark.parametrize("op", OPS, ids=ids)
@pytest.mark.parametrize("bad, exc", [("0.1", TypeError), (None, TypeError), (True, TypeError),
                                      (np.array([0.1, 0.2]), ValueError), (np.ones((1, 1)), ValueError)])
def test_bad_scalar_raises(op, bad, exc):
    inputs, attrs = _valid(op)
    for name in _scalar_names(op, inputs):
        trial = dict(inputs, **{name: bad})
        assert_raises_and_unchanged(op, trial, attrs, exc, name)


@pytest.mark.parametrize("op", OPS, ids=ids)
def test_scalars_accept_numbers_and_small_arrays(op):
    """A Python number, a NumPy scalar, a 0-d and a shape-(1,) array give the same bits."""
    results = []
    for form in (float, np.float64, lambda x: np.array(x), lambda x: np.array([x], np.float32)):
        inputs, attrs = _valid(op)
        for name in _scalar_names(op, inputs):
            value = inputs[name]
            inputs[name] = int(value) if name == "global_step" else form(value)
        out = op.kernel(*op.args(inputs), **attrs)
        results.append([np.copy(a) for a in (out if isinstance(out, tuple) else (out,))])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)


OUT_OF_RANGE = [(op, name, value) for op in OPS for name, value in op.bad_values]


@pytest.mark.parametrize("op, name, value", OUT_OF_RANGE,
                         ids=[f"{op.name}-{name}={value}" for op, name, value in OUT_OF_RANGE])
def test_out_of_range_value_is_a_value_error(op, name, value):
    inputs, attrs = _valid(op)
    inputs[name] = value
    assert_raises_and_unchanged(op, inputs, attrs, ValueError, name)


BAD_ATTRS = [(op, name, value, exc) for op in OPS for name, value, exc in op.bad_attrs]


@pytest.mark.parametrize("op, name, value, exc", BAD_ATTRS,
                         ids=[f"{op.name}-{name}={value!r}" for op, name, value, exc in BAD_ATTRS])
def test_bad_attribute_raises(op, name, value, exc):
    inputs, attrs = _valid(op)
    attrs[name] = value
    assert_raises_and_unchanged(op, inputs, attrs, exc, name)


def test_apply_adagrad_v2_requires_epsilon():
    op = next(o for o in OPS if o.name == "apply_adagrad_v2")
    inputs, _ = _valid(op)
    with pytest.raises(TypeError, match="epsilon"):
        op.kernel(*op.args(inputs))


def test_sgd_nesterov_with_dampening_is_a_value_error():
    op = next(o for o in OPS if o.name == "sgd")
    inputs, _ = _valid(op)
    assert_raises_and_unchanged(op, inputs, dict(nesterov=True, dampening=0.5), ValueError, "dampening")


def test_output_array_is_validated():
    op = next(o for o in OPS if o.name == "lars_update")
    inputs, attrs = _valid(op)
    for out, exc, name in [(np.empty(SHAPE, np.float64), TypeError, "out"),
                           (np.empty((3, 4), np.float32), ValueError, "out"),
                           (inputs["weight"], ValueError, "out")]:
        assert_raises_and_unchanged(op, inputs, dict(attrs, out=out), exc, name)
    out = np.empty(SHAPE, np.float32)
    assert op.kernel(*op.args(inputs), **attrs, out=out) is out


def test_flat_output_array_is_validated_with_half_gradient():
    """1-D arrays that own their memory, float32 moments and a bfloat16 gradient (the offload host part's
    call): an ``out`` that is one of the inputs, or of the gradient's dtype, is still rejected."""
    import ml_dtypes

    op = next(o for o in OPS if o.name == "adam_no_update_param")
    inputs, attrs = _valid(op)
    inputs = {k: v.reshape(-1).copy() if isinstance(v, np.ndarray) and v.ndim == 2 else v
              for k, v in inputs.items()}
    inputs["gradient"] = inputs["gradient"].astype(ml_dtypes.bfloat16)
    size = inputs["m"].size
    for out, exc in [(inputs["m"], ValueError), (np.empty(size, ml_dtypes.bfloat16), TypeError)]:
        assert_raises_and_unchanged(op, inputs, dict(attrs, out=out), exc, "out")
    out = np.empty(size, np.float32)
    assert op.kernel(*op.args(inputs), **attrs, out=out) is out


def test_overlapping_views_are_a_value_error_and_disjoint_views_work():
    op = next(o for o in OPS if o.name == "apply_adam")
    inputs, attrs = _valid(op)
    size = int(np.prod(SHAPE))
    buffer = np.zeros(4 * size, np.float32)
    views = [buffer[k * size:(k + 1) * size].reshape(SHAPE) for k in range(4)]
    for view, name in zip(views, ("var", "m", "v", "gradient")):
        view[...] = inputs[name]
    disjoint = dict(inputs, var=views[0], m=views[1], v=views[2], gradient=views[3])
    expected = {k: np.copy(inputs[k]) for k in ("var", "m", "v")}
    op.kernel(*op.args(dict(inputs, **expected)), **attrs)
    op.kernel(*op.args(disjoint), **attrs)
    for k, view in zip(("var", "m", "v"), views):
        assert np.array_equal(view, expected[k]), f"{k}: views of one buffer must give the same bits"
    shifted = buffer[1:size + 1].reshape(SHAPE)  # overlaps views[0] and views[1]
    assert_raises_and_unchanged(op, dict(disjoint, m=shifted), attrs, ValueError, "share memory")


def test_apply_adam_plain_call_agrees_with_the_checked_path():
    """apply_adam's common call (plain arrays, Python or NumPy floats: checked in a few reads) gives the bits
    of the checked path (the scalars as 0-d arrays), and values that round onto a range's end in float32 (or
    NaN) still meet the checked path's errors, with nothing written."""
    from optkernels.kernels import apply_adam

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(37).astype(np.float32) for _ in range(4)]
    arrays[2] = np.abs(arrays[2])
    scalars = (0.9**3, 0.999**3, 1e-2, 0.9, 0.999, 1e-8)
    runs = []
    for convert in (float, np.float32, np.float64, np.asarray):
        var, m, v, g = (a.copy() for a in arrays)
        apply_adam(var, m, v, *map(convert, scalars), g, use_nesterov=True)
        runs.append((var, m, v))
    assert all(np.array_equal(x, y) for run in runs[1:] for x, y in zip(run, runs[0]))
    assert not np.array_equal(runs[0][0], arrays[0])
    for index, value, name in [(0, 1 - 2**-26, "beta1_power"), (3, 1 - 2**-26, "beta1"), (4, 1e-50, "beta2"),
                               (2, float("nan"), "lr")]:
        bad = list(scalars)
        bad[index] = value
        var, m, v, g = (a.copy() for a in arrays)
        with pytest.raises(ValueError, match=name):
            apply_adam(var, m, v, *bad, g)
        assert all(np.array_equal(x, y) for x, y in zip((var, m, v), arrays))
