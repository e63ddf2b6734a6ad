"""The prefetching loops of Adam's large launches (``Elementwise.prefetch_large``): the multi-tensor entry
``many_chunked(..., prefetch=True)`` gives the plain entry's bits for lists whose parts are above and below
2**20 elements, with tensors and part bounds around its blocks and prefetch bounds, on one part or two;
its loop stays vectorised and prefetches; and a launch compiles and runs it only where a thread's part
holds 2**20 elements or more."""
import re

import numba
import numpy as np
import pytest

from optkernels.kernels import _elementwise as E
from optkernels.kernels import torch_fused_adam as FA
from optkernels.kernels import torch_rules as T
from optkernels.kernels._multi_tensor import TensorList
from optkernels.kernels._threading import parallel_allowed, parallel_launch, thread_mask
from optkernels.kernels.adam import _adam
from optkernels.kernels.axpy import _axpy_scal

F32 = np.dtype(np.float32)


def _scalars(name):
    if name == "torch_adam":
        group = T.adam_group_scalars(F32, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, False, T.MKL_AVX512_SQRT)
        return T._torch_adam, T.adam_step_scalars(group, 3)
    if name == "fused_adam":
        group = FA.fused_adam_group_scalars(F32, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, False)
        return FA._fused_adam, FA.fused_adam_step_scalars(group, 3)
    f = np.float32
    return _adam, (f(1e-3), f(0.9), f(0.1), f(0.001), f(1e-8), False)


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
        entry(parts > 1 and parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars)


@pytest.mark.parametrize("name", ["torch_adam", "fused_adam", "adam"])
def test_the_prefetching_multi_tensor_entry_gives_the_plain_entrys_bits(name):
    kernel, scalars = _scalars(name)
    plain, prefetching = kernel.many_chunked(4), kernel.many_chunked(4, prefetch=True)
    assert plain is not prefetching
    rng = np.random.default_rng(5)
    for sizes in LISTS:
        arrays = [[rng.standard_normal(n, dtype=np.float32) for n in sizes] for _ in range(4)]
        for t in arrays[2]:
            np.abs(t, out=t)
        for parts in (1, 2):
            results = []
            for entry in (plain, prefetching):
                copies = [[t.copy() for t in row] for row in arrays]
                tensors = TensorList(sizes, np.float32, 4)
                for r, row in enumerate(copies):
                    tensors.set_row(r, row)
                _launch(entry, tensors, parts, scalars)
                results.append(copies)
            for r, (a, b) in enumerate(zip(*results)):
                for k, (x, y) in enumerate(zip(a, b)):
                    assert x.tobytes() == y.tobytes(), f"{name} {sizes} parts={parts}: row {r} tensor {k} differs"
            moved = np.concatenate(results[1][0]) != np.concatenate(arrays[0])
            assert moved.sum() > 0.9 * sum(sizes), "the step moved nothing: the check checks nothing"


def test_the_prefetching_multi_tensor_loop_is_vectorised_and_prefetches():
    """The fused Adam step's prefetching rows keep packed roots and divisions and hold the prefetches."""
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
