"""8-bit blockwise quantization and optimizer steps on CUDA arrays against the CPU kernels and the float32
reference (small arrays: the simulator is slow).

Under the simulator (which runs the same compiled math) results must be bit-identical. A real GPU may
contract the update into FMAs: there the states' codes may differ where a value lies within an ulp or two of
a decision midpoint, so codes are compared up to a few mismatches and the parameter within 1e-6.
"""
import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.kernels import blockwise_optim as bo
from optkernels.kernels.quantization import dequantize_blockwise, dynamic_map, quantize_blockwise
from optkernels.reference import lowbit as ref

f32 = np.float32
EXACT = _cuda.simulator_enabled()


def _same(got, want, what, codes=False):
    if EXACT:
        assert np.array_equal(got, want, equal_nan=True), what
    elif codes:
        assert np.count_nonzero(got != want) <= 3, what
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def test_quantize_on_device_matches_the_reference():
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(300) * np.exp(rng.uniform(-10, 2, 300))).astype(f32)
    codes, absmax = quantize_blockwise(_cuda.to_device(a), blocksize=256)
    assert _cuda.is_device_array(codes) and _cuda.is_device_array(absmax)
    rc, ra = ref.quantize_blockwise(a, blocksize=256)
    _same(codes.copy_to_host(), rc, "codes", codes=True)
    _same(absmax.copy_to_host(), ra, "absmax")
    out = dequantize_blockwise(codes, absmax, blocksize=256)
    _same(out.copy_to_host(), ref.dequantize_blockwise(rc, ra, blocksize=256), "dequantized")


def test_cuda_blocksize_must_be_supported():
    with pytest.raises(ValueError, match="blocksize"):
        quantize_blockwise(_cuda.to_device(np.zeros(10, f32)), blocksize=100)


HYPER = {
    "adam": (0.9, 0.999, 0.0, 0.0, 1e-8, 1e-3, 0.01),
    "ademamix": (0.9, 0.999, 0.9999, 5.0, 1e-8, 1e-3, 0.01),
    "momentum": (0.9, 0.0, 0.0, 0.0, 0.0, 1e-2, 1e-3),
    "lion": (0.9, 0.99, 0.0, 0.0, 0.0, 1e-4, 0.1),
    "rmsprop": (0.99, 0.0, 0.0, 0.0, 1e-8, 1e-2, 1e-3),
    "adagrad": (0.0, 0.0, 0.0, 0.0, 1e-10, 1e-2, 1e-3),
}


@pytest.mark.parametrize("name", bo.ALGORITHMS)
def test_50_steps_on_device_match_the_reference(name):
    rng = np.random.default_rng(9)
    n = 256 + 20
    b1, b2, b3, alpha, eps, lr, wd = HYPER[name]
    two, rows = name in ("adam", "ademamix"), 2 if name == "ademamix" else 1
    blocks = 2
    dev = [(0.1 * rng.standard_normal(n)).astype(f32),
            np.zeros((rows, n) if rows == 2 else n, np.uint8), np.zeros(n, np.uint8) if two else None,
            np.zeros((rows, blocks) if rows == 2 else blocks, f32), np.zeros(blocks, f32) if two else None]
    dev = [None if x is None else _cuda.to_device(x) for x in dev]
    q1, q2 = dynamic_map(True), dynamic_map(False)
    dq1, dq2 = _cuda.to_device(q1), _cuda.to_device(q2)
    for t in range(1, 51):                  # each step from the device's state: the reference's one-step result
        g = (0.01 * rng.standard_normal(n)).astype(f32)
        before = [None if x is None else x.copy_to_host() for x in dev]
        want = ref.optimizer_update_8bit_blockwise(name, g, before[0], before[1], before[2], b1, b2, b3, alpha,
                                                   eps, t, lr, q1, q2, before[3], before[4], weight_decay=wd)
        p, s1, s2, a1, a2 = dev
        bo.optimizer_update_8bit_blockwise(name, _cuda.to_device(g), p, s1, s2, b1, b2, b3, alpha, eps, t, lr,
                                           dq1, dq2 if two else None, a1, a2, weight_decay=wd)
        for got, expected, what in zip(dev, want, ("p", "state1", "state2", "absmax1", "absmax2")):
            if expected is not None:
                _same(got.copy_to_host(), expected, f"{name} step {t} {what}", codes=what.startswith("state"))


@pytest.mark.parametrize("mode", ["none", "l2", "decoupled"])
def test_rowwise_adagrad_on_device_matches_the_cpu(mode):
    from optkernels.sparse import rowwise_adagrad

    rng = np.random.default_rng(4)
    w, h = (0.5 * rng.standard_normal((6, 3))).astype(f32), np.zeros(6, f32)
    dw, dh = _cuda.to_device(w), _cuda.to_device(h)
    for sparse in (True, False):
        idx = np.array([4, 1, 4, 0], np.int64) if sparse else None
        g = (rng.standard_normal((4, 3)) if sparse else rng.standard_normal((6, 3))).astype(f32)
        kw = dict(lr=0.1, weight_decay=0.01, weight_decay_mode=mode, max_norm=0.8)
        rowwise_adagrad(dw, dh, _cuda.to_device(g), None if idx is None else _cuda.to_device(idx), **kw)
        rowwise_adagrad(w, h, g, idx, **kw)
        _same(dw.copy_to_host(), w, f"{mode} var")
        _same(dh.copy_to_host(), h, f"{mode} sum")
