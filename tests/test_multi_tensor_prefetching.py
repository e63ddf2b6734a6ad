"""The prefetching loops of Adam's large launches (``Elementwise.prefetch_large``): the multi-tensor entry
``many_chunked(..., prefetch=True)`` gives the plain entry's bits for lists whose parts are above and below
2**20 elements, with tensors and part bounds around its blocks and prefetch bounds, on one part or two, as
the single-tensor ``chunked_prefetching`` gives ``chunked``'s (AMSGrad's kernels and the offload's host
step too); its loop stays vectorised and prefetches; and a launch compiles and runs it only where a
thread's part holds 2**20 elements or more."""

import re

import numba
import numpy as np
import pytest

from optkernels.kernels import _elementwise as E
from optkernels.kernels import adam as A
from optkernels.kernels import torch_fused_adam as FA
from optkernels.kernels import torch_rules as T
from optkernels.kernels._multi_tensor import TensorList
from optkernels.kernels._threading import parallel_allowed, parallel_launch, thread_mask
from optkernels.kernels.adam import _adam
from optkernels.kernels.axpy import _axpy_scal

F32 = np.dtype(np.float32)


def _scalars(name):
    """``(kernel, scalars)``; the kernel's arrays: the parameter (or delta) first, the gradient last, the
    second moment (and AMSGrad's maximum) third (and fourth)."""
    if name in ("torch_adam", "torch_amsgrad"):
        group = T.adam_group_scalars(F32, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, False, T.MKL_AVX512_SQRT)
        kernel = T._torch_adam if name == "torch_adam" else T._torch_adam_amsgrad
        return kernel, T.adam_step_scalars(group, 3)
    if name == "fused_adam":
        group = FA.fused_adam_group_scalars(F32, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, False)
        return FA._fused_adam, FA.fused_adam_step_scalars(group, 3)
    f = np.float32
    if name == "amsgrad":
        return A._adam_amsgrad, (f(1e-3), f(0.1), f(0.001), f(1e-8))
    if name == "delta":
        return A._adam_delta, (f(1e-3), f(0.9), f(0.1), f(0.999), f(0.001), f(1e-8), True)
    return _adam, (f(1e-3), f(0.9), f(0.1), f(0.001), f(1e-8), False)


def _count(kernel):
    """The number of array arguments of ``kernel``'s element function (5 with AMSGrad's maximum)."""
    return 5 if "amsgrad" in kernel.__name__ else 4


def _inputs(rng, count, sizes):
    """``count`` rows of float32 tensors of ``sizes``; rows 2 and 3 (moments, AMSGrad's maximum) >= 0."""
    arrays = [[rng.standard_normal(n, dtype=np.float32) for n in sizes] for _ in range(count)]
    for row in arrays[2:4] if count == 5 else arrays[2:3]:
        for t in row:
            np.abs(t, out=t)
    return arrays


KERNELS = ["torch_adam", "fused_adam", "adam", "torch_amsgrad", "amsgrad", "delta"]


# one tensor over two parts of 2**20 and more; many tensors whose parts' bounds fall inside them, sizes around
# the block (64), the prefetch distance (1024 + 64) and the chunk (16384); totals under the bound on two parts
LISTS = [
    (2**21 + 64 * 37 + 5,),
    (5, 2**20 + 1087, 100, 0, 2**20 - 1, 3 * 16384 + 7, 1088, 2**19 + 63),
    (2**20 + 1088,),
    (2**20 - 1, 1000),
]


def _launch(entry, tensors, parts, scalars):
    table = tensors.balanced(parts)
    with parallel_launch(), np.errstate(all="ignore"):
        entry(
            parts > 1 and parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars
        )


@pytest.mark.parametrize("name", KERNELS)
def test_the_prefetching_multi_tensor_entry_gives_the_plain_entrys_bits(name):
    kernel, scalars = _scalars(name)
    assert kernel.prefetch_large, f"{name}'s large launches do not prefetch"
    count = _count(kernel)
    plain, prefetching = kernel.many_chunked(count), kernel.many_chunked(count, prefetch=True)
    assert plain is not prefetching
    rng = np.random.default_rng(5)
    for sizes in LISTS:
        arrays = _inputs(rng, count, sizes)
        for parts in (1, 2):
            results = []
            for entry in (plain, prefetching):
                copies = [[t.copy() for t in row] for row in arrays]
                tensors = TensorList(sizes, np.float32, count)
                for r, row in enumerate(copies):
                    tensors.set_row(r, row)
                _launch(entry, tensors, parts, scalars)
                results.append(copies)
            for r, (a, b) in enumerate(zip(*results)):
                for k, (x, y) in enumerate(zip(a, b)):
                    assert x.tobytes() == y.tobytes(), (
                        f"{name} {sizes} parts={parts}: row {r} tensor {k} differs"
                    )
            moved = np.concatenate(results[1][0]) != np.concatenate(arrays[0])
            assert moved.sum() > 0.9 * sum(sizes), "the step moved nothing: the check checks nothing"


@pytest.mark.parametrize("name", ["adam", "amsgrad", "delta"])
def test_the_prefetching_single_tensor_entry_gives_the_plain_entrys_bits(name):
    """``chunked_prefetching`` (apply_adam, apply_adam_with_amsgrad, adam_no_update_param over one array of
    2**20 elements or more per thread) against ``chunked`` around the part, block and prefetch bounds."""
    kernel, scalars = _scalars(name)
    count = _count(kernel)
    rng = np.random.default_rng(7)
    for n in (1000, 2**20 - 1, 2**20 + 1087, 2**21 - 2, 2**21 + 64 * 37 + 5):
        arrays = [row[0] for row in _inputs(rng, count, [n])]
        for parallel in (False, True):
            a = [x.copy() for x in arrays]
            b = [x.copy() for x in arrays]
            with parallel_launch(), np.errstate(all="ignore"):
                kernel.chunked(parallel and parallel_allowed(), n, *a, *scalars)
                kernel.chunked_prefetching(parallel and parallel_allowed(), n, *b, *scalars)
            for k, (x, y) in enumerate(zip(a, b)):
                assert x.tobytes() == y.tobytes(), f"{name} n={n} parallel={parallel}: array {k} differs"
            assert (a[0] != arrays[0]).sum() > 0.9 * n, "the step moved nothing: the check checks nothing"


def test_apply_adam_with_amsgrad_and_adam_no_update_param_take_the_prefetching_loop_for_large_arrays(
    monkeypatch,
):
    """The public entries run ``chunked_prefetching`` on one thread's part of 2**20 elements or more, with
    the bits of their plain launch (``prefetch_large`` off), and leave it uncompiled below."""
    from optkernels.kernels import adam_no_update_param, apply_adam_with_amsgrad

    def steps(var, m, v, vhat, g):
        out = [x.copy() for x in (var, m, v, vhat)]
        apply_adam_with_amsgrad(*out, 0.9**3, 0.999**3, 1e-3, g)
        moments = [m.copy(), v.copy()]
        delta = adam_no_update_param(*moments, 0.9**3, 0.999**3, 1e-3, 0.9, 0.999, 1e-8, g)
        return [*out, delta, *moments]

    rng = np.random.default_rng(11)
    kernels = (A._adam_amsgrad, A._adam_delta)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        for n, large in ((1000, False), (2**20 + 5, True)):
            arrays = [row[0] for row in _inputs(rng, 5, [n])]
            for kernel in kernels:
                kernel.__dict__.pop("chunked_prefetching", None)
            got = steps(*arrays)
            for kernel in kernels:
                assert ("chunked_prefetching" in kernel.__dict__) == large, (kernel.__name__, n)
            with monkeypatch.context() as patch:
                for kernel in kernels:
                    patch.setattr(kernel, "prefetch_large", False)
                want = steps(*arrays)
            for k, (x, y) in enumerate(zip(got, want)):
                assert x.tobytes() == y.tobytes(), f"n={n}: output {k} differs"
            assert (got[0] != arrays[0]).sum() > 0.9 * n and (got[4] != 0).sum() > 0.9 * n, "nothing moved"
    finally:
        numba.set_num_threads(threads)


def test_the_prefetching_multi_tensor_loop_is_vectorised_and_prefetches(monkeypatch):
    """The fused Adam step's prefetching rows keep packed roots and divisions and hold the prefetches (on
    AMD's Zen cores too, where they are left out unless told otherwise)."""
    from optkernels.kernels import _chunks

    monkeypatch.setattr(_chunks, "PREFETCH_ON_ZEN", True)
    _, scalars = _scalars("fused_adam")
    entry = E._many_entry(FA._fused_adam.py_func, 4, None, False, False, True)
    tensors = TensorList([1000], np.float32, 4)
    for r in range(4):
        tensors.set_row(r, [np.full(1000, 0.5, np.float32)])
    _launch(entry, tensors, 1, scalars)
    asm = entry.inspect_asm(entry.signatures[0])
    for packed in (r"vsqrtps\s+%[yz]mm", r"vdivps\s+%[yz]mm", r"prefetcht0\s"):
        assert re.search(packed, asm), f"no {packed.split(chr(92))[0]} in the prefetching multi-tensor loop"


def test_a_loop_with_a_prologue_does_not_prefetch():
    with pytest.raises(ValueError, match="prologue does not prefetch"):
        _adam.many_chunked(4, _axpy_scal, prefetch=True)


def test_launches_compile_and_run_the_prefetching_loops_only_for_large_parts():
    kernel = E.Elementwise(_adam.py_func)
    kernel.prefetch_large = True
    _, scalars = _scalars("adam")
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        with parallel_launch():
            assert not E._large_parts(2**20 - 1, True) and E._large_parts(2**20, True)
            assert not E._large_parts(2**20 - 1, False) and E._large_parts(2**20, False)
        for n, large in ((1000, False), (2**20 - 1, False), (2**20 + 5, True)):
            arrays = [np.full(n, 0.5, np.float32) for _ in range(4)]
            expected = [a.copy() for a in arrays]
            _adam.launch("cpu", n, *expected, *scalars)
            kernel.launch("cpu", n, *arrays, *scalars)
            assert ("chunked_prefetching" in kernel.__dict__) == large, n
            assert all(np.array_equal(a, b) for a, b in zip(arrays, expected))
            tensors = TensorList([n // 2, n - n // 2], np.float32, 4)
            for r in range(4):
                tensors.set_row(r, [np.full(s, 0.5, np.float32) for s in tensors.sizes])
            kernel.launch_many("cpu", tensors, *scalars)
            assert ((4, None, True) in kernel.__dict__["_many_chunked"]) == large, n
            assert all(np.array_equal(np.concatenate(tensors._kept[r]), expected[r]) for r in range(4))
    finally:
        numba.set_num_threads(threads)
    if threads > 1:  # on every thread, 2**20 + 5 elements make parts under the bound
        with parallel_launch():
            get = thread_mask()[0]
            assert get() == threads and not E._large_parts(2**20 + 5, True)
