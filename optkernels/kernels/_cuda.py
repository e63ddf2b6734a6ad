"""The one place optkernels imports CUDA from.

Today the CUDA target is numba-cuda (``numba.cuda``). numba-cuda is in maintenance mode; moving to its
successor means editing this module alone: every other module asks it whether an object is a CUDA array,
to wrap one, and for the ``cuda`` namespace that kernels are compiled with.

Nothing here imports CUDA at import time, and optkernels works without numba-cuda installed: NumPy arrays
never reach this module's imports. Under ``NUMBA_ENABLE_CUDASIM=1`` (set before the first import) Numba's
CUDA simulator stands in for a GPU; its arrays have no ``__cuda_array_interface__``, so they are
recognised by type.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from typing import Any

from .._install import install_hint

_INSTALL_HINT = "CUDA arrays need numba-cuda: " + install_hint("cuda")


@functools.cache
def installed() -> bool:
    """True if a CUDA backend (numba-cuda) can be imported, without importing it."""
    try:
        return importlib.util.find_spec("numba.cuda") is not None
    except (ImportError, ValueError):
        return False


def simulator_enabled() -> bool:
    """True if Numba's CUDA simulator is requested for this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def module() -> Any:
    """The ``cuda`` namespace (``numba.cuda``), imported on first use.

    Raises:
        ImportError: numba-cuda is not installed.
    """
    if not installed():
        raise ImportError(_INSTALL_HINT)
    from numba import cuda

    return cuda


def is_device_array(x: Any) -> bool:
    """True if ``x`` lives on a CUDA device (or in the CUDA simulator).

    Any object exposing ``__cuda_array_interface__`` counts (Numba device arrays, CuPy arrays, PyTorch CUDA
    tensors), as do the simulator's device arrays.
    """
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return type(x).__module__.startswith("numba.cuda.simulator") and hasattr(x, "copy_to_host")


def interface(x: Any) -> dict:
    """The ``__cuda_array_interface__`` of ``x``, or an equivalent dict for a simulator array."""
    if hasattr(x, "__cuda_array_interface__"):
        return x.__cuda_array_interface__
    # The simulator wraps a host ndarray; describe it as a C-contiguous or strided device array would be.
    host = x._ary
    return {
        "shape": host.shape,
        "typestr": host.dtype.str,
        "strides": None if host.flags.c_contiguous else host.strides,
        "data": (host.__array_interface__["data"][0], not host.flags.writeable),
        "version": 3,
    }


def as_device_array(x: Any) -> Any:
    """A Numba device-array view of the CUDA array ``x`` (no copy)."""
    cuda = module()
    if simulator_enabled() or type(x).__module__.startswith("numba.cuda"):
        return x
    return cuda.as_cuda_array(x)


def to_host(x: Any):
    """Copy a (small) CUDA array to a NumPy array."""
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return as_device_array(x).copy_to_host()


def loaded() -> bool:
    """True if the CUDA module was already imported by someone (cheap check for hot paths)."""
    return "numba.cuda" in sys.modules
