"""Every sparse kernel and merge_duplicates on CUDA arrays equal the CPU's (small arrays: the simulator is
slow).

The CUDA path groups the (small) index array on the host exactly as the CPU does and sums each distinct row
in the same order, so merge_duplicates gives the same bits on both targets. A real GPU may contract the
update math into FMAs, so there kernels are compared within the few-ulp tolerance of tests/optable.py; under
the simulator (which runs the same compiled math) they must be bit-identical.
"""
import numpy as np
import pytest

from optable import assert_close
from optkernels.kernels import _cuda
from optkernels.sparse import RowSparse, merge_duplicates
from sparse_optable import SPARSE_OPS, draw_inputs, run_kernel

SHAPE = (6, 2, 3)
INDICES = np.array([4, 1, 4, 0, 4, 5, 1], np.int64)


EMPTY_AND_DROP_OPS = [o for o in SPARSE_OPS if o.name in ("fused_sparse_adam", "sparse_apply_ftrl")]


def _to_device(inputs):
    return {k: _cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _host_copy(inputs):
    return {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", SPARSE_OPS, ids=lambda op: op.name)
def test_cuda_equals_cpu(op, dtype, index_dtype):
    rng = np.random.default_rng(21)
    inputs, attrs = draw_inputs(op, rng, SHAPE, dtype, INDICES.astype(index_dtype))
    device = _to_device(inputs)
    result = op.kernel(*op.args(device), **attrs)
    assert all(r is device[n] for r, n in zip(result, op.states)), "returns the updated arrays themselves"
    cpu = run_kernel(op, _host_copy(inputs), attrs)
    for name in op.states:
        got = _cuda.to_host(device[name])
        assert_close(got, cpu[name], dtype, 4.0, f"{op.name}.{name} cuda vs cpu", inputs[name])
        if _cuda.simulator_enabled():
            assert got.tobytes() == cpu[name].tobytes(), f"{op.name}.{name}: not the CPU's bits"
    untouched = np.setdiff1d(np.arange(SHAPE[0]), INDICES)
    if op.lazy:
        for name in op.states:
            assert np.array_equal(_cuda.to_host(device[name])[untouched], inputs[name][untouched])


@pytest.mark.parametrize("op", EMPTY_AND_DROP_OPS,
                         ids=lambda op: op.name)
def test_empty_indices_and_drop_on_cuda(op):
    rng = np.random.default_rng(22)
    cases = ((np.zeros(0, np.int32), {}), (np.array([3, -1, 9, 3], np.int32), {"out_of_range": "drop"}))
    for indices, extra in cases:
        inputs, attrs = draw_inputs(op, rng, SHAPE, np.float64, indices)
        device = _to_device(inputs)
        op.kernel(*op.args(device), **attrs, **extra)
        cpu = run_kernel(op, _host_copy(inputs), dict(attrs, **extra))
        for name in op.states:
            assert_close(_cuda.to_host(device[name]), cpu[name], np.float64, 4.0, name, inputs[name])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_merge_duplicates_cuda_equals_cpu(dtype):
    rng = np.random.default_rng(23)
    indices = rng.integers(0, 9, 40).astype(np.int32)
    values = rng.standard_normal((40, 3)).astype(dtype)
    rows, sums = merge_duplicates(_cuda.to_device(indices), _cuda.to_device(values), 9)
    assert _cuda.is_device_array(rows) and _cuda.is_device_array(sums)
    cpu_rows, cpu_sums = merge_duplicates(indices, values, 9)
    assert _cuda.to_host(rows).tobytes() == cpu_rows.tobytes()
    assert _cuda.to_host(sums).tobytes() == cpu_sums.tobytes(), "sums are plain adds in one order: same bits"


def test_bad_index_on_cuda_raises_and_writes_nothing():
    op = SPARSE_OPS[0]
    indices = np.array([1, 6, 2], np.int64)
    inputs, attrs = draw_inputs(op, np.random.default_rng(24), SHAPE, np.float32, indices)
    device = _to_device(inputs)
    with pytest.raises(IndexError, match=r"indices\[1\] = 6"):
        op.kernel(*op.args(device), **attrs)
    for name in op.states:
        assert np.array_equal(_cuda.to_host(device[name]), inputs[name])


def test_host_indices_with_device_arrays_is_a_type_error():
    op = SPARSE_OPS[1]
    inputs, attrs = draw_inputs(op, np.random.default_rng(25), SHAPE, np.float32, np.array([1, 2], np.int64))
    device = dict(_to_device(inputs), indices=inputs["indices"])
    with pytest.raises(TypeError, match="indices"):
        op.kernel(*op.args(device), **attrs)


def test_row_sparse_on_cuda():
    indices = np.array([2, 0, 2], np.int64)
    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    rs = RowSparse(_cuda.to_device(indices), _cuda.to_device(values), (4, 2))
    assert rs.device == "cuda" and rs.dtype == np.float32
    dense = rs.to_dense()  # copied to the host
    assert isinstance(dense, np.ndarray) and np.array_equal(dense, [[2, 3], [0, 0], [4, 6], [0, 0]])
    merged = rs.merged()
    assert merged.device == "cuda" and np.array_equal(_cuda.to_host(merged.indices), [0, 2])
    assert np.array_equal(rs.to_scipy().toarray(), dense)
    with pytest.raises(IndexError, match="indices"):
        RowSparse(_cuda.to_device(np.array([4])), _cuda.to_device(np.ones((1, 2), np.float32)), (4, 2))
    op = next(o for o in SPARSE_OPS if o.name == "sparse_apply_adagrad")
    inputs, attrs = draw_inputs(op, np.random.default_rng(26), (4, 2), np.float32, indices, values)
    device = _to_device(inputs)
    op.kernel(device["var"], device["accum"], rs, **attrs)
    cpu = run_kernel(op, _host_copy(inputs), attrs)
    assert_close(_cuda.to_host(device["var"]), cpu["var"], np.float32, 4.0, "var", inputs["var"])
