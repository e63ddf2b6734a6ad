"""torch rules whose scalars differ from tensor to tensor (Adafactor, Muon), over many CPU tensors of one
dtype in one compiled call per phase: the same element functions as the single-tensor launches of
:mod:`.torch_adafactor` and :mod:`.torch_family` (the same bits), without a call per tensor.

Adafactor's step has three phases between the reductions that torch takes (the norms, the row means):

1. :func:`lerp_factors`: each matrix's ``R ← lerp(R, r²/m, w)`` and ``C ← lerp(C, c²/n, w)`` from the norms
   ``r`` of its gradient's rows and ``c`` of its columns (torch's ``square_().div_(m)`` then ``lerp_``);
2. :func:`updates`: every tensor's update ``U`` (and a vector's ``V ← lerp(V, g², w)``);
3. :func:`decayed_steps`: ``w ← fma(U, s, w·(1 − lr·wd))``, ``s = −α/den`` per tensor (Muon's step too).

Muon's momentum and Nesterov blend before Newton–Schulz: :func:`muon_momenta`.

Tensors are passed as tables of data addresses (``addresses[j, t]``: array ``j`` of tensor ``t``), with
per-tensor integers and scalars in arrays; the caller keeps every addressed tensor alive during the call.
The element-wise phases run over a chunk table (:func:`~._multi_tensor.chunk_table`), in parallel from
:data:`~.torch_family.SERIAL_BELOW` elements.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np
from numpy import uint64

from . import _chunks
from ._elementwise import _JIT_OPTIONS
from ._pointers import address_as_pointer
from ._threading import parallel_allowed, parallel_launch
from .torch_adafactor import _factored_element, _vector_element
from .torch_family import SERIAL_BELOW, _muon_momentum, fma, torch_lerp
from .torch_reductions import _factored_chunk, _norms_chunk

__all__ = [
    "decayed_steps",
    "increment_steps",
    "lerp_factors",
    "muon_momenta",
    "updates",
    "tensor_norms",
    "factored_moments",
]


# Element loops run over uint64 indices: an unsigned index needs no negative-index wraparound, which would
# stop LLVM from vectorising them.


@numba.njit(inline="always", **_JIT_OPTIONS)
def _at(address, like, n):
    return numba.carray(address_as_pointer(address, like), n)


@numba.njit(cache=True, **_JIT_OPTIONS)
def _lerp_factors(addresses, counts, divisors, weights, small, like):
    for t in range(addresses.shape[1]):
        w, c, s = weights[0, t], weights[1, t], small[t]
        for j in range(2):  # rows, then columns
            moment = _at(addresses[2 * j, t], like, counts[j, t])
            norms = _at(addresses[2 * j + 1, t], like, counts[j, t])
            divisor = divisors[j, t]
            for i in range(counts[j, t]):
                x = norms[i]
                moment[i] = torch_lerp(moment[i], (x * x) / divisor, w, c, s)


def _update_chunk(k, chunks, addresses, shapes, weights, small, like, maximize, eps1, eps1_sq, one):
    t, start, stop, size = chunks[k, 0], chunks[k, 1], chunks[k, 2], chunks[k, 3]
    update = _at(addresses[0, t], like, size)
    grad = _at(addresses[1, t], like, size)
    n_rows, n_cols = shapes[0, t], shapes[1, t]
    if n_cols == 0:  # a vector's moment
        variance = _at(addresses[2, t], like, size)
        w, c, s = weights[0, t], weights[1, t], small[t]
        for i in range(uint64(start), uint64(stop)):
            v, u = _vector_element(variance[i], grad[i], maximize, w, c, s, eps1_sq, one)
            variance[i] = v
            update[i] = u
        return
    batches = size // (n_rows * n_cols)
    rows = _at(addresses[2, t], like, batches * n_rows)
    cols = _at(addresses[3, t], like, batches * n_cols)
    means = _at(addresses[4, t], like, batches)
    r = start // n_cols
    while r * n_cols < stop:
        b = r // n_rows
        row, mean = rows[r], means[b]
        if mean < eps1:  # torch's clamp_(min=ε1) of the mean (NaN passes)
            mean = eps1
        base, first = uint64(r * n_cols), uint64(b * n_cols)
        for j in range(uint64(max(start - r * n_cols, 0)), uint64(min(stop - r * n_cols, n_cols))):
            update[base + j] = _factored_element(
                row, cols[first + j], mean, grad[base + j], maximize, eps1_sq, one
            )
        r += 1


def _step_chunk(k, chunks, addresses, neg_steps, decay, like):
    t, start, stop, size = chunks[k, 0], chunks[k, 1], chunks[k, 2], chunks[k, 3]
    param = _at(addresses[0, t], like, size)
    update = _at(addresses[1, t], like, size)
    neg_step = neg_steps[t]
    for i in range(uint64(start), uint64(stop)):
        param[i] = fma(update[i], neg_step, param[i] * decay)


_muon_element = numba.njit(inline="always", **_JIT_OPTIONS)(_muon_momentum.py_func)


def _momentum_chunk(k, chunks, addresses, like, mw, mc, ms, nw, nc, ns, nesterov):
    t, start, stop, size = chunks[k, 0], chunks[k, 1], chunks[k, 2], chunks[k, 3]
    buf = _at(addresses[0, t], like, size)
    update = _at(addresses[1, t], like, size)
    grad = _at(addresses[2, t], like, size)
    for i in range(uint64(start), uint64(stop)):
        _muon_element(i, buf, update, grad, mw, mc, ms, nw, nc, ns, nesterov)


@numba.njit(cache=True, **_JIT_OPTIONS)
def _increment_steps(addresses, like, out):
    for t in range(addresses.shape[0]):
        step = _at(addresses[t], like, 1)
        step[0] += 1
        out[t] = step[0]


def _run(
    chunk_function: Any, total: int, chunks: np.ndarray, *args: Any, serial_below: int = SERIAL_BELOW
) -> None:
    """``chunk_function(k, chunks, *args)`` for every row ``k`` of ``chunks``, as a chunked launch
    (:func:`._chunks.entry`): on Numba's threads from ``serial_below`` elements in all, on the calling
    thread below."""
    parallel = total >= serial_below and parallel_allowed()
    with parallel_launch():
        _entry(chunk_function)(parallel, chunks.shape[0], chunks, *args)


#: The reductions' phases read each tensor once and write a few numbers: on the calling thread below this
#: many elements in all (as torch takes each tensor's norm on one thread), where a launch on Numba's threads
#: would cost more than it saves.
REDUCE_SERIAL_BELOW = 1 << 20


@functools.cache
def _entry(chunk_function: Any) -> Any:
    return _chunks.entry(chunk_function, views=True)  # arrays made from addresses


def lerp_factors(
    addresses: np.ndarray,
    counts: np.ndarray,
    divisors: np.ndarray,
    weights: np.ndarray,
    small: np.ndarray,
    like: np.ndarray,
) -> None:
    r"""Every matrix's factored moments: ``R ← lerp(R, r·r/m, w)``, ``C ← lerp(C, c·c/n, w)``, each operation
    rounded in the dtype as torch's ``norm.square_().div_(m)`` and ``R.lerp_(·, w)``
    (:func:`~.torch_family.torch_lerp`).

    Parameters
    ----------
    addresses : int64 array (4, T)
        Per matrix ``t``: the addresses of ``R`` (``row_var``), ``r`` (the norms of its gradient's rows),
        ``C`` (``col_var``) and ``c`` (the norms of its columns), flat, C-contiguous, of ``like``'s dtype.
    counts : int64 array (2, T)
        The element counts of ``R`` (and ``r``) and of ``C`` (and ``c``).
    divisors : array (2, T) of ``like``'s dtype
        ``m`` (the row length) and ``n`` (the column length).
    weights : array (2, T) of ``like``'s dtype
        The lerp weight ``w`` and ``1 − w`` (:func:`~.torch_family.lerp_scalars`).
    small : bool array (T,)
        ``|w| < 0.5``.
    like : array
        Any array of the dtype (not read).
    """
    _lerp_factors(addresses, counts, divisors, weights, small, like)


def updates(
    chunks: np.ndarray,
    addresses: np.ndarray,
    shapes: np.ndarray,
    weights: np.ndarray,
    small: np.ndarray,
    like: np.ndarray,
    maximize: bool,
    eps1: Any,
    eps1_sq: Any,
    one: Any,
) -> None:
    r"""Every tensor's update ``U = g/√max(V, ε1²)`` (``g ← −g`` with ``maximize``): a vector's
    ``V ← lerp(V, g², w)`` (written back), a matrix's ``V = R·C/max(mean(R), ε1)``.

    Parameters
    ----------
    chunks : int64 array (K, 4)
        :func:`~._multi_tensor.chunk_table` of the tensors' sizes.
    addresses : int64 array (5, T)
        Per tensor: ``U``, ``g``, then ``V`` (a vector) or ``R``, ``C`` and the means of ``R`` (one per
        matrix of the batch, before the clamp); unused entries are ignored.
    shapes : int64 array (2, T)
        ``(n, m)``, the last two dimensions of a matrix; ``(0, 0)`` for a vector.
    weights, small : arrays
        As :func:`lerp_factors`' (read for vectors).
    like : array
        Any array of the dtype.
    maximize : bool
        Negate the gradient.
    eps1, eps1_sq, one : scalars of the dtype
        ``ε1``, ``ε1²`` and 1.
    """
    args = (chunks, addresses, shapes, weights, small, like, maximize, eps1, eps1_sq, one)
    _run(_update_chunk, _total(chunks), *args)


def decayed_steps(
    chunks: np.ndarray, addresses: np.ndarray, neg_steps: np.ndarray, decay: Any, like: np.ndarray
) -> None:
    r"""``w ← fma(U, s_t, w·decay)`` over every tensor ``t`` (torch's ``w.mul_(decay)`` then
    ``w.add_(U, alpha=s_t)``).

    Parameters
    ----------
    chunks : int64 array (K, 4)
        :func:`~._multi_tensor.chunk_table` of the tensors' sizes.
    addresses : int64 array (2, T)
        Per tensor: the parameter ``w`` and its update ``U``.
    neg_steps : array (T,) of the dtype
        ``s_t = −α_t/den_t``.
    decay : scalar of the dtype
        ``1 − lr·wd``.
    like : array
        Any array of the dtype.
    """
    _run(_step_chunk, _total(chunks), chunks, addresses, neg_steps, decay, like)


def _total(chunks: np.ndarray) -> int:
    return int((chunks[:, 2] - chunks[:, 1]).sum()) if chunks.shape[0] else 0


def muon_momenta(chunks: np.ndarray, addresses: np.ndarray, like: np.ndarray, *scalars: Any) -> None:
    r"""Muon's ``buf ← lerp(buf, g, 1 − μ)``; ``U = lerp(g, buf, μ)`` (nesterov) or ``buf``, over every
    tensor (the element function of :func:`~.torch_family.torch_muon_momentum`).

    Parameters
    ----------
    chunks : int64 array (K, 4)
        :func:`~._multi_tensor.chunk_table` of the tensors' sizes.
    addresses : int64 array (3, T)
        Per tensor: ``buf``, ``U`` and ``g``.
    like : array
        Any array of the dtype.
    *scalars
        :func:`~.torch_family.muon_momentum_scalars` of the dtype.
    """
    _run(_momentum_chunk, _total(chunks), chunks, addresses, like, *scalars)


def increment_steps(addresses: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``t ← t + 1`` in place for every one-element step counter (torch's ``step_t += 1``, in the counters'
    dtype, that of ``like``) at ``addresses`` (int64, one per counter); returns the new values, float64."""
    out = np.empty(addresses.shape[0], np.float64)
    _increment_steps(addresses, like, out)
    return out


def tensor_norms(tasks: np.ndarray, addresses: np.ndarray, like: np.ndarray) -> np.ndarray:
    r"""torch's ``linalg_vector_norm`` of every contiguous tensor (:mod:`.torch_reductions`, the same bits).

    Parameters
    ----------
    tasks : int64 array (T, 4)
        Row ``t``: ``(t, 0, N_t, N_t)``, ``N_t`` the element count of tensor ``t``.
    addresses : int64 array (T,)
        The tensors' data addresses (C-contiguous, of ``like``'s dtype).
    like : array
        Any float32 or float64 array of the dtype (not read).

    Returns
    -------
    float64 array (T,)
        Each tensor's norm, computed in its dtype.
    """
    out = np.empty(tasks.shape[0], like.dtype)
    _run(_norms_chunk, _total(tasks), tasks, addresses, out, like, serial_below=REDUCE_SERIAL_BELOW)
    return out.astype(np.float64)


def factored_moments(
    tasks: np.ndarray,
    addresses: np.ndarray,
    dims: np.ndarray,
    divisors: np.ndarray,
    weights: np.ndarray,
    small: np.ndarray,
    means: np.ndarray,
    like: np.ndarray,
) -> None:
    r"""Every matrix's factored moments from its gradient ``g`` of shape ``(…, n, m)``, as torch's
    Adafactor takes them: ``R ← lerp(R, ‖g‖²_rows/m, w)``, ``C ← lerp(C, ‖g‖²_cols/n, w)`` (the norms in
    torch's order, :mod:`.torch_reductions`), then ``mean(R)`` over the rows of each batch (torch's
    ``R.mean(dim=-2)``, before the clamp).

    Parameters
    ----------
    tasks : int64 array (T, 4)
        Row ``t``: ``(t, 0, N_t, N_t)``, ``N_t`` the gradient's element count.
    addresses : int64 array (3, T)
        Per matrix: ``g``, ``R`` (``row_var``), ``C`` (``col_var``), C-contiguous, of ``like``'s dtype.
    dims : int64 array (4, T)
        The batch count ``B``, ``n``, ``m`` and the index of the matrix's first entry in ``means``.
    divisors : array (2, T) of the dtype
        ``m`` and ``n``.
    weights, small : arrays
        As :func:`lerp_factors`'.
    means : array of the dtype
        Receives the ``B`` row means of each matrix.
    like : array
        Any float32 or float64 array of the dtype.
    """
    args = (tasks, addresses, dims, divisors, weights, small, means, like)
    _run(_factored_chunk, _total(tasks), *args, serial_below=REDUCE_SERIAL_BELOW)
