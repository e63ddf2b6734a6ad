"""``kahan_summation=True`` (LOWBIT.md §9.3 write-back) on bfloat16 parameters of the Adam-family classes:
each step equals the float32 optimizer's step from the upcast parameter and slots followed by the Kahan
write-back computed here in NumPy, bit for bit; the compensated parameter tracks a float32 run better than
plain rounding; state_dict resumes bit for bit; the option's checks."""
import ml_dtypes
import numpy as np
import pytest

from optkernels.optimizers import Adam, AdamWeightDecay, Parameter

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
SHAPES = {"w": (6, 5), "b": (7,)}

CLASSES = [
    pytest.param(lambda ps, **kw: Adam(ps, learning_rate=2e-3, **kw), id="Adam"),
    pytest.param(lambda ps, **kw: AdamWeightDecay(ps, learning_rate=2e-3, weight_decay=0.05, **kw),
                 id="AdamWeightDecay"),
]


def _data(steps, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    init = {n: (scale * rng.standard_normal(s)).astype(F32).astype(BF16) for n, s in SHAPES.items()}
    grads = [{n: rng.standard_normal(s).astype(F32).astype(BF16) for n, s in SHAPES.items()}
             for _ in range(steps)]
    return init, grads


def _params(init, dtype):
    return [Parameter(np.array(v, dtype=dtype), n) for n, v in init.items()]


def _rn(x):
    """float32 -> bfloat16 (round to nearest even) -> float32."""
    return np.asarray(x, F32).astype(BF16).astype(F32)


def _kahan(p, w, c):
    """The spec's write-back in NumPy: u = w - p; c <- c + u; p' = p + c; c <- c + (p - p')."""
    p, c = p.astype(F32), c.astype(F32)
    u = w - p
    c = _rn(c + u)
    new = _rn(p + c)
    return new.astype(BF16), _rn(c + _rn(p - new)).astype(BF16)


def _slots(opt):
    return {slot: [p.data for p in getattr(opt, slot)] for slot in opt._slot_names}


@pytest.mark.parametrize("make", CLASSES)
def test_step_is_float32_update_then_kahan_write_back(make):
    init, grads = _data(24)
    half_params = _params(init, BF16)
    opt = make(half_params, kahan_summation=True)
    f32_params = _params(init, F32)
    ref = make(f32_params)
    comp = {n: np.zeros(s, BF16) for n, s in SHAPES.items()}
    for step_grads in grads:
        for hp, fp in zip(half_params, f32_params):
            fp.data[...] = hp.data.astype(F32)
        for slot, arrays in _slots(opt).items():
            assert all(a.dtype == BF16 for a in arrays), f"{slot} keeps the parameter's dtype"
            for a, b in zip(arrays, _slots(ref)[slot]):
                b[...] = a.astype(F32)
        before = {hp.name: hp.data.copy() for hp in half_params}
        opt(tuple(step_grads[n] for n in SHAPES))
        ref(tuple(step_grads[n].astype(F32) for n in SHAPES))
        for hp, fp in zip(half_params, f32_params):
            want, comp[hp.name] = _kahan(before[hp.name], fp.data, comp[hp.name])
            assert np.array_equal(hp.data.view(np.uint16), want.view(np.uint16)), hp.name
        for slot, arrays in _slots(opt).items():
            for a, b in zip(arrays, _slots(ref)[slot]):
                assert np.array_equal(a.view(np.uint16), b.astype(BF16).view(np.uint16)), slot
    state = opt.state_dict()
    for n in SHAPES:
        assert state[f"compensation.{n}"].dtype == BF16
        assert np.array_equal(state[f"compensation.{n}"].view(np.uint16), comp[n].view(np.uint16))
    assert any(np.any(c != 0) for c in comp.values())


def test_compensated_parameter_tracks_float32_better_than_rounding():
    """Parameters in [4, 8) (bfloat16 ulp 2**-5) under 60 Adam steps of about 1e-3 in a steady direction:
    plain rounding loses every update (each below half an ulp), the compensated parameter stays within an
    ulp of the float32 run."""
    rng = np.random.default_rng(3)
    n = 64
    init = (rng.uniform(4, 8, n) * rng.choice([-1, 1], n)).astype(F32).astype(BF16)
    direction = rng.choice([-1.0, 1.0], n)
    grads = [(direction + 0.3 * rng.standard_normal(n)).astype(F32).astype(BF16) for _ in range(60)]
    runs = {}
    for label, dtype, kw in (("f32", F32, {}), ("plain", BF16, {}),
                             ("kahan", BF16, {"kahan_summation": True})):
        param = Parameter(init.astype(dtype), "w")
        opt = Adam([param], learning_rate=1e-3, **kw)
        for g in grads:
            opt((g.astype(dtype),))
        runs[label] = param.data.astype(F32)
    moved = np.abs(runs["f32"] - init.astype(F32))
    err_plain = np.abs(runs["plain"] - runs["f32"])
    err_kahan = np.abs(runs["kahan"] - runs["f32"])
    assert moved.min() > 0.05  # about two bfloat16 ulps
    assert np.array_equal(runs["plain"], init.astype(F32))  # every update swallowed
    assert np.all(err_kahan <= 2.0**-5), err_kahan.max()
    assert err_kahan.mean() < err_plain.mean() / 4


@pytest.mark.parametrize("make", CLASSES)
def test_resume_from_state_dict_is_bit_identical(make):
    init, grads = _data(8, seed=5)
    whole_params = _params(init, BF16)
    whole = make(whole_params, kahan_summation=True)
    for step_grads in grads:
        whole(tuple(step_grads[n] for n in SHAPES))
    first_params = _params(init, BF16)
    first = make(first_params, kahan_summation=True)
    for step_grads in grads[:4]:
        first(tuple(step_grads[n] for n in SHAPES))
    saved = first.state_dict()
    resumed_params = [Parameter(p.data.copy(), p.name) for p in first_params]
    resumed = make(resumed_params, kahan_summation=True)
    resumed.load_state_dict(saved)
    for step_grads in grads[4:]:
        resumed(tuple(step_grads[n] for n in SHAPES))
    for a, b in zip(whole_params, resumed_params):
        assert np.array_equal(a.data.view(np.uint16), b.data.view(np.uint16)), a.name
    for key, value in whole.state_dict().items():
        assert np.array_equal(value, resumed.state_dict()[key]), key


def test_kahan_summation_option_is_checked():
    p = Parameter(np.zeros(3, BF16), "w")
    with pytest.raises(TypeError, match="kahan_summation"):
        Adam([p], kahan_summation=1)
    for other in ("master_weights", "stochastic_rounding"):
        with pytest.raises(ValueError, match=f"'kahan_summation' and '{other}'"):
            Adam([p], kahan_summation=True, **{other: True})
    with pytest.raises(TypeError, match="w16 is float16"):
        Adam([Parameter(np.zeros(3, np.float16), "w16")], kahan_summation=True)
    opt = Adam([p, Parameter(np.ones(2, F32), "f")], kahan_summation=True)
    assert opt.kahan_summation and set(opt.state_dict()) >= {"compensation.w"}
    assert "compensation.f" not in opt.state_dict()  # float32 parameters are updated as they are
