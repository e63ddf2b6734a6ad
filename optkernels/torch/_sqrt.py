"""Which square root torch's CPU ``sqrt`` computes in this process: IEEE ``sqrt``, or MKL's float32 kernel
for CPUs that MKL gives its AVX path (``rsqrtss`` then two Newton-like steps without FMA), which
:func:`optkernels.kernels.torch_rules.torch_sqrt` reproduces. Decided once, on first use, by running
``torch.sqrt`` on probe inputs. Any other kernel (MKL's AVX-512 one on Intel processors) is not reproduced:
IEEE ``sqrt`` is then used (docs/guide/torch_bits.rst)."""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..kernels.torch_rules import torch_sqrt_array

__all__ = ["mkl_float32_sqrt"]


@functools.lru_cache(maxsize=None)
def mkl_float32_sqrt() -> bool:
    """True if torch's float32 CPU ``sqrt`` here is MKL's AVX-path kernel and not IEEE ``sqrt``: it equals
    :func:`~optkernels.kernels.torch_rules.torch_sqrt` with ``mkl`` on every probe input (a slice of the
    binades [1, 2) and [2, 4), and values from 1e-30 to 1e30)."""
    binades = (np.arange(0, 1 << 24, 97, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    spread = np.logspace(-30, 30, 4099, dtype=np.float64).astype(np.float32)
    x = np.concatenate([binades, spread])
    theirs = torch.from_numpy(x).sqrt().numpy()
    if np.array_equal(theirs, np.sqrt(x)):
        return False
    return bool(np.array_equal(theirs, torch_sqrt_array(x, True)))
