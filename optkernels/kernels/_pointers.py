"""Raw addresses of NumPy arrays, and typed pointers from them inside Numba code.

The multi-tensor loops (:mod:`._multi_tensor`) receive the arrays of many tensors as tables of int64
addresses, so that one compiled call can update any number of tensors of any shapes. Two pieces make that
work, kept here and nowhere else:

* :func:`address_as_pointer` (a Numba intrinsic, usable only in jitted code): ``address_as_pointer(address,
  like)`` reinterprets an int64 address as a pointer to ``like``'s dtype (``like`` is any array of that
  dtype, for example a zero-length one); ``numba.carray(pointer, n)`` then views ``n`` elements there.
  Nothing is checked: the address must point to ``n`` live, aligned elements of that dtype.
* :func:`data_addresses`: the data addresses of a sequence of NumPy arrays, fast. ``a.ctypes.data`` and
  ``a.__array_interface__`` each cost about 1.4 µs per array (they build a ctypes object or a dict), which
  is more than the whole update of a small tensor. NumPy's own C macro ``PyArray_DATA(a)`` reads the first
  field after the object header of the array object (``PyArrayObject_fields.data``, the same in NumPy 1.x
  and 2.x); :func:`data_addresses` reads that field at ``id(a) + object.__basicsize__`` in a jitted loop,
  about 0.06 µs per array. The layout is verified once, on the first call, against ``ctypes.data`` of
  a few probe arrays (views, read-only, zero-size); if it ever disagrees the slow, documented
  ``__array_interface__`` is used instead.

An address is only valid while its array is alive and its buffer is not reallocated: whoever builds a
table keeps the arrays referenced for as long as the table is used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

__all__ = ["address_as_pointer", "data_addresses"]


@intrinsic
def address_as_pointer(typingctx, address, like):
    """``address_as_pointer(address, like)``: the int64 ``address`` as a pointer to ``like.dtype`` (jitted
    code only; ``like`` is an array whose dtype is wanted, it is not read)."""
    if not isinstance(address, types.Integer) or not isinstance(like, types.Array):
        return None
    signature = types.CPointer(like.dtype)(address, like)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return signature, codegen


@numba.njit(cache=True)
def _read_words(object_addresses: np.ndarray, offset: int, out: np.ndarray) -> None:
    like = out[:0]
    for k in range(object_addresses.shape[0]):
        out[k] = address_as_pointer(object_addresses[k] + offset, like)[0]


_OFFSET = object.__basicsize__  # PyArrayObject_fields.data follows PyObject_HEAD


@functools.cache
def _layout_verified() -> bool:
    base = np.arange(24.0)
    read_only = np.ones(3, np.float32)
    read_only.flags.writeable = False
    probes = [base, base[3:], base.reshape(4, 6)[1:, ::2], read_only, np.empty(0), np.float64(1).reshape(1)]
    out = np.empty(len(probes), np.int64)
    _read_words(np.fromiter(map(id, probes), np.int64, len(probes)), _OFFSET, out)
    return out.tolist() == [p.ctypes.data for p in probes]


def data_addresses(arrays: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """The data address (``a.ctypes.data``) of every NumPy array in ``arrays``, as an int64 array.

    Args:
        arrays: a sequence of ``numpy.ndarray`` (instances of it or of a subclass; the caller checks
            this: anything else gives meaningless numbers).
        out: optional int64 array of ``len(arrays)`` elements to write into (returned).

    Returns:
        ``out`` (a new int64 array if None), ``out[k]`` the address of ``arrays[k]``'s first element.
    """
    count = len(arrays)
    if out is None:
        out = np.empty(count, np.int64)
    if _layout_verified():
        _read_words(np.fromiter(map(id, arrays), np.int64, count), _OFFSET, out)
    else:  # a NumPy whose array object layout differs from 1.x/2.x
        out[:] = [a.__array_interface__["data"][0] for a in arrays]
    return out
