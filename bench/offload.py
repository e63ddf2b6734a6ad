"""The AdamOffload pipeline on a GPU: a CUDA parameter, host moments, the step computed on the host chunk by
chunk and added on the device (``optkernels.optimizers._offload``). Part of the GPU group (run only where
Numba sees a device or the simulator).

Contenders at each N, interleaved, each call ending with its streams synchronised:

* the pipeline (chunks of ``_offload.CHUNK``, double-buffered), the gradient on the host, and on the device;
  and with its copies and adds queued from a second thread (``submit_thread=True``), the gradient on the host;
* the same in one chunk: the host step, then the copy and the add, nothing overlapping;
* its floors: the host step alone (``adam_no_update_param`` into a buffer) and the pinned host-to-device
  copy of N elements alone. The pipeline's ideal is the larger of the two (plus one chunk's copy).
"""
from __future__ import annotations

import numpy as np

from harness import Row, Suite
from optkernels.kernels import adam_no_update_param
from optkernels.optimizers import _offload

F = np.float32
CASE = "AdamOffload step (GPU param)"


def _scalars():
    lr_t, b1, b2, eps = F(1e-3), F(0.9), F(0.999), F(1e-8)
    return lr_t, b1, F(1) - b1, b2, F(1) - b2, eps, False


def run(suite: Suite, cuda, sizes: list[int], repeats: int, chunk: int | None = None) -> None:
    """Measure the offload pipeline into ``suite`` at each of ``sizes`` (``cuda``: the numba.cuda module)."""
    for n in sizes:
        _one_size(suite, cuda, n, repeats, chunk or _offload.CHUNK)


def _one_size(suite: Suite, cuda, n: int, repeats: int, chunk: int) -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal(n, dtype=F)
    g = rng.standard_normal(n, dtype=F) * F(1e-3)
    m, v = np.zeros(n, F), np.zeros(n, F)
    param, device_grad = cuda.to_device(w), cuda.to_device(g)
    pinned, target, out = cuda.pinned_array(n, F), cuda.device_array(n, F), np.empty(n, F)
    pinned[:] = g
    chunked = _offload.CudaTransport(min(chunk, n), F, submit_thread=False)
    threaded = _offload.CudaTransport(min(chunk, n), F, submit_thread=True)
    whole = _offload.CudaTransport(n, F)
    scalars = _scalars()

    def copy():
        target.copy_to_device(pinned)
        cuda.synchronize()

    impls = {
        f"pipeline, chunks of {min(chunk, n)}, host grad": lambda: _offload.offload_step(
            chunked, param, m, v, g, scalars),
        f"pipeline, chunks of {min(chunk, n)}, device grad": lambda: _offload.offload_step(
            chunked, param, m, v, device_grad, scalars),
        f"pipeline, chunks of {min(chunk, n)}, host grad, submit thread": lambda: _offload.offload_step(
            threaded, param, m, v, g, scalars),
        "one chunk (no overlap), host grad": lambda: _offload.offload_step(whole, param, m, v, g, scalars),
        "host step alone (adam_no_update_param)": lambda: adam_no_update_param(
            m, v, 0.0, 0.0, 1e-3, 0.9, 0.999, 1e-8, g, out=out),
        "pinned host-to-device copy alone": copy,
    }
    times = suite.time_interleaved(impls, repeats=repeats)
    floor = max(times["host step alone (adam_no_update_param)"], times["pinned host-to-device copy alone"])
    for impl, seconds in times.items():
        note = f"{100 * floor / seconds:5.1f}% of max(host, copy)"
        suite.add(Row("gpu", CASE, impl, n, seconds, 0.0, note))
