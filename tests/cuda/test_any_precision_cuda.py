"""AnyPrecisionAdamW's kernel (plain and Kahan-compensated, bfloat16 and float32 arrays) on CUDA arrays: the
same bits as the NumPy kernel and the float64 reference (small arrays: the simulator is slow)."""
import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.kernels.any_precision import any_precision_adamw
from optkernels.reference import lowbit as ref

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)


def _bits(a):
    return np.asarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("kahan,param_dtype,momentum_dtype", [(True, BF16, F32), (False, F32, BF16)])
def test_steps_on_device_equal_the_cpu_kernel_and_the_reference(kahan, param_dtype, momentum_dtype):
    rng = np.random.default_rng(5)
    n = 40
    host = [rng.standard_normal(n).astype(param_dtype), np.zeros(n, momentum_dtype), np.zeros(n, BF16),
            np.zeros(n, BF16) if kahan else None]
    want = [a if a is None else a.copy() for a in host]
    dev = [a if a is None else _cuda.to_device(a) for a in host]
    for t in range(1, 3):
        g = rng.standard_normal(n).astype(param_dtype)
        hyper = dict(lr=1e-2, weight_decay=0.1 if t > 1 else 0.0)
        any_precision_adamw(*host[:3], g, t, host[3], **hyper)
        any_precision_adamw(*dev[:3], _cuda.to_device(g), t, dev[3], **hyper)
        want = list(ref.any_precision_adamw(*want[:3], g, t, want[3], **hyper))
    for name, h, d, w in zip(("param", "exp_avg", "exp_avg_sq", "compensation"), host, dev, want):
        if h is None:
            continue
        assert np.array_equal(_bits(h), _bits(w)), name
        assert np.array_equal(_bits(_cuda.to_host(d).view(h.dtype)), _bits(h)), name
