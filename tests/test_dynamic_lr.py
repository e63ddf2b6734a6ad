"""Learning-rate lists: published MindSpore examples (bit for bit), argument errors, formulas, properties."""
import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optkernels.conformance.examples import EXAMPLES_FILE
from optkernels.optimizers import dynamic_lr
from optkernels.optimizers.dynamic_lr import (
    cosine_decay_lr,
    exponential_decay_lr,
    inverse_decay_lr,
    natural_exp_decay_lr,
    piecewise_constant_lr,
    polynomial_decay_lr,
    warmup_lr,
)


def _published(key):
    if not EXAMPLES_FILE.is_file():
        return []
    return json.loads(EXAMPLES_FILE.read_text())[key]


LIST_EXAMPLES = _published("lr_lists")


@pytest.mark.skipif(not LIST_EXAMPLES, reason=f"published examples not found at {EXAMPLES_FILE}")
@pytest.mark.parametrize("entry", LIST_EXAMPLES, ids=lambda e: e["fn"])
def test_published_example_bit_for_bit(entry):
    lr = getattr(dynamic_lr, entry["fn"])(**entry["args"])
    assert lr == entry["expected"]  # Python floats printed with repr: exact equality
    assert all(type(x) is float for x in lr)


def test_all_seven_published_examples_are_present():
    if not LIST_EXAMPLES:
        pytest.skip(f"published examples not found at {EXAMPLES_FILE}")
    assert sorted(e["fn"] for e in LIST_EXAMPLES) == sorted(dynamic_lr.__all__)


# ---------------------------------------------------------------------------------------------------------
# Argument errors.

DECAY_FNS = (exponential_decay_lr, natural_exp_decay_lr, inverse_decay_lr)
GOOD = dict(learning_rate=0.1, decay_rate=0.9, total_step=6, step_per_epoch=2, decay_epoch=1, is_stair=False)
GOOD_COS = dict(min_lr=0.01, max_lr=0.1, total_step=6, step_per_epoch=2, decay_epoch=2)
GOOD_POLY = dict(learning_rate=0.1, end_learning_rate=0.01, total_step=6, step_per_epoch=2, decay_epoch=2,
                 power=0.5, update_decay_epoch=False)
GOOD_WARM = dict(learning_rate=0.1, total_step=6, step_per_epoch=2, warmup_epoch=2)

ERROR_CASES = []
for _fn in DECAY_FNS:
    for _int_arg in ("total_step", "step_per_epoch", "decay_epoch"):
        ERROR_CASES += [(_fn, dict(GOOD, **{_int_arg: 2.0}), TypeError, _int_arg),
                        (_fn, dict(GOOD, **{_int_arg: True}), TypeError, _int_arg),
                        (_fn, dict(GOOD, **{_int_arg: 0}), ValueError, _int_arg)]
    for _float_arg in ("learning_rate", "decay_rate"):
        ERROR_CASES += [(_fn, dict(GOOD, **{_float_arg: 1}), TypeError, _float_arg),
                        (_fn, dict(GOOD, **{_float_arg: False}), TypeError, _float_arg),
                        (_fn, dict(GOOD, **{_float_arg: 0.0}), ValueError, _float_arg),
                        (_fn, dict(GOOD, **{_float_arg: math.nan}), ValueError, _float_arg)]
    ERROR_CASES += [(_fn, dict(GOOD, is_stair=0), TypeError, "is_stair")]
ERROR_CASES += [
    (cosine_decay_lr, dict(GOOD_COS, min_lr=0), TypeError, "min_lr"),
    (cosine_decay_lr, dict(GOOD_COS, min_lr=-1.0), ValueError, "min_lr"),
    (cosine_decay_lr, dict(GOOD_COS, max_lr=1), TypeError, "max_lr"),
    (cosine_decay_lr, dict(GOOD_COS, max_lr=-1.0), ValueError, "max_lr"),
    (cosine_decay_lr, dict(GOOD_COS, min_lr=0.5, max_lr=0.1), ValueError, "max_lr"),
    (cosine_decay_lr, dict(GOOD_COS, total_step=0), ValueError, "total_step"),
    (cosine_decay_lr, dict(GOOD_COS, step_per_epoch=1.5), TypeError, "step_per_epoch"),
    (cosine_decay_lr, dict(GOOD_COS, decay_epoch=-2), ValueError, "decay_epoch"),
    (polynomial_decay_lr, dict(GOOD_POLY, learning_rate=1), TypeError, "learning_rate"),
    (polynomial_decay_lr, dict(GOOD_POLY, learning_rate=0.0), ValueError, "learning_rate"),
    (polynomial_decay_lr, dict(GOOD_POLY, end_learning_rate=0), TypeError, "end_learning_rate"),
    (polynomial_decay_lr, dict(GOOD_POLY, end_learning_rate=-0.1), ValueError, "end_learning_rate"),
    (polynomial_decay_lr, dict(GOOD_POLY, power=2), TypeError, "power"),
    (polynomial_decay_lr, dict(GOOD_POLY, power=0.0), ValueError, "power"),
    (polynomial_decay_lr, dict(GOOD_POLY, total_step=0), ValueError, "total_step"),
    (polynomial_decay_lr, dict(GOOD_POLY, decay_epoch=1.0), TypeError, "decay_epoch"),
    (polynomial_decay_lr, dict(GOOD_POLY, update_decay_epoch=None), TypeError, "update_decay_epoch"),
    (warmup_lr, dict(GOOD_WARM, learning_rate=1), TypeError, "learning_rate"),
    (warmup_lr, dict(GOOD_WARM, learning_rate=-0.1), ValueError, "learning_rate"),
    (warmup_lr, dict(GOOD_WARM, warmup_epoch=0), ValueError, "warmup_epoch"),
    (warmup_lr, dict(GOOD_WARM, total_step=3.0), TypeError, "total_step"),
    (warmup_lr, dict(GOOD_WARM, step_per_epoch=0), ValueError, "step_per_epoch"),
    (piecewise_constant_lr, dict(milestone=5, learning_rates=[0.1]), TypeError, "milestone"),
    (piecewise_constant_lr, dict(milestone=[5], learning_rates=0.1), TypeError, "learning_rates"),
    (piecewise_constant_lr, dict(milestone=[5], learning_rates={0.1}), TypeError, "learning_rates"),
    (piecewise_constant_lr, dict(milestone=[2, 5], learning_rates=[0.1]), ValueError, "milestone"),
    (piecewise_constant_lr, dict(milestone=[2, 5.0], learning_rates=[0.1, 0.2]), TypeError, "milestone[1]"),
    (piecewise_constant_lr, dict(milestone=[0, 5], learning_rates=[0.1, 0.2]), ValueError, "milestone[0]"),
    (piecewise_constant_lr, dict(milestone=[5, 2], learning_rates=[0.1, 0.2]), ValueError, "milestone[1]"),
    (piecewise_constant_lr, dict(milestone=[2, 5], learning_rates=[0.1, 1]), TypeError, "learning_rates[1]"),
    (piecewise_constant_lr, dict(milestone=[2, 5], learning_rates=[True, 0.1]), TypeError,
     "learning_rates[0]"),
    (piecewise_constant_lr, dict(milestone=[2, 5], learning_rates=[0.1, math.inf]), ValueError,
     "learning_rates[1]"),
]


@pytest.mark.parametrize("fn, kwargs, exc, name", ERROR_CASES,
                         ids=[f"{f.__name__}-{n}-{e.__name__}-{i}"
                              for i, (f, _, e, n) in enumerate(ERROR_CASES)])
def test_bad_argument_raises_naming_it(fn, kwargs, exc, name):
    with pytest.raises(exc, match=re.escape(f"'{name}'")):
        fn(**kwargs)


def test_accepted_edge_arguments():
    # tuples, an equal milestone (zero steps), a negative rate (MindSpore only asks for a float)
    assert piecewise_constant_lr((2, 2, 4), (0.3, 0.2, -0.1)) == [0.3, 0.3, -0.1, -0.1]
    assert piecewise_constant_lr([], []) == []
    assert warmup_lr(0.0, 3, 1, 1) == [0.0, 0.0, 0.0]
    assert cosine_decay_lr(0.0, 1.0, 3, 1, 2)[-1] == 0.0


# ---------------------------------------------------------------------------------------------------------
# Formulas (the spec's, written here independently) on random arguments; properties.

int_args = st.integers(1, 12)
rates = st.floats(1e-3, 1.0)


def epochs(total_step, step_per_epoch):
    return [math.floor(i / step_per_epoch) for i in range(total_step)]


@given(rates, st.floats(0.05, 0.99), int_args, int_args, int_args, st.booleans())
def test_exponential_formula(lr, rate, total, spe, de, stair):
    expected = [lr * rate ** (math.floor(e / de) if stair else e / de) for e in epochs(total, spe)]
    assert exponential_decay_lr(lr, rate, total, spe, de, stair) == pytest.approx(expected, rel=1e-14, abs=0)


@given(rates, st.floats(0.01, 2.0), int_args, int_args, int_args, st.booleans())
def test_natural_exp_formula(lr, rate, total, spe, de, stair):
    expected = [lr * math.exp(-rate * (math.floor(e / de) * de if stair else e)) for e in epochs(total, spe)]
    assert natural_exp_decay_lr(lr, rate, total, spe, de, stair) == pytest.approx(expected, rel=1e-13, abs=0)


@given(rates, st.floats(0.01, 2.0), int_args, int_args, int_args, st.booleans())
def test_inverse_formula(lr, rate, total, spe, de, stair):
    expected = [lr / (1 + rate * (math.floor(e / de) if stair else e / de)) for e in epochs(total, spe)]
    assert inverse_decay_lr(lr, rate, total, spe, de, stair) == pytest.approx(expected, rel=1e-14, abs=0)


@given(st.floats(0.0, 0.5), st.floats(1e-3, 1.0), int_args, int_args, int_args)
def test_cosine_formula(lo, span, total, spe, de):
    hi = lo + span
    expected = [lo + (hi - lo) / 2 * (1 + math.cos(math.pi * min(e, de) / de)) for e in epochs(total, spe)]
    assert cosine_decay_lr(lo, hi, total, spe, de) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@given(rates, st.floats(0.0, 1e-3), int_args, int_args, int_args, st.floats(0.1, 4.0), st.booleans())
def test_polynomial_formula(lr, end, total, spe, de, power, update):
    expected = []
    for e in epochs(total, spe):
        horizon = de * max(math.ceil(e / de), 1) if update else de
        t = e if update else min(e, de)
        expected.append((lr - end) * (1 - t / horizon) ** power + end)
    assert polynomial_decay_lr(lr, end, total, spe, de, power, update) == pytest.approx(expected, rel=1e-13,
                                                                                        abs=1e-16)


@given(st.floats(0.0, 1.0), int_args, int_args, int_args)
def test_warmup_formula(lr, total, spe, we):
    expected = [lr * min(e, we) / we for e in epochs(total, spe)]
    assert warmup_lr(lr, total, spe, we) == pytest.approx(expected, rel=1e-15, abs=0)


@pytest.mark.parametrize("fn, kwargs", [(exponential_decay_lr, GOOD), (natural_exp_decay_lr, GOOD),
                                        (inverse_decay_lr, GOOD), (cosine_decay_lr, GOOD_COS),
                                        (polynomial_decay_lr, GOOD_POLY), (warmup_lr, GOOD_WARM)],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_length_and_constant_within_each_epoch(fn, kwargs):
    kwargs = dict(kwargs, total_step=23, step_per_epoch=4)
    lr = fn(**kwargs)
    assert len(lr) == 23
    for i in range(23):
        assert lr[i] == lr[i - i % 4]


def test_decays_never_increase_and_start_at_learning_rate():
    for fn in DECAY_FNS:
        for stair in (False, True):
            lr = fn(0.5, 0.3, 40, 3, 2, stair)
            assert lr[0] == 0.5
            assert all(b <= a for a, b in zip(lr, lr[1:])) and lr[-1] < lr[0]


def test_natural_exp_decays_per_epoch_and_stair_quantises_the_epoch():
    lr = natural_exp_decay_lr(1.0, 0.5, 8, 1, 3)               # decay_epoch is not a divisor
    assert lr == natural_exp_decay_lr(1.0, 0.5, 8, 1, 1)
    stair = natural_exp_decay_lr(1.0, 0.5, 8, 1, 3, True)      # epochs 0-2 -> 0, 3-5 -> 3, 6-7 -> 6
    assert stair == [lr[0]] * 3 + [lr[3]] * 3 + [lr[6]] * 2


def test_exponential_stair_drops_once_per_decay_epoch():
    assert exponential_decay_lr(1.0, 0.5, 8, 1, 2, True) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125]


def test_piecewise_blocks():
    lr = piecewise_constant_lr([3, 4, 8], [1.0, 0.5, 0.25])
    assert lr == [1.0] * 3 + [0.5] + [0.25] * 4


def test_cosine_endpoints():
    lr = cosine_decay_lr(0.1, 0.9, 12, 2, 4)
    assert lr[0] == lr[1] == 0.9
    assert lr[8:] == [0.1] * 4
    assert lr[4] == pytest.approx(0.5, rel=1e-15)


def test_polynomial_update_decay_epoch_restarts():
    lr = polynomial_decay_lr(1.0, 0.0, 10, 1, 2, 1.0, True)
    # e=0: D=2 -> 1; e=1: 1/2; e=2: D=2 -> 0; e=3: D=4 -> 1/4; e=4: 0; e=5: D=6 -> 1/6; ...
    assert lr == pytest.approx([1.0, 0.5, 0.0, 0.25, 0.0, 1 / 6, 0.0, 1 / 8, 0.0, 1 / 10], rel=1e-15)
    plain = polynomial_decay_lr(1.0, 0.0, 10, 1, 2, 1.0)
    assert plain == [1.0, 0.5] + [0.0] * 8


def test_warmup_starts_at_zero_and_reaches_learning_rate():
    lr = warmup_lr(0.4, 10, 1, 4)
    assert lr[0] == 0.0 and lr[4:] == [0.4] * 6
    assert lr[:5] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4], rel=1e-15)
