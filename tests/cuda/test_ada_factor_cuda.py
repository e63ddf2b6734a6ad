"""fused_ada_factor on CUDA arrays equals the CPU kernel (small arrays: the simulator is slow).

"Equal" as for the other kernels (tests/cuda/test_cuda_kernels.py): within the few-ulp tolerance used
against the reference, since a GPU may fuse multiply-adds; float16 slots within one float16 ulp.
"""
import numpy as np
import pytest

from optable import assert_close
from optkernels.kernels import _cuda, fused_ada_factor
from test_ada_factor_kernel import NAMES, make


def _to_device(x):
    return _cuda.to_device(x) if isinstance(x, np.ndarray) else x


CASES = [((), False), ((10,), False), ((12,), True), ((6, 7), False), ((2, 3, 4, 5), False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, half", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("flags", [(False, False, False), (True, True, True)], ids=["plain", "all"])
def test_cuda_equals_cpu(shape, half, dtype, flags):
    global_norm = [2.5] if flags[0] else []  # with all flags on: FusedAdaFactorWithGlobalNorm
    args = make(np.random.default_rng(21), shape, dtype, half=half) + global_norm
    kw = dict(zip(["enable_scale_parameter", "enable_first_moment", "enable_weight_decay"], flags))
    before = [np.copy(a) for a in args[7:12]]
    device = [_to_device(a) for a in args]
    result = fused_ada_factor(*device, **kw)
    assert all(r is d for r, d in zip(result, device[7:12])), "returns the device arrays passed in"
    fused_ada_factor(*args, **kw)
    for name, cpu, dev, old in zip(NAMES, args[7:12], device[7:12], before):
        got = _cuda.to_host(dev)
        if cpu.dtype == np.float16:
            spacing = np.spacing(np.abs(cpu)).astype(np.float64)
            assert np.all(np.abs(got.astype(np.float64) - cpu.astype(np.float64)) <= spacing), name
        else:
            assert_close(got, cpu, dtype, 16.0, f"{name} cuda vs cpu", old)


def test_mixed_devices_are_a_type_error_and_write_nothing():
    args = make(np.random.default_rng(22), (3, 4), np.float32)
    device = [_to_device(a) for a in args]
    device[6] = args[6]  # the gradient stays on the host
    snapshot = [_cuda.to_host(d) for d in device[7:11]]
    with pytest.raises(TypeError, match="grad"):
        fused_ada_factor(*device)
    for d, s in zip(device[7:11], snapshot):
        assert np.array_equal(_cuda.to_host(d), s)


def test_float16_slot_on_the_host_with_device_params_is_a_type_error():
    args = make(np.random.default_rng(23), (8,), np.float32, half=True)
    device = [_to_device(a) for a in args]
    device[11] = args[11]
    with pytest.raises(TypeError, match="exp_avg_sq"):
        fused_ada_factor(*device)


@pytest.mark.parametrize("compression", [False, True])
def test_optimizer_on_cuda_parameters_equals_cpu(compression):
    from optkernels.optimizers import Parameter
    from optkernels.optimizers.ada_factor import AdaFactor

    rng = np.random.default_rng(24)
    shapes = {"w": (3, 4), "b": (5,), "k": (2, 2, 3)}
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    grads = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(2)]
    cpu = {n: Parameter(v.copy(), n) for n, v in init.items()}
    dev = {n: Parameter(_to_device(v.copy()), n) for n, v in init.items()}
    opt_cpu = AdaFactor(list(cpu.values()), compression=compression, weight_decay=0.01)
    opt_dev = AdaFactor(list(dev.values()), compression=compression, weight_decay=0.01)
    for g in grads:
        opt_cpu([g[n] for n in shapes])
        opt_dev([_to_device(g[n]) for n in shapes])
    for n in shapes:
        assert_close(dev[n].asnumpy(), cpu[n].data, np.float32, 16.0, n, init[n])
    state_cpu, state_dev = opt_cpu.state_dict(), opt_dev.state_dict()
    assert sorted(state_cpu) == sorted(state_dev)
    for key, value in state_cpu.items():
        if value.dtype == np.float16:
            assert np.all(np.abs(state_dev[key].astype(np.float64) - value.astype(np.float64))
                          <= np.spacing(np.abs(value)).astype(np.float64)), key
        else:
            assert_close(state_dev[key], value, value.dtype, 16.0, key)
