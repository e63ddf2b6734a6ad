"""The AnyPrecisionAdamW kernel (LOWBIT.md §9.3) against the float64 reference, bit for bit, for each mix of
float32 / bfloat16 arrays; its bfloat16 rounding against ml_dtypes; bad input raises before any write."""
import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import any_precision_adamw
from optkernels.kernels.any_precision import round_to_bf16
from optkernels.reference import lowbit as ref

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)


def test_round_to_bf16_is_ml_dtypes_cast():
    rng = np.random.default_rng(0)
    bits = np.concatenate([rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001,
                                     0x00000001, 0x80008000, 0], np.uint32)])
    with np.errstate(invalid="ignore"):
        cast = bits.view(np.float32).astype(BF16).astype(np.float32)
    for x, want in zip(bits.view(np.float32), cast):
        got = np.float32(round_to_bf16(x, True))
        assert got.view(np.uint32) == want.view(np.uint32) or (np.isnan(got) and np.isnan(want)), hex(x.view(np.uint32))
        if not np.isnan(x):       # (a NaN's payload may change on its way out of compiled code)
            assert np.float32(round_to_bf16(x, False)).view(np.uint32) == x.view(np.uint32)


@pytest.mark.parametrize("param,moments,comp", [(BF16, (F32, BF16), BF16), (BF16, (BF16, BF16), F32),
                                                (F32, (F32, F32), BF16), (BF16, (F32, BF16), None)])
def test_kernel_equals_the_float64_reference(param, moments, comp):
    rng = np.random.default_rng(1)
    n = 600                                        # more than one 512-element chunk of the bfloat16 driver
    arrays = [rng.standard_normal(n).astype(param), np.zeros(n, moments[0]), np.zeros(n, moments[1]),
              None if comp is None else np.zeros(n, comp)]
    want = [a if a is None else a.copy() for a in arrays]
    for t in range(1, 13):
        g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 1, n)).astype(param)
        hyper = dict(lr=2e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05 * (t % 2))
        any_precision_adamw(*arrays[:3], g, t, arrays[3], **hyper)
        want = list(ref.any_precision_adamw(*want[:3], g, t, want[3], **hyper))
        for a, b in zip(arrays, want):
            if a is not None:
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), t


@pytest.mark.parametrize("change,error,match", [
    (dict(param=np.zeros(4, np.float16)), TypeError, "param must be float32 or bfloat16"),
    (dict(grad=np.zeros(4, np.float64)), TypeError, "dtype"),
    (dict(exp_avg=np.zeros(5, F32)), ValueError, "shape"),
    (dict(step=0), ValueError, "step"),
    (dict(step=1.0), TypeError, "step"),
    (dict(beta1=1.0), ValueError, "beta1"),
    (dict(lr=-1.0), ValueError, "lr"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay"),
])
def test_bad_input_raises_before_any_write(change, error, match):
    args = dict(param=np.ones(4, BF16), exp_avg=np.ones(4, F32), exp_avg_sq=np.ones(4, BF16),
                grad=np.ones(4, BF16), step=3, compensation=np.ones(4, BF16))
    args.update(change)
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    with pytest.raises(error, match=match):
        any_precision_adamw(**args)
    for k, v in before.items():
        assert args[k].tobytes() == v.tobytes(), k
