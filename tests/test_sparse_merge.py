"""merge_duplicates: sorted unique indices, the sums of their rows in order of appearance, the same bits with
any thread count and every run; out-of-range handling."""
from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import optkernels.reference as R
from optkernels.sparse import merge_duplicates


def _sequential_sums(indices, values):
    """The documented order, spelled out: each distinct row's values added left to right in their dtype."""
    out = {}
    for k, row in enumerate(indices.tolist()):
        out[row] = values[k].copy() if row not in out else out[row] + values[k]
    rows = sorted(out)
    sums = np.array([out[r] for r in rows], values.dtype).reshape((len(rows),) + values.shape[1:])
    return np.array(rows, np.int64), sums


@given(rows=st.lists(st.integers(0, 20), max_size=60), width=st.sampled_from([(), (1,), (4,), (2, 3)]),
       index_dtype=st.sampled_from([np.int32, np.int64]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_sorted_unique_and_summed_in_order_of_appearance(rows, width, index_dtype, dtype, seed):
    indices = np.array(rows, index_dtype)
    values = np.random.default_rng(seed).standard_normal((len(rows),) + width).astype(dtype)
    unique, summed = merge_duplicates(indices, values)
    assert unique.dtype == index_dtype and summed.dtype == dtype
    assert summed.shape == (len(unique),) + width
    assert np.array_equal(unique, np.unique(indices))
    expected_rows, expected = _sequential_sums(indices, values)
    assert np.array_equal(unique, expected_rows)
    assert summed.tobytes() == expected.tobytes(), "sums must be left to right, in the values' dtype"
    ref_rows, ref = R.merge_duplicates(indices, values)
    assert np.array_equal(unique, ref_rows)
    tol = (len(rows) + 1) * np.finfo(dtype).eps * np.abs(values).sum(axis=0, initial=0.0).max(initial=1.0)
    assert np.all(np.abs(summed - ref) <= tol)


def test_float32_sums_stay_float32():
    """1 + 2**-24 + 2**-24 in float32, left to right, is 1 (a float64 sum would give 1 + 2**-23)."""
    values = np.array([[1.0], [2.0 ** -24], [2.0 ** -24]], np.float32)
    _, summed = merge_duplicates(np.array([5, 5, 5]), values)
    assert summed[0, 0] == np.float32(1.0)
    _, summed = merge_duplicates(np.array([5, 5, 5]), values[::-1].copy())
    assert summed[0, 0] == np.float32(1.0 + 2.0 ** -23)


def _big_case(seed=0):
    """Enough rows to be split across threads: 40,000 Zipf-like indices into 100,000 rows of 16."""
    rng = np.random.default_rng(seed)
    indices = ((rng.zipf(1.2, 40_000) - 1) % 100_000).astype(np.int64)
    values = rng.standard_normal((40_000, 16)).astype(np.float32)
    return indices, values


def _with_threads(threads, indices, values):
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        return merge_duplicates(indices, values, 100_000)
    finally:
        numba.set_num_threads(previous)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
def test_bitwise_equal_with_one_and_two_threads_and_run_to_run():
    indices, values = _big_case()
    one = _with_threads(1, indices, values)
    two = _with_threads(2, indices, values)
    again = _with_threads(2, indices, values)
    for a, b, c in zip(one, two, again):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    assert len(one[0]) > 1000 and len(one[0]) < len(indices)  # many rows, many repeats
    rows, expected = _sequential_sums(indices, values)
    assert one[1].tobytes() == expected.tobytes()


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
def test_sparse_kernels_are_bitwise_equal_with_one_and_two_threads():
    """The fused row loops sum duplicates the same way: thread count never changes a bit."""
    from sparse_optable import SPARSE_OPS, draw_inputs, run_kernel

    indices, _ = _big_case(1)
    indices = indices % 3000
    results = []
    for threads in (1, 2, 2):
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            out = []
            for op in SPARSE_OPS:
                inputs, attrs = draw_inputs(op, np.random.default_rng(2), (3000, 16), np.float32, indices)
                out.append(run_kernel(op, inputs, attrs))
            results.append(out)
        finally:
            numba.set_num_threads(previous)
    for op, a, b, c in zip(SPARSE_OPS, *results):
        for name in op.states:
            assert a[name].tobytes() == b[name].tobytes() == c[name].tobytes(), f"{op.name}.{name}"


def test_num_rows_and_out_of_range():
    indices = np.array([3, 9, 3, 12, -2, 0], np.int64)
    values = np.arange(6, dtype=np.float64)[:, None] * np.ones((1, 2))
    with pytest.raises(IndexError, match=r"indices\[3\] = 12 .*0 <= index < 10"):
        merge_duplicates(indices, values, 10)
    with pytest.raises(IndexError, match=r"indices\[4\] = -2"):
        merge_duplicates(indices, values)
    unique, summed = merge_duplicates(indices, values, 10, out_of_range="drop")
    assert np.array_equal(unique, [0, 3, 9])
    assert np.array_equal(summed, [[5, 5], [2, 2], [1, 1]])
    ref_rows, ref = R.merge_duplicates(indices, values, 10)
    assert np.array_equal(unique, ref_rows) and np.array_equal(summed, ref)
    unique, summed = merge_duplicates(indices, values, out_of_range="drop")  # only negatives are dropped
    assert np.array_equal(unique, [0, 3, 9, 12])


def test_empty():
    unique, summed = merge_duplicates(np.zeros(0, np.int32), np.zeros((0, 3), np.float32), 4)
    assert unique.dtype == np.int32 and unique.shape == (0,) and summed.shape == (0, 3)
    unique, summed = merge_duplicates(np.array([7, 7], np.int32), np.zeros((2, 0), np.float32))
    assert np.array_equal(unique, [7]) and summed.shape == (1, 0)


def test_inputs_are_not_modified_and_non_contiguous_values_work():
    indices = np.array([4, 1, 4], np.int32)
    wide = np.arange(12, dtype=np.float64).reshape(3, 4)
    values = wide[:, ::2]
    unique, summed = merge_duplicates(indices, values)
    assert np.array_equal(unique, [1, 4]) and np.array_equal(summed, [[4, 6], [8, 12]])
    assert np.array_equal(indices, [4, 1, 4]) and np.array_equal(wide, np.arange(12).reshape(3, 4))


@pytest.mark.parametrize("indices, values, num_rows, kwargs, exc, name", [
    ([0, 1], np.ones((2, 2)), None, {}, TypeError, "indices"),
    (np.array([0.0, 1.0]), np.ones((2, 2)), None, {}, TypeError, "indices"),
    (np.array([0, 1], np.uint32), np.ones((2, 2)), None, {}, TypeError, "indices"),
    (np.array([True, False]), np.ones((2, 2)), None, {}, TypeError, "indices"),
    (np.array([[0, 1]]), np.ones((2, 2)), None, {}, ValueError, "indices"),
    (np.array([0, 1]), np.ones((3, 2)), None, {}, ValueError, "values"),
    (np.array([0, 1]), np.ones((2, 2), np.int64), None, {}, TypeError, "values"),
    (np.array([0, 1]), np.ones((2, 2)).tolist(), None, {}, TypeError, "values"),
    (np.array([0, 1]), np.ones((2, 2)), 2.0, {}, TypeError, "num_rows"),
    (np.array([0, 1]), np.ones((2, 2)), -1, {}, ValueError, "num_rows"),
    (np.array([0, 1]), np.ones((2, 2)), None, {"out_of_range": "clip"}, ValueError, "out_of_range"),
])
def test_bad_arguments(indices, values, num_rows, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        merge_duplicates(indices, values, num_rows, **kwargs)


def test_large_int64_indices():
    """Indices far beyond int32 (several radix passes) sort and merge exactly."""
    indices = np.array([2 ** 62 + 5, 7, 2 ** 40, 7, 2 ** 62 + 5, 2 ** 33, 0], np.int64)
    values = np.arange(7, dtype=np.float64)[:, None]
    unique, summed = merge_duplicates(indices, values)
    assert np.array_equal(unique, [0, 7, 2 ** 33, 2 ** 40, 2 ** 62 + 5])
    assert np.array_equal(summed[:, 0], [6, 1 + 3, 5, 2, 0 + 4])
    with pytest.raises(IndexError, match=r"indices\[0\] = 4611686018427387909"):
        merge_duplicates(indices, values, 2 ** 62)


def test_sparse_kernels_work_without_numba_cuda():
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import importlib.abc, sys

        class BlockCuda(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "numba.cuda" or name.startswith("numba.cuda."):
                    raise ImportError("numba-cuda is not installed (blocked by the test)")
                return None

        sys.meta_path.insert(0, BlockCuda())
        import numpy as np
        from optkernels.sparse import fused_sparse_lazy_adam, merge_duplicates

        f = np.float32
        var, m, v = (np.ones((3, 1, 2), f) for _ in range(3))
        grad = np.array([[[0.1, 0.1]], [[0.1, 0.1]]], f)
        fused_sparse_lazy_adam(var, m, v, 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, grad, np.array([0, 1]))
        assert np.all(var[:2] == f(0.9997121)) and np.all(var[2] == 1)
        assert "numba.cuda" not in sys.modules
    """)
    root = Path(__file__).resolve().parents[1]  # this checkout's optkernels, not an installed one
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=root)
    assert result.returncode == 0, result.stderr
