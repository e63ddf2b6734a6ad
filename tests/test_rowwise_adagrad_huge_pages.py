"""Row-wise Adagrad moves a large NumPy table onto transparent huge pages
(``optkernels/kernels/_huge_pages.py``): once per table, after a completed row-sparse step (not before an
index error, not for dense gradients or small tables), changing no bit of the results."""
import sys

import numpy as np
import pytest

from optkernels.kernels import _huge_pages
from optkernels.sparse import RowSparse, rowwise_adagrad

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages are Linux-only")
ROWS, DIM = _huge_pages.HUGE_PAGE_THRESHOLD // (4 * 64), 64  # a float32 table of exactly the threshold


@pytest.fixture
def calls(monkeypatch):
    recorded = []
    advise = _huge_pages.madvise_huge

    def recording(address, nbytes, advice=_huge_pages.MADV_HUGEPAGE):
        recorded.append((address, nbytes, advice))
        return advise(address, nbytes, advice)

    monkeypatch.setattr(_huge_pages, "madvise_huge", recording)
    monkeypatch.setattr(_huge_pages, "_advised", {})
    return recorded


def _batch(seed, count=300):
    rng = np.random.default_rng(seed)
    return rng.integers(0, ROWS, count), rng.standard_normal((count, DIM), dtype=np.float32)


@linux_only
def test_a_large_table_is_advised_once_after_its_first_step_and_bits_do_not_change(calls, monkeypatch):
    table = np.random.default_rng(1).standard_normal((ROWS, DIM), dtype=np.float32)
    w, h = table.copy(), np.zeros(ROWS, np.float32)
    for seed in (2, 3):
        idx, g = _batch(seed)
        rowwise_adagrad(w, h, g, idx, lr=0.1)
    address = w.ctypes.data
    assert calls == [(address, ROWS * DIM * 4, 14), (address, ROWS * DIM * 4, 25)]
    calls.clear()
    monkeypatch.setattr(_huge_pages, "_LINUX", False)  # the same steps on a table never advised
    w2, h2 = table.copy(), np.zeros(ROWS, np.float32)
    for seed in (2, 3):
        idx, g = _batch(seed)
        rowwise_adagrad(w2, h2, g, idx, lr=0.1)
    assert not calls
    assert np.array_equal(w, w2) and np.array_equal(h, h2) and not np.array_equal(w, table)


@linux_only
def test_the_checked_path_advises_a_wide_numpy_table(calls):
    w, h = np.zeros((ROWS, DIM), np.float32), np.zeros(ROWS, np.float32)
    idx, g = _batch(4)
    rowwise_adagrad(w, h, RowSparse(idx.astype(np.int32), g, w.shape), lr=0.1)  # int32: the checked path
    assert [c[1:] for c in calls] == [(ROWS * DIM * 4, 14), (ROWS * DIM * 4, 25)]


@linux_only
def test_no_advice_for_small_tables_dense_gradients_half_tables_or_bad_indices(calls):
    small = np.zeros((ROWS - 1, DIM), np.float32)
    idx, g = _batch(5)
    rowwise_adagrad(small, np.zeros(ROWS - 1, np.float32), g, idx % (ROWS - 1), lr=0.1)
    w, h = np.zeros((ROWS, DIM), np.float32), np.zeros(ROWS, np.float32)
    rowwise_adagrad(w, h, np.ones((ROWS, DIM), np.float32), lr=0.1)  # dense
    half = np.zeros((ROWS, DIM), np.float16)
    rowwise_adagrad(half, np.zeros(ROWS, np.float16), g.astype(np.float16), idx, lr=0.1)
    bad = idx.copy()
    bad[7] = ROWS
    with pytest.raises(IndexError, match="indices"):
        rowwise_adagrad(w, h, g, bad, lr=0.1)
    assert not calls


def test_advise_scattered_once_skips_small_ranges_and_forgets_after_its_bound(monkeypatch):
    recorded = []
    monkeypatch.setattr(
        _huge_pages, "madvise_huge", lambda a, n, advice=14: recorded.append((a, n, advice)) or True
    )
    monkeypatch.setattr(_huge_pages, "_advised", {})
    monkeypatch.setattr(_huge_pages, "_LINUX", True)
    limit = _huge_pages.HUGE_PAGE_THRESHOLD
    _huge_pages.advise_scattered_once(1 << 30, limit - 1)
    assert recorded == []
    _huge_pages.advise_scattered_once(1 << 30, limit)
    _huge_pages.advise_scattered_once(1 << 30, limit)
    assert recorded == [(1 << 30, limit, 14), (1 << 30, limit, 25)]
    recorded.clear()
    _huge_pages.advise_scattered_once(1 << 31, _huge_pages.COLLAPSE_BYTES + 1)  # too large: advice only
    assert recorded == [(1 << 31, _huge_pages.COLLAPSE_BYTES + 1, 14)]
    for k in range(_huge_pages.ADVISED_RANGES):
        _huge_pages.advise_scattered_once((k + 4) << 32, limit)
    recorded.clear()
    _huge_pages.advise_scattered_once(1 << 30, limit)  # forgotten when the bound was reached
    assert recorded == [(1 << 30, limit, 14), (1 << 30, limit, 25)]
