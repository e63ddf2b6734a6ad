"""float16/bfloat16 Parameters with every optimizer (optim_table): without master weights each step is the
float32 step on upcast state rounded once; with ``master_weights=True`` the float32 masters follow the
float32 optimizer on upcast gradients bit for bit and the parameters are the masters rounded once; resume,
stochastic rounding and loss-scale overflow on half gradients."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

from optim_table import MODEL, OPTIMIZERS, scenario
from optkernels.optimizers import (
    Adam,
    DynamicLossScaleManager,
    Momentum,
    Parameter,
    all_finite,
    loss_scaled_step,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALF = [pytest.param(F16, id="float16"), pytest.param(BF16, id="bfloat16")]
STEPS = 3


def _data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    init = {name: rng.standard_normal(shape).astype(np.float32).astype(dtype) for name, shape in MODEL}
    grads = [{name: (0.5 * rng.standard_normal(shape)).astype(np.float32).astype(dtype)
              for name, shape in MODEL} for _ in range(STEPS)]
    return init, grads


def _build(info, name, init, dtype, **extra):
    """The scenario's optimizer over new parameters of ``dtype`` (``extra``: more constructor keywords)."""
    sc = scenario(dataclasses.replace(info, kwargs={**info.kwargs, **extra}), name, np.float32)
    params = [Parameter(np.array(v, dtype=dtype), n) for n, v in init.items()]
    return sc, params, sc.build(params)


def _step(opt, sc, grads, dtype):
    names = [MODEL[i][0] for i in sc.order]
    scale = np.float32(sc.loss_scale)
    opt(tuple((grads[n].astype(np.float32) * scale).astype(dtype) for n in names))


def _slots(opt):
    return {slot: [p.data for p in getattr(opt, slot)] for slot in opt._slot_names}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", ["plain", "decay_scale", "groups"])
@pytest.mark.parametrize("info", OPTIMIZERS, ids=lambda i: i.id)
def test_master_weights_follow_the_float32_optimizer(info, name, dtype):
    """Masters (and float32 slots) bit-identical to the float32 optimizer fed the upcast half gradients;
    each half parameter is its master rounded once (round to nearest even)."""
    init, grads = _data(dtype)
    sc, half_params, half_opt = _build(info, name, init, dtype, master_weights=True)
    _, f32_params, f32_opt = _build(info, name, {k: v.astype(np.float32) for k, v in init.items()},
                                    np.float32)
    for step_grads in grads:
        _step(half_opt, sc, step_grads, dtype)
        _step(f32_opt, sc, step_grads, np.float32)
    state = half_opt.state_dict()
    for hp, fp in zip(half_params, f32_params):
        assert hp.dtype == dtype
        master = state[f"master.{hp.name}"]
        assert master.dtype == np.float32
        assert np.array_equal(master.view(np.uint32), fp.data.view(np.uint32)), f"{hp.name}: master differs"
        assert np.array_equal(hp.data.view(np.uint16), fp.data.astype(dtype).view(np.uint16)), hp.name
    for slot, arrays in _slots(half_opt).items():
        for a, b in zip(arrays, _slots(f32_opt)[slot]):
            assert a.dtype == np.float32 and np.array_equal(a, b, equal_nan=True), slot


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("info", OPTIMIZERS, ids=lambda i: i.id)
def test_half_parameters_step_is_float32_step_rounded_once(info, dtype):
    """No master weights: slots in the parameter's dtype, and each step equals the float32 optimizer's step
    from the upcast parameters and slots, every updated array rounded once."""
    init, grads = _data(dtype, seed=1)
    sc, half_params, half_opt = _build(info, "plain", init, dtype)
    _, f32_params, f32_opt = _build(info, "plain", {k: v.astype(np.float32) for k, v in init.items()},
                                    np.float32)
    for step_grads in grads:
        for hp, fp in zip(half_params, f32_params):
            fp.data[...] = hp.data.astype(np.float32)
        for slot, arrays in _slots(half_opt).items():
            assert all(a.dtype == dtype for a in arrays), f"{slot} must have the parameter's dtype"
            for a, b in zip(arrays, _slots(f32_opt)[slot]):
                b[...] = a.astype(np.float32)
        _step(half_opt, sc, step_grads, dtype)
        _step(f32_opt, sc, step_grads, np.float32)
        for hp, fp in zip(half_params, f32_params):
            assert np.array_equal(hp.data.view(np.uint16), fp.data.astype(dtype).view(np.uint16)), hp.name
        for slot, arrays in _slots(half_opt).items():
            for a, b in zip(arrays, _slots(f32_opt)[slot]):
                assert np.array_equal(a.view(np.uint16), b.astype(dtype).view(np.uint16)), slot


@pytest.mark.parametrize("stochastic", [False, True], ids=["nearest", "stochastic"])
def test_master_weights_resume_is_bit_identical(stochastic):
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((40, 7)).astype(np.float32).astype(BF16)
    grads = [rng.standard_normal((40, 7)).astype(np.float32).astype(BF16) for _ in range(4)]

    def make(data):
        p = Parameter(np.array(data), "w")
        return p, Adam([p], learning_rate=0.01, weight_decay=0.01, master_weights=True,
                       stochastic_rounding=stochastic, seed=5)

    p, opt = make(w0)
    for g in grads:
        opt((g,))
    q, first = make(w0)
    for g in grads[:2]:
        first((g,))
    saved, saved_param = first.state_dict(), q.data.copy()
    assert saved["master.w"].dtype == np.float32
    r, second = make(saved_param)
    second.load_state_dict(saved)
    for g in grads[2:]:
        second((g,))
    assert np.array_equal(r.data.view(np.uint16), p.data.view(np.uint16))
    assert np.array_equal(second.state_dict()["master.w"], opt.state_dict()["master.w"])


def test_stochastic_rounding_of_the_parameter_from_its_master():
    """The parameter is its master rounded stochastically: each element one of the master's two bfloat16
    neighbours, not always the nearest; the same seed gives the same bits."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(5000).astype(np.float32).astype(BF16)
    g = rng.standard_normal(5000).astype(np.float32).astype(BF16)
    runs = []
    for _ in range(2):
        p = Parameter(np.array(w0), "w")
        opt = Momentum([p], learning_rate=0.01, momentum=0.9, master_weights=True, stochastic_rounding=True,
                       seed=9)
        opt((g,))
        runs.append(p.data.view(np.uint16).copy())
        master = opt.state_dict()["master.w"]
    assert np.array_equal(runs[0], runs[1])
    nearest = master.astype(BF16).view(np.uint16)
    assert np.any(runs[0] != nearest), "stochastic rounding never left the nearest value"
    assert np.all(np.abs(runs[0].astype(np.int32) - nearest.astype(np.int32)) <= 1)


@pytest.mark.parametrize("master", [False, True], ids=["half-slots", "master-weights"])
def test_loss_scale_overflow_in_float16_gradients_skips_the_step(master):
    rng = np.random.default_rng(4)
    p = Parameter(rng.standard_normal(64).astype(np.float16), "w")
    opt = Adam([p], learning_rate=0.01, master_weights=master)
    manager = DynamicLossScaleManager(init_loss_scale=2.0 ** 10, scale_factor=2, scale_window=10)
    good = (rng.standard_normal(64) * 4).astype(np.float16)
    applied, _ = loss_scaled_step(opt, (good,), manager)
    assert applied
    before = p.data.copy(), opt.state_dict()
    bad = good.copy()
    bad[3] = np.float16(np.inf)
    applied, scale = loss_scaled_step(opt, (bad,), manager)
    assert not applied and scale == 2.0 ** 9
    assert np.array_equal(p.data.view(np.uint16), before[0].view(np.uint16))
    for key, value in opt.state_dict().items():
        assert np.array_equal(value, before[1][key]), key


def test_all_finite_on_bfloat16_and_float16():
    x = np.array([1.0, -2.0, 3e38], np.float32).astype(BF16)
    assert all_finite((x, x.astype(np.float32).astype(F16)[:2]))
    for bad in (np.inf, -np.inf, np.nan):
        y = x.copy()
        y[1] = bad
        assert not all_finite(y)
        assert not all_finite((np.ones(3, F16), np.array([bad], np.float32).astype(F16)))


def test_master_weights_option_is_checked():
    p = Parameter(np.zeros(3, BF16), "w")
    with pytest.raises(TypeError, match="master_weights"):
        Adam([p], master_weights=1)
    with pytest.raises(ValueError, match="seed"):
        Adam([p], stochastic_rounding=True, seed=-1)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("kind", ["AdaFactor", "LARS"])
def test_adafactor_and_lars_with_half_parameters(kind, dtype):
    """The optimizers outside optim_table: half parameters keep their dtype, and with master weights the
    masters follow the float32 optimizer on the upcast gradients bit for bit."""
    from optkernels.optimizers import LARS, AdaFactor

    def make(params, **kw):
        if kind == "AdaFactor":
            return AdaFactor(params, learning_rate=0.01, relative_step=False, scale_parameter=False, **kw)
        return LARS(Momentum(params, 0.1, 0.9, **kw))

    rng = np.random.default_rng(6)
    init = [rng.standard_normal(s).astype(np.float32).astype(dtype) for s in ((6, 4), (4,))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32).astype(dtype) for a in init] for _ in range(3)]

    def run(storage, **kw):
        params = [Parameter(a.astype(storage), n) for a, n in zip(init, ("w", "b"))]
        opt = make(params, **kw)
        for g in grads:
            opt(tuple(x.astype(storage) for x in g))
        return params, opt

    half, _ = run(dtype)
    assert all(p.dtype == dtype and np.all(np.isfinite(p.data.astype(np.float32))) for p in half)
    masters, opt = run(dtype, master_weights=True)
    wide, _ = run(np.float32)
    state = opt.state_dict()
    for p, q in zip(masters, wide):
        assert np.array_equal(state[f"master.{p.name}"], q.data)
        assert np.array_equal(p.data.view(np.uint16), q.data.astype(dtype).view(np.uint16))
