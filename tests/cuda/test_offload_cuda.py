"""The offload pipeline with a CUDA parameter (pinned buffers, streams, events; small arrays under the
simulator): the same bits as the host-only step, whether the gradient is on the host or on the device."""

import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import _cuda, adam_no_update_param
from optkernels.optimizers import AdamOffload, Parameter, _offload
from optkernels.optimizers._offload import CudaTransport, offload_step


def _state(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    w, g = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    m = (rng.standard_normal(n) * 0.1).astype(dtype)
    v = np.abs(rng.standard_normal(n) * 0.1).astype(dtype)
    return w, m, v, g


@pytest.mark.parametrize("dtype,submit_thread", [(np.float32, False), (np.float64, False), (np.float32, True)])
@pytest.mark.parametrize("grad_on_device", [False, True])
def test_chunked_device_step_equals_the_host_only_step(dtype, grad_on_device, submit_thread):
    w, m, v, g = _state(23, dtype)
    t = np.dtype(dtype).type
    b1, b2, eps, lr_t = t(0.9), t(0.999), t(1e-8), t(0.01)
    expected_m, expected_v = m.copy(), v.copy()
    delta = adam_no_update_param(expected_m, expected_v, 0.0, 0.0, lr_t, b1, b2, eps, g)  # lr_t = lr here
    expected = w + delta
    param = _cuda.to_device(w)
    grad = _cuda.to_device(g) if grad_on_device else g
    transport = CudaTransport(5, dtype, submit_thread=submit_thread)
    offload_step(transport, param, m, v, grad, (lr_t, b1, t(1) - b1, b2, t(1) - b2, eps, False))
    np.testing.assert_array_equal(param.copy_to_host(), expected)
    np.testing.assert_array_equal(m, expected_m)
    np.testing.assert_array_equal(v, expected_v)


def _bits(a):
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_adam_offload_on_the_device_in_chunks_equals_the_host_step(monkeypatch, dtype):
    monkeypatch.setattr(_offload, "CHUNK", 4)
    rng = np.random.default_rng(5)
    init = {"a": rng.standard_normal((3, 5)).astype(dtype), "b": rng.standard_normal(3).astype(dtype)}
    grads = [{k: rng.standard_normal(x.shape).astype(dtype) for k, x in init.items()} for _ in range(3)]
    host = [Parameter(x.copy(), k) for k, x in init.items()]
    device = [Parameter(_cuda.to_device(x.copy()), k) for k, x in init.items()]
    opts = [AdamOffload(ps, learning_rate=0.01, weight_decay=0.01, loss_scale=2.0) for ps in (host, device)]
    for g in grads:
        opts[0](tuple(g[k] for k in init))
        opts[1](tuple(_cuda.to_device(g[k]) for k in init))
    assert all(isinstance(t, CudaTransport) for t in opts[1]._transports.values())
    for p, q in zip(host, device):
        np.testing.assert_array_equal(_bits(q.asnumpy()), _bits(p.data))
    for a, b in zip(opts[0].moment2, opts[1].moment2):
        np.testing.assert_array_equal(b.data, a.data)


def test_a_transport_reused_on_another_parameter_adds_to_that_one():
    """The transport keeps each chunk's device views and prepared add for the parameter it saw last: two
    steps on one parameter, then a step on another, each equal to the host-only step."""
    w, m, v, g = _state(17, np.float32, seed=2)
    t = np.float32
    b1, b2 = t(0.9), t(0.999)
    scalars = (t(0.01), b1, t(1) - b1, b2, t(1) - b2, t(1e-8), False)
    transport = CudaTransport(6, np.float32)
    first, second = _cuda.to_device(w), _cuda.to_device(-w)
    host_m, host_v, host = m.copy(), v.copy(), [w.copy(), -w]
    for param, expected in ((first, host[0]), (first, host[0]), (second, host[1])):
        offload_step(transport, param, m, v, g, scalars)
        expected += adam_no_update_param(host_m, host_v, 0.0, 0.0, scalars[0], b1, b2, t(1e-8), g)
        np.testing.assert_array_equal(param.copy_to_host(), expected)
    np.testing.assert_array_equal(first.copy_to_host(), host[0])
    np.testing.assert_array_equal(m, host_m)
    np.testing.assert_array_equal(v, host_v)
