"""The offload pipeline behind ``Adam(use_offload=True)`` and :class:`AdamOffload`: Adam's step computed on
the host chunk by chunk (``AdamNoUpdateParam``), each chunk's step carried to the parameter and added there
(``w ← w + delta``) while the host computes the next chunk.

Per chunk k, with two staging buffers (slot ``k % 2``): wait until the slot's previous step has left, compute
the chunk's step into it, queue its copy and add. A gradient on the device is fetched one chunk ahead into
the slot's gradient buffer. A transport carries the buffers and the copies: :class:`CudaTransport` (pinned
host buffers, a CUDA stream each way, events) for a CUDA parameter, :class:`HostTransport` for a NumPy one;
the schedule (:func:`offload_step`) is the same for both.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels.adam import _adam_delta
from ..kernels.axpy import _axpy

__all__ = ["CHUNK", "SUBMIT_THREAD", "CudaTransport", "HostTransport", "chunk_bounds", "offload_step"]

#: Elements per chunk of a CUDA parameter (16 MiB of float32): a larger chunk leaves more of the last copy
#: and add unoverlapped, a smaller one multiplies the per-chunk launches of the host step, the copy and the
#: add (bench/results/gpu/ has the measurements). A NumPy parameter has no copy to overlap and runs in one
#: chunk.
CHUNK = 1 << 22

#: Whether a :class:`CudaTransport` queues its copies and adds from a second thread by default.
SUBMIT_THREAD = False


def chunk_bounds(n: int, chunk: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in order, each ``chunk`` long but the last.

    Parameters
    ----------
    n : int
        Number of elements (>= 0).
    chunk : int
        Elements per chunk (>= 1).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]


class HostTransport:
    """The transport for a NumPy parameter: staging buffers in host memory, the add done at once (NumPy's
    ``w + delta``; for a float16/bfloat16 parameter ``_axpy``'s ``1·delta + w``, rounded once)."""

    def __init__(self, chunk: int, dtype: Any):
        self.chunk = chunk
        self._dtype = np.dtype(dtype)
        self._staging: list = [None, None]  # made on first use: one chunk needs one buffer

    def staging(self, slot: int, count: int) -> np.ndarray:
        """Slot ``slot``'s buffer for the step of ``count`` elements."""
        if self._staging[slot] is None:
            self._staging[slot] = np.empty(self.chunk, self._dtype)
        return self._staging[slot][:count]

    def fetch(self, grad: Any, lo: int, hi: int, slot: int) -> None:
        """Queue the copy of ``grad[lo:hi]`` to the host (a host gradient needs none)."""

    def fetched(self, grad: Any, lo: int, hi: int, slot: int) -> np.ndarray:
        """``grad[lo:hi]`` on the host, once its copy (queued by :meth:`fetch`) is done."""
        return grad[lo:hi]

    def wait_sent(self, slot: int) -> None:
        """Block until slot ``slot``'s staging buffer may be written again."""

    def send_add(self, slot: int, param: Any, lo: int, hi: int) -> None:
        """Queue ``param[lo:hi] ← param[lo:hi] + staging(slot)``."""
        delta, target = self._staging[slot][: hi - lo], param[lo:hi]
        if target.dtype == delta.dtype:
            np.add(target, delta, out=target)
        else:
            _axpy.launch("cpu", hi - lo, target, delta, delta.dtype.type(1))

    def finish(self) -> None:
        """Block until every queued copy and add is done."""


class CudaTransport(HostTransport):
    """The transport for a CUDA parameter: pinned staging and gradient buffers; steps go up on one stream
    (copy, then the add as a kernel on the same stream), gradients come down on another; an event per slot
    and direction says when a buffer is free (up) or filled (down). A slot's buffers are made on its first
    use (one chunk needs one slot). Both streams are blocking streams: they start after the work already
    queued on the legacy default stream (Numba's and PyTorch's default), so a gradient computed there is
    complete before it is copied.

    With ``submit_thread=True`` the copy and the add of a chunk are queued from a second thread, so the
    Python and driver cost of queuing them overlaps the host's next chunk (the host kernels release the
    GIL) rather than adding to it; the bits are the same either way."""

    def __init__(self, chunk: int, dtype: Any, grad_dtype: Any = None, submit_thread: bool | None = None):
        cuda = _cuda.module()
        super().__init__(chunk, dtype)
        self._grad_dtype = np.dtype(grad_dtype or dtype)
        self._device: list = [None, None]
        self._grads: list = [None, None]
        self._up, self._down = cuda.stream(), cuda.stream()
        self._sent = [cuda.event() for _ in range(2)]
        self._got = [cuda.event() for _ in range(2)]
        self._pending = [False, False]
        self.submit_thread = SUBMIT_THREAD if submit_thread is None else submit_thread
        self._queued: list = [None, None]  # per slot: the Future of its send_add on the submit thread
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._kept: dict = {}  # (slot, lo, hi) -> (parameter, its chunk's views)

    def _make(self, slot: int) -> None:
        if self._device[slot] is None:
            cuda = _cuda.module()
            self._staging[slot] = cuda.pinned_array(self.chunk, self._dtype)
            self._device[slot] = cuda.device_array(self.chunk, self._dtype)
            self._grads[slot] = cuda.pinned_array(self.chunk, self._grad_dtype)

    def staging(self, slot: int, count: int) -> np.ndarray:
        self._make(slot)
        return self._staging[slot][:count]

    def fetch(self, grad: Any, lo: int, hi: int, slot: int) -> None:
        if not isinstance(grad, np.ndarray):
            self._make(slot)
            _cuda.queue_copy_to_host(self._grads[slot][: hi - lo], grad[lo:hi], self._down)
            self._got[slot].record(self._down)

    def _views(self, key: tuple, array: Any, make: Any) -> Any:
        """The views (slices, a prepared launch) of one chunk's copy and add, made by ``make()`` on first use
        and kept while ``array`` (the parameter) is the same object: slicing a device array and typing a
        launch cost more Python time per chunk than the driver's own calls."""
        kept = self._kept.get(key)
        if kept is None or kept[0] is not array:
            kept = self._kept[key] = (array, make())
        return kept[1]

    def fetched(self, grad: Any, lo: int, hi: int, slot: int) -> np.ndarray:
        if isinstance(grad, np.ndarray):
            return grad[lo:hi]
        self._got[slot].synchronize()
        return self._grads[slot][: hi - lo]

    def wait_sent(self, slot: int) -> None:
        queued = self._queued[slot]
        if queued is not None:
            self._queued[slot] = None
            queued.result()  # its copy and add are queued (and any error surfaces here)
        if self._pending[slot]:
            self._sent[slot].synchronize()
            self._pending[slot] = False

    def send_add(self, slot: int, param: Any, lo: int, hi: int) -> None:
        if self.submit_thread:
            self._queued[slot] = self._submitter().submit(self._send_add, slot, param, lo, hi)
        else:
            self._send_add(slot, param, lo, hi)

    def _submitter(self) -> ThreadPoolExecutor:
        """The submit thread, made on first use and again in a forked child (threads do not survive fork)."""
        pid = os.getpid()
        if self._pool is None or self._pool[0] != pid:
            self._pool = (pid, ThreadPoolExecutor(1, thread_name_prefix="optkernels-offload"))
        return self._pool[1]

    def _send_add(self, slot: int, param: Any, lo: int, hi: int) -> None:
        delta, staged, add = self._views((slot, lo, hi), param, lambda: self._add_views(slot, param, lo, hi))
        _cuda.queue_copy_to_device(delta, staged, self._up)
        add()
        self._sent[slot].record(self._up)
        self._pending[slot] = True

    def _add_views(self, slot: int, param: Any, lo: int, hi: int) -> tuple:
        """``(device delta, pinned delta, add)`` of one chunk: ``add()`` queues ``param[lo:hi] += delta``."""
        count = hi - lo
        delta = self._device[slot][:count]
        one = self._staging[slot].dtype.type(1)
        add = _axpy.prepared_cuda(count, param[lo:hi], delta, one, stream=self._up)
        return delta, self._staging[slot][:count], add

    def finish(self) -> None:
        for slot in (0, 1):
            queued, self._queued[slot] = self._queued[slot], None
            if queued is not None:
                queued.result()
        self._up.synchronize()
        self._down.synchronize()
        self._pending = [False, False]


def offload_step(
    transport: HostTransport, param: Any, m: np.ndarray, v: np.ndarray, grad: Any, scalars: tuple
) -> None:
    r"""One offloaded Adam step of one flat parameter, chunk by chunk through ``transport``::

        m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;  delta = −lr_t·m/(sqrt(v) + ε)   (host, per chunk)
        param ← param + delta                                                        (where param lives)

    The bits equal one ``adam_no_update_param`` over the whole array followed by ``param + delta``: every
    element is computed by the same element function, whatever the chunk.

    Parameters
    ----------
    transport : HostTransport
        Buffers and copies (:class:`HostTransport` or :class:`CudaTransport`); its ``chunk`` sets the chunks.
    param : array
        The flat parameter (NumPy or CUDA), updated in place.
    m, v : numpy.ndarray
        The flat host moments (the step's compute dtype), updated in place.
    grad : array
        The flat gradient, on the host or on the parameter's device.
    scalars : tuple
        ``(lr_t, beta1, 1 − beta1, beta2, 1 − beta2, epsilon, use_nesterov)`` in the compute dtype.
    """
    bounds = chunk_bounds(m.size, transport.chunk)
    if bounds:
        transport.fetch(grad, *bounds[0], 0)
    for k, (lo, hi) in enumerate(bounds):
        slot = k % 2
        if k + 1 < len(bounds):
            transport.fetch(grad, *bounds[k + 1], 1 - slot)  # the next gradient chunk comes down meanwhile
        g = transport.fetched(grad, lo, hi, slot)
        transport.wait_sent(slot)  # chunk k − 2's step has left this buffer
        delta = transport.staging(slot, hi - lo)
        _adam_delta.launch("cpu", hi - lo, delta, m[lo:hi], v[lo:hi], g, *scalars)
        transport.send_add(slot, param, lo, hi)  # not waited for: overlaps chunk k + 1
    transport.finish()
