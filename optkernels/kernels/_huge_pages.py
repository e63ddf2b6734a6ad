"""Transparent huge pages for large memory read and written at scattered places (an embedding table updated
row by row): ``madvise`` over the 2 MiB pages of a byte range, and the move of a range onto them once per
range (:func:`advise_scattered_once`). Linux only; values, layout and addresses never change.

On 4 KiB pages each scattered row of a large table costs a TLB miss and a page walk; on 2 MiB pages a
256 MB table needs 128 TLB entries. NumPy already asks for huge pages on its allocations of 4 MiB or more,
before the memory is first touched; torch's CPU allocator does not, and memory already touched stays on
4 KiB pages until it is collapsed (``MADV_COLLAPSE``, Linux 6.1 and later: a copy, made once). A leaf
module (ctypes only), shared by the sparse kernels and :mod:`optkernels.torch`.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = [
    "COLLAPSE_BYTES",
    "HUGE_PAGE_THRESHOLD",
    "MADV_COLLAPSE",
    "MADV_HUGEPAGE",
    "advise_scattered_once",
    "madvise_huge",
    "remember",
    "unadvised",
]

#: The smallest range (bytes) advised: NumPy's threshold for asking for huge pages.
HUGE_PAGE_THRESHOLD = 1 << 22

#: The largest range (bytes) moved onto huge pages at once (the kernel copies it, in time that grows with its size);
#: larger ones are only advised, left to the kernel's background collapsing.
COLLAPSE_BYTES = 1 << 30

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
_HUGE_PAGE = 1 << 21
_LINUX = sys.platform.startswith("linux")
_libc: list = []


def madvise_huge(address: int, nbytes: int, advice: int = MADV_HUGEPAGE) -> bool:
    """Give ``advice`` (default: huge pages) over the 2 MiB-aligned pages inside ``[address, address +
    nbytes)``; whether the kernel took it (it refuses an advice it does not know). Linux only."""
    lo = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    hi = (address + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if hi <= lo:
        return False
    if not _libc:
        _libc.append(ctypes.CDLL(None).madvise)
    return _libc[0](ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), advice) == 0


#: The ranges :func:`advise_scattered_once` has advised: ``(address, nbytes)`` -> True.
_advised: dict[tuple[int, int], bool] = {}

#: How many ranges :data:`_advised` keeps before it starts again (a range seen again is then advised again:
#: a syscall that finds it on huge pages already, a few milliseconds for 256 MB).
ADVISED_RANGES = 256


def unadvised(address: int, nbytes: int) -> bool:
    """Whether :func:`advise_scattered_once` would advise ``[address, address + nbytes)``: on Linux, a range
    of :data:`HUGE_PAGE_THRESHOLD` bytes or more not advised before (see :data:`_advised`). Memory freed and
    allocated again at the same address and size is taken as advised already (at worst it stays on the
    pages it has)."""
    return nbytes >= HUGE_PAGE_THRESHOLD and _LINUX and (address, nbytes) not in _advised


def advise_scattered_once(address: int, nbytes: int) -> None:
    """Where :func:`unadvised`: advise huge pages over the range and, up to :data:`COLLAPSE_BYTES`, move it
    there now (a copy, made once). Nothing otherwise."""
    if not unadvised(address, nbytes):
        return
    remember(address, nbytes)
    if madvise_huge(address, nbytes) and nbytes <= COLLAPSE_BYTES:
        madvise_huge(address, nbytes, MADV_COLLAPSE)


def remember(address: int, nbytes: int) -> None:
    """Mark ``[address, address + nbytes)`` as advised (by a caller that advised it itself), so that
    :func:`advise_scattered_once` leaves it alone."""
    if len(_advised) >= ADVISED_RANGES:
        _advised.clear()
    _advised[(address, nbytes)] = True
