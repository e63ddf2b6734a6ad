"""A step's check that a group's parameters and gradients are still what its launch table was built for,
read in one compiled loop from the tensors' own C++ fields instead of ~10 Python calls per tensor.

A plan's table holds data addresses. Before a step may use it, the group's list must hold the same
parameter objects, each with the data address, element count, sizes, strides, dtype, device and dispatch
keys it had, and each parameter's gradient the parameter's sizes, the expected strides, dtype, device and
dispatch keys (its address is then the one the step writes into the table). Read through Python
(``p.grad``, ``p.data_ptr()``, ``g.shape``, ``g.dtype``, ...) that is about 0.7 µs per tensor; :class:`Guard`
reads the same fields where CPython and torch keep them: a list object holds its size and item array after
the object header; a tensor's Python object its ``TensorImpl*`` (``THPVariable.cdata``); the ``TensorImpl``
the storage pointer, the autograd metadata (whose ``grad_`` is the gradient's ``TensorImpl*``), the storage
offset, element count, dimension, sizes and strides (inline up to 5 dimensions), the dtype and device word
and the dispatch key set; the ``StorageImpl`` the data pointer.

Where each field sits is not assumed: it is found once per process (:func:`layout`) on probe tensors by
matching words against what torch's Python API reports for them (``_cdata``, ``untyped_storage()._cdata``,
``storage_offset()``, ``numel()``, sizes, strides, dispatch keys, ``untyped_storage().data_ptr()``,
``grad._cdata``), each field required at exactly one position within the object (``TensorImpl`` is at most
26 words: c10's own size check); a pointer is followed only after its position was matched (the autograd
metadata: the word after the storage, as c10 declares them, null for a tensor without autograd metadata),
and the result is checked on fresh probes. If any field is not found, :func:`layout` is None and callers
keep their Python checks. At a step, a mismatch of any field (or a list of another length, a parameter
without autograd metadata, a gradient that is None, sparse, of a Python subclass's dispatch keys) makes
:meth:`Guard.addresses` return None: the caller then runs its full checks, which raise or route as they do
without this module.

A plan's state (:class:`StateWatch`) is checked the same way: each state tensor's fields (its data address
among them), and that the optimizer's ``state`` dict and each parameter's entry were not modified, told by
the version CPython's dicts (3.11 to 3.13) keep in their object (``ma_version_tag``, PEP 509: a new value
from one process-wide counter at every modification, never repeated), found once per process
(:func:`dict_version_at`) as the one header word that grows at each of a probe dict's modifications.
"""

from __future__ import annotations

import collections
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np
import torch

from ..kernels._chunks import GuardedEntry
from ..kernels._intrinsics import CACHE_LINE_BYTES, prefetch_address
from ..kernels._pointers import address_as_pointer

__all__ = ["Guard", "StateWatch", "dict_version_at", "layout"]

_IMPL_WORDS = 26  # sizeof(TensorImpl) <= 26 words (c10's TensorImpl size check on 64-bit platforms)
_STORAGE_WORDS = 6  # the StorageImpl's data pointer is among its first words (after its refcounts)
_INLINE = 5  # C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE: sizes and strides inline up to 5 dimensions
_LOW40 = (1 << 40) - 1  # data_type_ (2 bytes) and device_opt_ (3 bytes) at the start of their word
# columns of a Guard's table of expected values (``_DATA``: the data address, or -1 for any)
_OBJECT, _KEYS, _KIND, _NUMEL, _DIM, _ITEM, _DATA, _SIZES = range(8)
_STRIDES = _SIZES + _INLINE
_COLUMNS = _STRIDES + _INLINE
# the word offsets of a layout: cdata in the object; storage, storage offset, numel, dim (sizes and
# strides follow it), dispatch keys, dtype/device, autograd metadata in the TensorImpl; the data pointer in
# the StorageImpl; the gradient in the autograd metadata
_CDATA, _STORAGE, _OFFSET, _NUMEL_AT, _DIM_AT, _KEYS_AT, _KIND_AT, _DATA_AT, _META, _GRAD = range(10)
# a CPython list object: PyObject_VAR_HEAD (refcount, type, size), then the item array's address
_LIST_SIZE, _LIST_ITEMS = 2, 3


@numba.njit(cache=True)
def _read(address: int, count: int, out: np.ndarray) -> None:
    pointer = address_as_pointer(address, out)
    for k in range(count):
        out[k] = pointer[k]


@numba.njit(cache=True, inline="always")
def _word(address: int, k: int, like: np.ndarray) -> int:
    return address_as_pointer(address, like)[k]


@numba.njit(cache=True, inline="always")
def _fits(impl: int, row: np.ndarray, at: np.ndarray, like: np.ndarray) -> int:
    """The data address of the TensorImpl at ``impl`` when its fields are ``row``'s, else -1."""
    if impl == 0 or _word(impl, at[_KEYS_AT], like) != row[_KEYS]:
        return -1
    if (_word(impl, at[_KIND_AT], like) & _LOW40) != row[_KIND]:
        return -1
    dim = _word(impl, at[_DIM_AT], like)
    if dim != row[_DIM] or _word(impl, at[_NUMEL_AT], like) != row[_NUMEL]:
        return -1
    for d in range(dim):
        if _word(impl, at[_DIM_AT] + 1 + d, like) != row[_SIZES + d]:
            return -1
        if _word(impl, at[_DIM_AT] + 1 + _INLINE + d, like) != row[_STRIDES + d]:
            return -1
    storage = _word(impl, at[_STORAGE], like)
    if storage == 0:
        return -1
    data = _word(storage, at[_DATA_AT], like) + _word(impl, at[_OFFSET], like) * row[_ITEM]
    if data < 0 or (row[_DATA] != -1 and data != row[_DATA]):
        return -1
    return data


@numba.njit(cache=True, inline="always")
def _fetch_impl(impl: int) -> None:
    """Prefetch the lines of the TensorImpl at ``impl`` (its first :data:`_IMPL_WORDS` words)."""
    for line in range(0, 8 * _IMPL_WORDS, CACHE_LINE_BYTES):
        prefetch_address(impl + line)
    prefetch_address(impl + 8 * _IMPL_WORDS - 1)


@numba.njit(cache=True, inline="always")
def _warm(items: int, n: int, expected: np.ndarray, at: np.ndarray, scratch: np.ndarray) -> None:
    """Bring the fields :func:`_check` reads into the cache, one level of pointers per pass over the
    tensors (``scratch``: 2n words, overwritten). After a backward pass these lines are mostly out of cache,
    and the check's reads of one tensor depend on each other (object, TensorImpl, storage, autograd
    metadata, gradient's TensorImpl and storage): checked one tensor after the other, each miss waits for
    the one before. Here each pass makes its reads independent of each other, so their misses overlap.
    Only pointers the check would also follow are read (a parameter's object only if it is the expected
    one, no null pointer); the last level is prefetched, never read."""
    for k in range(n):
        obj = _word(items, k, scratch)
        scratch[k] = _word(obj, at[_CDATA], scratch) if obj == expected[k, _OBJECT] else 0
        if scratch[k] != 0:
            _fetch_impl(scratch[k])
    for k in range(n):
        impl = scratch[k]
        scratch[n + k] = 0
        if impl != 0:
            storage = _word(impl, at[_STORAGE], scratch)
            if storage != 0:
                prefetch_address(storage + 8 * at[_DATA_AT])
            meta = _word(impl, at[_META], scratch)
            if meta != 0:
                scratch[n + k] = meta + 8 * at[_GRAD]
                prefetch_address(scratch[n + k])
    for k in range(n):
        if scratch[n + k] != 0:
            scratch[n + k] = _word(scratch[n + k], 0, scratch)  # the gradient's TensorImpl
            if scratch[n + k] != 0:
                _fetch_impl(scratch[n + k])
    for k in range(n):
        grad = scratch[n + k]
        if grad != 0:
            storage = _word(grad, at[_STORAGE], scratch)
            if storage != 0:
                prefetch_address(storage + 8 * at[_DATA_AT])


@numba.njit(cache=True, inline="always")
def _warm_state(rows: np.ndarray, versions: np.ndarray, at: np.ndarray, like: np.ndarray) -> None:
    """:func:`_warm` of :func:`_state_differs`' reads: the dicts' version words and the state tensors'
    objects prefetched, then their TensorImpls (each object's ``cdata`` read once its line is on its way)."""
    for j in range(versions.shape[0]):
        prefetch_address(versions[j, 0])
    for k in range(rows.shape[0]):
        prefetch_address(rows[k, _OBJECT] + 8 * at[_CDATA])
    for k in range(rows.shape[0]):
        _fetch_impl(_word(rows[k, _OBJECT], at[_CDATA], like))


@numba.njit(cache=True, inline="always")
def _state_differs(rows: np.ndarray, versions: np.ndarray, at: np.ndarray, like: np.ndarray) -> int:
    """-1 when every dict word ``versions[j, 0]`` holds ``versions[j, 1]`` and every tensor object of
    ``rows`` (``_OBJECT``: its address, kept alive by the caller) has the row's fields; else the index of the
    first that differs (dicts first, then tensors)."""
    m = versions.shape[0]
    for j in range(m):
        if _word(versions[j, 0], 0, like) != versions[j, 1]:
            return j
    for k in range(rows.shape[0]):
        if _fits(_word(rows[k, _OBJECT], at[_CDATA], like), rows[k], at, like) < 0:
            return m + k
    return -1


@numba.njit(cache=True)
def _state_check(rows: np.ndarray, versions: np.ndarray, at: np.ndarray) -> int:
    """:func:`_state_differs`, its reads first brought into the cache (:func:`_warm_state`)."""
    _warm_state(rows, versions, at, versions)
    return _state_differs(rows, versions, at, versions)


@numba.njit(cache=True)
def _check(
    params: int, expected: np.ndarray, at: np.ndarray, out: np.ndarray, rows: np.ndarray, versions: np.ndarray
) -> int:
    """-1 when the Python list at ``params`` holds the expected objects (rows ``0..n-1`` of ``expected``)
    with the expected fields, their gradients have the fields of rows ``n..2n-1`` and the watched state
    (``rows``, ``versions``: :func:`_state_differs`) is unchanged: the data addresses are then in ``out``
    (parameters, then gradients). Else the index of the first row that differs (-2: the list's length;
    ``2n`` and above: the state); no pointer read from a tensor that differs is followed further. The
    fields are first brought into the cache by :func:`_warm_state` and :func:`_warm` (``out`` its
    scratch)."""
    n = expected.shape[0] // 2
    if _word(params, _LIST_SIZE, out) != n:
        return -2
    items = _word(params, _LIST_ITEMS, out)
    _warm_state(rows, versions, at, out)
    _warm(items, n, expected, at, out)
    for k in range(n):
        obj = _word(items, k, out)
        if obj != expected[k, _OBJECT]:
            return k
        impl = _word(obj, at[_CDATA], out)
        out[k] = _fits(impl, expected[k], at, out)
        if out[k] < 0:
            return k
        meta = _word(impl, at[_META], out)
        if meta == 0:
            return n + k
        out[n + k] = _fits(_word(meta, at[_GRAD], out), expected[n + k], at, out)
        if out[n + k] < 0:
            return n + k
    state = _state_differs(rows, versions, at, out)
    return -1 if state == -1 else 2 * n + state


@numba.njit(cache=True)
def _refill(check: tuple, chunks: np.ndarray, addresses: np.ndarray, like: np.ndarray) -> int:
    """The prelude of a guarded launch (:meth:`Guard.launch`): :func:`_check` of ``check`` (the list's
    address, the expected table, the offsets), the gradients' data addresses written into the last row of
    ``addresses`` (the parameters' are those of its first row: each was checked equal to its expected
    one). -1 when every tensor is as expected; else, as :func:`_check`, where it differs (the last row
    then partly written). The fields are first brought into the cache by :func:`_warm`."""
    params, expected, at = check
    n = expected.shape[0] // 2
    row = addresses[addresses.shape[0] - 1]
    if _word(params, _LIST_SIZE, row) != n:
        return -2
    items = _word(params, _LIST_ITEMS, row)
    _warm(items, n, expected, at, np.empty(2 * n, np.int64))
    for k in range(n):
        obj = _word(items, k, row)
        if obj != expected[k, _OBJECT]:
            return k
        impl = _word(obj, at[_CDATA], row)
        if _fits(impl, expected[k], at, row) < 0:
            return k
        meta = _word(impl, at[_META], row)
        if meta == 0:
            return n + k
        data = _fits(_word(meta, at[_GRAD], row), expected[n + k], at, row)
        if data < 0:
            return n + k
        row[k] = data
    return -1


@numba.njit(cache=True)
def _refill_watched(check: tuple, chunks: np.ndarray, addresses: np.ndarray, like: np.ndarray) -> int:
    """:func:`_refill` of ``check[:3]``, then the state ``check[3:]`` (``rows``, ``versions``: as
    :func:`_state_differs` checks them): -1 when both pass; else as :func:`_refill` (``2n`` and above: the
    state)."""
    params, expected, at, rows, versions = check
    _warm_state(rows, versions, at, versions)
    found = _refill((params, expected, at), chunks, addresses, like)
    if found != -1:
        return found
    state = _state_differs(rows, versions, at, versions)
    return -1 if state == -1 else expected.shape[0] + state


@numba.njit(cache=True)
def _check_into(
    params: int,
    expected: np.ndarray,
    at: np.ndarray,
    out: np.ndarray,
    grads: np.ndarray,
    rows: np.ndarray,
    versions: np.ndarray,
) -> int:
    """:func:`_check`, and where it passes (-1) the gradients' data addresses copied into ``grads`` (a row of
    a launch table); ``grads`` is not written otherwise."""
    found = _check(params, expected, at, out, rows, versions)
    if found == -1:
        n = grads.shape[0]
        for k in range(n):
            grads[k] = out[n + k]
    return found


def _words(address: int, count: int) -> list[int]:
    out = np.empty(count, np.int64)
    _read(address, count, out)
    return out.tolist()


def _probes() -> list[torch.Tensor]:
    """Tensors of varied dtypes, devices, offsets, sizes, strides and dimensions; the last two a Parameter
    and the gradient autograd wrote for it."""
    base = torch.arange(60, dtype=torch.float32)
    weight = torch.nn.Parameter(torch.ones(3, 7, dtype=torch.float64))
    (weight * 2.0).sum().backward()
    assert weight.grad is not None
    return [
        base,
        base[3:],
        base.view(4, 15)[1:, 2:9],
        base.view(3, 4, 5).permute(2, 0, 1)[1:],
        base.view(2, 2, 3, 5)[:, 1],
        base.view(1, 2, 2, 3, 5),
        torch.zeros((), dtype=torch.float64),
        torch.ones(11, dtype=torch.bfloat16)[5:],
        torch.ones(13, dtype=torch.float16),
        torch.from_numpy(np.ones((5, 2))),
        torch.empty(9, device="meta"),
        weight,
        weight.grad,
    ]


def _unique(candidates: list[int]) -> int:
    if len(candidates) != 1:
        raise LookupError("a tensor field found at no or several positions")
    return candidates[0]


def _find() -> np.ndarray:
    """The word offsets of the fields (see the module docstring), found and checked on probe tensors."""
    probes = _probes()
    lists = [_words(id(x), 4) for x in ([], probes)]
    if [w[_LIST_SIZE] for w in lists] != [0, len(probes)] or _words(lists[1][_LIST_ITEMS], len(probes)) != [
        id(t) for t in probes
    ]:
        raise LookupError("a list object of another layout")
    objects = [_words(id(t), type(t).__basicsize__ // 8) for t in probes]
    at = np.zeros(10, np.int64)
    at[_CDATA] = _unique(
        [
            k
            for k in range(2, min(map(len, objects)))
            if all(w[k] == t._cdata for w, t in zip(objects, probes))
        ]
    )
    impls = [_words(t._cdata, _IMPL_WORDS) for t in probes]

    def where(value: Any) -> int:
        return _unique(
            [k for k in range(_IMPL_WORDS) if all(w[k] == value(t) for w, t in zip(impls, probes))]
        )

    at[_STORAGE] = where(lambda t: t.untyped_storage()._cdata)
    at[_OFFSET] = where(lambda t: t.storage_offset())
    at[_NUMEL_AT] = where(lambda t: t.numel())
    at[_KEYS_AT] = where(lambda t: _signed(torch._C._dispatch_keys(t).raw_repr()))
    at[_DIM_AT] = _unique(
        [
            k
            for k in range(_IMPL_WORDS - 2 * _INLINE)
            if all(
                w[k] == t.dim()
                and w[k + 1 : k + 1 + t.dim()] == list(t.shape)
                and w[k + 1 + _INLINE : k + 1 + _INLINE + t.dim()] == list(t.stride())
                for w, t in zip(impls, probes)
            )
        ]
    )
    kinds = [(t.dtype, t.device) for t in probes]
    at[_KIND_AT] = _unique(
        [
            k
            for k in range(_IMPL_WORDS)
            if all(
                (impls[i][k] & _LOW40 == impls[j][k] & _LOW40) == (kinds[i] == kinds[j])
                for i in range(len(probes))
                for j in range(i)
            )
        ]
    )
    stored = [t for t in probes if t.untyped_storage().data_ptr()]
    storages = [_words(t.untyped_storage()._cdata, _STORAGE_WORDS) for t in stored]
    at[_DATA_AT] = _unique(
        [
            k
            for k in range(_STORAGE_WORDS)
            if all(w[k] == t.untyped_storage().data_ptr() for w, t in zip(storages, stored))
        ]
    )
    # c10 declares storage_, autograd_meta_, extra_meta_, version_counter_, pyobj_slot_, sizes_and_strides_
    # in that order (one word each but the last): the autograd metadata is followed only where the found
    # offsets agree, and where that word is null for the tensors without autograd metadata (the probes that
    # are not views, but the Parameter) and not for the Parameter
    at[_META] = at[_STORAGE] + 1
    metas = [w[at[_META]] for w in impls]
    bare = [m for m, t in zip(metas, probes) if not t._is_view() and t is not probes[-2]]
    if at[_DIM_AT] != at[_STORAGE] + 5 or any(bare) or not metas[-2]:
        raise LookupError("the autograd metadata is not where c10 declares it")
    at[_GRAD] = _unique([k for k, w in enumerate(_words(metas[-2], 8)) if w == probes[-1]._cdata])
    # checked where it is used: the step's check on fresh probes, and a refusal of a wrong size
    fresh = [torch.nn.Parameter(t) for t in _probes()[:-4] if t.dtype.is_floating_point]
    grads = [torch.full_like(t, float(k)) for k, t in enumerate(fresh)]
    for t, g in zip(fresh, grads):
        t.grad = g
    guard = Guard(fresh, grads, at, [g.stride() for g in grads])
    found = guard.addresses(fresh)
    if found is None or found.tolist() != [t.data_ptr() for t in fresh + grads]:
        raise LookupError("the fields found do not give the probes' addresses")
    guard.table[-1, _NUMEL] += 1
    if guard.addresses(fresh) is not None:
        raise LookupError("the fields found do not tell a changed size")
    return at


def _signed(value: int) -> int:
    """An unsigned 64-bit value as the int64 the word holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


@functools.cache
def layout() -> np.ndarray | None:
    """The fields' word offsets in this torch build (found once per process), or None where they were not
    all found (callers then check tensors through torch's Python API)."""
    try:
        return _find()
    except (LookupError, RuntimeError, TypeError, ValueError, AttributeError):
        return None


def _fill_row(
    row: np.ndarray,
    at: np.ndarray,
    t: torch.Tensor,
    shape_of: torch.Tensor,
    strides: tuple,
    obj: int,
    data: int,
) -> None:
    """Write into ``row`` the fields expected of ``t``: ``shape_of``'s sizes, ``strides``, ``t``'s dtype,
    device and dispatch keys, the object address ``obj`` and the data address ``data`` (-1: any)."""
    if shape_of.dim() > _INLINE:
        raise ValueError("tensors of more than 5 dimensions are checked through Python")
    impl = _words(t._cdata, _IMPL_WORDS)
    row[_OBJECT], row[_DATA], row[_ITEM] = obj, data, t.element_size()
    row[_KEYS], row[_KIND] = impl[at[_KEYS_AT]], impl[at[_KIND_AT]] & _LOW40
    row[_NUMEL], row[_DIM] = shape_of.numel(), shape_of.dim()
    row[_SIZES : _SIZES + shape_of.dim()] = list(shape_of.shape)
    row[_STRIDES : _STRIDES + shape_of.dim()] = list(strides)


_NO_ROWS = np.zeros((0, _COLUMNS), np.int64)
_NO_VERSIONS = np.zeros((0, 2), np.int64)
_DICTS = (dict, collections.defaultdict)


def _find_version() -> int:
    """The word offset of a dict's version (see the module docstring), found on a probe dict: the one
    header word that grows at each of its modifications (its size does not change when a value is
    replaced; its keys table not when a value is replaced in place)."""
    if not (3, 11) <= sys.version_info[:2] <= (3, 13):  # PEP 509's version: kept up to date until 3.13
        raise LookupError("no dict version in this Python")
    words = dict.__basicsize__ // 8
    probe: dict = {}
    key = object()
    changes: list[Callable[[dict], Any]] = [
        lambda d: d.__setitem__(key, 1),
        lambda d: d.__setitem__(key, 2),
        lambda d: d.setdefault("a", 3),
        lambda d: d.update(b=4),
        lambda d: d.__setitem__("b", 5),
        lambda d: d.pop("a"),
        lambda d: d.__delitem__("b"),
        lambda d: d.popitem(),
        lambda d: d.__setitem__("c", 6),
        lambda d: d.clear(),
    ]
    grows = set(range(2, words))  # after the reference count and the type
    before = _words(id(probe), words)
    for change in changes:
        change(probe)
        after = _words(id(probe), words)
        grows = {k for k in grows if after[k] > before[k]}
        before = after
    return _unique(sorted(grows))


@functools.cache
def dict_version_at() -> int | None:
    """The word offset of a dict object's version in this Python (found once per process), or None where
    it was not found (callers then check dicts through Python)."""
    try:
        return _find_version()
    except (LookupError, ValueError):
        return None


class StateWatch:
    """The state a plan's launch tables were built from, as it is now (checked by the caller): the
    optimizer's ``state`` dict, each parameter's entry in it and the state tensors read from the entries.
    :meth:`intact` tells, in one compiled call, that none of the dicts was modified since and that each
    tensor has the fields it has now (its data address, sizes, strides, dtype, device, dispatch keys): then
    ``state[p]`` is still each entry, each entry still holds its tensors, and each tensor its memory.

    Args:
        state: the optimizer's ``state`` (a dict or ``collections.defaultdict``).
        entries: the entries (dicts) read from it, one per parameter.
        kept: the state tensors read from the entries (plain tensors or ``torch.nn.Parameter``, at most 5
            dimensions).
        at: the tensors' field offsets (:func:`layout`).
        version_at: the dicts' version offset (:func:`dict_version_at`).

    Raises:
        ValueError: a dict of another type (it may keep its items elsewhere), a tensor of a subclass or of
            more than 5 dimensions.
    """

    def __init__(
        self,
        state: dict,
        entries: Sequence[dict],
        kept: Sequence[torch.Tensor],
        at: np.ndarray,
        version_at: int,
    ):
        dicts = {id(d): d for d in (state, *entries)}
        if any(type(d) not in _DICTS for d in dicts.values()):
            raise ValueError("a mapping of another type: checked through Python")
        if any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in kept):
            raise ValueError("a tensor subclass: checked through Python")
        self.state, self.entries, self.kept, self.at = state, list(entries), list(kept), at
        self.versions = np.array(
            [(address + 8 * version_at, _words(address, version_at + 1)[version_at]) for address in dicts],
            np.int64,
        ).reshape(-1, 2)
        self.rows = np.zeros((len(self.kept), _COLUMNS), np.int64)
        for k, t in enumerate(self.kept):
            _fill_row(self.rows[k], at, t, t, t.stride(), id(t), t.data_ptr())

    def intact(self) -> bool:
        """No dict modified, every tensor's fields as they were (see the class docstring)."""
        return _state_check(self.rows, self.versions, self.at) == -1


class Guard:
    """The expected fields of a group's parameters and of their gradients (see the module docstring).

    Args:
        params: the parameters (checked by the caller: dense, of at most 5 dimensions, plain tensors or
            ``torch.nn.Parameter``), each expected to stay in the group's list, in order, with its data
            address, sizes, strides, dtype, device and dispatch keys.
        grads: their gradients as they are now (checked by the caller: of the parameter's shape, dtype and
            device): later gradients are expected to have their dtype, device and dispatch keys, the
            parameter's sizes and the strides of ``layouts`` (any tensor, any address).
        at: the field offsets (:func:`layout`).
        layouts: the strides expected of each gradient (default: its parameter's).

    Raises:
        ValueError: a parameter of more than 5 dimensions, or of a tensor subclass other than
            ``torch.nn.Parameter`` (its ``grad`` may not be the autograd field).
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        grads: Sequence[torch.Tensor],
        at: np.ndarray,
        layouts: Sequence[tuple] | None = None,
    ):
        self.at = at
        self.n = len(params)
        self.table = np.zeros((2 * self.n, _COLUMNS), np.int64)
        layouts = layouts if layouts is not None else [p.stride() for p in params]
        for k, (p, g) in enumerate(zip(params, grads, strict=True)):
            if type(p) not in (torch.Tensor, torch.nn.Parameter):
                raise ValueError("a tensor subclass: checked through Python")
            self._fill(k, p, p, p.stride(), id(p), p.data_ptr())
            self._fill(self.n + k, g, p, layouts[k], 0, -1)
        self._scratch = np.empty(2 * self.n, np.int64)
        self.watching: StateWatch | None = None
        self.rows, self.versions = _NO_ROWS, _NO_VERSIONS

    def _fill(
        self, k: int, t: torch.Tensor, shape_of: torch.Tensor, strides: tuple, obj: int, data: int
    ) -> None:
        _fill_row(self.table[k], self.at, t, shape_of, strides, obj, data)

    def watch(self, state: StateWatch | None) -> None:
        """Check ``state`` too at every check of this guard (None: no state), as :meth:`StateWatch.intact`
        checks it: a guard watching a state passes only while it is intact."""
        self.watching = state
        self.rows, self.versions = (_NO_ROWS, _NO_VERSIONS) if state is None else (state.rows, state.versions)

    def launcher(self, kernel: Any, tensors: Any, rounding: Any, host: int) -> Callable[[tuple, tuple], int]:
        """The guarded launch of ``kernel`` (an element function) over ``tensors`` (a
        :class:`~optkernels.kernels._multi_tensor.TensorList` over these parameters, in order, whose first
        row holds their addresses) for :meth:`launch`: one compiled call makes the check of
        :meth:`addresses`, writes the gradients' addresses into the last row of ``tensors``, rounds the
        kernel's scalars from ``host`` float values (``rounding(host, like)``, a Numba function) and
        launches (:meth:`~optkernels.kernels._elementwise.Elementwise.guarded_launcher`)."""
        return kernel.guarded_launcher(tensors, GuardedEntry(_refill, 3, rounding, host, 3))

    def watched_launcher(
        self, kernel: Any, tensors: Any, rounding: Any, host: int
    ) -> Callable[[tuple, tuple], int]:
        """:meth:`launcher` whose check also covers the state the guard watches (:meth:`watch`), for
        :meth:`launch_watched`."""
        return kernel.guarded_launcher(tensors, GuardedEntry(_refill_watched, 5, rounding, host, 3))

    def launch_watched(self, launcher: Callable[[tuple, tuple], int], params: list, host: tuple) -> int:
        """Run ``launcher`` (:meth:`watched_launcher`) over the group's list ``params`` with the ``host``
        values: -1 when it launched; else what differs (nothing launched): ``2 * n`` and above the watched
        state, below it a parameter or gradient (-2 the list's length, -3 nothing to launch, -4 not a
        list)."""
        if type(params) is not list:
            return -4
        return launcher((id(params), self.table, self.at, self.rows, self.versions), host)

    def launch(self, launcher: Callable[[tuple, tuple], int], params: list, host: tuple) -> bool:
        """Run ``launcher`` (:meth:`launcher`) over the group's list ``params`` with the ``host`` values.
        True when it launched; False where anything differs (nothing launched; the caller then checks the
        tensors through Python and refills the row)."""
        return type(params) is list and launcher((id(params), self.table, self.at), host) == -1

    def addresses(self, params: list) -> np.ndarray | None:
        """The data addresses of the parameters of the group's list ``params`` then of their gradients (an
        int64 array) when every tensor is as expected, else None (the caller then checks them through
        Python)."""
        if type(params) is not list:
            return None
        out = np.empty(2 * self.n, np.int64)
        if _check(id(params), self.table, self.at, out, self.rows, self.versions) != -1:
            return None
        return out

    def gradients_into(self, params: list, grads: np.ndarray) -> bool:
        """True when every tensor is as expected (as :meth:`addresses` checks them), the gradients' data
        addresses then written into ``grads`` (an int64 array of one per parameter, such as the gradient row
        of a launch table); False, ``grads`` untouched, otherwise. The check's scratch is kept in the guard
        (one step at a time per guard, as a launch table is used)."""
        return (
            type(params) is list
            and _check_into(id(params), self.table, self.at, self._scratch, grads, self.rows, self.versions)
            == -1
        )
