"""Which square root torch's CPU ``sqrt`` computes in this process for float32: IEEE ``sqrt``, or one of the
two MKL kernels that :func:`optkernels.kernels.torch_rules.torch_sqrt` reproduces (the AVX-path kernel MKL
runs on AMD processors among others, and the AVX-512 one it runs on Intel processors). Decided once, on
first use, by running ``torch.sqrt`` on probe inputs; a kernel that is none of these gets IEEE ``sqrt``
(docs/guide/torch_bits.rst). float64 always gets IEEE ``sqrt``."""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..kernels.torch_rules import IEEE_SQRT, MKL_AVX512_SQRT, MKL_AVX_SQRT, torch_sqrt_array

__all__ = ["mkl_float32_sqrt"]


@functools.lru_cache(maxsize=None)
def mkl_float32_sqrt() -> int:
    """The ``mkl`` scalar of :func:`~optkernels.kernels.torch_rules.torch_sqrt` that equals torch's float32
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
