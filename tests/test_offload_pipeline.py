"""The offload pipeline's chunking and double buffering, on the CPU: chunked steps equal the one-shot host
step bit for bit, and a transport whose copies really are deferred (as a CUDA stream's are) still gives
those bits, which it would not if a staging buffer were rewritten before its copy left."""

import numpy as np
import pytest

from optkernels.kernels import adam_no_update_param
from optkernels.optimizers._offload import HostTransport, chunk_bounds, offload_step

SCALARS = dict(beta1_power=0.9 ** 3, beta2_power=0.999 ** 3, lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8)


def _state(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    w, g = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    m = (rng.standard_normal(n) * 0.1).astype(dtype)
    v = np.abs(rng.standard_normal(n) * 0.1).astype(dtype)
    return w, m, v, g


def _scalars(dtype):
    """The pipeline's scalars as the optimizer forms them (lr_t in the dtype, then the betas)."""
    t = np.dtype(dtype).type
    b1p, b2p = t(SCALARS["beta1_power"]), t(SCALARS["beta2_power"])
    lr_t = t(SCALARS["lr"]) * t(np.sqrt(t(1) - b2p)) / (t(1) - b1p)
    b1, b2 = t(SCALARS["beta1"]), t(SCALARS["beta2"])
    return lr_t, b1, t(1) - b1, b2, t(1) - b2, t(SCALARS["epsilon"]), False


def _host_only(w, m, v, g):
    delta = adam_no_update_param(m, v, SCALARS["beta1_power"], SCALARS["beta2_power"], SCALARS["lr"],
                                 SCALARS["beta1"], SCALARS["beta2"], SCALARS["epsilon"], g)
    return w + delta


@pytest.mark.parametrize("n, chunk", [(0, 4), (1, 4), (10, 3), (12, 4), (12, 5), (5, 100)])
def test_chunk_bounds_cover_the_range_in_order(n, chunk):
    bounds = chunk_bounds(n, chunk)
    flat = [i for lo, hi in bounds for i in range(lo, hi)]
    assert flat == list(range(n))
    assert all(hi - lo == chunk for lo, hi in bounds[:-1])
    assert len(bounds) == -(-n // chunk)


def test_chunk_bounds_refuse_an_empty_chunk():
    with pytest.raises(ValueError, match="chunk"):
        chunk_bounds(5, 0)


class DeferredTransport(HostTransport):
    """A host transport whose copies and adds happen only when waited for (a stream that has not run yet),
    and that logs the schedule. The staging buffer is read when the deferred copy runs, as a GPU would."""

    def __init__(self, chunk, dtype):
        super().__init__(chunk, dtype)
        self.queued = {0: [], 1: []}
        self.log = []

    def send_add(self, slot, param, lo, hi):
        self.log.append(("send", slot, lo))
        self.queued[slot].append(lambda: HostTransport.send_add(self, slot, param, lo, hi))

    def wait_sent(self, slot):
        self.log.append(("wait", slot))
        for run in self.queued[slot]:
            run()
        self.queued[slot] = []

    def finish(self):
        self.log.append(("finish",))
        for slot in (0, 1):
            self.wait_sent(slot)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, chunk", [(37, 5), (40, 8), (7, 7), (3, 16)])
def test_deferred_chunks_equal_the_host_only_step(dtype, n, chunk):
    w, m, v, g = _state(n, dtype)
    expected_m, expected_v = m.copy(), v.copy()
    expected = _host_only(w, expected_m, expected_v, g)
    transport = DeferredTransport(chunk, dtype)
    offload_step(transport, w, m, v, g, _scalars(dtype))
    np.testing.assert_array_equal(w, expected)
    np.testing.assert_array_equal(m, expected_m)
    np.testing.assert_array_equal(v, expected_v)


def test_large_chunks_take_the_prefetching_host_step_with_the_plain_steps_bits(monkeypatch):
    """Chunks of 2**21 elements and more (parts of 2**20 or more on up to two threads) run the host step's
    prefetching loop (``_adam_delta.prefetch_large``): the bits of the plain loop over the whole array."""
    from optkernels.kernels import adam as A

    chunk = 2**21 + 37
    w, m, v, g = _state(2 * chunk + 1000, np.float32)
    expected_m, expected_v = m.copy(), v.copy()
    with monkeypatch.context() as patch:
        patch.setattr(A._adam_delta, "prefetch_large", False)
        expected = _host_only(w, expected_m, expected_v, g)
    A._adam_delta.__dict__.pop("chunked_prefetching", None)
    offload_step(DeferredTransport(chunk, np.float32), w, m, v, g, _scalars(np.float32))
    assert "chunked_prefetching" in A._adam_delta.__dict__, "the chunks did not take the prefetching loop"
    assert w.tobytes() == expected.tobytes()
    assert m.tobytes() == expected_m.tobytes() and v.tobytes() == expected_v.tobytes()


def test_the_host_waits_only_for_the_copy_two_chunks_back():
    w, m, v, g = _state(50, np.float32)
    transport = DeferredTransport(10, np.float32)
    offload_step(transport, w, m, v, g, _scalars(np.float32))
    sends = [e for e in transport.log if e[0] == "send"]
    assert [lo for _, _, lo in sends] == [0, 10, 20, 30, 40]
    assert [slot for _, slot, _ in sends] == [0, 1, 0, 1, 0]
    # Before chunk k's step is written, the wait is for its slot: the copy of chunk k - 2, never chunk k - 1.
    steps = [e for e in transport.log if e[0] != "finish"]
    for k in range(5):
        wait, send = steps[2 * k], steps[2 * k + 1]
        assert wait == ("wait", k % 2) and send == ("send", k % 2, 10 * k)
    assert transport.log[-3:] == [("finish",), ("wait", 0), ("wait", 1)]


def test_a_buffer_rewritten_before_its_copy_left_would_be_seen():
    """The deferred transport is a real check: skipping the wait corrupts the result."""

    class Impatient(DeferredTransport):
        def wait_sent(self, slot):
            self.log.append(("skipped", slot))

    w, m, v, g = _state(40, np.float32)
    expected = _host_only(w, m.copy(), v.copy(), g)
    transport = Impatient(8, np.float32)
    offload_step(transport, w, m, v, g, _scalars(np.float32))
    for slot in (0, 1):
        for run in transport.queued[slot]:
            run()
    assert not np.array_equal(w, expected)
