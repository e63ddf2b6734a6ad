"""Every dense kernel on CUDA arrays equals the CPU kernel on the same inputs (small arrays: the simulator is slow).

"Equal" between targets: bit-equal is not promised, because a GPU fuses ``a*b + c`` into one FMA and the
simulator evaluates ``math.sqrt`` in float64. Results agree to within the same few-ulp tolerance as
against the reference (tests/optable.py: assert_close).
"""
import numpy as np
import pytest

from optable import OPS, assert_close, bounds, draw, draw_attrs, run_kernel
from optkernels.kernels import _cuda

SHAPE = (3, 5)


def _to_device(inputs):
    return {k: _cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_cuda_equals_cpu(op, dtype):
    rng = np.random.default_rng(17)
    inputs, attrs = draw(op, rng, SHAPE, dtype), draw_attrs(op, rng, dtype)
    before = bounds(op, inputs, attrs)
    device = _to_device(inputs)
    result = op.kernel(*op.args(device), **attrs)
    cpu = run_kernel(op, {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}, attrs)
    if op.output != "states":
        assert _cuda.is_device_array(result), "a CUDA call returns a CUDA array"
        got = {op.output: result}
    else:
        assert all(r is device[n] for r, n in zip(result, op.states)), "returns the updated arrays themselves"
        got = {}
    got.update({name: device[name] for name in op.states})
    for name, value in cpu.items():
        assert_close(_cuda.to_host(got[name]), value, dtype, op.ulps, f"{op.name}.{name} cuda vs cpu",
                     before.get(name))


def test_mixed_devices_are_a_type_error_and_write_nothing():
    op = next(o for o in OPS if o.name == "apply_adam")
    inputs = draw(op, np.random.default_rng(1), SHAPE, np.float32)
    device = _to_device(inputs)
    mixed = dict(device, gradient=inputs["gradient"])
    snapshot = {k: _cuda.to_host(device[k]) for k in op.states}
    with pytest.raises(TypeError, match="gradient"):
        op.kernel(*op.args(mixed))
    for k in op.states:
        assert np.array_equal(_cuda.to_host(device[k]), snapshot[k])


def test_device_scalars_are_accepted():
    op = next(o for o in OPS if o.name == "apply_momentum")
    inputs = draw(op, np.random.default_rng(2), SHAPE, np.float32)
    device = _to_device(inputs)
    device["learning_rate"] = _cuda.to_device(np.array([inputs["learning_rate"]], np.float32))
    before = bounds(op, inputs)
    op.kernel(*op.args(device))
    expected = run_kernel(op, inputs, {})
    assert_close(_cuda.to_host(device["variable"]), expected["variable"], np.float32, op.ulps, "variable",
                 before["variable"])


def test_non_contiguous_device_array_is_a_value_error():
    op = next(o for o in OPS if o.name == "apply_adagrad")
    inputs = draw(op, np.random.default_rng(4), (4, 6), np.float32)
    device = _to_device(inputs)
    device["grad"] = device["grad"][:, ::2]
    device["var"] = _to_device({"x": inputs["var"][:, ::2].copy()})["x"]
    device["accum"] = _to_device({"x": inputs["accum"][:, ::2].copy()})["x"]
    with pytest.raises(ValueError, match="grad"):
        op.kernel(*op.args(device))


def test_verify_on_cuda():
    from optkernels.conformance.verify import verify

    reports = verify("cuda", cases=1, seed=1, only=["apply_adam", "apply_ftrl", "apply_ftrl_v2", "lamb",
                                                   "lars_update", "fused_sparse_adam",
                                                   "sparse_apply_ftrl", "sparse_apply_ftrl_v2",
                                                   "fused_ada_factor"])
    assert all(r.ok for r in reports), [f for r in reports for f in r.failures]
