"""The 8-bit blockwise kernels against the float64 reference of the quantized step
(optkernels.reference.lowbit64) over 60 steps of every algorithm, one step at a time from the kernel's own
state (so errors do not compound): codes equal wherever the float64 value is farther from a decision point
than a float32 step can move it (the module's error model), absmax and parameters within that model's bound.
The undecided elements are counted; they must be rare."""
import numpy as np
import pytest

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
def test_60_steps_agree_with_the_float64_step(name):
    rng = np.random.default_rng(11)
    n = 2 * 256 + 91                                      # a partial last block
    b1, b2, b3, alpha, eps, lr, wd = HYPER[name]
    two, rows, blocks = name in ("adam", "ademamix"), 2 if name == "ademamix" else 1, -(-n // 256)
    p = (0.1 * rng.standard_normal(n)).astype(f32)
    s1 = np.zeros((rows, n) if rows == 2 else n, np.uint8)
    a1 = np.zeros((rows, blocks) if rows == 2 else blocks, f32)
    s2, a2 = (np.zeros(n, np.uint8), np.zeros(blocks, f32)) if two else (None, None)
    q1, q2 = dynamic_map(True), dynamic_map(False)
    undecided = differ = 0
    for t in range(1, 61):
        g = (0.01 * rng.standard_normal(n) * np.exp(rng.uniform(-3, 1, n))).astype(f32)
        args = (name, g, p, s1, s2, b1, b2, b3, alpha, eps, t, lr, q1, q2, a1, a2)
        want = optimizer_update_8bit_blockwise_f64(*args, weight_decay=wd)
        bo.optimizer_update_8bit_blockwise(*args, weight_decay=wd)
        for codes, key in ((s1, "1"), (s2, "2")):
            if codes is None:
                continue
            open_ = want["undecided" + key]
            assert np.array_equal(codes[~open_], want["state" + key][~open_]), f"{name} step {t}: codes{key}"
            undecided += int(open_.sum())
            differ += int((codes[open_] != want["state" + key][open_]).sum())
            got_a = (a1 if key == "1" else a2).astype(np.float64)
            assert np.all(np.abs(got_a - want["absmax" + key]) <= want["absmax_tol" + key]), f"{name} {t}"
        assert np.all(np.abs(p.astype(np.float64) - want["p"]) <= want["p_tol"]), f"{name} step {t}: p"
    total = 60 * n * (rows + two)
    print(f"{name}: {undecided} undecided codes of {total}, {differ} of them differ")
    assert undecided <= total // 200                       # the float32 margin decides few codes
