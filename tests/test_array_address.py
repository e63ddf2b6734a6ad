"""The data address read from the array object (kernels/_address.py) and the byte spans of the overlap
check built on it (kernels/_checks._byte_span)."""
import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import _address
from optkernels.kernels._checks import _byte_span, check_arrays


def _arrays() -> list:
    base = np.arange(240.0).reshape(12, 20)
    read_only = np.ones(5, np.float32)
    read_only.flags.writeable = False
    return [
        base,
        base[3:7, 5:],
        base[::-1],
        base[:, ::-2],
        base.T,
        np.array(3.0),
        read_only,
        np.ones(7, ml_dtypes.bfloat16)[1:],
        np.frombuffer(b"abcdefgh", np.uint8)[2:],
    ]


@pytest.mark.parametrize("k", range(9))
def test_data_address_is_ctypes_data(k):
    a = _arrays()[k]
    assert _address.data_address(a) == a.ctypes.data


def test_data_address_falls_back_to_ctypes_without_the_probed_offset(monkeypatch):
    monkeypatch.setattr(_address, "_DATA_OFFSET", None)
    a = np.arange(10.0)[3:]
    assert _address.data_address(a) == a.ctypes.data


def test_byte_spans_of_views_strides_and_empty_arrays():
    base = np.arange(240.0).reshape(12, 20)  # 8-byte items, rows of 160 bytes
    start = base.ctypes.data
    assert _byte_span(base) == (start, start + 1920)
    assert _byte_span(base[3:7, 5:]) == (start + 3 * 160 + 40, start + 6 * 160 + 160)
    assert _byte_span(base[::-1]) == (start, start + 1920)  # negative stride: same memory
    assert _byte_span(base[:, ::-2]) == (start + 8, start + 1920)  # columns 19, 17, ..., 1
    assert _byte_span(np.zeros((3, 0))) == (0, 0)


def test_overlapping_views_are_still_refused():
    buffer = np.zeros(100, np.float32)
    with pytest.raises(ValueError, match="var and m share memory"):
        check_arrays({"var": buffer[:50], "m": buffer[49:99]})
    batch = check_arrays({"var": buffer[:50], "m": buffer[50:]})  # adjacent, not overlapping
    assert batch.size == 50
