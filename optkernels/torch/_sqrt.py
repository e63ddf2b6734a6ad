"""The square root optkernels.torch computes for float32: IEEE ``sqrt`` by default (the vectorised loops), or,
with ``OPTKERNELS_TORCH_SQRT=torch`` in the environment, the one torch's CPU ``sqrt`` computes here when it
is one of the two MKL kernels that :func:`optkernels.kernels.torch_rules.torch_sqrt` reproduces (the
AVX-path kernel MKL runs on AMD processors among others, the AVX-512 one it runs on Intel processors):
torch's bits, at the cost of a scalar loop (docs/guide/torch_bits.rst). Which kernel torch runs is found
once, on first use, by running ``torch.sqrt`` on probe inputs. float64 always gets IEEE ``sqrt``."""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

from ..kernels.torch_rules import IEEE_SQRT, MKL_AVX512_SQRT, MKL_AVX_SQRT, torch_sqrt_array

__all__ = ["float32_sqrt", "mkl_float32_sqrt"]

#: The environment variable that asks for torch's own float32 sqrt ("torch"; default "ieee").
ENVIRONMENT = "OPTKERNELS_TORCH_SQRT"


@functools.cache
def mkl_float32_sqrt() -> int:
    """The ``mkl`` kernel of :func:`~optkernels.kernels.torch_rules.torch_sqrt` that equals torch's float32
    CPU ``sqrt`` here on every probe input (a slice of the binades [1, 2) and [2, 4), and values from 1e-40
    to 1e30): ``MKL_AVX_SQRT`` or ``MKL_AVX512_SQRT``; ``IEEE_SQRT`` where torch's is IEEE, or none
    matches."""
    binades = (np.arange(0, 1 << 24, 97, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    spread = np.logspace(-40, 30, 4099, dtype=np.float64).astype(np.float32)
    x = np.concatenate([binades, spread])
    theirs = torch.from_numpy(x).sqrt().numpy()
    for kernel in (IEEE_SQRT, MKL_AVX_SQRT, MKL_AVX512_SQRT):
        if np.array_equal(theirs, torch_sqrt_array(x, kernel)):
            return kernel
    return IEEE_SQRT


def float32_sqrt() -> int:
    """The float32 sqrt kernel the classes use: :func:`mkl_float32_sqrt` if the environment variable
    ``OPTKERNELS_TORCH_SQRT`` is ``torch``, else ``IEEE_SQRT``.

    Raises:
        ValueError: the variable is set to something else than ``torch`` or ``ieee``.
    """
    choice = os.environ.get(ENVIRONMENT, "ieee").strip().lower()
    if choice == "ieee":
        return IEEE_SQRT
    if choice == "torch":
        return mkl_float32_sqrt()
    raise ValueError(f"{ENVIRONMENT} must be 'ieee' or 'torch', got {choice!r}")
