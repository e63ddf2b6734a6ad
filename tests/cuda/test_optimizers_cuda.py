"""Optimizers over CUDA parameters (small arrays: the simulator is slow) equal the same optimizers over NumPy
parameters; AdamOffload keeps its moments on the host and adds the step on the device."""

import math

import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.kernels.axpy import axpy, scal
from optkernels.kernels.sum_squares import square_sum_all
from optkernels.optimizers import FTRL, LARS, SGD, Adam, AdamOffload, Momentum, Parameter

SHAPES = {"conv.weight": (2, 16), "bn.gamma": (5,), "fc.bias": (3,)}


def _data(dtype, steps=3, seed=0):
    rng = np.random.default_rng(seed)
    init = {n: rng.standard_normal(s).astype(dtype) for n, s in SHAPES.items()}
    grads = [{n: rng.standard_normal(s).astype(dtype) for n, s in SHAPES.items()} for _ in range(steps)]
    return init, grads


def _run(make, init, grads, device):
    to = (lambda a: _cuda.to_device(a.copy())) if device else (lambda a: a.copy())
    params = [Parameter(to(v), n) for n, v in init.items()]
    opt = make(params)
    for g in grads:
        assert opt(tuple(to(g[n]) for n in SHAPES)) is True
    values = {p.name: p.asnumpy().copy() for p in params}
    return opt, params, values


def GROUPED(cls, **kw):
    """A grouped optimizer: the first parameter decayed and centralized, the others defaults."""

    def make(ps):
        groups = [{"params": ps[:1], "weight_decay": 0.01, "grad_centralization": True}, {"params": ps[1:]}]
        return cls(groups, loss_scale=4.0, **kw)

    return make


def _equal(actual, expected, exact, what):
    if exact or expected.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        eps = np.finfo(expected.dtype).eps
        np.testing.assert_allclose(
            actual, expected, rtol=4 * eps, atol=4 * eps * np.max(np.abs(expected)), err_msg=what
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "make, exact",
    [
        (lambda ps: AdamOffload(ps, learning_rate=0.01, weight_decay=0.01, loss_scale=4.0), True),
        (lambda ps: Adam(ps, learning_rate=0.01, weight_decay=0.01, loss_scale=4.0, use_offload=True), True),
        (lambda ps: Adam(ps, learning_rate=[0.01, 0.02, 0.03], weight_decay=0.01, loss_scale=4.0), True),
        (GROUPED(Adam, learning_rate=0.01), True),
        # LARSUpdate's kernel line ``coeff·(g + wd·w)`` is evaluated in float64 by the simulator: within ulps
        (lambda ps: LARS(Momentum(ps, 0.1, 0.9, weight_decay=0.01, loss_scale=2.0)), False),
        # SGD decays through the base pipeline (default filter, group decay); FTRL-V2 takes square roots
        (lambda ps: SGD(ps, momentum=0.9, weight_decay=0.01, loss_scale=4.0), True),
        (GROUPED(SGD, momentum=0.9), True),
        (GROUPED(FTRL, learning_rate=0.1, l1=0.001, l2=0.01, l2_shrinkage=0.05), False),
    ],
    ids=["AdamOffload", "Adam-offload", "Adam", "Adam-groups-gc", "LARS-Momentum", "SGD-decay", "SGD-groups-gc",
         "FTRL-shrinkage"],
)
def test_cuda_parameters_equal_numpy_parameters(make, exact, dtype):
    """AdamOffload and Adam are bit-equal under the simulator (which computes like NumPy; a GPU may fuse
    multiply-adds in the decay step: within an ulp there)."""
    init, grads = _data(dtype)
    opt_gpu, params_gpu, on_gpu = _run(make, init, grads, device=True)
    opt_cpu, _, on_cpu = _run(make, init, grads, device=False)
    for name in SHAPES:
        _equal(on_gpu[name], on_cpu[name], exact, name)
        assert not np.array_equal(on_cpu[name], init[name])
    assert all(_cuda.is_device_array(p.data) for p in params_gpu)
    state_gpu, state_cpu = opt_gpu.state_dict(), opt_cpu.state_dict()
    assert state_gpu.keys() == state_cpu.keys()
    for k in state_cpu:
        assert isinstance(state_gpu[k], np.ndarray)
        _equal(state_gpu[k], state_cpu[k], exact, k)


def test_adam_offload_keeps_moments_on_the_host_and_loads_state():
    init, grads = _data(np.float32)
    opt, params, _ = _run(lambda ps: AdamOffload(ps), init, grads, device=True)
    assert all(isinstance(m.data, np.ndarray) for m in opt.moment1 + opt.moment2)
    fresh = AdamOffload([Parameter(_cuda.to_device(v.copy()), n) for n, v in init.items()])
    fresh.load_state_dict(opt.state_dict())
    assert np.array_equal(fresh.moment2[0].data, opt.moment2[0].data)


def test_regular_adam_slots_live_on_the_device_and_reload():
    init, grads = _data(np.float64)
    opt, params, _ = _run(lambda ps: Adam(ps), init, grads, device=True)
    assert all(_cuda.is_device_array(m.data) for m in opt.moment1)
    fresh = Adam([Parameter(_cuda.to_device(v.copy()), n) for n, v in init.items()])
    fresh.load_state_dict(opt.state_dict())
    assert np.array_equal(_cuda.to_host(fresh.moment1[0].data), _cuda.to_host(opt.moment1[0].data))


def test_numpy_gradient_for_a_cuda_parameter_is_a_type_error():
    p = Parameter(_cuda.to_device(np.ones(3, np.float32)), "w")
    opt = Adam([p])
    with pytest.raises(TypeError, match="must be a CUDA array"):
        opt((np.ones(3, np.float32),))
    assert np.array_equal(p.asnumpy(), np.ones(3, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_scal_square_sum_all_on_the_device(dtype):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(50).astype(dtype), rng.standard_normal(50).astype(dtype)
    dx, dy = _cuda.to_device(x), _cuda.to_device(y)
    axpy(0.5, dx, dy)
    np.testing.assert_array_equal(dy.copy_to_host(), dtype(0.5) * x + y)
    scal(3.0, dx)
    np.testing.assert_array_equal(dx.copy_to_host(), dtype(3.0) * x)
    sx, sy = square_sum_all(_cuda.to_device(x), _cuda.to_device(y))
    # the squares rounded to the dtype, summed in float64 (one chunk): the CPU's bits
    assert (sx, sy) == square_sum_all(x, y)
    assert sx == pytest.approx(math.fsum(np.square(x).astype(np.float64)), rel=1e-14)
    assert sy == pytest.approx(math.fsum(np.square(y).astype(np.float64)), rel=1e-14)


def test_sparse_gradients_of_cuda_parameters():
    """Row-sparse CUDA gradients go to the sparse kernels on the device (centralization and loss scale on the
    values); weight decay of a CUDA row-sparse gradient and mixed devices are TypeErrors raised before
    anything is written."""
    from optkernels.sparse import RowSparse

    rng = np.random.default_rng(9)
    init = rng.standard_normal((6, 16))
    idx, values = np.array([4, 1, 4]), rng.standard_normal((3, 16))
    results = []
    for device in (False, True):
        to = _cuda.to_device if device else np.asarray
        p = Parameter(to(init.copy()), "embedding")
        opt = Adam(
            [{"params": [p], "grad_centralization": True}], learning_rate=0.01, loss_scale=4.0, use_lazy=True
        )
        opt((RowSparse(to(idx), to(values * 4.0), (6, 16)),))
        results.append(p.asnumpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-14, atol=1e-14)
    p = Parameter(_cuda.to_device(init.copy()), "embedding")
    for opt, grad, match in [
        (
            Adam([p], weight_decay=0.1),
            RowSparse(_cuda.to_device(idx), _cuda.to_device(values), (6, 16)),
            "decay",
        ),
        (Adam([p]), RowSparse(idx, values, (6, 16)), "is on the cpu"),
    ]:
        with pytest.raises(TypeError, match=match):
            opt((grad,))
    np.testing.assert_array_equal(p.asnumpy(), init)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_and_numpy_parameters_in_one_optimizer(dtype):
    """CUDA parameters are updated one by one, the NumPy ones by one multi-tensor launch: the same bits as
    all-NumPy parameters (the simulator computes like NumPy)."""
    init, grads = _data(dtype)
    on_device = {"conv.weight", "fc.bias"}

    def to(name, a):
        return _cuda.to_device(a.copy()) if name in on_device else a.copy()

    mixed = [Parameter(to(n, v), n) for n, v in init.items()]
    plain = [Parameter(v.copy(), n) for n, v in init.items()]
    opts = [GROUPED(Adam, learning_rate=0.01)(ps) for ps in (mixed, plain)]
    for g in grads:
        opts[0](tuple(to(n, g[n]) for n in SHAPES))
        opts[1](tuple(g[n].copy() for n in SHAPES))
    launches = opts[0]._launches
    assert sorted(launches.sequential) == [0, 2]
    assert [p.name for group in launches.kernel_groups for p in group.plans] == ["bn.gamma"]
    for p, q in zip(mixed, plain):
        assert p.asnumpy().tobytes() == q.data.tobytes(), p.name
    state, expected = opts[0].state_dict(), opts[1].state_dict()
    for k in expected:
        assert state[k].tobytes() == expected[k].tobytes(), k
