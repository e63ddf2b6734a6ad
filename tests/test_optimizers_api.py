"""Optimizer API behaviour: the published get_lr_parameter example, learning-rate forms and the global step,
slot initial values, beta powers, state_dict round trips and resumes, AdamOffload vs Adam, LARS."""

import io
import json
import warnings

import numpy as np
import pytest

import optkernels.reference as R
from optable import assert_close
from optim_table import OPTIMIZERS, Halving, make_data, make_params, scenario
from optkernels.conformance.examples import EXAMPLES_FILE
from optkernels.optimizers import (
    FTRL,
    LARS,
    SGD,
    Adagrad,
    Adam,
    AdaMax,
    AdamOffload,
    Lamb,
    Momentum,
    Parameter,
    ProximalAdagrad,
    RMSProp,
)
from optkernels.sparse import RowSparse


def test_published_get_lr_parameter_example():
    example = json.loads(EXAMPLES_FILE.read_text())["optimizer_api"][0]
    assert example["api"] == "Optimizer.get_lr_parameter"
    conv_params = [
        Parameter(np.ones((4, 16, 3, 3), np.float32), "conv1.weight"),
        Parameter(np.ones((8, 4, 3, 3), np.float32), "conv2.weight"),
    ]
    no_conv_params = [
        Parameter(np.ones((10, 8), np.float32), "fc.weight"),
        Parameter(np.ones(10, np.float32), "fc.bias"),
    ]
    opt = Momentum(
        [{"params": conv_params, "lr": 0.05}, {"params": no_conv_params, "lr": 0.01}],
        learning_rate=0.1,
        momentum=0.9,
        weight_decay=0.0,
    )
    lr = opt.get_lr_parameter(conv_params)[0]
    assert isinstance(lr, Parameter)
    assert float(np.asarray(lr)) == example["expected"]
    assert float(np.asarray(opt.get_lr_parameter(no_conv_params[1]))) == 0.01
    assert opt.get_lr() == (0.05, 0.05, 0.01, 0.01)


def test_get_lr_parameter_returns_the_table_or_the_schedule():
    a, b, c = (Parameter(np.ones(3), n) for n in "abc")
    schedule = Halving(0.1)
    opt = Momentum(
        [{"params": [a], "lr": [0.3, 0.2]}, {"params": [b], "lr": schedule}, {"params": [c]}],
        learning_rate=0.1,
        momentum=0.9,
    )
    table, sched, fixed = opt.get_lr_parameter([a, b, c])
    assert np.array_equal(table.data, [0.3, 0.2]) and table.name == "learning_rate_group_0"
    assert sched is schedule
    assert float(fixed.data) == 0.1 and fixed.name == "learning_rate"
    assert opt.learning_rate == (table, sched, fixed)


def test_changing_the_lr_parameter_changes_the_next_step():
    w = Parameter(np.zeros(3), "w")
    opt = Momentum([w], 0.1, 0.0)
    opt((np.ones(3),))
    assert np.array_equal(w.data, [-0.1] * 3)
    opt.get_lr_parameter(w).data[...] = 0.5
    assert opt.get_lr() == 0.5
    opt((np.ones(3),))
    assert np.array_equal(w.data, np.full(3, -0.1 - 0.5))


def test_table_lr_past_the_end_is_zero():
    w = Parameter(np.zeros(2), "w")
    opt = Momentum([w], [0.5, 0.25], 0.0)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            seen.append(opt.get_lr())
            opt((np.ones(2),))
    assert seen == [0.5, 0.25, 0.0, 0.0]
    assert np.array_equal(w.data, [-0.75, -0.75])  # the last two steps moved nothing
    assert opt.global_step == 4
    assert sum("past the end" in str(x.message) for x in caught) == 1  # warned once


@pytest.mark.parametrize(
    "make, counts",
    [
        (lambda p: Momentum(p, 0.1, 0.9), False),
        (lambda p: Momentum(p, np.array(0.1), 0.9), False),
        (lambda p: Momentum(p, [0.1, 0.2, 0.3], 0.9), True),
        (lambda p: Momentum(p, np.array([0.1, 0.2, 0.3]), 0.9), True),
        (lambda p: Momentum(p, Halving(0.1), 0.9), True),
        (lambda p: Momentum(p, 0.1, 0.9, weight_decay=lambda t: 0.01), True),
        (lambda p: Momentum([{"params": p, "weight_decay": lambda t: 0.01}], 0.1, 0.9), True),
        (lambda p: Lamb(p, 0.1), True),
        (lambda p: Adam(p), False),
    ],
)
def test_global_step_counts_only_with_dynamic_lr_or_weight_decay(make, counts):
    opt = make([Parameter(np.ones(2), "w")])
    for _ in range(3):
        opt((np.ones(2),))
    assert opt.global_step == (3 if counts else 0)


def test_schedule_sees_the_step_before_the_increment():
    seen = []

    class Spy(Halving):
        def __call__(self, step):
            seen.append(int(step))
            return 0.1

    opt = Momentum([Parameter(np.ones(2), "w")], Spy(0.1), 0.9)
    seen.clear()
    for _ in range(3):
        opt((np.ones(2),))
    assert seen == [0, 1, 2]


def test_dynamic_weight_decay_is_evaluated_at_the_step_and_scaled():
    w = Parameter(np.full(2, 2.0), "w")
    opt = Momentum([w], 0.5, 0.0, weight_decay=lambda t: 0.1 * (t + 1), loss_scale=4.0)
    assert opt.get_weight_decay() == pytest.approx(0.1 * 4.0)
    opt((np.zeros(2),))  # g = 2·0.1 = 0.2 → w = 2 − 0.5·0.2
    assert np.allclose(w.data, 1.9, rtol=0, atol=1e-15)
    assert opt.get_weight_decay() == pytest.approx(0.2 * 4.0)


def test_slot_initial_values_and_names():
    p = [Parameter(np.zeros((2, 2), np.float32), "w")]
    assert np.all(RMSProp(p).mean_square[0].data == 1.0)
    assert np.all(RMSProp(p, centered=True).mean_grad[0].data == 0.0)
    sgd = SGD(p, momentum=0.9)
    assert np.all(sgd.stat[0].data == 1.0) and np.all(sgd.accum[0].data == 0.0)
    assert np.all(Adagrad(p, accum=0.3).accum[0].data == np.float32(0.3))
    assert np.all(ProximalAdagrad(p, accum=0.2).accum[0].data == np.float32(0.2))
    ftrl = FTRL(p, initial_accum=0.4)
    assert np.all(ftrl.moments[0].data == np.float32(0.4)) and np.all(ftrl.linear[0].data == 0.0)
    adam = Adam(p, use_amsgrad=True)
    assert adam.moment1[0].name == "moment1.w" and adam.vhat[0].data.dtype == np.float32
    assert adam.beta1_power == 1.0 and adam.beta2_power == 1.0


def test_beta_powers_advance_before_the_update_and_follow_the_dtype():
    p32 = [Parameter(np.zeros(2, np.float32), "w")]
    opt = Adam(p32, beta1=0.9, beta2=0.999)
    opt((np.ones(2, np.float32),))
    opt((np.ones(2, np.float32),))
    b1 = np.float32(0.9)
    assert opt.state_dict()["beta1_power"] == np.float32(b1 * b1)
    assert opt.state_dict()["beta1_power"].dtype == np.float32
    p64 = [Parameter(np.zeros(2), "w")]
    opt = AdaMax(p64, beta1=0.9)
    opt((np.ones(2),))
    opt((np.ones(2),))
    assert opt.beta1_power == 0.9 * 0.9
    mixed = Adam([Parameter(np.zeros(2), "a"), Parameter(np.zeros(2, np.float32), "b")])
    assert mixed.state_dict()["beta1_power"].dtype == np.float32


def test_gradients_are_not_modified():
    w = Parameter(np.ones((3, 16)), "w")
    g = np.full((3, 16), 0.5)
    g[0, 0] = 3.0
    copy = g.copy()
    opt = Adam([{"params": [w], "weight_decay": 0.1, "grad_centralization": True}], loss_scale=8.0)
    opt((g,))
    assert np.array_equal(g, copy)


def test_centralization_only_where_shape1_is_a_multiple_of_16():
    """(3, 16) is centralized, (16, 3) is not (MindSpore's real filter), grouped only."""
    a, b = Parameter(np.zeros((3, 16)), "a"), Parameter(np.zeros((16, 3)), "b")
    opt = SGD([{"params": [a, b], "grad_centralization": True}], learning_rate=1.0)
    ga, gb = np.arange(48.0).reshape(3, 16), np.arange(48.0).reshape(16, 3)
    opt((ga, gb))
    assert np.array_equal(a.data, -(ga - ga.mean(axis=1, keepdims=True)))
    assert np.array_equal(b.data, -gb)
    c = Parameter(np.zeros((3, 16)), "c")
    SGD([c], learning_rate=1.0)((ga,))  # ungrouped: never centralized
    assert np.array_equal(c.data, -ga)


def test_default_decay_filter_ungrouped_and_group_rule():
    names = ["fc.weight", "bn.gamma", "bn.beta", "fc.bias"]
    ps = [Parameter(np.ones(2), n) for n in names]
    assert Momentum(ps, 0.1, 0.9, weight_decay=0.1).decay_flags == (True, False, False, True)
    assert FTRL(ps, weight_decay=0.1).decay_flags == (True, True, True, True)
    grouped = Momentum([{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:]}], 0.1, 0.9)
    assert grouped.decay_flags == (True, True, False, False)


# ----------------------------------------------------------------------------------------------- state


def _roundtrip(state):
    buffer = io.BytesIO()
    np.savez(buffer, **state)
    buffer.seek(0)
    return np.load(buffer)


@pytest.mark.parametrize("info", OPTIMIZERS, ids=lambda i: i.id)
def test_resume_from_saved_state_is_bit_identical(info):
    dtype = np.float32
    sc = scenario(info, "groups", dtype)
    init, grads = make_data(dtype, seed=3, steps=4)
    names = [n for n, _ in sorted(init.items(), key=lambda kv: 0)]
    order = [list(init)[i] for i in sc.order]

    def feed(opt, step_grads):
        opt(tuple(step_grads[n] * np.asarray(sc.loss_scale, dtype) for n in order))

    straight = make_params(init)
    opt = sc.build(straight)
    for g in grads:
        feed(opt, g)
    first = make_params(init)
    opt1 = sc.build(first)
    for g in grads[:2]:
        feed(opt1, g)
    saved = _roundtrip(opt1.state_dict())
    resumed = make_params({p.name: p.data.copy() for p in first})
    opt2 = sc.build(resumed)
    opt2.load_state_dict(saved)
    assert opt2.global_step == opt1.global_step
    for g in grads[2:]:
        feed(opt2, g)
    for p, q in zip(straight, resumed):
        assert np.array_equal(p.data, q.data), p.name
    final, again = opt.state_dict(), opt2.state_dict()
    assert final.keys() == again.keys() and names
    for k in final:
        assert np.array_equal(final[k], again[k]), k


def test_state_dict_is_keyed_by_name_not_position():
    a, b = Parameter(np.ones(2), "a"), Parameter(np.ones(3), "b")
    opt = Adam([a, b])
    opt((np.ones(2), np.full(3, 2.0)))
    state = opt.state_dict()
    assert set(state) == {
        "global_step",
        "beta1_power",
        "beta2_power",
        "moment1.a",
        "moment1.b",
        "moment2.a",
        "moment2.b",
    }
    other = Adam([Parameter(np.ones(3), "b"), Parameter(np.ones(2), "a")])
    other.load_state_dict(state)
    assert np.array_equal(other.moment1[0].data, state["moment1.b"])
    assert np.array_equal(other.moment1[1].data, state["moment1.a"])
    state["moment1.a"][...] = 7.0  # the state dict holds copies
    assert not np.any(opt.moment1[0].data == 7.0)


def test_load_state_dict_errors_write_nothing():
    opt = Adam([Parameter(np.ones(2), "a"), Parameter(np.ones(3), "b")])
    opt((np.ones(2), np.ones(3)))
    good = opt.state_dict()
    target = Adam([Parameter(np.ones(2), "a"), Parameter(np.ones(3), "b")])
    before = target.state_dict()

    def check(bad, exc, match):
        with pytest.raises(exc, match=match):
            target.load_state_dict(bad)
        now = target.state_dict()
        assert all(np.array_equal(now[k], before[k]) for k in before)

    check({k: v for k, v in good.items() if k != "moment2.b"}, KeyError, "moment2.b.*parameter 'b'")
    check(dict(good, **{"moment1.c": np.ones(2)}), KeyError, "moment1.c")
    check(dict(good, **{"moment1.b": np.ones(4)}), ValueError, "moment1.b.*shape")
    check(dict(good, **{"moment1.a": np.ones(2, np.float32)}), TypeError, "moment1.a.*dtype")
    check(dict(good, global_step=np.array(-1)), ValueError, "global_step")
    check(dict(good, beta1_power=np.ones(2)), ValueError, "beta1_power")
    check([1, 2], TypeError, "mapping")
    renamed = Adam([Parameter(np.ones(2), "x"), Parameter(np.ones(3), "b")])
    with pytest.raises(KeyError, match="parameter 'x'"):
        renamed.load_state_dict(good)


# ----------------------------------------------------------------------------------------------- Adam family


def test_adam_offload_is_close_to_adam_with_numpy_parameters():
    init, grads = make_data(np.float64, seed=5, steps=6)
    runs = []
    for cls in (Adam, AdamOffload):
        ps = make_params(init)
        opt = cls(ps, learning_rate=0.01, weight_decay=0.01, loss_scale=2.0)
        for g in grads:
            opt(tuple(g[p.name] * 2.0 for p in ps))
        runs.append({p.name: p.data for p in ps})
    for name in init:
        # the two moment forms differ by rounding only
        np.testing.assert_allclose(runs[1][name], runs[0][name], rtol=1e-13, atol=1e-13)
        assert not np.array_equal(runs[0][name], init[name])


def test_sparse_gradient_is_refused_by_dense_only_optimizers():
    grad = RowSparse(np.array([0]), np.ones((1, 2)), (3, 2))
    for opt in (
        Momentum([Parameter(np.ones((3, 2)), "w")], 0.1, 0.9),
        Adam([Parameter(np.ones((3, 2)), "w")], use_amsgrad=True),
        AdamOffload([Parameter(np.ones((3, 2)), "w")]),
    ):
        with pytest.raises(TypeError, match="row-sparse"):
            opt((grad,))


# ----------------------------------------------------------------------------------------------- LARS


def test_lars_trajectory_matches_reference():
    rng = np.random.default_rng(7)
    shapes = {"fc.weight": (3, 4), "fc.bias": (3,), "LayerNorm.gamma": (4,), "out.weight": (2, 3)}
    init = {n: rng.standard_normal(s) for n, s in shapes.items()}
    grads = [{n: rng.standard_normal(s) for n, s in shapes.items()} for _ in range(4)]
    ps = make_params(init)
    inner = Momentum(ps, learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=4.0)
    opt = LARS(inner, epsilon=1e-5, coefficient=0.01)
    for g in grads:
        assert opt(tuple(g[n] * 4.0 for n in shapes)) is True
    w = {n: v.copy() for n, v in init.items()}
    moments = {n: np.zeros(s) for n, s in shapes.items()}
    for g in grads:
        for n in shapes:
            gn = g[n] * 4.0 * 0.25
            if "bias" not in n and "LayerNorm" not in n:
                wd = 0.01 if "gamma" not in n else 0.0
                (gn,) = R.lars_update(
                    w[n], gn, np.sum(w[n] ** 2), np.sum(gn**2), wd, 0.0, epsilon=1e-5, hyperpara=0.01
                )
            w[n], moments[n] = R.apply_momentum(w[n], moments[n], 0.1, gn, 0.9)
    for p in ps:
        assert_close(p.data, w[p.name], np.float64, 0, p.name, before=init[p.name])
    assert inner.decay_flags == (False,) * 4 and not inner.need_scale
    assert opt.state_dict().keys() == inner.state_dict().keys()


def test_lars_clip_uses_the_inner_learning_rate_and_counts_dynamic_decay():
    init = {"w": np.linspace(-1, 1, 6).reshape(2, 3)}
    ps = make_params(init)
    inner = Momentum(ps, learning_rate=0.5, momentum=0.0, weight_decay=lambda t: 0.1 * (t + 1))
    opt = LARS(inner, coefficient=0.9, use_clip=True)
    g = np.full((2, 3), 0.3)
    opt((g,))
    assert opt.global_step == 1
    (expected,) = R.lars_update(
        init["w"],
        g,
        np.sum(init["w"] ** 2),
        np.sum(g**2),
        0.1,
        0.5,
        epsilon=1e-5,
        hyperpara=0.9,
        use_clip=True,
    )
    assert_close(ps[0].data, init["w"] - 0.5 * expected, np.float64, 0, "w", before=init["w"])


def test_mindspore_pipeline_methods():
    a, b = Parameter(np.full((2, 16), 2.0), "conv.weight"), Parameter(np.full(3, 2.0), "bn.gamma")
    ga, gb = np.arange(32.0).reshape(2, 16), np.ones(3)
    opt = Momentum([{"params": [a], "weight_decay": 0.1, "grad_centralization": True}, {"params": [b]}], 0.1,
                   0.9, loss_scale=4.0)
    da, db = opt.decay_weight((ga, gb))
    np.testing.assert_array_equal(da, ga + 2.0 * (0.1 * 4.0))
    assert db is gb
    ca, cb = opt.gradients_centralization((ga, gb))
    np.testing.assert_array_equal(ca, ga - ga.mean(axis=1, keepdims=True))
    assert cb is gb
    sa, sb = opt.scale_grad((ga, gb))
    np.testing.assert_array_equal(sa, ga * 0.25)
    np.testing.assert_array_equal(sb, gb * 0.25)
    assert opt.flatten_gradients((ga, gb)) == (ga, gb) and opt.broadcast_params(True) is True
    ungrouped = Momentum([a, b], 0.1, 0.9, weight_decay=0.1)
    da, db = ungrouped.decay_weight((ga, gb))
    np.testing.assert_array_equal(da, ga + 2.0 * 0.1)
    assert db is gb                                   # 'gamma': not decayed by the default filter
    assert ungrouped.gradients_centralization((ga, gb))[0] is ga   # ungrouped: never centralized


def test_parameter_is_the_array_updated_in_place():
    data = np.ones((2, 2), np.float32)
    p = Parameter(data, "w")
    assert p.data is data and np.asarray(p) is data and p.unique is False and p.requires_grad
    Momentum([p], 0.5, 0.0)((np.ones((2, 2), np.float32),))
    assert np.all(data == 0.5)
    p.set_data(np.zeros((2, 2)))
    assert p.data is data and np.all(data == 0.0) and data.dtype == np.float32
    assert Parameter([1.0, 2.0], "v").dtype == np.float64


def test_a_fixed_rate_set_to_a_bad_value_raises_before_anything_is_written():
    p = Parameter(np.ones(3), "w")
    opt = Lamb([p], 0.1)
    opt.get_lr_parameter(p).data[...] = -1.0
    with pytest.raises(ValueError, match="learning rate learning_rate holds -1.0"):
        opt((np.ones(3),))
    assert np.all(p.data == 1.0) and opt.global_step == 0
