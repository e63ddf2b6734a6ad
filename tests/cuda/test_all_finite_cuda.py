"""all_finite on CUDA arrays (copied to the host and checked there); small arrays for the simulator."""
import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.optimizers.loss_scale import all_finite


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_on_cuda_arrays(bad):
    host = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8)
    clean = _cuda.to_device(host)
    assert all_finite(clean) is True
    assert all_finite((clean, _cuda.to_device(np.ones(5)))) is True
    host[3, 4] = bad
    dirty = _cuda.to_device(host)
    assert all_finite(dirty) is False
    assert all_finite([clean, dirty]) is False
