"""The optimizers with the loss-scale managers (loss_scaled_step) and with the real lr schedules and lists."""

import numpy as np
import pytest

from optim_table import OPTIMIZERS_BY_ID, make_data, make_params
from optkernels.optimizers import (
    Adam,
    CosineDecayLR,
    DynamicLossScaleManager,
    FixedLossScaleManager,
    Momentum,
    RMSProp,
    loss_scaled_step,
    piecewise_constant_lr,
    polynomial_decay_lr,
)


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (Adam, dict(learning_rate=[0.01, 0.02, 0.03], weight_decay=0.01)),
        (Momentum, dict(learning_rate=0.1, momentum=0.9)),
        (RMSProp, dict(centered=True, weight_decay=lambda t: 0.01)),
    ],
)
def test_overflowing_step_changes_nothing_and_lowers_the_scale(cls, kwargs):
    init, grads = make_data(np.float32, seed=11, steps=3)
    params = make_params(init)
    opt = cls(params, **kwargs)
    manager = DynamicLossScaleManager(init_loss_scale=2.0**10, scale_factor=2, scale_window=1000)
    scale = manager.get_loss_scale()
    applied, scale = loss_scaled_step(opt, tuple(g * np.float32(scale) for g in grads[0].values()), manager)
    assert applied and scale == 2.0**10
    values = {p.name: p.data.copy() for p in params}
    state, step = opt.state_dict(), opt.global_step
    overflowing = [g * np.float32(scale) for g in grads[1].values()]
    overflowing[2] = overflowing[2].copy()
    overflowing[2][0] = np.inf
    applied, new_scale = loss_scaled_step(opt, tuple(overflowing), manager)
    assert not applied and new_scale == 2.0**9
    for p in params:
        assert np.array_equal(p.data, values[p.name]), p.name
    after = opt.state_dict()
    for key, value in state.items():
        assert np.array_equal(after[key], value), key
    assert opt.global_step == step
    applied, _ = loss_scaled_step(opt, tuple(g * np.float32(new_scale) for g in grads[2].values()), manager)
    assert applied and not all(np.array_equal(p.data, values[p.name]) for p in params)


@pytest.mark.parametrize("info_id", ["Adam", "Momentum", "SGD", "FTRL", "AdaMax"])
def test_fixed_manager_without_drop_equals_unscaled_training(info_id):
    """FixedLossScaleManager(drop_overflow_update=False): the optimizer gets scaled gradients and its own
    loss_scale divides them out; with a power-of-two scale that is bit-identical to unscaled training (the
    decay is pre-multiplied by the scale, §1.4)."""
    info = OPTIMIZERS_BY_ID[info_id]
    init, grads = make_data(np.float32, seed=12, steps=3)
    scaled_params, plain_params = make_params(init), make_params(init)
    lr = {"learning_rate": info.learning_rate}
    scaled = info.cls(scaled_params, weight_decay=0.01, loss_scale=128.0, **lr, **info.kwargs)
    plain = info.cls(plain_params, weight_decay=0.01, **lr, **info.kwargs)
    manager = FixedLossScaleManager(128.0, drop_overflow_update=False)
    for g in grads:
        applied, scale = loss_scaled_step(scaled, tuple(x * np.float32(128.0) for x in g.values()), manager)
        assert applied and scale == 128.0
        plain(tuple(g.values()))
    for p, q in zip(scaled_params, plain_params):
        assert np.array_equal(p.data, q.data), p.name
        assert not np.array_equal(p.data, init[p.name])


def test_real_schedule_and_lr_list_feed_the_steps():
    schedule = CosineDecayLR(0.01, 0.1, 4)
    w = [make_params({"w": np.zeros(3)})[0]]
    opt = Momentum(w, schedule, 0.0)
    seen = []
    for _ in range(6):
        seen.append(opt.get_lr())
        opt((np.ones(3),))
    assert seen == [schedule(t) for t in range(6)]
    assert np.isclose(w[0].data[0], -sum(seen), rtol=0, atol=1e-15)
    table = piecewise_constant_lr([2, 4], [0.1, 0.05])
    opt = Momentum(w, table, 0.0)
    assert [opt.get_lr() for _ in range(1)] == [0.1]
    lrs = []
    for _ in range(5):
        lrs.append(opt.get_lr())
        opt((np.ones(3),))
    assert lrs == [0.1, 0.1, 0.05, 0.05, 0.0]
    poly = polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5)
    assert Momentum(w, poly, 0.9).get_lr_parameter(w[0]).data.tolist() == poly
