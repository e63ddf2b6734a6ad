"""The multi-tensor CPU loop: addresses and pointers, the chunk table, and the same bits as one launch per
tensor for every element-wise kernel the optimizers use, with one or two threads; its loop is vectorised."""
import platform
import re

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from optkernels.kernels import _elementwise
from optkernels.kernels import _multi_tensor as MT
from optkernels.kernels._pointers import address_as_pointer, data_addresses
from optkernels.kernels.ada_max import _ada_max
from optkernels.kernels.adagrad import _adagrad
from optkernels.kernels.adam import _adam, _adam_amsgrad
from optkernels.kernels.adam_weight_decay import _adam_weight_decay
from optkernels.kernels.axpy import _axpy_scal
from optkernels.kernels.ftrl import _ftrl, _ftrl_sqrt, ftrl_hyper
from optkernels.kernels.momentum import _momentum
from optkernels.kernels.proximal_adagrad import _proximal_adagrad, proximal_hyper
from optkernels.kernels.rms_prop import _centered_rms_prop, _rms_prop
from optkernels.kernels.sgd import _sgd
from optkernels.kernels.sum_squares import _pair
from optkernels.optimizers.optimizer import scalar_batch

# ------------------------------------------------------------------------------ addresses and pointers


@numba.njit
def _fill_through_address(address, like, n):
    view = numba.carray(address_as_pointer(address, like), n)
    for k in range(n):
        view[k] = view[k] * 2 + k


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int8])
def test_address_as_pointer_reads_and_writes_the_array_at_that_address(dtype):
    base = np.arange(12).astype(dtype)
    target = base[3:10]                                   # an interior address, not the buffer's start
    _fill_through_address(target.ctypes.data, target[:0], target.size)
    expected = np.arange(12).astype(dtype)
    expected[3:10] = expected[3:10] * 2 + np.arange(7).astype(dtype)
    np.testing.assert_array_equal(base, expected)          # written in place, neighbours untouched


def test_data_addresses_equal_ctypes_data():
    base = np.arange(60.0).reshape(6, 10)
    read_only = np.ones(4, np.float32)
    read_only.flags.writeable = False
    arrays = [base, base[2:], base[:, 3], base.T, read_only, np.empty(0), np.array(2.5), base.view(np.matrix),
              np.ones((3, 0, 2), np.float32)]
    got = data_addresses(arrays)
    assert got.dtype == np.int64
    assert got.tolist() == [a.ctypes.data for a in arrays]
    out = np.zeros(len(arrays), np.int64)
    assert data_addresses(arrays, out) is out and out.tolist() == got.tolist()
    assert data_addresses([]).shape == (0,)


def test_data_addresses_falls_back_when_the_layout_check_fails(monkeypatch):
    """Were the array object's layout ever different, the first-call check fails and the addresses come from
    ``__array_interface__`` instead (still right)."""
    from optkernels.kernels import _pointers

    arrays = [np.ones(5), np.ones((2, 3), np.float32)[1:]]
    _pointers._layout_verified.cache_clear()
    monkeypatch.setattr(_pointers, "_OFFSET", _pointers._OFFSET + 8)    # read the wrong field
    try:
        assert not _pointers._layout_verified()
        assert data_addresses(arrays).tolist() == [a.ctypes.data for a in arrays]
    finally:
        _pointers._layout_verified.cache_clear()
    monkeypatch.undo()
    assert _pointers._layout_verified()


# ------------------------------------------------------------------------------------ the chunk table


@given(st.lists(st.integers(0, 300), max_size=12), st.integers(1, 70))
def test_chunk_table_covers_every_element_once_and_never_spans_tensors(sizes, chunk):
    table = MT.chunk_table(sizes, chunk)
    assert table.dtype == np.int64 and table.shape == (len(table), 4)
    seen = [np.zeros(s, int) for s in sizes]
    for tensor, start, stop, size in table.tolist():
        assert size == sizes[tensor]
        assert 0 <= start < stop <= size and stop - start <= chunk
        assert start % chunk == 0                          # fixed-size chunks from each tensor's start
        seen[tensor][start:stop] += 1
    assert all((s == 1).all() for s in seen)               # every element exactly once
    assert table[:, 0].tolist() == sorted(table[:, 0].tolist())   # tensor order, then element order
    assert len(table) == sum(-(-s // chunk) for s in sizes)


def test_chunk_table_errors_and_default_chunk():
    with pytest.raises(ValueError, match="chunk"):
        MT.chunk_table([3], 0)
    with pytest.raises(ValueError, match="sizes"):
        MT.chunk_table([3, -1])
    assert MT.chunk_table([MT.CHUNK * 2 + 1]).tolist() == [
        [0, 0, MT.CHUNK, MT.CHUNK * 2 + 1], [0, MT.CHUNK, MT.CHUNK * 2, MT.CHUNK * 2 + 1],
        [0, MT.CHUNK * 2, MT.CHUNK * 2 + 1, MT.CHUNK * 2 + 1]]
    assert MT.chunk_table([]).shape == (0, 4)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=6).filter(sum), st.integers(1, 70), st.integers(1, 5))
def test_balanced_table_gives_each_thread_its_share_of_the_elements(sizes, chunk, threads):
    """Numba gives each of ``threads`` threads an equal, contiguous block of the rows: each block then holds
    the same number of elements (within the rounding of two cuts to 16-element bounds)."""
    table = MT.balanced_table(sizes, chunk, threads)
    assert table.dtype == np.int64 and len(table) % threads == 0
    seen = [np.zeros(s, int) for s in sizes]
    for tensor, start, stop, size in table.tolist():
        assert size == sizes[tensor] and 0 <= start <= stop <= size and stop - start <= chunk
        assert chunk < 32 or start == stop or start % 16 == 0
        seen[tensor][start:stop] += 1
    assert all((s == 1).all() for s in seen)               # every element exactly once
    shares = (table[:, 2] - table[:, 1]).reshape(threads, -1).sum(axis=1)
    assert shares.max() - shares.min() <= (31 if chunk >= 32 else 1)


def test_balanced_table_of_one_tensor_on_two_threads():
    """1e5 elements: 7 chunks of the plain table (4 rows against 3), 8 rows of 16-element bounds here."""
    assert MT.balanced_table([100_000], MT.CHUNK, 2)[:, 1:3].tolist() == [
        [0, 12496], [12496, 24992], [24992, 37488], [37488, 50000],
        [50000, 62496], [62496, 74992], [74992, 87488], [87488, 100_000]]


def test_tensor_list_checks_the_arrays_of_a_row():
    tensors = MT.TensorList([3, 2], np.float32, 2)
    with pytest.raises(ValueError, match="got 1 arrays for 2 tensors"):
        tensors.set_row(0, [np.ones(3, np.float32)])
    with pytest.raises(TypeError, match="array 1 must be a NumPy array of dtype float32"):
        tensors.set_row(0, [np.ones(3, np.float32), np.ones(2)])
    with pytest.raises(ValueError, match="array 0 must be C-contiguous with 3 elements"):
        tensors.set_row(0, [np.ones(6, np.float32)[::2], np.ones(2, np.float32)])
    with pytest.raises(ValueError, match="array 1 must be C-contiguous with 2 elements"):
        tensors.set_row(0, [np.ones(3, np.float32), np.ones(3, np.float32)])
    odd = np.frombuffer(bytearray(9), np.float32, 2, offset=1)
    with pytest.raises(ValueError, match="array 1 must be aligned"):
        tensors.set_row(0, [np.ones(3, np.float32), odd])
    assert not tensors.addresses.any()                     # nothing was set by the failed calls


def test_launch_many_refuses_cuda_and_sums_of_squares():
    tensors = MT.TensorList([3], np.float32, 2)
    with pytest.raises(ValueError, match="CPU only"):
        _axpy_scal.launch_many("cuda", tensors)
    with pytest.raises(NotImplementedError, match="no multi-tensor loop"):
        _pair.many(2)


# ------------------------------------------------------------------ same bits as one launch per tensor


def _betas(dtype):
    return dtype(0.9), dtype(0.1), dtype(0.001), dtype(0.999)


# kernel, number of arrays (the last is the gradient), the scalars for a dtype, states that must be >= 0,
# states that hold 0/1 flags (SGD's stat).
KERNELS = [
    ("adam", _adam, 4, lambda d: (d(0.01), d(0.9), d(0.1), d(0.001), d(1e-8), False), (2,), ()),
    ("adam-nesterov", _adam, 4, lambda d: (d(0.01), d(0.9), d(0.1), d(0.001), d(1e-8), True), (2,), ()),
    ("adam-amsgrad", _adam_amsgrad, 5, lambda d: (d(0.01), d(0.1), d(0.001), d(1e-8)), (2, 3), ()),
    ("adam_weight_decay", _adam_weight_decay, 4, lambda d: (d(0.01), d(0.1), d(0.001), d(1e-6), d(0.05)),
     (2,), ()),
    ("ada_max", _ada_max, 4, lambda d: (d(0.01) / d(0.1), d(0.1), d(0.999), d(1e-8)), (2,), ()),
    ("adagrad", _adagrad, 3, lambda d: (d(0.01), d(0), True), (1,), ()),
    ("adagrad-no-slots", _adagrad, 3, lambda d: (d(0.01), d(1e-6), False), (1,), ()),
    ("momentum", _momentum, 3, lambda d: (d(0.01), d(0.9), d(1), False), (), ()),
    ("momentum-nesterov", _momentum, 3, lambda d: (d(0.01), d(0.9), d(0.5), True), (), ()),
    ("sgd", _sgd, 4, lambda d: (d(0.1), d(0.9), d(0.9), d(0.01), False), (), (2,)),
    ("sgd-nesterov", _sgd, 4, lambda d: (d(0.1), d(0.9), d(1), d(0), True), (), (2,)),
    ("rms_prop", _rms_prop, 4, lambda d: (d(0.01), d(0.1), d(0.5), d(1e-6)), (1,), ()),
    ("centered_rms_prop", _centered_rms_prop, 5, lambda d: (d(0.01), d(0.1), d(0.5), d(1e-6)), (2,), ()),
    ("ftrl", _ftrl_sqrt, 4, lambda d: ftrl_hyper(scalar_batch(d), 0.1, 0.001, 0.01, -0.5)[:3], (1,), ()),
    ("ftrl-power", _ftrl, 4, lambda d: ftrl_hyper(scalar_batch(d), 0.1, 0.001, 0.01, -0.3)[:4], (1,), ()),
    ("proximal_adagrad", _proximal_adagrad, 3, lambda d: proximal_hyper(scalar_batch(d), 0.1, 0.01, 0.02),
     (1,), ()),
    ("axpy_scal", _axpy_scal, 3, lambda d: (d(0.01), d(1 / 1024), True, True), (), ()),
    ("axpy_scal-scale-only", _axpy_scal, 3, lambda d: (d(0), d(0.5), False, True), (), ()),
]

SIZES = [0, 1, 7, 63, 64, 65, 200, 0, 3]           # with chunk=64: tails, exact multiples, empty tensors


def _arrays(n_arrays, nonneg, flags, dtype, sizes, seed=0):
    """``arrays[j][t]``: array j of tensor t (the last j is the gradient)."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n_arrays):
        row = []
        for s in sizes:
            if j in flags:
                a = rng.integers(0, 2, s).astype(dtype)
            elif j in nonneg:
                a = rng.uniform(0.01, 2.0, s).astype(dtype)
            else:
                a = rng.standard_normal(s).astype(dtype)
            row.append(a)
        out.append(row)
    return out


def _per_tensor(kernel, arrays, scalars):
    arrays = [[a.copy() for a in row] for row in arrays]
    for t in range(len(arrays[0])):
        kernel.launch("cpu", arrays[0][t].size, *(row[t] for row in arrays), *scalars)
    return arrays


def _many(kernel, arrays, scalars, chunk, threads=None, excluded=()):
    arrays = [[a.copy() for a in row] for row in arrays]
    tensors = MT.TensorList([a.size for a in arrays[0]], arrays[0][0].dtype, len(arrays), chunk)
    for j, row in enumerate(arrays):
        tensors.set_row(j, row)
    previous = numba.get_num_threads()
    if threads:
        numba.set_num_threads(threads)
    try:
        kernel.launch_many("cpu", tensors, *scalars, chunks=tensors.chunks_without(excluded))
    finally:
        numba.set_num_threads(previous)
    return arrays


def _assert_same_bits(got, expected, what):
    for j, (row_g, row_e) in enumerate(zip(got, expected)):
        for t, (g, e) in enumerate(zip(row_g, row_e)):
            assert g.tobytes() == e.tobytes(), f"{what}: array {j} of tensor {t}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, kernel, n_arrays, scalars, nonneg, flags", KERNELS,
                         ids=[k[0] for k in KERNELS])
def test_multi_tensor_launch_equals_one_launch_per_tensor(name, kernel, n_arrays, scalars, nonneg, flags,
                                                          dtype):
    arrays = _arrays(n_arrays, nonneg, flags, dtype, SIZES)
    sc = scalars(dtype)
    expected = _per_tensor(kernel, arrays, sc)
    assert any(not np.array_equal(e, a) for e, a in zip(expected[0], arrays[0]))   # the update did something
    _assert_same_bits(_many(kernel, arrays, sc, chunk=64), expected, name)


def _per_tensor_after_prologue(kernel, arrays, pre_scalars, scalars):
    """``axpy_scal`` into a buffer of the tensor's size (from the parameter and the raw gradient), then the
    kernel with that buffer as its gradient: one launch each per tensor."""
    arrays = [[a.copy() for a in row] for row in arrays]
    for t in range(len(arrays[0])):
        buffer = np.empty_like(arrays[-1][t])
        _axpy_scal.launch("cpu", buffer.size, buffer, arrays[0][t], arrays[-1][t], *pre_scalars)
        kernel.launch("cpu", buffer.size, *(row[t] for row in arrays[:-1]), buffer, *scalars)
    return arrays


def _many_after_prologue(kernel, arrays, pre_scalars, scalars, chunk, threads=None):
    arrays = [[a.copy() for a in row] for row in arrays]
    tensors = MT.TensorList([a.size for a in arrays[0]], arrays[0][0].dtype, len(arrays), chunk)
    for j, row in enumerate(arrays):
        tensors.set_row(j, row)
    previous = numba.get_num_threads()
    numba.set_num_threads(threads or previous)
    try:
        kernel.launch_many("cpu", tensors, *scalars, prologue=_axpy_scal, prologue_scalars=pre_scalars)
    finally:
        numba.set_num_threads(previous)
    return arrays


PROLOGUES = [(True, True), (True, False), (False, True)]   # (decay, unscale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, kernel, n_arrays, scalars, nonneg, flags", KERNELS[:-2],
                         ids=[k[0] for k in KERNELS[:-2]])
def test_multi_tensor_launch_with_prologue_equals_two_launches_per_tensor(name, kernel, n_arrays, scalars,
                                                                        nonneg, flags, dtype):
    arrays = _arrays(n_arrays, nonneg, flags, dtype, SIZES, seed=1)
    sc = scalars(dtype)
    for add, scale in PROLOGUES:
        pre = (dtype(0.01) if add else dtype(0), dtype(1 / 1024) if scale else dtype(0), add, scale)
        expected = _per_tensor_after_prologue(kernel, arrays, pre, sc)
        _assert_same_bits(_many_after_prologue(kernel, arrays, pre, sc, chunk=64), expected,
                          f"{name} after axpy_scal{(add, scale)}")
        assert all(g.tobytes() == e.tobytes() for g, e in zip(arrays[-1], expected[-1]))   # read only


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multi_tensor_prologue_same_bits_with_one_and_two_threads(dtype, monkeypatch):
    monkeypatch.setattr(_elementwise, "SERIAL_BELOW", 0)  # small lists too run on both threads
    sizes = [MT.CHUNK * 2 + 5, 0, 1, 1000, MT.CHUNK, 17]
    arrays = _arrays(4, (2,), (), dtype, sizes, seed=6)
    sc = (dtype(0.01), dtype(0.9), dtype(0.1), dtype(0.001), dtype(1e-8), True)
    pre = (dtype(0.02), dtype(0.25), True, True)
    expected = _per_tensor_after_prologue(_adam, arrays, pre, sc)
    for threads in (1, 2, 2):
        _assert_same_bits(_many_after_prologue(_adam, arrays, pre, sc, MT.CHUNK, threads), expected,
                          f"{threads} threads")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multi_tensor_adam_default_chunk_same_bits_with_one_and_two_threads(dtype, monkeypatch):
    sizes = [MT.CHUNK * 2 + 5, 0, 1, 1000, MT.CHUNK, 17]
    arrays = _arrays(4, (2,), (), dtype, sizes, seed=3)
    sc = (dtype(0.01), dtype(0.9), dtype(0.1), dtype(0.001), dtype(1e-8), False)
    expected = _per_tensor(_adam, arrays, sc)
    _assert_same_bits(_many(_adam, arrays, sc, MT.CHUNK, threads=2), expected, "below SERIAL_BELOW")
    tensors = MT.TensorList(sizes, dtype, 4)
    for j, row in enumerate(_arrays(4, (2,), (), dtype, sizes, seed=3)):
        tensors.set_row(j, row)
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        _adam.launch_many("cpu", tensors, *sc)   # on the calling thread; the thread mask is restored
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(previous)
    monkeypatch.setattr(_elementwise, "SERIAL_BELOW", 0)
    one = _many(_adam, arrays, sc, MT.CHUNK, threads=1)
    two = _many(_adam, arrays, sc, MT.CHUNK, threads=2)
    again = _many(_adam, arrays, sc, MT.CHUNK, threads=2)
    _assert_same_bits(one, expected, "1 thread")
    _assert_same_bits(two, expected, "2 threads")
    _assert_same_bits(again, two, "run to run")


def test_chunks_without_leaves_the_excluded_tensors_alone():
    dtype = np.float32
    arrays = _arrays(3, (1,), (), dtype, SIZES, seed=4)
    sc = (dtype(0.01), dtype(1e-6), True)
    expected = _per_tensor(_adagrad, arrays, sc)
    got = _many(_adagrad, arrays, sc, chunk=64, excluded=(3, 6))
    for t in range(len(SIZES)):
        want = arrays if t in (3, 6) else expected
        for j in range(3):
            assert got[j][t].tobytes() == want[j][t].tobytes(), (j, t)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
@pytest.mark.parametrize("prologue", [False, True], ids=["plain", "prologue"])
@pytest.mark.parametrize("dtype, suffix", [(np.float32, "ps"), (np.float64, "pd")])
def test_multi_tensor_adam_loop_is_vectorised(dtype, suffix, prologue):
    """Packed sqrt and div in the chunk loop (as in the single-tensor loop, see
    tests/test_determinism_and_codegen.py)."""
    tensors = MT.TensorList([64, 3], dtype, 4)
    for j in range(4):
        tensors.set_row(j, [np.ones(64, dtype), np.ones(3, dtype)])
    s = dtype(0.5)
    if prologue:
        loop = _adam.many_uncached(4, _axpy_scal)
        loop(tensors.chunks, tensors.addresses, tensors.like, tensors.workspace(), s, s, True, True,
             s, s, s, s, s, False)
    else:
        loop = _adam.many_uncached(4)
        loop(tensors.chunks, tensors.addresses, tensors.like, s, s, s, s, s, False)
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(rf"\bv?sqrt{suffix}\b", asm), f"no packed sqrt{suffix} in the multi-tensor Adam loop"
    assert re.search(rf"\bv?div{suffix}\b", asm), f"no packed div{suffix} in the multi-tensor Adam loop"
    if dtype == np.float32:
        assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 loop promoted to float64"


@numba.njit
def _prelude_returns(check, chunks, addresses, like):
    return check[0]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
def test_guarded_launch_claims_each_row_once_with_one_and_two_threads(monkeypatch):
    """A guarded launch (rows claimed by the threads from both ends, scalars rounded in the call from host
    floats) gives the bits of one launch per tensor with its scalars rounded in Python; a prelude that
    fails launches nothing."""
    from optkernels.kernels._chunks import GuardedEntry
    from optkernels.kernels.schedule_free import (
        _schedule_free_sgd,
        schedule_free_sgd_host,
        schedule_free_sgd_scalars,
        sgd_rounding,
    )

    monkeypatch.setattr(_elementwise, "SERIAL_BELOW", 0)  # small lists too run on both threads
    sizes = [1000, 0, 1, 333, 64, 17] + [130] * 30
    arrays = _arrays(3, (), (), np.float32, sizes, seed=11)
    host = schedule_free_sgd_host(0.05, 0.9, 0.01, 0.25)
    scalars = schedule_free_sgd_scalars(np.float32, 0.05, 0.9, 0.01, 0.25)
    expected = _per_tensor(_schedule_free_sgd, arrays, scalars)
    assert not np.array_equal(expected[0][0], arrays[0][0])
    previous = numba.get_num_threads()
    for threads in (1, 2, 2):
        got = [[a.copy() for a in row] for row in arrays]
        tensors = MT.TensorList(sizes, np.float32, 3, chunk=64)   # 70 rows
        for j, row in enumerate(got):
            tensors.set_row(j, row)
        guard = GuardedEntry(_prelude_returns, 1, sgd_rounding, 4, 3)
        launch = _schedule_free_sgd.guarded_launcher(tensors, guard)
        numba.set_num_threads(threads)
        try:
            assert launch((7,), host) == 7
            _assert_same_bits(got, arrays, "failed prelude")
            assert launch((-1,), host) == -1
        finally:
            numba.set_num_threads(previous)
        _assert_same_bits(got, expected, f"{threads} threads")
