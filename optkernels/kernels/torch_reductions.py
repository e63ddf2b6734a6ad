"""torch's CPU float32/float64 reductions of Adafactor's step, reproduced in the order torch adds, so that
the sums are torch's bits, and run over many tensors in one compiled call.

What torch 2.x's CPU kernels compute (its ``ReduceOpsKernel.cpp`` and ``SumKernel.cpp``, confirmed on data
against ``torch.linalg.vector_norm`` and ``Tensor.mean``; :func:`optkernels.torch._reductions.matches_torch`
checks it again in each process before these kernels are used):

* **2-norm along a contiguous last dimension** (a whole contiguous tensor, or a matrix's rows):
  :func:`sum_squares`: ``L`` lane sums ``s_l += x²`` over the first ``n − n mod L`` elements (``L = 8``
  for float32, 4 for float64, each product rounded, no fused multiply-add), the lanes added left to
  right, then the tail: float32 in groups of 4 added as ``s += x²``, the rest, and float64's whole tail, as
  ``s = fma(x, x, s)``; then ``√s``. A reduction over one element is ``|x|``.
* **2-norm along a strided dimension** (a matrix's columns): ``s += x²`` row after row, per column.
* **Sum of a contiguous run** (the mean of a matrix's row moments, ``sum / n``): :func:`cascade_sum`:
  torch's ``cascade_sum``: ``L``-lane vectors (``L`` as above) in groups of 4 vectors summed by a
  four-level cascade whose levels flush every ``2^max(4, ⌈log2 k⌉ // 4)`` rows (``k`` groups), leftover
  vectors into the first, the four vectors added, the scalar tail summed, then the lanes added to it left
  to right; a run shorter than ``L`` is summed as 4 interleaved scalar accumulators by the same cascade.
  torch splits a single sum of 32,768 elements or more over its threads: not reproduced (the caller
  leaves those to torch).
"""

from __future__ import annotations

import numba
import numpy as np
from numba.extending import overload
from numpy import uint64

from ._elementwise import _JIT_OPTIONS
from ._pointers import address_as_pointer
from .torch_family import fma, torch_lerp

__all__ = ["cascade_sum", "sum_squares"]


@numba.njit(inline="always", **_JIT_OPTIONS)
def _at(address, like, n):
    return numba.carray(address_as_pointer(address, like), n)


# Indices are uint64: an unsigned index needs no negative-index wraparound, which would keep the lanes'
# loop scalar.


@numba.njit(inline="always", **_JIT_OPTIONS)
def _sum_squares_8(x, start, n):
    z = x.dtype.type(0)
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
    base = uint64(start)
    full = uint64(n - n % 8)
    for i in range(uint64(0), full, uint64(8)):
        k = base + i
        v0, v1, v2, v3 = x[k], x[k + uint64(1)], x[k + uint64(2)], x[k + uint64(3)]
        v4, v5, v6, v7 = x[k + uint64(4)], x[k + uint64(5)], x[k + uint64(6)], x[k + uint64(7)]
        a0 += v0 * v0
        a1 += v1 * v1
        a2 += v2 * v2
        a3 += v3 * v3
        a4 += v4 * v4
        a5 += v5 * v5
        a6 += v6 * v6
        a7 += v7 * v7
    s = a0 + a1
    s = s + a2
    s = s + a3
    s = s + a4
    s = s + a5
    s = s + a6
    s = s + a7
    i = full
    if i + uint64(4) <= uint64(n):  # the float32 tail's group of 4: products rounded, added in order
        for j in range(uint64(4)):
            v = x[base + i + j]
            s = s + v * v
        i += uint64(4)
    for j in range(i, uint64(n)):
        v = x[base + j]
        s = fma(v, v, s)
    return s


@numba.njit(inline="always", **_JIT_OPTIONS)
def _sum_squares_4(x, start, n):
    z = x.dtype.type(0)
    a0 = a1 = a2 = a3 = z
    base = uint64(start)
    full = uint64(n - n % 4)
    for i in range(uint64(0), full, uint64(4)):
        k = base + i
        v0, v1, v2, v3 = x[k], x[k + uint64(1)], x[k + uint64(2)], x[k + uint64(3)]
        a0 += v0 * v0
        a1 += v1 * v1
        a2 += v2 * v2
        a3 += v3 * v3
    s = a0 + a1
    s = s + a2
    s = s + a3
    for j in range(full, uint64(n)):
        v = x[base + j]
        s = fma(v, v, s)
    return s


def sum_squares(x, start, n):
    """The sum of squares of the contiguous run ``x[start : start + n]`` (``n >= 1``), in the order of
    torch's CPU 2-norm along a contiguous dimension (module docstring); compiled code only."""
    raise NotImplementedError("compiled code only")


@overload(sum_squares, **_JIT_OPTIONS)
def _sum_squares_overload(x, start, n):
    if x.dtype.bitwidth == 32:
        return lambda x, start, n: _sum_squares_8(x, start, n)
    return lambda x, start, n: _sum_squares_4(x, start, n)


def _lanes(x):
    raise NotImplementedError("compiled code only")


@overload(_lanes, **_JIT_OPTIONS)
def _lanes_overload(x):
    lanes = 8 if x.dtype.bitwidth == 32 else 4
    return lambda x: lanes


# Not inlined (nor cascade_sum): compiled once each and called, they cut the first compile of the factored
# chunk from 6.7 to 3.6 CPU s (LLVM optimised each inlined copy of their unrolled lanes); the same operations.
@numba.njit(**_JIT_OPTIONS)
def _norm(x, start, n):
    """torch's 2-norm of the contiguous run ``x[start : start + n]``."""
    if n == 1:
        return abs(x[start])
    return np.sqrt(sum_squares(x, start, n))


@numba.njit(inline="always", **_JIT_OPTIONS)
def _ceil_log2(x):
    if x <= 2:
        return 1
    r = 0
    y = x - 1
    while y > 0:
        y >>= 1
        r += 1
    return r


@numba.njit(inline="always", **_JIT_OPTIONS)
def _cascade(x, start, stride, width, size, acc):
    """torch's ``multi_row_sum``: ``acc[0, :]`` ← the sums over ``r < size`` of the ``width`` values
    ``x[start + r·stride + k]``, by its four-level cascade (``acc``: (4, width) scratch)."""
    for j in range(4):
        for k in range(width):
            acc[j, k] = 0
    power = max(4, _ceil_log2(size) // 4)
    step = 1 << power
    mask = step - 1
    i = 0
    while i + step <= size:
        for _ in range(step):
            base = start + i * stride
            for k in range(width):
                acc[0, k] += x[base + k]
            i += 1
        for j in range(1, 4):
            for k in range(width):
                acc[j, k] += acc[j - 1, k]
                acc[j - 1, k] = 0
            if i & (mask << (j * power)) != 0:
                break
    while i < size:
        base = start + i * stride
        for k in range(width):
            acc[0, k] += x[base + k]
        i += 1
    for j in range(1, 4):
        for k in range(width):
            acc[0, k] += acc[j, k]


@numba.njit(**_JIT_OPTIONS)
def cascade_sum(x, start, n, acc):
    """torch's CPU ``sum`` of the contiguous run ``x[start : start + n]`` (module docstring); ``acc``: a
    (4, 4·L) scratch array of ``x``'s dtype."""
    lanes = _lanes(x)
    if n < lanes:  # torch's scalar_inner_sum: row_sum over scalars
        groups = n // 4
        _cascade(x, start, 4, 4, groups, acc)
        for i in range(groups * 4, n):
            acc[0, 0] += x[start + i]
        return ((acc[0, 0] + acc[0, 1]) + acc[0, 2]) + acc[0, 3]
    vectors = n // lanes
    groups = vectors // 4
    _cascade(x, start, 4 * lanes, 4 * lanes, groups, acc)
    for v in range(groups * 4, vectors):  # leftover vectors into the first partial
        for k in range(lanes):
            acc[0, k] += x[start + v * lanes + k]
    for p in range(1, 4):
        for k in range(lanes):
            acc[0, k] += acc[0, p * lanes + k]
    total = x.dtype.type(0)
    for i in range(vectors * lanes, n):
        total += x[start + i]
    for k in range(lanes):
        total += acc[0, k]
    return total


def _norms_chunk(k, tasks, addresses, out, like):
    t, size = tasks[k, 0], tasks[k, 3]
    if size == 0:
        out[t] = 0
        return
    x = _at(addresses[t], like, size)
    out[t] = _norm(x, 0, size)


def _factored_chunk(k, tasks, addresses, dims, divisors, weights, small, means, like):
    t, size = tasks[k, 0], tasks[k, 3]
    batches, n, m = dims[0, t], dims[1, t], dims[2, t]
    grad = _at(addresses[0, t], like, size)
    rows = _at(addresses[1, t], like, batches * n)
    cols = _at(addresses[2, t], like, batches * m)
    first = dims[3, t]  # this matrix's first entry in ``means``
    w, c, s = weights[0, t], weights[1, t], small[t]
    by_m, by_n = divisors[0, t], divisors[1, t]
    column = np.empty(m, like.dtype)
    acc = np.empty((4, 4 * _lanes(like)), like.dtype)
    for b in range(batches):
        base = b * n * m
        for i in range(n):
            r = _norm(grad, base + i * m, m)
            rows[b * n + i] = torch_lerp(rows[b * n + i], (r * r) / by_m, w, c, s)
        if n == 1:  # a reduction over one element
            for j in range(m):
                column[j] = abs(grad[base + j])
        elif m == 1:  # a contiguous column: torch's last-dimension norm
            column[0] = _norm(grad, base, n)
        else:  # each column summed row after row
            for j in range(m):
                column[j] = 0
            for i in range(n):
                row = uint64(base + i * m)
                for j in range(uint64(m)):
                    v = grad[row + j]
                    column[j] = column[j] + v * v
            for j in range(m):
                column[j] = np.sqrt(column[j])
        for j in range(m):
            x = column[j]
            cols[b * m + j] = torch_lerp(cols[b * m + j], (x * x) / by_n, w, c, s)
        means[first + b] = cascade_sum(rows, b * n, n, acc) / by_n
