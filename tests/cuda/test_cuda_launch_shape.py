"""The launch shape of element-wise CUDA kernels (several elements per thread, several blocks): every
element updated exactly once, as on the CPU (small arrays: the simulator is slow)."""

import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.kernels._elementwise import CUDA_ELEMENTS_PER_THREAD, CUDA_THREADS_PER_BLOCK
from optkernels.kernels.axpy import _axpy


def _bits(a):
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_an_elementwise_kernel_over_several_blocks_updates_each_element_once(dtype):
    """Element-wise CUDA kernels take CUDA_ELEMENTS_PER_THREAD elements per thread, a block-width apart:
    over three blocks (the last one partial) every element is updated exactly once, as on the CPU (the
    float32 template and the half-precision one)."""
    n = 2 * CUDA_THREADS_PER_BLOCK * CUDA_ELEMENTS_PER_THREAD + 517
    rng = np.random.default_rng(9)
    y, x = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    expected = y.copy()
    _axpy.launch("cpu", n, expected, x, np.float32(0.75))
    device = _cuda.to_device(y)
    _axpy.launch("cuda", n, device, _cuda.to_device(x), np.float32(0.75))
    np.testing.assert_array_equal(_bits(_cuda.to_host(device)), _bits(expected))
