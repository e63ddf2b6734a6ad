"""GPU benchmarks, run only where Numba sees a CUDA device (otherwise the group leaves a note and returns).

Contenders, interleaved, each call followed by a device synchronisation (so a time is the work's, not a
launch's), medians:

* the device's copy bandwidth: a device-to-device copy of N float32 (read + write: 8 bytes per element),
  the yardstick of the dense target (apply_adam at 1e8 >= 85% of it);
* ``apply_adam`` at N = 1e5 .. 1e8 on device arrays, next to ``torch.optim.Adam(fused=True)`` on the same
  data on the GPU (7 x 4 bytes per element: var, m, v, grad read; var, m, v written);
* ``fused_sparse_lazy_adam`` on a 1,000,000 x 64 table with 16,384 Zipf indices, all on the device (the merge
  plan is built on the host from a copy of the indices), next to ``torch.optim.SparseAdam`` on the GPU;
* the ``Adam`` class over 100 device tensors totalling 1e6 and 1e7, next to torch's fused CUDA Adam;
* the AdamOffload pipeline at the dense sizes, next to its floors (see ``offload.py``).

Under Numba's CUDA simulator it runs too (tests/cuda/test_bench_gpu.py, tiny sizes): a check of the code,
not of speed.

torch is optional (skipped without a CUDA build of it).
"""
from __future__ import annotations

import numpy as np

import offload
from harness import Row, Suite, optional
from optimizer_step import model_sizes
from optkernels.kernels import apply_adam
from optkernels.optimizers import Adam, Parameter
from optkernels.sparse import fused_sparse_lazy_adam
from sparse import zipf_batch

F = np.float32
ADAM = (F(0.9), F(0.999), F(1e-3), F(0.9), F(0.999), F(1e-8))


def _cuda():
    """numba.cuda if a device (or the simulator) is there, else None."""
    try:
        from numba import cuda
    except ImportError:
        return None
    return cuda if cuda.is_available() else None


def _torch_cuda():
    torch = optional("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def _synced(cuda, fn):
    def call():
        fn()
        cuda.synchronize()
    return call


def run(suite: Suite, sizes: list[int] | None = None, table: tuple[int, int] = (1_000_000, 64),
        batch: int = 16384, totals: list[int] | None = None, tensors: int = 100,
        repeats: int | None = None, offload_chunk: int | None = None) -> None:
    """Measure the GPU group into ``suite`` (the defaults are the issue's sizes; quick mode shrinks them;
    ``offload_chunk``: the offload pipeline's chunk, default ``_offload.CHUNK``)."""
    cuda = _cuda()
    if cuda is None:
        suite.note("no CUDA device: the GPU group was not run")
        return
    name = getattr(cuda.get_current_device(), "name", "the CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else name
    suite.note(f"GPU group on {name}")
    if suite.quick:
        sizes, table, batch, totals = [int(1e5)], (100_000, 64), 4096, [int(1e5)]
    sizes = sizes or [int(1e5), int(1e6), int(1e7), int(1e8)]
    totals = totals or [int(1e6), int(1e7)]
    torch = _torch_cuda()
    repeats = repeats or (5 if suite.quick else 21)
    for n in sizes:
        _dense(suite, cuda, torch, n, repeats)
    _sparse(suite, cuda, torch, table, batch, repeats)
    for total in totals:
        _model(suite, cuda, torch, total, tensors, repeats)
    offload.run(suite, cuda, sizes, repeats, offload_chunk)


def _dense(suite: Suite, cuda, torch, n: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(n, dtype=F) * F(0.01) for _ in range(4)]
    host[2] = np.abs(host[2])
    var, m, v, g = (cuda.to_device(a) for a in host)
    src, dst = cuda.to_device(host[0]), cuda.device_array(n, F)
    impls = {"device copy": _synced(cuda, lambda: dst.copy_to_device(src)),
             "optkernels": _synced(cuda, lambda: apply_adam(var, m, v, *ADAM, g))}
    if torch is not None:
        p = torch.tensor(host[0], device="cuda", requires_grad=True)
        p.grad = torch.tensor(host[3], device="cuda")
        optimizer = torch.optim.Adam([p], lr=1e-3, fused=True)
        impls["torch Adam(fused=True, cuda)"] = lambda: (optimizer.step(), torch.cuda.synchronize())
    times = suite.time_interleaved(impls, repeats=repeats)
    copy = suite.add(Row("gpu", "device copy", "copy bandwidth", n, times.pop("device copy"), 8.0 * n))
    for impl, seconds in times.items():
        row = Row("gpu", "apply_adam (GPU)", impl, n, seconds, 28.0 * n)
        row.note = f"{100 * row.gbs / copy.gbs:5.1f}% of copy"
        suite.add(row)


def _sparse(suite: Suite, cuda, torch, table: tuple[int, int], batch: int, repeats: int) -> None:
    rows, dim = table
    indices, grad = zipf_batch(rows, batch, dim)
    rng = np.random.default_rng(1)
    host = rng.standard_normal((rows, dim), dtype=F) * F(0.01)
    var, m, v = cuda.to_device(host), cuda.to_device(np.zeros_like(host)), cuda.to_device(np.zeros_like(host))
    g, idx = cuda.to_device(grad), cuda.to_device(indices)
    impls = {"optkernels fused_sparse_lazy_adam": _synced(
        cuda, lambda: fused_sparse_lazy_adam(var, m, v, *ADAM, g, idx))}
    if torch is not None:
        weight = torch.nn.Parameter(torch.tensor(host, device="cuda"))
        optimizer = torch.optim.SparseAdam([weight], lr=1e-3)
        sparse_grad = torch.sparse_coo_tensor(torch.tensor(indices.astype(np.int64), device="cuda")[None, :],
                                              torch.tensor(grad, device="cuda"), (rows, dim))

        def torch_step():
            weight.grad = sparse_grad
            optimizer.step()
            torch.cuda.synchronize()

        impls["torch SparseAdam (cuda)"] = torch_step
    case = f"{rows}x{dim} table, {batch} Zipf indices (GPU)"
    for impl, seconds in suite.time_interleaved(impls, repeats=repeats).items():
        suite.add(Row("gpu", case, impl, batch, seconds))


def _model(suite: Suite, cuda, torch, total: int, tensors: int, repeats: int) -> None:
    rng = np.random.default_rng(2)
    sizes = model_sizes(total, tensors, rng)
    host = [rng.standard_normal(s, dtype=F) for s in sizes]
    grads = [rng.standard_normal(s, dtype=F) * F(1e-3) for s in sizes]
    params = [Parameter(cuda.to_device(h), f"p{k}") for k, h in enumerate(host)]
    device_grads = tuple(cuda.to_device(gr) for gr in grads)
    optimizer = Adam(params, learning_rate=1e-3)
    impls = {"optkernels Adam": _synced(cuda, lambda: optimizer(device_grads))}
    if torch is not None:
        torch_params = [torch.tensor(h, device="cuda", requires_grad=True) for h in host]
        for t, gr in zip(torch_params, grads):
            t.grad = torch.tensor(gr, device="cuda")
        fused = torch.optim.Adam(torch_params, lr=1e-3, fused=True)
        impls["torch Adam(fused=True, cuda)"] = lambda: (fused.step(), torch.cuda.synchronize())
    for impl, seconds in suite.time_interleaved(impls, repeats=repeats).items():
        suite.add(Row("gpu", f"Adam step, {tensors} tensors (GPU)", impl, total, seconds, 28.0 * total))
