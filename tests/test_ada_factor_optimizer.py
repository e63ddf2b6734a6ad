"""AdaFactor (MindSpore nn.AdaFactor): trajectories against the float64 reference composed by hand, the step
rules (relative step, beta2t, loss scale never applied, global step), state, determinism, and every
documented bad argument."""
import math
import re
import warnings

import numba
import numpy as np
import pytest

import optkernels.reference as R
from optable import assert_close
from optkernels.optimizers import LearningRateSchedule, Parameter
from optkernels.optimizers.ada_factor import AdaFactor

SHAPES = {"bias": (7,), "fc.weight": (5, 6), "conv.weight": (2, 3, 4, 5), "scale": ()}
STEPS = 5


def make_data(dtype, seed=0, shapes=SHAPES, steps=STEPS):
    rng = np.random.default_rng(seed)
    init = {n: np.asarray(rng.standard_normal(s), dtype) for n, s in shapes.items()}
    grads = [{n: np.asarray(rng.standard_normal(s) * 0.5, dtype) for n, s in shapes.items()}
             for _ in range(steps)]
    return init, grads


def run(init, grads, **kw):
    params = {n: Parameter(np.array(v, copy=True), n) for n, v in init.items()}
    opt = AdaFactor(list(params.values()), **kw)
    for g in grads:
        assert opt([g[n] for n in params]) is True
    return opt, params


def compose_reference(init, grads, learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0,
                      decay_rate=0.8, beta1=0.9, weight_decay=0.0, scale_parameter=True, relative_step=True,
                      warmup_init=False, compression=False, loss_scale=1.0):
    """The spec's step (OPTIMIZERS §2.14) composed by hand over the float64 reference kernel."""
    beta1 = 0.0 if beta1 is None else float(beta1)
    plain = learning_rate is None or isinstance(learning_rate, (int, float))
    scale = scale_parameter and plain
    state = {}
    for n, x in init.items():
        factored = x.ndim >= 2
        state[n] = dict(
            x=x.astype(np.float64), m=np.zeros(x.shape),
            r=np.zeros(x.shape[:-1]) if factored else None,
            c=np.zeros(x.shape[:-2] + x.shape[-1:]) if factored else None,
            v=None if factored else np.zeros(x.shape, np.float16 if compression else np.float64))
    for k, g in enumerate(grads):
        t = k + 1.0
        beta2t = 1.0 - t ** (-decay_rate)
        if relative_step:
            rho = min(1e-6 * t if warmup_init else 1e-2, 1.0 / math.sqrt(t))
        elif isinstance(learning_rate, LearningRateSchedule):
            rho = learning_rate(k)
        elif plain:
            rho = float(learning_rate)
        else:
            table = np.asarray(learning_rate, np.float64)
            rho = float(table[k]) if k < table.size else 0.0
        for n, s in state.items():
            x, m, r, c, v = R.fused_ada_factor(eps, clip_threshold, beta1, beta2t, weight_decay, rho,
                                               g[n].astype(np.float64), s["x"], s["m"], s["r"], s["c"],
                                               s["v"],
                                               enable_scale_parameter=scale, enable_first_moment=beta1 > 0,
                                               enable_weight_decay=weight_decay > 0)
            if v is not None and compression:
                v = v.astype(np.float16)  # the stored slot; exact (the reference rounded it to float16)
            s.update(x=x, m=m, r=r, c=c, v=v)
    return state


class Halving(LearningRateSchedule):
    def __call__(self, global_step):
        return 0.05 * 0.5 ** int(global_step)


SCENARIOS = {
    "defaults": {},
    "no-first-moment": dict(beta1=None),
    "warmup": dict(warmup_init=True),
    "weight-decay": dict(weight_decay=0.1, clip_threshold=0.5),
    "compression": dict(compression=True, decay_rate=0.5),
    "fixed-lr": dict(relative_step=False, learning_rate=0.02, scale_parameter=False, eps=(1e-20, 1e-2)),
    "fixed-lr-scaled": dict(relative_step=False, learning_rate=0.02, beta1=0.5, weight_decay=0.05),
    "lr-table": dict(relative_step=False, learning_rate=[0.03, 0.02, 0.01], scale_parameter=False),
    "schedule": dict(relative_step=False, learning_rate=Halving(), scale_parameter=False, compression=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_trajectory_matches_reference(name, dtype):
    kw = SCENARIOS[name]
    init, grads = make_data(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the lr table runs past its end on purpose
        opt, params = run(init, grads, **kw)
        expected = compose_reference(init, grads, **kw)
    state = opt.state_dict()
    for n, p in params.items():
        assert p.data.dtype == dtype
        assert_close(p.data, expected[n]["x"], dtype, 64.0, f"{name}: {n}", before=init[n])
        slots = {"exp_avg": "m", "exp_avg_sq_row": "r", "exp_avg_sq_col": "c", "exp_avg_sq": "v"}
        for slot, key in slots.items():
            value = expected[n][key]
            if slot == "exp_avg" and (kw.get("beta1", 0.9) in (None, 0.0)):
                assert f"{slot}.{n}" not in state
                continue
            if value is None:
                assert f"{slot}.{n}" not in state
                continue
            got = state[f"{slot}.{n}"]
            if value.dtype == np.float16:
                assert got.dtype == np.float16
                spacing = np.spacing(np.abs(value)).astype(np.float64)
                assert np.all(np.abs(got.astype(np.float64) - value.astype(np.float64)) <= spacing), slot
            else:
                assert got.dtype == dtype
                assert_close(got, value, dtype, 64.0, f"{name}: {slot}.{n}")
    assert opt.global_step == STEPS
    assert state["step"] == STEPS and state["step"].dtype == np.float32


def test_relative_step_and_beta2t_follow_the_step_counter():
    """By hand for a scalar parameter: beta2t(1) = 0, so V = g² + eps1 and |U| = 1 on the first step; the
    relative step is min(1e-2, 1/sqrt(t)) = 1e-2; with scale_parameter the step is 1e-2·max(1e-3, |x|)."""
    x = Parameter(np.array([2.0]), "x")
    opt = AdaFactor([x], beta1=None)
    opt((np.array([-3.0]),))
    assert x.data[0] == pytest.approx(2.0 + 1e-2 * 2.0, rel=1e-15)
    assert opt.exp_avg_sq[0][0] == pytest.approx(9.0 + 1e-30)
    # step 2: beta2t = 1 - 2^-0.8
    b2 = 1.0 - 2.0 ** -0.8
    opt((np.array([1.0]),))
    assert opt.exp_avg_sq[0][0] == pytest.approx(b2 * 9.0 + (1 - b2) * 1.0, rel=1e-15)
    assert opt.step_count == 2 and opt.global_step == 2


def test_warmup_rate_is_1e_6_t():
    x = Parameter(np.array([1.0]), "x")
    opt = AdaFactor([x], beta1=None, warmup_init=True, scale_parameter=False)
    opt((np.array([1.0]),))
    assert x.data[0] == pytest.approx(1.0 - 1e-6, rel=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loss_scale_is_accepted_and_never_applied(dtype):
    init, grads = make_data(dtype, seed=3)
    _, plain = run(init, grads)
    _, scaled = run(init, grads, loss_scale=1024.0)
    for n in plain:
        assert np.array_equal(plain[n].data, scaled[n].data)


def test_weight_decay_applies_to_every_parameter_and_ignores_group_values():
    """No beta/gamma filter, and the constructor's decay even for a group that sets its own."""
    init = {"bn.gamma": np.ones(4), "bn.beta": np.ones(4), "w": np.ones((2, 3))}
    zero = [{n: np.zeros_like(v) for n, v in init.items()}]
    params = {n: Parameter(v.copy(), n) for n, v in init.items()}
    opt = AdaFactor([{"params": [params["bn.gamma"], params["bn.beta"]], "weight_decay": 0.0},
                     {"params": [params["w"]]}], weight_decay=0.5, beta1=None, scale_parameter=False)
    opt([zero[0][n] for n in ("bn.gamma", "bn.beta", "w")])
    for p in params.values():
        np.testing.assert_allclose(p.data, 1.0 - 0.5 * 1e-2, rtol=1e-15)


def test_a_dynamic_learning_rate_turns_scale_parameter_off_with_a_warning():
    x = Parameter(np.ones(3), "x")
    with pytest.warns(UserWarning, match="scale_parameter"):
        opt = AdaFactor([x], learning_rate=np.array([0.1, 0.2]), relative_step=False)
    assert opt.scale_parameter is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AdaFactor([Parameter(np.ones(3), "y")], learning_rate=0.1, relative_step=False)


def test_slots_shapes_dtypes_and_compression():
    params = [Parameter(np.zeros((2, 3, 4), np.float32), "w"), Parameter(np.zeros(5, np.float32), "b")]
    opt = AdaFactor(params, compression=True)
    assert opt.exp_avg_sq_row[0].shape == (2, 3) and opt.exp_avg_sq_col[0].shape == (2, 4)
    assert opt.exp_avg_sq[0] is None and opt.exp_avg_sq_row[1] is None and opt.exp_avg_sq_col[1] is None
    assert opt.exp_avg_sq[1].dtype == np.float16 and opt.exp_avg_sq[1].shape == (5,)
    assert opt.exp_avg[0].shape == (2, 3, 4) and opt.exp_avg[0].dtype == np.float32
    assert sorted(opt.state_dict()) == sorted(["global_step", "step", "exp_avg.w", "exp_avg.b",
                                               "exp_avg_sq_row.w", "exp_avg_sq_col.w", "exp_avg_sq.b"])
    assert AdaFactor([Parameter(np.zeros(2), "z")], beta1=None).exp_avg == (None,)


@pytest.mark.parametrize("compression", [False, True])
def test_state_dict_round_trip_resumes_bit_identically(compression):
    init, grads = make_data(np.float32, seed=4, steps=6)
    _, straight = run(init, grads, compression=compression)
    opt, params = run(init, grads[:3], compression=compression)
    saved = {k: v.copy() for k, v in opt.state_dict().items()}
    fresh = {n: Parameter(p.data.copy(), n) for n, p in params.items()}
    resumed = AdaFactor(list(fresh.values()), compression=compression)
    resumed.load_state_dict(saved)
    assert resumed.step_count == 3 and resumed.global_step == 3
    for g in grads[3:]:
        resumed([g[n] for n in fresh])
    for n in straight:
        assert np.array_equal(fresh[n].data, straight[n].data), n


def test_load_state_dict_rejects_a_bad_step_before_writing():
    opt, params = run(*make_data(np.float64, seed=5, steps=1))
    state = opt.state_dict()
    before = {k: v.copy() for k, v in opt.state_dict().items()}
    state["step"] = np.array(-1.0, np.float32)
    with pytest.raises(ValueError, match="step"):
        opt.load_state_dict(state)
    state["step"] = np.array(2.5, np.float32)
    with pytest.raises(ValueError, match="step"):
        opt.load_state_dict(state)
    after = opt.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
def test_bitwise_equal_with_one_and_two_threads():
    shapes = {"w": (301, 257), "b": (20001,)}

    def trajectory(threads):
        init, grads = make_data(np.float32, seed=6, shapes=shapes, steps=2)
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            _, params = run(init, grads, compression=True, weight_decay=0.01)
        finally:
            numba.set_num_threads(previous)
        return {n: p.data.tobytes() for n, p in params.items()}

    assert trajectory(1) == trajectory(2) == trajectory(2)


def test_sparse_and_mismatched_gradients_are_rejected_before_writing():
    opt, params = run(*make_data(np.float32, seed=7, steps=1))
    before = {n: p.data.copy() for n, p in params.items()}
    bad = [np.zeros(p.shape, np.float32) for p in params.values()]
    bad[1] = np.zeros((6, 5), np.float32)
    with pytest.raises(ValueError, match="fc.weight"):
        opt(bad)
    bad[1] = np.zeros((5, 6), np.float64)
    with pytest.raises(TypeError, match="fc.weight"):
        opt(bad)
    assert all(np.array_equal(before[n], p.data) for n, p in params.items())
    assert opt.step_count == 1


# ---------------------------------------------------------------------------------------------------- errors

def _params():
    return [Parameter(np.zeros((2, 3), np.float32), "w")]


BAD = [
    ("lr-with-relative-step", dict(learning_rate=0.1), ValueError, "relative_step"),
    ("warmup-without-relative", dict(warmup_init=True, relative_step=False, learning_rate=0.1), ValueError,
     "warmup_init"),
    ("no-lr-without-relative", dict(relative_step=False), ValueError, "learning_rate"),
    ("negative-lr", dict(relative_step=False, learning_rate=-0.1), ValueError, "learning rate"),
    ("lr-string", dict(relative_step=False, learning_rate="0.1"), TypeError, "learning rate"),
    ("loss-scale-zero", dict(loss_scale=0.0), ValueError, "loss_scale"),
    ("loss-scale-string", dict(loss_scale="1"), TypeError, "loss_scale"),
    ("eps-not-sequence", dict(eps=1e-30), TypeError, "eps"),
    ("eps-length", dict(eps=(1e-30,)), ValueError, "eps"),
    ("eps-int", dict(eps=(0, 1e-3)), TypeError, "eps[0]"),
    ("eps-negative", dict(eps=(1e-30, -1e-3)), ValueError, "eps[1]"),
    ("clip-int", dict(clip_threshold=1), TypeError, "clip_threshold"),
    ("clip-negative", dict(clip_threshold=-1.0), ValueError, "clip_threshold"),
    ("decay-rate-one", dict(decay_rate=1.0), ValueError, "decay_rate"),
    ("decay-rate-zero", dict(decay_rate=0.0), ValueError, "decay_rate"),
    ("decay-rate-int", dict(decay_rate=1), TypeError, "decay_rate"),
    ("weight-decay-one", dict(weight_decay=1.0), ValueError, "weight_decay"),
    ("weight-decay-negative", dict(weight_decay=-0.1), ValueError, "weight_decay"),
    ("weight-decay-int", dict(weight_decay=0), TypeError, "weight_decay"),
    ("weight-decay-callable", dict(weight_decay=lambda step: 0.1), TypeError, "weight_decay"),
    ("scale-parameter-int", dict(scale_parameter=1), TypeError, "scale_parameter"),
    ("relative-step-int", dict(relative_step=1), TypeError, "relative_step"),
    ("compression-int", dict(compression=1), TypeError, "compression"),
    ("beta1-negative", dict(beta1=-0.1), ValueError, "beta1"),
    ("beta1-above-one", dict(beta1=1.5), ValueError, "beta1"),
    ("beta1-string", dict(beta1="0.9"), TypeError, "beta1"),
]


@pytest.mark.parametrize("case, kw, exc, mention", BAD, ids=[b[0] for b in BAD])
def test_bad_argument_raises(case, kw, exc, mention):
    with pytest.raises(exc, match=re.escape(mention)):
        AdaFactor(_params(), **kw)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="parameters"):
        AdaFactor([])
    with pytest.raises(TypeError, match="parameters"):
        AdaFactor(3)
    with pytest.raises(ValueError, match="'lr'"):
        AdaFactor([{"params": _params(), "lr": 0.1}])


def test_validation_order_follows_mindspore():
    """The three relative-step rules come first, then the base checks, then eps, clip_threshold, ..."""
    with pytest.raises(ValueError, match="relative_step"):
        AdaFactor([], learning_rate=0.1)             # before the empty-parameters check
    with pytest.raises(ValueError, match="parameters"):
        AdaFactor([], eps=3)                          # base checks before eps
    with pytest.raises(TypeError, match="eps"):
        AdaFactor(_params(), eps=3, clip_threshold=-1.0)


def test_init_ada_factor_state_creates_the_slots_mindspore_creates():
    """MindSpore's ``init_ada_factor_state(beta1)``: exp_avg only for beta1 > 0; row/column moments for
    rank >= 2, the full second moment (float16 with compression) otherwise; all zeros."""
    params = [Parameter(np.ones((2, 3, 4), np.float32), "w"), Parameter(np.ones(5, np.float32), "b"),
              Parameter(np.ones((), np.float32), "s")]
    opt = AdaFactor(params, compression=True)
    opt.init_ada_factor_state(None)
    assert opt.use_first_moment is False and opt.beta1 == 0.0 and opt.exp_avg == (None, None, None)
    opt.init_ada_factor_state(1)
    assert opt.use_first_moment is True and opt.beta1 == 1.0
    assert [m.shape for m in opt.exp_avg] == [(2, 3, 4), (5,), ()]
    assert [None if r is None else r.shape for r in opt.exp_avg_sq_row] == [(2, 3), None, None]
    assert [None if c is None else c.shape for c in opt.exp_avg_sq_col] == [(2, 4), None, None]
    assert opt.exp_avg_sq[0] is None
    assert [(v.shape, v.dtype) for v in opt.exp_avg_sq[1:]] == [((5,), np.float16), ((), np.float16)]
    every = [a for name in ("exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq")
             for a in getattr(opt, name) if a is not None]
    assert len(every) == 7 and all(not a.any() for a in every)


def test_init_ada_factor_state_restarts_the_moments_and_keeps_the_step():
    """After two steps without a first moment, ``init_ada_factor_state(0.5)`` continues exactly like a
    fresh beta1=0.5 optimizer whose moments are zero and whose step counters read 2."""
    init, grads = make_data(np.float32, seed=7, steps=4)
    opt, params = run(init, grads[:2], beta1=None)
    opt.init_ada_factor_state(0.5)
    fresh = {n: Parameter(p.data.copy(), n) for n, p in params.items()}
    other = AdaFactor(list(fresh.values()), beta1=0.5)
    state = other.state_dict()
    state["step"] = np.array(2, np.float32)
    state["global_step"] = np.array(2, np.int64)
    other.load_state_dict(state)
    for g in grads[2:]:
        opt([g[n] for n in params])
        other([g[n] for n in fresh])
    for n in params:
        assert np.array_equal(params[n].data, fresh[n].data), n
    assert opt.step_count == other.step_count == 4


@pytest.mark.parametrize("beta1, exc", [("0.9", TypeError), (1.5, ValueError), (-0.1, ValueError)])
def test_init_ada_factor_state_rejects_a_bad_beta1_and_keeps_the_state(beta1, exc):
    opt, _ = run(*make_data(np.float64, seed=8, steps=1))
    before = {k: v.copy() for k, v in opt.state_dict().items()}
    with pytest.raises(exc, match="beta1"):
        opt.init_ada_factor_state(beta1)
    after = opt.state_dict()
    assert sorted(after) == sorted(before) and opt.beta1 == 0.9
    assert all(np.array_equal(after[k], before[k]) for k in before)
