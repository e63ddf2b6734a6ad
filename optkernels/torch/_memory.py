"""Large optimizer state tensors on transparent huge pages, placed as their parameter is placed.

NumPy asks Linux for huge pages (``madvise(MADV_HUGEPAGE)``) on every allocation of 4 MiB or more before
the memory is first touched; torch's CPU allocator does not, so under the common ``madvise`` setting of
``/sys/kernel/mm/transparent_hugepage/enabled`` a torch tensor lives on 4 KiB pages and a memory-bound step
pays a TLB miss every 4 KiB of each stream. A step also slows down when the arrays it reads and writes
start at different offsets within a 4 KiB page (stores of one array and the next loads of another then
look alike to the processor's store-to-load check, which compares the address bits below 4 KiB: worst for
arrays 48 or 64 bytes apart). :func:`zeros_like` gives a new large state tensor both: huge pages, and the
parameter's offset within a page. Its values, dtype, device, shape and strides are those of
``torch.zeros_like``.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import torch

__all__ = ["HUGE_PAGE_THRESHOLD", "zeros_like"]

#: NumPy's threshold for asking for huge pages (bytes): state tensors this large are placed by
#: :func:`zeros_like`.
HUGE_PAGE_THRESHOLD = 1 << 22
_HUGE_PAGE = 1 << 21
_PAGE = 1 << 12
_MADV_HUGEPAGE = 14


def _madvise_huge(address: int, nbytes: int) -> None:
    """Ask for huge pages over the 2 MiB-aligned pages inside ``[address, address + nbytes)`` (ignored
    where the kernel does not know the advice)."""
    lo = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    hi = (address + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if hi > lo:
        ctypes.CDLL(None).madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_HUGEPAGE)


def placed(p: torch.Tensor) -> bool:
    """Whether :func:`zeros_like` places the state of ``p``: on Linux, a strided CPU tensor of
    :data:`HUGE_PAGE_THRESHOLD` bytes or more."""
    return (
        sys.platform.startswith("linux")
        and p.layout is torch.strided
        and p.is_cpu
        and p.numel() * p.element_size() >= HUGE_PAGE_THRESHOLD
    )


def zeros_like(p: torch.Tensor) -> torch.Tensor:
    """``torch.zeros_like(p, memory_format=torch.preserve_format)``: the same values, dtype, device, shape and
    strides. Where :func:`placed` (large CPU tensors on Linux) its memory is a NumPy allocation of its exact
    size (storage offset 0), advised onto transparent huge pages before it is zeroed and starting at the
    same offset within a 4 KiB page as ``p``'s data; such a tensor's storage is not resizable
    (``resize_`` to a larger size raises), as any ``torch.from_numpy`` tensor's.

    Args:
        p: the tensor whose shape, dtype, device and layout the zeros take.

    Returns:
        A new tensor of zeros.
    """
    if not placed(p):
        return torch.zeros_like(p, memory_format=torch.preserve_format)
    strides = torch.empty_like(p, memory_format=torch.preserve_format, device="meta").stride()
    nbytes = p.numel() * p.element_size()
    raw = np.empty(nbytes + _PAGE, np.uint8)
    start = (p.data_ptr() - raw.ctypes.data) % _PAGE
    memory = raw[start : start + nbytes]
    _madvise_huge(memory.ctypes.data, nbytes)
    storage = torch.from_numpy(memory).untyped_storage()  # holds the NumPy array while it lives
    return torch.empty(0, dtype=p.dtype).set_(storage, 0, p.shape, strides).zero_()
