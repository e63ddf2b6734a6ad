"""Optimizer state tensors on transparent huge pages, as NumPy puts its large arrays.

NumPy asks Linux for huge pages (``madvise(MADV_HUGEPAGE)``) on every allocation of 4 MiB or more before
the memory is first touched; torch's CPU allocator does not, so under the common ``madvise`` setting of
``/sys/kernel/mm/transparent_hugepage/enabled`` a torch tensor lives on 4 KiB pages. A memory-bound step
over large tensors then pays a TLB miss every 4 KiB of each stream (two-level page walks in a virtual
machine). :func:`zeros_like` gives new state tensors the pages NumPy would give them; the values and the
layout are those of ``torch.zeros_like``.
"""

from __future__ import annotations

import ctypes
import sys

import torch

__all__ = ["zeros_like"]

#: NumPy's threshold for asking for huge pages (bytes).
HUGE_PAGE_THRESHOLD = 1 << 22
_HUGE_PAGE = 1 << 21
_MADV_HUGEPAGE = 14


def _madvise_huge(address: int, nbytes: int) -> None:
    """Ask for huge pages over the 2 MiB-aligned pages inside ``[address, address + nbytes)`` (ignored
    where the kernel does not know the advice)."""
    lo = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    hi = (address + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if hi > lo:
        ctypes.CDLL(None).madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_HUGEPAGE)


def zeros_like(p: torch.Tensor) -> torch.Tensor:
    """``torch.zeros_like(p, memory_format=torch.preserve_format)``; on Linux, a CPU tensor of 4 MiB or more
    is first allocated empty and advised onto transparent huge pages, then zeroed.

    Args:
        p: the tensor whose shape, dtype, device and layout the zeros take.

    Returns:
        A new tensor of zeros.
    """
    if not (
        sys.platform.startswith("linux") and p.is_cpu and p.numel() * p.element_size() >= HUGE_PAGE_THRESHOLD
    ):
        return torch.zeros_like(p, memory_format=torch.preserve_format)
    out = torch.empty_like(p, memory_format=torch.preserve_format)
    _madvise_huge(out.data_ptr(), out.untyped_storage().nbytes())
    return out.zero_()
