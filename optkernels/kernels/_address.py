"""The data address of one NumPy array, read from the array object: quicker than ``a.ctypes.data`` or
``a.__array_interface__`` (each builds an object, a few microseconds), which argument checks and launches
would otherwise pay for every array of every call. A leaf module (ctypes and NumPy only), so that the
argument checks (:mod:`._checks`) and the packed launches (:mod:`._workers`) share it."""

from __future__ import annotations

import ctypes

import numpy as np


def _data_field_offset() -> int | None:
    """Where an ndarray object keeps its data pointer, found by probing (the first field after the object
    header in NumPy's ``PyArrayObject_fields``), or None if not found where expected."""
    probe = np.zeros(3)
    expected = probe.ctypes.data
    for offset in range(8, 65, 8):
        if ctypes.c_void_p.from_address(id(probe) + offset).value == expected:
            return offset
    return None


_DATA_OFFSET = _data_field_offset()


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s data (``a.ctypes.data``), read from the array object (NumPy's
    ``PyArrayObject_fields.data``, at the offset found once by probing); ``a.ctypes.data`` where the probe
    found nothing. ``a`` must be a ``numpy.ndarray`` (or a subclass): anything else gives a meaningless
    number."""
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0
