"""Large optimizer state tensors on transparent huge pages, placed as their parameter is placed.

NumPy asks Linux for huge pages (``madvise(MADV_HUGEPAGE)``) on every allocation of 4 MiB or more before
the memory is first touched; torch's CPU allocator does not, so under the common ``madvise`` setting of
``/sys/kernel/mm/transparent_hugepage/enabled`` a torch tensor lives on 4 KiB pages and a memory-bound step
pays a TLB miss every 4 KiB of each stream. A step also slows down when the arrays it reads and writes
start at different offsets within a 4 KiB page (stores of one array and the next loads of another then
look alike to the processor's store-to-load check, which compares the address bits below 4 KiB: worst for
arrays 48 or 64 bytes apart; arrays at one offset still meet within each element's loads and stores).
:func:`zeros_like` gives a new large state tensor both: huge pages, and an offset within a page a whole
number of :data:`SLOT_BYTES` from the parameter's (the ``slot``-th state tensor of a parameter, so the
moments sit 1 KiB and 2 KiB from the parameter and its gradient: far from both collisions). Its values,
dtype, device, shape and strides are those of ``torch.zeros_like``. :func:`advise_table` moves a large parameter that a step reads row by row at
scattered places (an embedding table) onto huge pages: one TLB entry and page walk per 2 MiB instead of one
per row.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from ..kernels import _huge_pages

__all__ = ["COLLAPSE_BYTES", "HUGE_PAGE_THRESHOLD", "SLOT_BYTES", "advise_table", "zeros_like"]

#: NumPy's threshold for asking for huge pages (bytes): state tensors this large are placed by
#: :func:`zeros_like`.
HUGE_PAGE_THRESHOLD = _huge_pages.HUGE_PAGE_THRESHOLD
_PAGE = 1 << 12
_MADV_HUGEPAGE = _huge_pages.MADV_HUGEPAGE

#: How far apart within a 4 KiB page :func:`zeros_like` places the state tensors of one parameter (bytes,
#: a multiple of 64, so every tensor keeps the parameter's offset within a cache line): slot ``k`` starts
#: ``k·SLOT_BYTES`` (modulo 4 KiB) after the parameter's offset.
SLOT_BYTES = 1024
_MADV_COLLAPSE = _huge_pages.MADV_COLLAPSE

#: The largest table (bytes) :func:`advise_table` moves onto huge pages at once (the kernel copies
#: it); larger ones are left to the kernel's background collapsing.
COLLAPSE_BYTES = _huge_pages.COLLAPSE_BYTES

_madvise_huge = _huge_pages.madvise_huge


def placed(p: torch.Tensor) -> bool:
    """Whether :func:`zeros_like` places the state of ``p``: on Linux, a strided CPU tensor of
    :data:`HUGE_PAGE_THRESHOLD` bytes or more."""
    return (
        sys.platform.startswith("linux")
        and p.layout is torch.strided
        and p.is_cpu
        and p.numel() * p.element_size() >= HUGE_PAGE_THRESHOLD
    )


def zeros_like(p: torch.Tensor, slot: int = 0) -> torch.Tensor:
    """``torch.zeros_like(p, memory_format=torch.preserve_format)``: the same values, dtype, device, shape and
    strides. Where :func:`placed` (large CPU tensors on Linux) its memory is a NumPy allocation of its exact
    size (storage offset 0), advised onto transparent huge pages before it is zeroed and starting within a
    4 KiB page at ``(offset(p) + slot·SLOT_BYTES) mod 4096``, ``offset(p)`` being ``p``'s data's; such a
    tensor's storage is not resizable (``resize_`` to a larger size raises), as any ``torch.from_numpy``
    tensor's.

    Args:
        p: the tensor whose shape, dtype, device and layout the zeros take.
        slot: which of ``p``'s state tensors this is (1 for the first; 0: at ``p``'s own offset), so that
            the arrays of one step start :data:`SLOT_BYTES` apart (measured in
            ``bench/results/target-notes.md``).

    Returns:
        A new tensor of zeros.
    """
    if not placed(p):
        return torch.zeros_like(p, memory_format=torch.preserve_format)
    strides = torch.empty_like(p, memory_format=torch.preserve_format, device="meta").stride()
    nbytes = p.numel() * p.element_size()
    raw = np.empty(nbytes + _PAGE, np.uint8)
    start = (p.data_ptr() + slot * SLOT_BYTES - raw.ctypes.data) % _PAGE
    memory = raw[start : start + nbytes]
    _madvise_huge(memory.ctypes.data, nbytes)
    storage = torch.from_numpy(memory).untyped_storage()  # holds the NumPy array while it lives
    return torch.empty(0, dtype=p.dtype).set_(storage, 0, p.shape, strides).zero_()


def advise_table(p: torch.Tensor) -> bool:
    """Ask Linux to keep ``p``'s memory on transparent huge pages (``madvise(MADV_HUGEPAGE)`` over the
    2 MiB-aligned pages of its bytes, or of its storage when it is not contiguous) and, for at most
    :data:`COLLAPSE_BYTES`, to move it there now (``MADV_COLLAPSE``, Linux 6.1 and later: a copy made once,
    here); values, layout and addresses do not change. Only where :func:`placed` (large CPU tensors on
    Linux); nothing otherwise.

    Args:
        p: the table (a parameter read and written row by row at scattered rows).

    Returns:
        Whether the memory was moved onto huge pages now (False: not placed, too large, or refused).
    """
    if not placed(p):
        return False
    if p.is_contiguous():  # its own bytes (a view's storage may be far larger)
        address, nbytes = p.data_ptr(), p.numel() * p.element_size()
    else:
        storage = p.untyped_storage()
        address, nbytes = storage.data_ptr(), storage.nbytes()
    if not _madvise_huge(address, nbytes) or nbytes > COLLAPSE_BYTES:
        return False
    _huge_pages.remember(address, nbytes)  # the kernels' own advice (advise_scattered_once) is done
    return _madvise_huge(address, nbytes, _MADV_COLLAPSE)
