"""Learning-rate schedules: published MindSpore examples, argument errors, float32 evaluation, properties."""
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from optkernels.conformance.examples import EXAMPLES_FILE
from optkernels.optimizers.schedules import (
    CosineDecayLR,
    ExponentialDecayLR,
    InverseDecayLR,
    LearningRateSchedule,
    NaturalExpDecayLR,
    PolynomialDecayLR,
    WarmUpLR,
)

CLASSES = {cls.__name__: cls for cls in (ExponentialDecayLR, NaturalExpDecayLR, InverseDecayLR, CosineDecayLR,
                                         PolynomialDecayLR, WarmUpLR)}
F32 = np.float32


def _published(key):
    if not EXAMPLES_FILE.is_file():
        return []
    return json.loads(EXAMPLES_FILE.read_text())[key]


SCHEDULE_EXAMPLES = _published("lr_schedules")


def ulp32(x):
    return float(np.spacing(F32(abs(x))))


def is_float32_value(x):
    return isinstance(x, float) and float(F32(x)) == x


# ---------------------------------------------------------------------------------------------------------
# Published examples: MindSpore printed 0-d float32 tensors; compare exactly after a float32 cast.

@pytest.mark.skipif(not SCHEDULE_EXAMPLES, reason=f"published examples not found at {EXAMPLES_FILE}")
@pytest.mark.parametrize("entry", SCHEDULE_EXAMPLES, ids=lambda e: e["cls"])
def test_published_example(entry):
    schedule = CLASSES[entry["cls"]](**entry["args"])
    lr = schedule(entry["global_step"])
    assert is_float32_value(lr), f"{lr!r} is not a float32 value widened to float"
    assert F32(lr) == F32(entry["expected"]), f"{entry['cls']}: {lr!r} != {entry['expected']}"


def test_all_six_published_examples_are_present():
    if not SCHEDULE_EXAMPLES:
        pytest.skip(f"published examples not found at {EXAMPLES_FILE}")
    assert sorted(e["cls"] for e in SCHEDULE_EXAMPLES) == sorted(CLASSES)


# ---------------------------------------------------------------------------------------------------------
# Argument errors: the type and the argument named in the message (MindSpore's validators).

DECAY = (ExponentialDecayLR, NaturalExpDecayLR, InverseDecayLR)
GOOD_DECAY = dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4, is_stair=False)

ERROR_CASES = []
for _cls in DECAY:
    ERROR_CASES += [
        (_cls, dict(GOOD_DECAY, learning_rate=1), TypeError, "learning_rate"),        # int is not a float
        (_cls, dict(GOOD_DECAY, learning_rate=True), TypeError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, learning_rate=F32(0.1)), TypeError, "learning_rate"),  # not a float
        (_cls, dict(GOOD_DECAY, learning_rate="0.1"), TypeError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, learning_rate=0.0), ValueError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, learning_rate=-0.1), ValueError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, learning_rate=math.nan), ValueError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, learning_rate=math.inf), ValueError, "learning_rate"),
        (_cls, dict(GOOD_DECAY, decay_rate=1), TypeError, "decay_rate"),
        (_cls, dict(GOOD_DECAY, decay_rate=0.0), ValueError, "decay_rate"),
        (_cls, dict(GOOD_DECAY, decay_steps=4.0), TypeError, "decay_steps"),
        (_cls, dict(GOOD_DECAY, decay_steps=True), TypeError, "decay_steps"),
        (_cls, dict(GOOD_DECAY, decay_steps=np.int64(4)), TypeError, "decay_steps"),
        (_cls, dict(GOOD_DECAY, decay_steps=0), ValueError, "decay_steps"),
        (_cls, dict(GOOD_DECAY, decay_steps=-3), ValueError, "decay_steps"),
        (_cls, dict(GOOD_DECAY, is_stair=1), TypeError, "is_stair"),
        (_cls, dict(GOOD_DECAY, is_stair=None), TypeError, "is_stair"),
    ]
GOOD_COS = dict(min_lr=0.01, max_lr=0.1, decay_steps=4)
GOOD_POLY = dict(learning_rate=0.1, end_learning_rate=0.01, decay_steps=4, power=0.5,
                 update_decay_steps=False)
ERROR_CASES += [
    (CosineDecayLR, dict(GOOD_COS, min_lr=0), TypeError, "min_lr"),
    (CosineDecayLR, dict(GOOD_COS, min_lr=-0.01), ValueError, "min_lr"),
    (CosineDecayLR, dict(GOOD_COS, max_lr=1), TypeError, "max_lr"),
    (CosineDecayLR, dict(GOOD_COS, max_lr=0.0), ValueError, "max_lr"),
    (CosineDecayLR, dict(GOOD_COS, max_lr=math.inf), ValueError, "max_lr"),
    (CosineDecayLR, dict(GOOD_COS, decay_steps=2.5), TypeError, "decay_steps"),
    (CosineDecayLR, dict(GOOD_COS, decay_steps=0), ValueError, "decay_steps"),
    (CosineDecayLR, dict(GOOD_COS, min_lr=0.1, max_lr=0.1), ValueError, "max_lr"),
    (CosineDecayLR, dict(GOOD_COS, min_lr=0.2, max_lr=0.1), ValueError, "min_lr"),
    (PolynomialDecayLR, dict(GOOD_POLY, learning_rate=1), TypeError, "learning_rate"),
    (PolynomialDecayLR, dict(GOOD_POLY, learning_rate=0.0), ValueError, "learning_rate"),
    (PolynomialDecayLR, dict(GOOD_POLY, end_learning_rate=0), TypeError, "end_learning_rate"),
    (PolynomialDecayLR, dict(GOOD_POLY, end_learning_rate=-0.5), ValueError, "end_learning_rate"),
    (PolynomialDecayLR, dict(GOOD_POLY, decay_steps=4.0), TypeError, "decay_steps"),
    (PolynomialDecayLR, dict(GOOD_POLY, decay_steps=0), ValueError, "decay_steps"),
    (PolynomialDecayLR, dict(GOOD_POLY, power=1), TypeError, "power"),
    (PolynomialDecayLR, dict(GOOD_POLY, power=0.0), ValueError, "power"),
    (PolynomialDecayLR, dict(GOOD_POLY, power=-2.0), ValueError, "power"),
    (PolynomialDecayLR, dict(GOOD_POLY, update_decay_steps="yes"), TypeError, "update_decay_steps"),
    (WarmUpLR, dict(learning_rate=1, warmup_steps=2), TypeError, "learning_rate"),
    (WarmUpLR, dict(learning_rate=-0.1, warmup_steps=2), ValueError, "learning_rate"),
    (WarmUpLR, dict(learning_rate=math.nan, warmup_steps=2), ValueError, "learning_rate"),
    (WarmUpLR, dict(learning_rate=0.1, warmup_steps=2.0), TypeError, "warmup_steps"),
    (WarmUpLR, dict(learning_rate=0.1, warmup_steps=0), ValueError, "warmup_steps"),
]


@pytest.mark.parametrize("cls, kwargs, exc, name", ERROR_CASES,
                         ids=[f"{c.__name__}-{n}-{e.__name__}-{i}"
                              for i, (c, _, e, n) in enumerate(ERROR_CASES)])
def test_bad_argument_raises_naming_it(cls, kwargs, exc, name):
    with pytest.raises(exc, match=re.escape(f"'{name}'")):
        cls(**kwargs)


def test_first_failing_argument_in_mindspore_order_is_reported():
    # MindSpore checks decay_steps first, then learning_rate, decay_rate, is_stair.
    with pytest.raises(TypeError, match="'decay_steps'"):
        ExponentialDecayLR(1, 1, 1.0, 1)
    with pytest.raises(TypeError, match="'learning_rate'"):
        InverseDecayLR(1, 1, 1, 1)


def test_accepted_edge_arguments():
    assert WarmUpLR(0.0, 3)(5) == 0.0                    # learning_rate may be 0 for WarmUpLR
    assert CosineDecayLR(0.0, 0.5, 3)(0) == 0.5          # min_lr may be 0
    assert PolynomialDecayLR(0.5, 0.0, 3, 1.0)(3) == 0.0  # end_learning_rate may be 0
    assert ExponentialDecayLR(np.float64(0.5), 0.5, 1)(1) == 0.25  # np.float64 is a float


@pytest.mark.parametrize("step", [3, np.int32(3), np.int64(3), np.uint8(3), np.array(3),
                                  np.array([3], np.int32)])
def test_global_step_forms(step):
    schedule = ExponentialDecayLR(0.1, 0.5, 1)
    assert schedule(step) == float(F32(0.1 * 0.5 ** 3))


@pytest.mark.parametrize("step, exc", [(True, TypeError), (np.bool_(True), TypeError), (2.0, TypeError),
                                       (np.array(2.0), TypeError), (np.array([1, 2]), ValueError),
                                       (np.ones((1, 1), np.int64), ValueError), (-1, ValueError),
                                       (np.array(-4), ValueError), ("2", TypeError), (None, TypeError)])
@pytest.mark.parametrize("cls", list(CLASSES.values()), ids=list(CLASSES))
def test_bad_global_step(cls, step, exc):
    args = {"CosineDecayLR": GOOD_COS, "PolynomialDecayLR": GOOD_POLY,
            "WarmUpLR": dict(learning_rate=0.1, warmup_steps=2)}.get(cls.__name__, GOOD_DECAY)
    with pytest.raises(exc, match="'global_step'"):
        cls(**args)(step)


def test_base_class_is_abstract_and_schedules_derive_from_it():
    with pytest.raises(TypeError):
        LearningRateSchedule()
    assert all(issubclass(cls, LearningRateSchedule) for cls in CLASSES.values())

    class Halving(LearningRateSchedule):
        def __call__(self, global_step):
            return 1.0 / 2 ** int(global_step)

    assert Halving()(3) == 0.125


# ---------------------------------------------------------------------------------------------------------
# The float32 evaluation, against the spec's formulas written here in float64 with MindSpore's float32 step
# and float32 quotients (the decisions MindSpore takes in float32), rounded once: within one float32 ulp.

def _q32(a, b):
    return float(F32(a) / F32(b))


def reference(name, args, step):
    s = float(F32(step))
    if name == "ExponentialDecayLR":
        p = _q32(step, args["decay_steps"])
        p = math.floor(p) if args["is_stair"] else p
        return args["learning_rate"] * args["decay_rate"] ** p
    if name == "NaturalExpDecayLR":
        p = math.floor(_q32(step, args["decay_steps"])) * args["decay_steps"] if args["is_stair"] else s
        e32 = float(F32(math.e))  # MindSpore's Pow receives e as a float32 constant
        return args["learning_rate"] * e32 ** (-args["decay_rate"] * p)
    if name == "InverseDecayLR":
        p = _q32(step, args["decay_steps"])
        p = math.floor(p) if args["is_stair"] else p
        return args["learning_rate"] / (1 + args["decay_rate"] * p)
    if name == "CosineDecayLR":
        t = min(step, args["decay_steps"])
        return args["min_lr"] + 0.5 * (args["max_lr"] - args["min_lr"]) * (
            1 + math.cos(math.pi * t / args["decay_steps"]))
    if name == "PolynomialDecayLR":
        d = args["decay_steps"]
        if args["update_decay_steps"]:
            horizon, t = d * max(math.ceil(_q32(step, d)), 1), s
        else:
            horizon, t = d, min(step, d)
        return (args["learning_rate"] - args["end_learning_rate"]) * (1 - _q32(t, horizon)) ** args["power"] \
            + args["end_learning_rate"]
    if name == "WarmUpLR":
        return args["learning_rate"] * _q32(min(step, args["warmup_steps"]), args["warmup_steps"])
    raise AssertionError(name)


rates = st.floats(1e-4, 1.0, allow_nan=False)
positive_ints = st.integers(1, 5000)
steps = st.integers(0, 2 ** 24)


@st.composite
def schedule_args(draw):
    name = draw(st.sampled_from(sorted(CLASSES)))
    if name in ("ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR"):
        rate = draw(st.floats(1e-3, 0.999) if name == "ExponentialDecayLR" else st.floats(1e-6, 1e-2))
        args = dict(learning_rate=draw(rates), decay_rate=rate, decay_steps=draw(positive_ints),
                    is_stair=draw(st.booleans()))
    elif name == "CosineDecayLR":
        lo = draw(st.floats(0.0, 0.5))
        args = dict(min_lr=lo, max_lr=lo + draw(st.floats(1e-3, 1.0)), decay_steps=draw(positive_ints))
    elif name == "PolynomialDecayLR":
        args = dict(learning_rate=draw(rates), end_learning_rate=draw(st.floats(0.0, 1e-4)),
                    decay_steps=draw(positive_ints), power=draw(st.floats(0.1, 4.0)),
                    update_decay_steps=draw(st.booleans()))
    else:
        args = dict(learning_rate=draw(st.floats(0.0, 1.0)), warmup_steps=draw(positive_ints))
    return name, args


@given(schedule_args(), steps)
def test_matches_the_formula_within_one_float32_ulp(name_args, step):
    name, args = name_args
    lr = CLASSES[name](**args)(step)
    expected = reference(name, args, step)
    assert is_float32_value(lr)
    if abs(expected) < np.finfo(np.float32).tiny:  # deep in float32's subnormal range (tiny lr)
        assert abs(lr - expected) <= float(np.finfo(np.float32).smallest_subnormal)
    else:
        assert abs(lr - expected) <= ulp32(expected), f"{name}{args}({step}): {lr!r} vs {expected!r}"


def test_step_is_cast_to_float32_like_mindspore():
    # 2**24 + 1 is not a float32: the step becomes 2**24 before the division.
    assert WarmUpLR(1.0, 2 ** 25)(2 ** 24 + 1) == 0.5
    assert NaturalExpDecayLR(1.0, 2.0 ** -24, 1)(2 ** 24 + 1) == float(F32(float(F32(math.e)) ** -1.0))


def test_natural_exp_decay_uses_float32_e_as_the_base():
    # e32 = float32(e) differs from e by 8.7e-8 relative; after 20 steps of rate 1 that shows in float32.
    lr = NaturalExpDecayLR(1.0, 1.0, 1)(20)
    e32 = float(F32(math.e))
    assert lr == float(F32(e32 ** -20))
    assert lr != float(F32(math.exp(-20)))


# ---------------------------------------------------------------------------------------------------------
# Properties.

@pytest.mark.parametrize("cls", DECAY, ids=lambda c: c.__name__)
@pytest.mark.parametrize("is_stair", [False, True])
def test_decays_start_at_learning_rate_and_never_increase(cls, is_stair):
    schedule = cls(0.3, 0.7 if cls is ExponentialDecayLR else 0.05, 5, is_stair)
    values = [schedule(i) for i in range(60)]
    assert values[0] == float(F32(0.3))
    assert all(b <= a for a, b in zip(values, values[1:]))
    assert values[-1] < values[0]


@pytest.mark.parametrize("cls", DECAY, ids=lambda c: c.__name__)
def test_stair_is_constant_within_each_block_and_drops_at_its_start(cls):
    schedule = cls(0.3, 0.5, 4, True)
    for block in range(5):
        values = {schedule(block * 4 + j) for j in range(4)}
        assert len(values) == 1
        if block:
            assert schedule(block * 4) < schedule(block * 4 - 1)


def test_stair_values_equal_the_continuous_values_at_block_starts():
    for cls in (ExponentialDecayLR, InverseDecayLR, NaturalExpDecayLR):
        stair, smooth = cls(0.2, 0.5, 3, True), cls(0.2, 0.5, 3, False)
        for k in range(6):
            assert stair(3 * k) == smooth(3 * k)


def test_natural_exp_decays_per_step_not_per_decay_steps():
    # MindSpore's code (the spec's quirk): p = step, so decay_steps does not matter without is_stair.
    e32 = float(F32(math.e))
    for decay_steps in (1, 7, 1000):
        schedule = NaturalExpDecayLR(0.1, 0.9, decay_steps)
        assert schedule(1) == float(F32(0.1 * e32 ** -0.9))
        assert schedule(2) == float(F32(0.1 * e32 ** -1.8))


def test_exponential_decays_by_decay_rate_per_decay_steps():
    schedule = ExponentialDecayLR(1.0, 0.5, 10)
    assert [schedule(10 * k) for k in range(5)] == [1.0, 0.5, 0.25, 0.125, 0.0625]
    assert schedule(5) == float(F32(math.sqrt(0.5)))


def test_inverse_decay_values():
    schedule = InverseDecayLR(1.0, 1.0, 2)
    assert [schedule(2 * k) for k in range(4)] == [1.0, 0.5, float(F32(1 / 3)), 0.25]


def test_cosine_endpoints_midpoint_and_monotone():
    schedule = CosineDecayLR(0.01, 0.1, 10)
    values = [schedule(i) for i in range(15)]
    assert values[0] == float(F32(0.1))
    assert values[10:] == [float(F32(0.01))] * 5  # stays at min_lr, no restart
    assert values[5] == float(F32(0.055))
    assert all(b < a for a, b in zip(values[:10], values[1:11]))
    # symmetric around the midpoint: lr(i) + lr(10 - i) = min_lr + max_lr
    for i in range(11):
        assert abs(values[i] + values[10 - i] - 0.11) <= 2 * ulp32(0.1)


def test_cosine_reaches_exactly_zero():
    assert CosineDecayLR(0.0, 1.0, 7)(7) == 0.0
    assert CosineDecayLR(0.0, 1.0, 7)(10 ** 6) == 0.0


def test_polynomial_endpoints_and_power():
    schedule = PolynomialDecayLR(0.1, 0.01, 10, 2.0)
    assert schedule(0) == float(F32(0.1))
    assert schedule(10) == schedule(25) == float(F32(0.01))
    assert schedule(5) == float(F32(0.09 * 0.25 + 0.01))  # (1 - 1/2) ** 2
    linear = PolynomialDecayLR(1.0, 0.0, 8, 1.0)
    assert [linear(i) for i in range(9)] == [1 - i / 8 for i in range(9)]
    # larger power: faster early decay, same endpoints
    assert PolynomialDecayLR(1.0, 0.0, 8, 3.0)(2) < linear(2) < PolynomialDecayLR(1.0, 0.0, 8, 0.5)(2)


def test_polynomial_update_decay_steps_cycles():
    d = 4
    schedule = PolynomialDecayLR(1.0, 0.0, d, 1.0, update_decay_steps=True)
    assert schedule(0) == 1.0
    for k in range(1, 5):
        assert schedule(k * d) == 0.0                       # end_learning_rate at every multiple
        for j in range(1, d):
            step = k * d + j
            horizon = (k + 1) * d                           # D = d * ceil(step / d)
            assert schedule(step) == float(F32(1 - float(F32(step) / F32(horizon))))
    # each cycle restarts higher than the end of the last, with a flatter slope
    assert schedule(5) > schedule(4) and schedule(9) - schedule(10) < schedule(1) - schedule(2)
    plain = PolynomialDecayLR(1.0, 0.0, d, 1.0)
    assert [plain(i) for i in range(4)] == [schedule(i) for i in range(4)]


def test_warmup_is_linear_then_flat():
    schedule = WarmUpLR(0.8, 8)
    assert schedule(0) == 0.0
    assert [schedule(i) for i in range(9)] == [float(F32(0.8 * i / 8)) for i in range(9)]
    assert schedule(8) == schedule(100) == float(F32(0.8))
    steps_ = [schedule(i + 1) - schedule(i) for i in range(8)]
    assert max(steps_) - min(steps_) <= 2 * ulp32(0.8)


def test_returns_a_python_float():
    for cls, args in ((ExponentialDecayLR, GOOD_DECAY), (CosineDecayLR, GOOD_COS),
                      (PolynomialDecayLR, GOOD_POLY), (WarmUpLR, dict(learning_rate=0.1, warmup_steps=2))):
        assert type(cls(**args)(np.array([1]))) is float
