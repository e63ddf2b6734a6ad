"""The 8-bit blockwise kernels on CUDA arrays against the float64 reference of the quantized step
(optkernels.reference.lowbit64) over 50 steps of every algorithm: codes equal wherever float32 rounding
cannot decide them, absmax and parameters within the reference's float32 bound (as tests/test_lowbit_float64.py
on the CPU; small arrays: the simulator is slow)."""
import numpy as np
import pytest

from optkernels.kernels import _cuda
from optkernels.kernels import blockwise_optim as bo
from optkernels.kernels.quantization import dynamic_map
from optkernels.reference.lowbit64 import optimizer_update_8bit_blockwise_f64

f32 = np.float32
HYPER = {  # name: (beta1, beta2, beta3, alpha, eps, lr, wd)
    "adam": (0.9, 0.999, 0.0, 0.0, 1e-8, 1e-3, 0.01),
    "ademamix": (0.9, 0.999, 0.9999, 5.0, 1e-8, 1e-3, 0.01),
    "momentum": (0.9, 0.0, 0.0, 0.0, 0.0, 1e-2, 1e-3),
    "lion": (0.9, 0.99, 0.0, 0.0, 0.0, 1e-4, 0.1),
    "rmsprop": (0.99, 0.0, 0.0, 0.0, 1e-8, 1e-2, 1e-3),
    "adagrad": (0.0, 0.0, 0.0, 0.0, 1e-10, 1e-2, 1e-3),
}


@pytest.mark.parametrize("name", list(HYPER))
def test_50_steps_on_device_agree_with_the_float64_step(name):
    rng = np.random.default_rng(12)
    n = 97                                                  # one partial block
    b1, b2, b3, alpha, eps, lr, wd = HYPER[name]
    two, rows, blocks = name in ("adam", "ademamix"), 2 if name == "ademamix" else 1, -(-n // 256)
    host = [(0.1 * rng.standard_normal(n)).astype(f32), np.zeros((rows, n) if rows == 2 else n, np.uint8),
            np.zeros(n, np.uint8) if two else None, np.zeros((rows, blocks) if rows == 2 else blocks, f32),
            np.zeros(blocks, f32) if two else None]
    dev = [None if a is None else _cuda.to_device(a) for a in host]
    q1, q2 = dynamic_map(True), dynamic_map(False)
    dq1, dq2 = _cuda.to_device(q1), _cuda.to_device(q2)
    undecided = 0
    state = [None if d is None else _cuda.to_host(d) for d in dev]
    for t in range(1, 51):
        g = (0.01 * rng.standard_normal(n) * np.exp(rng.uniform(-3, 1, n))).astype(f32)
        p, s1, s2, a1, a2 = state
        want = optimizer_update_8bit_blockwise_f64(name, g, p, s1, s2, b1, b2, b3, alpha, eps, t, lr, q1, q2, a1,
                                                   a2, weight_decay=wd)
        bo.optimizer_update_8bit_blockwise(name, _cuda.to_device(g), dev[0], dev[1], dev[2], b1, b2, b3, alpha,
                                           eps, t, lr, dq1, dq2, dev[3], dev[4],
                                           weight_decay=wd)
        state = [None if d is None else _cuda.to_host(d) for d in dev]
        p, s1, s2, a1, a2 = state
        for codes, absmax, key in ((s1, a1, "1"), (s2, a2, "2")):
            if codes is None:
                continue
            open_ = want["undecided" + key]
            assert np.array_equal(codes[~open_], want["state" + key][~open_]), f"{name} step {t}: codes{key}"
            undecided += int(open_.sum())
            err = np.abs(absmax.astype(np.float64) - want["absmax" + key])
            assert np.all(err <= want["absmax_tol" + key]), f"{name} step {t}: absmax{key}"
        assert np.all(np.abs(p.astype(np.float64) - want["p"]) <= want["p_tol"]), f"{name} step {t}: p"
    assert undecided <= 50 * n * (rows + two) // 200
