"""optkernels: neural-network optimizer update rules as Numba kernels for the CPU and CUDA.

Submodules are imported on first use, so ``import optkernels`` stays fast (Numba loads with
``optkernels.kernels``):

* :mod:`optkernels.kernels` -- dense in-place update kernels (MindSpore's ``ops.Apply*`` family).
* :mod:`optkernels.sparse` -- row-sparse gradients (:class:`~optkernels.sparse.RowSparse`), the
  deterministic duplicate merge and the sparse update kernels (MindSpore's ``Fused*``/``SparseApply*``).
* :mod:`optkernels.reference` -- plain NumPy float64 implementations, the yardstick of the tests.
"""

from __future__ import annotations

import importlib

from ._version import __version__

_SUBMODULES = ("kernels", "reference", "sparse", "optimizers")

__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
