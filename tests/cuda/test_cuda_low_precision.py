"""float16 and bfloat16 CUDA arrays in every kernel (dense and sparse): the result is bit-identical to the
float32 CUDA kernel on upcast copies with each updated array rounded once (small arrays: the simulator is
slow); stochastic rounding on CUDA is reproducible and matches the CPU's bits."""
import ml_dtypes
import numpy as np
import pytest

from optkernels.conformance.cases import CASES, draw, draw_attrs
from optkernels.kernels import _cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
HALF = [pytest.param(np.dtype(np.float16), id="float16"), pytest.param(BF16, id="bfloat16")]


def _device(inputs, dtype=None):
    out = {}
    for k, v in inputs.items():
        if isinstance(v, np.ndarray):
            if dtype is not None and v.dtype.kind in "fV":
                v = v.astype(dtype)
            v = _cuda.to_device(v)
        out[k] = v
    return out


def _run(case, inputs, attrs):
    result = case.kernel(*case.args(inputs), **attrs)
    out = {name: inputs[name] for name in case.states}
    if case.output != "states":
        out[case.output] = result
    return {k: _cuda.to_host(v) for k, v in out.items()}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cuda_half_is_float32_kernel_rounded_once(case, dtype):
    rng = np.random.default_rng(5)
    shape = (4, 3) if case.name != "fused_ada_factor" else (3, 4)
    inputs = draw(case, rng, shape, np.float32)
    attrs = draw_attrs(case, rng, np.float32)
    half = {k: v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
            for k, v in inputs.items()}
    expected = _run(case, _device(half, np.float32), attrs)
    actual = _run(case, _device(half), attrs)
    for name, value in expected.items():
        got = actual[name]
        assert got.dtype == dtype, f"{case.name}.{name} has dtype {got.dtype}"
        assert np.array_equal(got.view(np.uint16), value.astype(dtype).view(np.uint16)), (
            f"{case.name}.{name} {dtype.name}: differs from the float32 CUDA kernel rounded once")


def test_cuda_stochastic_rounding_matches_cpu_bits():
    from optkernels.kernels import apply_momentum, stochastic_rounding

    rng = np.random.default_rng(6)
    for dtype in (np.dtype(np.float16), BF16):
        var, acc, g = (rng.standard_normal(50).astype(np.float32).astype(dtype) for _ in range(3))
        cpu = [var.copy(), acc.copy()]
        dev = [_cuda.to_device(var), _cuda.to_device(acc)]
        with stochastic_rounding(seed=11, counter=3):
            apply_momentum(cpu[0], cpu[1], 0.1, g, 0.9)
        with stochastic_rounding(seed=11, counter=3):
            apply_momentum(dev[0], dev[1], 0.1, _cuda.to_device(g), 0.9)
        for c, d in zip(cpu, dev):
            assert np.array_equal(c.view(np.uint16), _cuda.to_host(d).view(np.uint16))


@pytest.mark.parametrize("master", [False, True], ids=["half-slots", "master-weights"])
def test_cuda_half_parameters_in_an_optimizer_match_numpy(master):
    """Adam on bfloat16 CUDA parameters: the same bits as on NumPy parameters (plain adds, multiplies and a
    correctly rounded sqrt here, so the simulator's float32 math equals the CPU's), masters included."""
    from optkernels.optimizers import Adam, Parameter

    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((3, 5)).astype(np.float32).astype(BF16)
    grads = [rng.standard_normal((3, 5)).astype(np.float32).astype(BF16) for _ in range(2)]
    host, dev = Parameter(w0.copy(), "w"), Parameter(_cuda.to_device(w0), "w")
    opts = [Adam([p], learning_rate=0.01, master_weights=master) for p in (host, dev)]
    for g in grads:
        opts[0]((g,))
        opts[1]((_cuda.to_device(g),))
    assert np.array_equal(_cuda.to_host(dev.data).view(np.uint16), host.data.view(np.uint16))
    states = [o.state_dict() for o in opts]
    assert set(states[0]) == set(states[1])
    if master:
        assert states[1]["master.w"].dtype == np.float32
        assert np.array_equal(host.data.view(np.uint16), states[0]["master.w"].astype(BF16).view(np.uint16))


def test_kahan_summation_on_cuda_matches_the_cpu():
    """``kahan_summation=True`` on a bfloat16 CUDA parameter: parameter, slots and compensation equal the
    CPU run's bits after 3 steps (the write-back kernel is one element function for both targets)."""
    from optkernels.optimizers import Adam, Parameter

    rng = np.random.default_rng(7)
    w0 = (4 * rng.standard_normal(12)).astype(np.float32).astype(BF16)
    grads = [rng.standard_normal(12).astype(np.float32).astype(BF16) for _ in range(3)]
    cpu = Adam([Parameter(w0.copy(), "w")], learning_rate=1e-3, kahan_summation=True)
    dev = Adam([Parameter(_cuda.to_device(w0), "w")], learning_rate=1e-3, kahan_summation=True)
    for g in grads:
        cpu((g,))
        dev((_cuda.to_device(g),))
    want, got = cpu.state_dict(), dev.state_dict()
    assert set(want) == set(got) and "compensation.w" in got
    for key, value in want.items():
        assert got[key].dtype == value.dtype and got[key].tobytes() == value.tobytes(), key
    assert np.array_equal(_cuda.to_host(dev.parameters[0].data).view(np.uint16),
                          cpu.parameters[0].data.view(np.uint16))
