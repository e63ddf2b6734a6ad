"""Zero-copy views of torch tensors for the kernels: NumPy views of CPU tensors' memory, CUDA views through
``__cuda_array_interface__``, and raw data addresses for the multi-tensor CPU loop.

No data is ever copied: a view writes into the tensor's own storage, so a parameter's ``data_ptr()`` never
changes. Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) there is no GPU and torch has no CUDA
tensors; :func:`simulate_cuda` then lets CPU tensors stand in for CUDA ones (wrapped, without a copy, as the
simulator's device arrays), so the adapter's CUDA path (per-tensor launches of the CUDA kernels, device
buffers) runs in tests. What the simulator cannot exercise: real device memory, streams and torch's own CUDA
caching allocator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import torch

from ..kernels import _cuda
from ..kernels._multi_tensor import chunk_table

__all__ = ["addresses", "chunks", "device_kind", "device_view", "host_view", "simulate_cuda"]

_SIMULATED = [False]

#: dtypes of the multi-tensor CPU loop (and of CUDA tensors)
FLOAT_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
}
#: half dtypes (CPU tensors only: float32 math, each updated tensor rounded once, per-tensor launches)
HALF_DTYPES = {torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16)}
#: every parameter dtype optkernels.torch updates
STORAGE_DTYPES = {**FLOAT_DTYPES, **HALF_DTYPES}


@contextlib.contextmanager
def simulate_cuda() -> Iterator[None]:
    """Within this block, under ``NUMBA_ENABLE_CUDASIM=1``, CPU tensors take the CUDA path (tests only).

    Raises:
        RuntimeError: the CUDA simulator is not enabled in this process.
    """
    if not _cuda.simulator_enabled():
        raise RuntimeError("simulate_cuda() needs NUMBA_ENABLE_CUDASIM=1 set before Numba is imported")
    _SIMULATED[0] = True
    try:
        yield
    finally:
        _SIMULATED[0] = False


def device_kind(t: torch.Tensor) -> str:
    """'cuda' for a CUDA tensor (or any tensor inside :func:`simulate_cuda`), 'cpu' for a CPU tensor.

    Raises:
        TypeError: a tensor on another device (meta, mps, xla, ...).
    """
    kind = t.device.type
    if kind == "cuda" or (kind == "cpu" and _SIMULATED[0]):
        return "cuda"
    if kind == "cpu":
        return "cpu"
    raise TypeError(f"optkernels.torch runs on CPU and CUDA tensors, got a tensor on {t.device}")


def host_cpu(t: torch.Tensor) -> bool:
    """Whether ``t`` is a CPU tensor that :func:`device_kind` calls ``'cpu'`` (not under
    :func:`simulate_cuda`), in two attribute reads (no ``torch.device`` made)."""
    return t.is_cpu and not _SIMULATED[0]


def host_view(t: torch.Tensor) -> np.ndarray:
    """The NumPy array sharing ``t``'s memory (a CPU tensor; writes go to the tensor). A bfloat16 or float16
    tensor is seen through its 16-bit integers (torch exports no bfloat16 to NumPy) as ``ml_dtypes.bfloat16``
    or ``numpy.float16``: the same bytes."""
    half = HALF_DTYPES.get(t.dtype)
    if half is not None:
        return t.detach().view(torch.int16).numpy().view(half)
    return t.detach().numpy()


def device_view(t: torch.Tensor, flat: bool = True) -> Any:
    """A CUDA array sharing ``t``'s memory (flat, or of ``t``'s shape): a Numba device array over
    ``__cuda_array_interface__`` for a CUDA tensor; inside :func:`simulate_cuda`, the simulator's device array
    over a CPU tensor's memory.

    Raises:
        TypeError: a float16/bfloat16 tensor (optkernels.torch updates those on the CPU only).
    """
    if t.dtype in HALF_DTYPES:
        raise TypeError(
            f"optkernels.torch updates {t.dtype} tensors on the CPU only; on CUDA, keep float32 "
            "parameters (or float32 master weights) for the optimizer"
        )
    view = t.detach().reshape(-1) if flat else t.detach()
    if view.device.type == "cpu":
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(view.numpy())
    return _cuda.as_device_array(view)


def view(t: torch.Tensor, kind: str, flat: bool = False) -> Any:
    """An array over ``t``'s memory (of its shape, or flat) for the kernels on ``kind`` ('cpu': NumPy,
    'cuda': CUDA)."""
    if kind == "cpu":
        return host_view(t).reshape(-1) if flat else host_view(t)
    return device_view(t, flat)


def addresses(*columns: list) -> np.ndarray:
    """int64 ``(len(columns), T)``: the data address of each of the T tensors of each list (CPU tensors;
    the caller keeps them alive while the table is used)."""
    return np.array([list(map(torch.Tensor.data_ptr, column)) for column in columns], np.int64)


_CHUNK_TABLES: dict = {}


def chunks(sizes: list) -> np.ndarray:
    """:func:`~optkernels.kernels._multi_tensor.chunk_table` of ``sizes`` (element counts), remembered: a
    model's sizes repeat every step."""
    key = tuple(sizes)
    table = _CHUNK_TABLES.get(key)
    if table is None:
        if len(_CHUNK_TABLES) >= 64:
            _CHUNK_TABLES.clear()
        table = _CHUNK_TABLES[key] = chunk_table(sizes)
    return table
