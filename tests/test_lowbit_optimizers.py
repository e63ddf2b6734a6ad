"""bitsandbytes' 8-bit optimizers: the NumPy classes against the float32 reference step by step (bit for
bit), the torch drop-ins against the NumPy classes, bitsandbytes' constructor rules and state_dict layout,
and a state saved by bitsandbytes itself loaded and continued (where bitsandbytes is installed)."""
import math

import ml_dtypes
import numpy as np
import pytest

import optkernels.optimizers as O
from optkernels.kernels.quantization import dynamic_map
from optkernels.reference import lowbit as ref

f32 = np.float32

# name, algo, constructor keywords, (beta1, beta2, beta3, alpha, eps, wd) as bitsandbytes passes them
ROWS = [
    ("Adam8bit", "adam", dict(lr=1e-3), (0.9, 0.999, 0.0, 0.0, 1e-8, 0.0)),
    ("AdamW8bit", "adam", dict(lr=1e-3), (0.9, 0.999, 0.0, 0.0, 1e-8, 1e-2)),
    ("AdEMAMix8bit", "ademamix", dict(lr=1e-3), (0.9, 0.999, 0.9999, 5.0, 1e-8, 1e-2)),
    ("Lion8bit", "lion", dict(lr=1e-4, weight_decay=0.1), (0.9, 0.99, 0.0, 0.0, 0.0, 0.1)),
    ("SGD8bit", "momentum", dict(lr=1e-2, momentum=0.9, weight_decay=1e-3), (0.9, 0.0, 0.0, 0.0, 0.0, 1e-3)),
    ("RMSprop8bit", "rmsprop", dict(lr=1e-2, alpha=0.9), (0.9, 0.0, 0.0, 0.0, 1e-8, 0.0)),
    ("Adagrad8bit", "adagrad", dict(lr=1e-2), (0.0, 0.0, 0.0, 0.0, 1e-10, 0.0)),
]
SHAPES = [(17, 300), (50,)]          # 5100 elements: 8-bit state (partial last block); 50: float32 state


def _data(steps, seed=0):
    rng = np.random.default_rng(seed)
    params = [(0.1 * rng.standard_normal(s)).astype(f32) for s in SHAPES]
    grads = [[(0.01 * rng.standard_normal(s)).astype(f32) for s in SHAPES] for _ in range(steps)]
    return params, grads


def _reference_run(algo, hyper, params, grads):
    b1, b2, b3, alpha, eps, wd = hyper
    lr = None
    out = []
    for k, p in enumerate(params):
        p = p.copy()
        n = p.size
        if n >= 4096:
            rows = 2 if algo == "ademamix" else 1
            blocks = -(-n // 256)
            s1 = np.zeros((rows,) + p.shape if rows == 2 else p.shape, np.uint8)
            a1 = np.zeros((rows, blocks) if rows == 2 else blocks, f32)
            s2, a2 = np.zeros(p.shape, np.uint8), np.zeros(blocks, f32)
        else:
            s1 = np.zeros(((2,) + p.shape) if algo == "ademamix" else p.shape, f32)
            s2 = np.zeros(p.shape, f32)
        for t, gs in enumerate(grads, start=1):
            lr = LR[algo]
            if n >= 4096:
                p, s1, s2_, a1, a2_ = ref.optimizer_update_8bit_blockwise(
                    algo, gs[k], p, s1, s2, b1, b2, b3, alpha, eps, t, lr, dynamic_map(True), dynamic_map(False),
                    a1, a2, weight_decay=wd)
                s2, a2 = (s2_, a2_) if s2_ is not None else (s2, a2)
            else:
                p, s1, s2_ = ref.optimizer_update_32bit(algo, gs[k], p, s1, b1, eps, t, lr, state2=s2, beta2=b2,
                                                        beta3=b3, alpha=alpha, weight_decay=wd)
                s2 = s2_ if s2_ is not None else s2
        out.append((p, s1))
    return out


LR = {"adam": 1e-3, "ademamix": 1e-3, "lion": 1e-4, "momentum": 1e-2, "rmsprop": 1e-2, "adagrad": 1e-2}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r[0])
def test_numpy_class_matches_the_reference(row):
    name, algo, kwargs, hyper = row
    params, grads = _data(12)
    opt = getattr(O, name)([p.copy() for p in params], **kwargs)
    for gs in grads:
        opt.step(gs)
    want = _reference_run(algo, hyper, params, grads)
    for k, (p, s1) in enumerate(want):
        assert np.array_equal(opt._arrays[k], p), f"{name} param {k}"
        assert np.array_equal(opt.state[k]["state1"], s1), f"{name} state1 {k}"
    big, small = opt.state[0], opt.state[1]
    assert big["state1"].dtype == np.uint8 and big["absmax1"].dtype == f32 and big["step"] == 12
    assert small["state1"].dtype == f32 and "qmap1" not in small and "absmax1" not in small


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r[0])
def test_numpy_state_dict_round_trip_continues_identically(row):
    name, algo, kwargs, _ = row
    params, grads = _data(6, seed=1)
    a = getattr(O, name)([p.copy() for p in params], **kwargs)
    for gs in grads[:3]:
        a.step(gs)
    sd = a.state_dict()
    q = sd["state"][0]["__bnb_optimizer_quant_state__"]
    two = algo in ("adam", "ademamix")
    assert set(q) == ({"state1", "qmap1", "absmax1"} | ({"state2", "qmap2", "absmax2"} if two else set()))
    assert set(sd["state"][1]["__bnb_optimizer_quant_state__"]) == ({"state1", "state2"} if two else {"state1"})
    b = getattr(O, name)([p.copy() for p in a._arrays], **kwargs)
    b.load_state_dict(sd)
    for gs in grads[3:]:
        a.step(gs)
        b.step(gs)
    for x, y in zip(a._arrays, b._arrays):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("make,error,match", [
    (lambda p: O.Adam8bit(p, lr=-1.0), ValueError, "learning rate"),
    (lambda p: O.Adam8bit(p, betas=(0.9, 1.0)), ValueError, "beta parameter at index 1"),
    (lambda p: O.Adam8bit(p, amsgrad=True), ValueError, "amsgrad"),
    (lambda p: O.Adam8bit(p, optim_bits=8), ValueError, "optim_bits"),
    (lambda p: O.AdamW8bit(p, weight_decay=-1.0), ValueError, "weight_decay"),
    (lambda p: O.SGD8bit(p, lr=0.1), NotImplementedError, "momentum"),
    (lambda p: O.RMSprop8bit(p, alpha=0.0), NotImplementedError, "alpha"),
    (lambda p: O.RMSprop8bit(p, centered=True), NotImplementedError, "Centered"),
    (lambda p: O.Adagrad8bit(p, lr_decay=0.1), ValueError, "Lr Decay"),
    (lambda p: O.Adagrad8bit(p, initial_accumulator_value=0.1), ValueError, "accumulator"),
    (lambda p: O.Adagrad8bit(p, optim_bits=32), ValueError, "optim_bits"),
    (lambda p: O.Adam8bit(p, min_8bit_size=1.5), TypeError, "min_8bit_size"),
])
def test_constructor_errors(make, error, match):
    with pytest.raises(error, match=match):
        make([np.zeros(3, f32)])


def test_string_betas_and_defaults():
    opt = O.Adam8bit([np.zeros(3, f32)], betas="(0.8, 0.99)")
    assert opt.param_groups[0]["betas"] == (0.8, 0.99)
    assert O.AdamW8bit([np.zeros(3, f32)]).param_groups[0]["weight_decay"] == 1e-2
    assert O.AdEMAMix8bit([np.zeros(3, f32)]).param_groups[0]["alpha"] == 5.0


def test_gradient_mismatch_writes_nothing():
    p, q = np.ones(5000, f32), np.ones(10, f32)
    opt = O.Adam8bit([p, q])
    with pytest.raises(ValueError, match="grads\\[1\\]"):
        opt.step([np.ones(5000, f32), np.ones(11, f32)])
    assert (p == 1).all() and opt.state == {}


def test_ademamix_schedules_follow_bitsandbytes_formulas():
    params, grads = _data(3, seed=2)
    opt = O.AdEMAMix8bit([p.copy() for p in params[:1]], t_alpha=10, t_beta3=10)
    want = params[0].copy()
    blocks = -(-want.size // 256)
    s1, a1 = np.zeros((2,) + want.shape, np.uint8), np.zeros((2, blocks), f32)
    s2, a2 = np.zeros(want.shape, np.uint8), np.zeros(blocks, f32)
    for t, gs in enumerate(grads, start=1):
        opt.step(gs[:1])
        alpha = min(t * 5.0 / 10, 5.0)
        s = t / 10
        ln1, ln3 = math.log(0.9), math.log(0.9999)
        beta3 = min(math.exp(ln1 * ln3 / ((1 - s) * ln3 + s * ln1)), 0.9999)
        want, s1, s2, a1, a2 = ref.optimizer_update_8bit_blockwise(
            "ademamix", gs[0], want, s1, s2, 0.9, 0.999, beta3, alpha, 1e-8, t, 1e-3, dynamic_map(True),
            dynamic_map(False), a1, a2, weight_decay=1e-2)
        assert np.array_equal(opt._arrays[0], want)


def test_bfloat16_parameters_are_rounded_once():
    params, grads = _data(3, seed=3)
    wide = O.Adam8bit([params[0].astype(ml_dtypes.bfloat16).astype(f32)])
    half = O.Adam8bit([params[0].astype(ml_dtypes.bfloat16)])
    for gs in grads:
        g = gs[0].astype(ml_dtypes.bfloat16)
        wide.step([g.astype(f32)])
        half.step([g])
        assert np.array_equal(half._arrays[0], wide._arrays[0].astype(ml_dtypes.bfloat16))
        wide._arrays[0][...] = half._arrays[0].astype(f32)      # both carry on from the rounded parameter


def test_bfloat16_parameters_with_stochastic_rounding():
    from optkernels.kernels import stochastic_rounding

    params, grads = _data(1, seed=6)
    start = params[0].astype(ml_dtypes.bfloat16)
    wide = O.Adam8bit([start.astype(f32)], lr=1e-2)
    half = O.Adam8bit([start.copy()], lr=1e-2)
    g = grads[0][0].astype(ml_dtypes.bfloat16)
    wide.step([g.astype(f32)])
    with stochastic_rounding(seed=3):
        half.step([g])
    exact, got = wide._arrays[0], half._arrays[0].astype(f32)
    nearest = exact.astype(ml_dtypes.bfloat16)
    bits = nearest.view(np.uint16).astype(np.int32)
    cands = np.stack([(bits + d).astype(np.uint16).view(ml_dtypes.bfloat16).astype(f32) for d in (-1, 0, 1)])
    lo = np.where(cands <= exact, cands, -np.inf).max(axis=0)
    hi = np.where(cands >= exact, cands, np.inf).min(axis=0)
    assert ((got == lo) | (got == hi)).all()                 # one of the two neighbours of the float32 result
    assert (got != nearest.astype(f32)).any()                # and not always the nearest one
    assert np.array_equal(half.state[0]["state1"], wide.state[0]["state1"])


# ------------------------------------------------------------------ AnyPrecisionAdamW (LOWBIT.md §9.3)

bf16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("kahan,param_dtype,moment_dtype,wd", [
    (True, bf16, np.float32, 0.01), (False, bf16, np.float32, 0.0), (True, np.float32, bf16, 0.0)])
def test_any_precision_adamw_matches_the_float64_reference(kahan, param_dtype, moment_dtype, wd):
    rng = np.random.default_rng(3)
    p = rng.standard_normal(300).astype(param_dtype)
    opt = O.AnyPrecisionAdamW([p], lr=3e-3, weight_decay=wd, use_kahan_summation=kahan,
                              momentum_dtype=moment_dtype)
    want = (p.copy(), np.zeros(300, moment_dtype), np.zeros(300, bf16), np.zeros(300, bf16) if kahan else None)
    for t in range(1, 31):
        g = (rng.standard_normal(300) * 0.1).astype(param_dtype)
        opt.step([g])
        want = ref.any_precision_adamw(want[0], want[1], want[2], g, t, want[3], lr=3e-3, weight_decay=wd)
        state = opt.state[0]
        got = (p, state["exp_avg"], state["exp_avg_sq"], state.get("compensation"))
        for name, a, b in zip(("p", "exp_avg", "exp_avg_sq", "compensation"), got, want):
            if b is not None:
                assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{name} {t}"
    assert state["step"] == 30 and ("compensation" in state) == kahan


def test_kahan_keeps_the_updates_bfloat16_rounding_swallows():
    # A constant gradient: every update is about -lr, far below half an ulp of 1.0 in bfloat16 (2**-8):
    # the plain bfloat16 parameter never moves; the compensated ones follow the sum of the same updates
    # taken by a float32 parameter (the updates do not depend on the parameter without weight decay):
    # closely with a float32 compensation buffer, within the buffer's own rounding with a bfloat16 one.
    plain, k16, k32, wide = np.ones(4, bf16), np.ones(4, bf16), np.ones(4, bf16), np.ones(4, f32)
    opts = [O.AnyPrecisionAdamW([plain], lr=1e-4), O.AnyPrecisionAdamW([k16], lr=1e-4, use_kahan_summation=True),
            O.AnyPrecisionAdamW([k32], lr=1e-4, use_kahan_summation=True, compensation_buffer_dtype=f32),
            O.AnyPrecisionAdamW([wide], lr=1e-4)]
    for _ in range(200):
        for opt, x in zip(opts, (plain, k16, k32, wide)):
            opt.step([np.ones(4, x.dtype)])
    assert np.all(plain == 1) and np.all(wide < 1 - 150 * 1e-4)
    for x, opt, tol in ((k16, opts[1], 1e-4), (k32, opts[2], 1e-5)):     # float32 sum: 200 roundings
        assert np.all(np.abs(x.astype(np.float64) - wide) <= 2 ** -8)      # within bfloat16's rounding
        total = x.astype(np.float64) + opt.state[0]["compensation"].astype(np.float64)
        assert np.all(np.abs(total - wide) < tol)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(use_kahan_summation=1), TypeError, "use_kahan_summation"),
    (dict(momentum_dtype=np.float16), ValueError, "momentum_dtype"),
    (dict(betas=(0.9, 1.0)), ValueError, "betas"),
    (dict(lr=-1.0), ValueError, "lr"),
])
def test_any_precision_adamw_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        O.AnyPrecisionAdamW([np.zeros(3, bf16)], **kwargs)
    with pytest.raises(TypeError, match="params"):
        O.AnyPrecisionAdamW([np.zeros(3, np.float16)])
