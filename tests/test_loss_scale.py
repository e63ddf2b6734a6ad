"""Loss scaling: manager and scaler trajectories against hand-computed scales; all_finite; the step."""
import copy
import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from optkernels.optimizers.loss_scale import (
    DynamicLossScaleManager,
    DynamicLossScaler,
    FixedLossScaleManager,
    all_finite,
    loss_scaled_step,
)

# ---------------------------------------------------------------------------------------------------------
# FixedLossScaleManager


def test_fixed_defaults_and_constant_scale():
    manager = FixedLossScaleManager()
    assert manager.get_loss_scale() == 128.0 and manager.get_drop_overflow_update() is True
    for overflow in (True, False, True, True, False):
        manager.update_loss_scale(overflow)
        assert manager.get_loss_scale() == 128.0
    assert FixedLossScaleManager(1024, False).get_drop_overflow_update() is False
    assert FixedLossScaleManager(1).get_loss_scale() == 1.0


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(loss_scale=0.5), ValueError, "loss_scale"),
    (dict(loss_scale=0), ValueError, "loss_scale"),
    (dict(loss_scale=np.nan), ValueError, "loss_scale"),
    (dict(loss_scale=np.inf), ValueError, "loss_scale"),
    (dict(loss_scale=True), TypeError, "loss_scale"),
    (dict(loss_scale="128"), TypeError, "loss_scale"),
    (dict(loss_scale=None), TypeError, "loss_scale"),
    (dict(drop_overflow_update=1), TypeError, "drop_overflow_update"),
])
def test_fixed_bad_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=re.escape(f"'{name}'")):
        FixedLossScaleManager(**kwargs)


# ---------------------------------------------------------------------------------------------------------
# DynamicLossScaleManager

def test_dynamic_defaults():
    manager = DynamicLossScaleManager()
    assert manager.get_loss_scale() == 2.0 ** 24
    assert manager.scale_factor == 2 and manager.scale_window == 2000
    assert manager.get_drop_overflow_update() is True


def test_dynamic_manager_trajectory_by_hand():
    # init 16, factor 2, window 3. Rule: overflow -> halve (min 1); the scale doubles after every 3
    # consecutive clean steps counted from the last overflow (or the start).
    manager = DynamicLossScaleManager(16, 2, 3)
    F, T = False, True
    flags = [F, F, F, T, F, F, F, T, T, F, F, F, F, F, F]
    expected = [16, 16, 32, 16, 16, 16, 32, 16, 8, 8, 8, 16, 16, 16, 32]
    got = []
    for overflow in flags:
        manager.update_loss_scale(overflow)
        got.append(manager.get_loss_scale())
    assert got == expected
    assert manager.cur_iter == 16 and manager.last_overflow_iter == 9


def test_dynamic_manager_window_one_doubles_every_clean_step_and_floors_at_one():
    manager = DynamicLossScaleManager(4, 2, 1)
    got = []
    for overflow in [False, False, True, True, True, True, True, False]:
        manager.update_loss_scale(overflow)
        got.append(manager.get_loss_scale())
    assert got == [8, 16, 8, 4, 2, 1, 1, 2]


def test_dynamic_manager_non_power_of_two_factor():
    manager = DynamicLossScaleManager(9.0, 3, 2)
    manager.update_loss_scale(True)
    assert manager.get_loss_scale() == 9.0 * (1 / 3)  # MindSpore multiplies by the reciprocal
    manager.update_loss_scale(False)
    manager.update_loss_scale(False)
    assert manager.get_loss_scale() == 9.0 * (1 / 3) * 3


def _model_scales(init, factor, window, flags):
    """The rule as a plain run counter (not the modular form the implementation uses)."""
    scale, clean_run, out = float(init), 0, []
    for overflow in flags:
        if overflow:
            scale, clean_run = max(scale / factor, 1.0), 0
        else:
            clean_run += 1
            if clean_run == window:
                scale, clean_run = scale * factor, 0
        out.append(scale)
    return out


@given(st.integers(0, 30), st.integers(1, 6), st.lists(st.booleans(), max_size=60))
def test_dynamic_manager_matches_run_counter_model(log2_init, window, flags):
    init = 2 ** log2_init
    manager = DynamicLossScaleManager(init, 2, window)
    got = []
    for overflow in flags:
        manager.update_loss_scale(overflow)
        got.append(manager.get_loss_scale())
    assert got == _model_scales(init, 2, window, flags)


def test_dynamic_manager_raises_after_1000_consecutive_overflows():
    manager = DynamicLossScaleManager(2 ** 10, 2, 5)
    for _ in range(1000):
        manager.update_loss_scale(True)
    assert manager.get_loss_scale() == 1.0 and manager.bad_step == 1000
    manager.update_loss_scale(False)  # a clean step resets the count
    for _ in range(1000):
        manager.update_loss_scale(True)
    with pytest.raises(RuntimeError, match="1001"):
        manager.update_loss_scale(True)


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(init_loss_scale=0.5), ValueError, "init_loss_scale"),
    (dict(init_loss_scale=True), TypeError, "init_loss_scale"),
    (dict(init_loss_scale="big"), TypeError, "init_loss_scale"),
    (dict(init_loss_scale=np.inf), ValueError, "init_loss_scale"),
    (dict(scale_window=0), ValueError, "scale_window"),
    (dict(scale_window=-5), ValueError, "scale_window"),
    (dict(scale_window=20.0), TypeError, "scale_window"),
    (dict(scale_window=True), TypeError, "scale_window"),
    (dict(scale_factor=0), ValueError, "scale_factor"),
    (dict(scale_factor=-2), ValueError, "scale_factor"),
    (dict(scale_factor=False), TypeError, "scale_factor"),
    (dict(scale_factor="2"), TypeError, "scale_factor"),
])
def test_dynamic_manager_bad_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=re.escape(f"'{name}'")):
        DynamicLossScaleManager(**kwargs)


@pytest.mark.parametrize("manager", [DynamicLossScaleManager(8, 2, 2), FixedLossScaleManager()],
                         ids=lambda m: type(m).__name__)
def test_update_loss_scale_flag_types(manager):
    manager.update_loss_scale(np.bool_(True))
    manager.update_loss_scale(np.array(False))
    manager.update_loss_scale(np.array([True]))
    for bad in (1, None, "yes", np.array([True, False]), np.array(1)):
        with pytest.raises(TypeError, match="'overflow'"):
            manager.update_loss_scale(bad)


# ---------------------------------------------------------------------------------------------------------
# DynamicLossScaler (mindspore.amp)

def test_scaler_mindspore_docstring_example():
    # MindSpore's amp.DynamicLossScaler docstring: scale 2**10, factor 2, window 1, a NaN gradient -> 512.
    scaler = DynamicLossScaler(scale_value=2 ** 10, scale_factor=2, scale_window=1)
    grads = (np.array([np.nan, 1.0], np.float16), np.array([0.2], np.float16))
    unscaled = scaler.unscale(grads)
    finite = all_finite(unscaled)
    assert finite is False
    assert scaler.adjust(finite) is True
    assert scaler.scale_value == 512.0


def test_scaler_trajectory_and_counter_by_hand():
    scaler = DynamicLossScaler(8, 2, 2)
    finite_flags = [True, True, True, False, True, True, True]
    expected_scales = [8, 16, 16, 8, 8, 16, 16]
    expected_counters = [1, 0, 1, 0, 1, 0, 1]
    got = []
    for finite in finite_flags:
        scaler.adjust(finite)
        got.append((scaler.scale_value, scaler.counter))
    assert got == list(zip(expected_scales, expected_counters))


def test_scaler_floor_and_float32_ceiling():
    scaler = DynamicLossScaler(3, 2, 1)
    scaler.adjust(False)
    assert scaler.scale_value == 1.5
    scaler.adjust(False)
    assert scaler.scale_value == 1.0
    top = DynamicLossScaler(2.0 ** 127, 2, 1)
    top.adjust(True)  # 2**128 is inf in float32: the scale stays
    assert top.scale_value == 2.0 ** 127 and top.counter == 0
    assert DynamicLossScaler(1000.1, 2, 1).scale_value == float(np.float32(1000.1))


@given(st.integers(0, 20), st.integers(1, 5), st.lists(st.booleans(), max_size=50))
def test_scaler_matches_run_counter_model(log2_init, window, finite_flags):
    scaler = DynamicLossScaler(2 ** log2_init, 2, window)
    got = []
    for finite in finite_flags:
        scaler.adjust(finite)
        got.append(scaler.scale_value)
    assert got == _model_scales(2 ** log2_init, 2, window, [not f for f in finite_flags])


@pytest.mark.parametrize("args, exc, name", [
    ((0.5, 2, 10), ValueError, "scale_value"),
    ((True, 2, 10), TypeError, "scale_value"),
    (("8", 2, 10), TypeError, "scale_value"),
    ((8, 2.0, 10), TypeError, "scale_factor"),
    ((8, 0, 10), ValueError, "scale_factor"),
    ((8, 2, 0), ValueError, "scale_window"),
    ((8, 2, 1.0), TypeError, "scale_window"),
])
def test_scaler_bad_arguments(args, exc, name):
    with pytest.raises(exc, match=re.escape(f"'{name}'")):
        DynamicLossScaler(*args)


def test_scaler_scale_and_unscale_return_new_arrays():
    scaler = DynamicLossScaler(1024, 2, 10)
    g32 = np.array([1.5, -3.0, 0.25], np.float32)
    g64 = np.array([[2.0, 7.0]], np.float64)
    scaled = scaler.scale((g32, [g64]))
    assert isinstance(scaled, tuple) and isinstance(scaled[1], list)
    assert scaled[0].dtype == np.float32 and scaled[1][0].dtype == np.float64
    assert np.array_equal(scaled[0], np.array([1536.0, -3072.0, 256.0], np.float32))
    assert np.array_equal(scaled[1][0], np.array([[2048.0, 7168.0]]))
    back = scaler.unscale(scaled)
    assert np.array_equal(back[0], g32) and np.array_equal(back[1][0], g64)
    assert np.array_equal(g32, [1.5, -3.0, 0.25])  # inputs untouched
    single = scaler.unscale(g32)
    assert single is not g32 and np.array_equal(single, g32 / np.float32(1024))
    odd = DynamicLossScaler(3, 2, 10).unscale(np.array([1.0], np.float32))
    assert odd[0] == np.float32(1.0) / np.float32(3.0)


def test_scaler_unscale_float16_by_a_large_scale():
    # 2**24 is inf in float16; the division goes through float32 (MindSpore: times the float32 reciprocal).
    out = DynamicLossScaler(2 ** 24, 2, 10).unscale(np.array([2048.0], np.float16))
    assert out.dtype == np.float16 and out[0] == np.float16(2.0 ** -13)


def test_scaler_rejects_non_float_arrays():
    scaler = DynamicLossScaler(8, 2, 2)
    with pytest.raises(TypeError, match=re.escape("inputs[1]")):
        scaler.scale((np.ones(2), np.ones(2, np.int32)))
    with pytest.raises(TypeError, match="inputs"):
        scaler.unscale(3.0)
    with pytest.raises(TypeError, match="'grads_finite'"):
        scaler.adjust(1)


# ---------------------------------------------------------------------------------------------------------
# all_finite

@dataclasses.dataclass
class RowSparse:
    indices: np.ndarray
    values: np.ndarray
    dense_shape: tuple


class RowSparsePlain:
    def __init__(self, indices, values, dense_shape):
        self.indices, self.values, self.dense_shape = indices, values, dense_shape


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_detects_each_non_finite_value(dtype, bad):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    assert all_finite(x) is True
    x[2, 1] = bad
    assert all_finite(x) is False
    assert all_finite((np.ones(3, dtype), x)) is False
    assert all_finite([np.ones(3, dtype), [np.zeros(2, dtype), x]]) is False
    assert all_finite((np.ones(3, dtype), np.ones((2, 2), dtype))) is True


def test_all_finite_inputs_forms():
    assert all_finite(()) is True
    assert all_finite(np.zeros((0,), np.float32)) is True
    assert all_finite(np.array([1, 2], np.int64)) is True
    assert all_finite(np.array([True])) is True
    assert all_finite(3.0) is True
    assert all_finite(float("nan")) is False and all_finite(np.float32("inf")) is False
    assert all_finite(10 ** 400) is True
    assert all_finite(np.array([1 + 2j])) is True and all_finite(np.array([complex(1, np.inf)])) is False
    finite_sparse = RowSparse(np.array([0, 2]), np.ones((2, 3), np.float32), (4, 3))
    bad_sparse = RowSparsePlain(np.array([1]), np.array([[np.nan, 1.0]]), (3, 2))
    assert all_finite(finite_sparse) is True
    assert all_finite(bad_sparse) is False
    assert all_finite([np.ones(2), finite_sparse]) is True
    assert all_finite([np.ones(2), bad_sparse]) is False


def test_all_finite_rejects_other_types():
    with pytest.raises(TypeError, match=re.escape("inputs[1]")):
        all_finite((np.ones(2), "x"))
    with pytest.raises(TypeError, match="inputs"):
        all_finite(np.array(["a"]))
    with pytest.raises(TypeError, match="inputs"):
        all_finite({"a": np.ones(2)})


# ---------------------------------------------------------------------------------------------------------
# loss_scaled_step

class RecordingOptimizer:
    """Records deep copies of the gradients it is called with, and applies plain SGD to its parameters."""

    def __init__(self, params, lr=0.5, loss_scale=None):
        self.params = params
        self.lr = lr
        self.calls = []
        if loss_scale is not None:
            self.loss_scale = loss_scale

    def __call__(self, gradients):
        self.calls.append(copy.deepcopy(gradients))
        for p, g in zip(self.params, gradients):
            if isinstance(g, np.ndarray):
                p -= self.lr * g
            else:
                p[g.indices] -= self.lr * g.values


def _grads(scale, dtype=np.float32):
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((4, 3)) * scale).astype(dtype),
            (rng.standard_normal(5) * scale).astype(dtype)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1024.0, 3.0, 1.0])
def test_clean_step_calls_optimizer_with_exactly_g_over_scale(dtype, scale):
    grads = _grads(scale, dtype)
    before = [g.copy() for g in grads]
    opt = RecordingOptimizer([np.zeros((4, 3), dtype), np.zeros(5, dtype)])
    applied, new_scale = loss_scaled_step(opt, grads, FixedLossScaleManager(scale))
    assert applied is True and new_scale == scale
    assert len(opt.calls) == 1
    (got,) = opt.calls
    assert isinstance(got, list) and len(got) == 2
    for g, b in zip(got, before):
        assert g.dtype == dtype
        assert np.array_equal(g, b / dtype(scale))  # bit for bit: a true division in the gradient's dtype
    for g, b in zip(grads, before):
        assert np.array_equal(g, b)  # the caller's arrays are not modified


def test_overflow_skips_the_optimizer_and_leaves_parameters_bit_identical():
    params = [np.full((4, 3), 0.1, np.float32), np.full(5, -0.3, np.float32)]
    snapshot = [p.copy() for p in params]
    opt = RecordingOptimizer(params)
    manager = DynamicLossScaleManager(2 ** 16, 2, 100)
    for bad in (np.nan, np.inf, -np.inf):
        grads = _grads(2 ** 16)
        grads[1][3] = bad
        applied, scale = loss_scaled_step(opt, grads, manager)
        assert applied is False
        assert opt.calls == []
        assert all(np.array_equal(p, s) for p, s in zip(params, snapshot))
    assert scale == 2.0 ** 13 == manager.get_loss_scale()


def test_overflow_from_an_inf_produced_before_unscaling_is_skipped_with_fixed_manager():
    opt = RecordingOptimizer([np.zeros(2)])
    manager = FixedLossScaleManager(128.0)
    applied, scale = loss_scaled_step(opt, (np.array([np.inf, 1.0]),), manager)
    assert (applied, scale, opt.calls) == (False, 128.0, [])


def test_training_loop_trajectory_with_dynamic_manager():
    # window 2, init 8: pattern of overflows; the optimizer is called exactly on the clean steps.
    params = [np.zeros(3)]
    opt = RecordingOptimizer(params, lr=1.0)
    manager = DynamicLossScaleManager(8, 2, 2)
    overflow_pattern = [False, False, True, False, False, False, True, True]
    expected_scales = [8, 16, 8, 8, 16, 16, 8, 4]  # hand-computed from the rule
    scales, applied = [], []
    for overflow in overflow_pattern:
        scale = manager.get_loss_scale()
        g = np.array([1.0, 2.0, 3.0]) * scale
        if overflow:
            g[0] = np.inf
        ok, new = loss_scaled_step(opt, [g], manager)
        applied.append(ok)
        scales.append(new)
    assert scales == expected_scales
    assert applied == [not o for o in overflow_pattern]
    assert len(opt.calls) == overflow_pattern.count(False)
    for call in opt.calls:  # every applied step saw the unscaled gradient exactly
        assert np.array_equal(call[0], [1.0, 2.0, 3.0])
    assert np.array_equal(params[0], -5.0 * np.array([1.0, 2.0, 3.0]))


def test_dynamic_loss_scaler_drives_the_step():
    scaler = DynamicLossScaler(4, 2, 1)
    opt = RecordingOptimizer([np.zeros(2, np.float32)])
    applied, scale = loss_scaled_step(opt, (np.array([4.0, 8.0], np.float32),), scaler)
    assert (applied, scale) == (True, 8.0)
    assert isinstance(opt.calls[0], tuple) and np.array_equal(opt.calls[0][0], [1.0, 2.0])
    applied, scale = loss_scaled_step(opt, (np.array([np.nan, 8.0], np.float32),), scaler)
    assert (applied, scale, len(opt.calls)) == (False, 4.0, 1)


@pytest.mark.parametrize("sparse_type", [RowSparse, RowSparsePlain])
def test_row_sparse_gradients_are_unscaled_by_values(sparse_type):
    indices = np.array([0, 2])
    values = np.array([[512.0, -256.0], [128.0, 64.0]], np.float32)
    grad = sparse_type(indices, values, (3, 2))
    params = [np.zeros((3, 2), np.float32)]
    opt = RecordingOptimizer(params, lr=1.0)
    applied, _ = loss_scaled_step(opt, [grad], FixedLossScaleManager(256.0))
    assert applied
    sent = opt.calls[0][0]
    assert type(sent) is sparse_type
    assert np.array_equal(sent.indices, indices) and sent.dense_shape == (3, 2)
    assert np.array_equal(sent.values, values / np.float32(256.0))
    assert np.array_equal(grad.values, [[512.0, -256.0], [128.0, 64.0]])  # original untouched
    assert np.array_equal(params[0], [[-2.0, 1.0], [0.0, 0.0], [-0.5, -0.25]])
    grad.values[1, 1] = np.inf
    applied, _ = loss_scaled_step(opt, [grad], FixedLossScaleManager(256.0))
    assert not applied and len(opt.calls) == 1


def test_fixed_manager_without_drop_passes_scaled_gradients_unchecked():
    grads = [np.array([np.inf, 2.0])]
    opt = RecordingOptimizer([np.zeros(2)], loss_scale=64.0)
    applied, scale = loss_scaled_step(opt, grads, FixedLossScaleManager(64.0, drop_overflow_update=False))
    assert (applied, scale) == (True, 64.0)
    assert len(opt.calls) == 1 and np.array_equal(opt.calls[0][0], [np.inf, 2.0])


@pytest.mark.parametrize("manager, optimizer_scale", [
    (FixedLossScaleManager(64.0, drop_overflow_update=False), 1.0),
    (FixedLossScaleManager(64.0), 64.0),
    (DynamicLossScaleManager(), 1024.0),
])
def test_optimizer_loss_scale_must_fit_the_mode(manager, optimizer_scale):
    opt = RecordingOptimizer([np.zeros(2)], loss_scale=optimizer_scale)
    with pytest.raises(ValueError, match="loss_scale"):
        loss_scaled_step(opt, [np.ones(2)], manager)
    assert opt.calls == []


class OnlyValues:
    """Has ``.values`` but neither ``indices`` nor ``dense_shape``, and is no dataclass: cannot be rebuilt."""

    def __init__(self, values):
        self.values = values


def _state(manager):
    return dict(vars(manager))


@pytest.mark.parametrize("optimizer, grads, manager, exc, name", [
    (lambda g: None, [np.ones(2)], "manager", TypeError, "manager"),
    (lambda g: None, [np.ones(2)], FixedLossScaleManager, TypeError, "manager"),
    ("opt", [np.ones(2)], DynamicLossScaleManager(), TypeError, "optimizer"),
    (lambda g: None, [np.ones(2), np.ones(2, np.int64)], DynamicLossScaleManager(), TypeError,
     "scaled_gradients[1]"),
    (lambda g: None, [np.ones(2), [np.ones(2)]], DynamicLossScaleManager(), TypeError, "scaled_gradients[1]"),
    (lambda g: None, [np.ones(2), 1.0], DynamicLossScaleManager(), TypeError, "scaled_gradients[1]"),
    (lambda g: None, [RowSparse(np.array([0]), np.array([1]), (2,))], DynamicLossScaleManager(), TypeError,
     "scaled_gradients[0].values"),
    (lambda g: None, [OnlyValues(np.ones(2))], DynamicLossScaleManager(), TypeError, "scaled_gradients[0]"),
])
def test_loss_scaled_step_bad_input(optimizer, grads, manager, exc, name):
    state = _state(manager) if not isinstance(manager, (str, type)) else None
    with pytest.raises(exc, match=re.escape(name)):
        loss_scaled_step(optimizer, grads, manager)
    if state is not None:
        assert _state(manager) == state


def test_failing_optimizer_leaves_manager_untouched():
    manager = DynamicLossScaleManager(8, 2, 1)

    def broken(grads):
        raise RuntimeError("optimizer failed")

    with pytest.raises(RuntimeError, match="optimizer failed"):
        loss_scaled_step(broken, [np.ones(2)], manager)
    assert manager.get_loss_scale() == 8 and manager.cur_iter == 1


def test_values_only_dataclass_is_rebuilt_with_replace():
    grad_type = dataclasses.make_dataclass("ValuesOnly", ["values", ("tag", str, "x")])
    seen = []
    grads = [grad_type(np.array([4.0]), "kept")]
    applied, _ = loss_scaled_step(seen.append, grads, FixedLossScaleManager(2.0))
    assert applied and type(seen[0][0]) is grad_type
    assert seen[0][0].tag == "kept" and np.array_equal(seen[0][0].values, [2.0])


def test_single_array_gradient_keeps_its_form():
    seen = []
    applied, scale = loss_scaled_step(seen.append, np.array([6.0, 3.0]), FixedLossScaleManager(3.0))
    assert applied and isinstance(seen[0], np.ndarray) and np.array_equal(seen[0], [2.0, 1.0])
