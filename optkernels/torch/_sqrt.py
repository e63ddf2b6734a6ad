"""The square root optkernels.torch computes: by default (or with ``OPTKERNELS_TORCH_SQRT=torch`` in the
environment) the one torch's CPU ``sqrt`` computes here when it is one of the MKL kernels that
:func:`optkernels.kernels.torch_rules.torch_sqrt` reproduces (float32: the AVX-path
kernel MKL runs on AMD processors among others, the AVX-512 one it runs on Intel processors; float64: those
two and the AVX2 one): torch's bits, in loops that vectorise too (the kernel is a compile-time choice and the
estimates have packed forms), at some cost in float32 (docs/guide/torch_bits.rst); with
``OPTKERNELS_TORCH_SQRT=ieee``, IEEE ``sqrt``. Which kernel torch runs is found once per dtype, on first
use, by running ``torch.sqrt`` on probe inputs."""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

from ..kernels.torch_rules import (
    IEEE_SQRT,
    MKL_AVX2_SQRT64,
    MKL_AVX512_SQRT,
    MKL_AVX512_SQRT64,
    MKL_AVX_SQRT,
    MKL_AVX_SQRT64,
    SqrtKernel,
    torch_sqrt_array,
)

__all__ = ["float32_sqrt", "for_device", "mkl_float32_sqrt", "mkl_float64_sqrt", "sqrt_kernel"]

#: The environment variable that chooses the sqrt: "torch" (torch's own, the default) or "ieee".
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


@functools.cache
def mkl_float64_sqrt() -> int:
    """The ``mkl`` float64 kernel of :func:`~optkernels.kernels.torch_rules.torch_sqrt` that equals torch's
    float64 CPU ``sqrt`` here on every probe input (random float64s of the binades [1, 2) and [2, 4), where
    MKL's kernels differ from IEEE on 0.5-2 %, and values from 1e-310 to 1e308): ``MKL_AVX_SQRT64``,
    ``MKL_AVX2_SQRT64`` or ``MKL_AVX512_SQRT64``; ``IEEE_SQRT`` where torch's is IEEE, or none matches."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(1.0, 4.0, 1 << 16), np.logspace(-310, 308, 4099)])
    theirs = torch.from_numpy(x).sqrt().numpy()
    for kernel in (IEEE_SQRT, MKL_AVX_SQRT64, MKL_AVX2_SQRT64, MKL_AVX512_SQRT64):
        if np.array_equal(theirs, np.sqrt(x) if kernel == IEEE_SQRT else torch_sqrt_array(x, kernel)):
            return kernel
    return IEEE_SQRT


def sqrt_kernel(dtype: np.dtype) -> int:
    """The sqrt kernel the classes use for arrays of ``dtype``: :func:`mkl_float32_sqrt` for float32 and
    :func:`mkl_float64_sqrt` for float64 (torch's own sqrt), unless the environment variable
    ``OPTKERNELS_TORCH_SQRT`` is ``ieee``; ``IEEE_SQRT`` then, and for other dtypes.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype of the parameter (and its state).

    Raises
    ------
    ValueError
        The variable is set to something else than ``torch`` or ``ieee``.
    """
    choice = os.environ.get(ENVIRONMENT, "torch").strip().lower()
    if choice == "ieee":
        return IEEE_SQRT
    if choice != "torch":
        raise ValueError(f"{ENVIRONMENT} must be 'ieee' or 'torch', got {choice!r}")
    if dtype == np.float32:
        return mkl_float32_sqrt()
    if dtype == np.float64:
        return mkl_float64_sqrt()
    return IEEE_SQRT


def float32_sqrt() -> int:
    """:func:`sqrt_kernel` of float32.

    Raises
    ------
    ValueError
        ``OPTKERNELS_TORCH_SQRT`` is set to something else than ``torch`` or ``ieee``.
    """
    return sqrt_kernel(np.dtype(np.float32))


def for_device(scalars: tuple, kind: str) -> tuple:
    """A kernel's ``scalars`` for a launch on ``kind`` ('cpu' or 'cuda'): on a CUDA device each MKL kernel
    (a :class:`~optkernels.kernels.torch_rules.SqrtKernel`) becomes None, IEEE ``sqrt``, which is what
    torch's CUDA ``sqrt`` computes (correctly rounded: equal to NumPy's on 4M float32 and float64 inputs on
    an H200); the CPU's MKL kernels concern CPU tensors only."""
    if kind != "cuda":
        return scalars
    return tuple(None if isinstance(s, SqrtKernel) else s for s in scalars)
