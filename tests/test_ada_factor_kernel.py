"""fused_ada_factor (MindSpore FusedAdaFactor): equals the float64 reference, rounds float16 slots exactly,
gives the same bits with any thread count, and rejects each bad argument before writing anything."""
import itertools
import re

import numba
import numpy as np
import pytest

from optable import assert_close
from optkernels.kernels import fused_ada_factor
from optkernels.kernels.ada_factor import _half_table, _vector_statistic_half
from optkernels.reference import fused_ada_factor as reference

SHAPES = [(), (7,), (5, 7), (1, 9), (2, 3, 4, 5)]
FLAGS = list(itertools.product([False, True], repeat=3))  # scale_parameter, first_moment, weight_decay
ALL_ON = dict(enable_scale_parameter=True, enable_first_moment=True, enable_weight_decay=True)


def make(rng, shape, dtype, *, half=False, zero_state=False):
    """Valid inputs: a positional list in FusedAdaFactor's order (state arrays of ``dtype``)."""
    def arr(x, dt=dtype):
        return np.asarray(x, dtype=dt)

    factored = len(shape) >= 2
    grad = arr(rng.standard_normal(shape))
    param = arr(rng.standard_normal(shape))
    exp_avg = arr(np.zeros(shape) if zero_state else 0.1 * rng.standard_normal(shape))
    if factored:
        row = arr(np.zeros(shape[:-1]) if zero_state else rng.uniform(0.1, 2.0, shape[:-1]))
        col_shape = shape[:-2] + shape[-1:]
        col = arr(np.zeros(col_shape) if zero_state else rng.uniform(0.1, 2.0, col_shape))
        sq = np.zeros((1,), np.float32)  # MindSpore's dummy
    else:
        row, col = np.zeros((1,), np.float32), np.zeros((1,), np.float32)
        sq = arr(np.zeros(shape) if zero_state else rng.uniform(0.1, 2.0, shape),
                 np.float16 if half else dtype)
    scalars = [(1e-30, 1e-3), float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 0.95)),
               float(rng.uniform(0.0, 0.99)), float(rng.uniform(0.0, 0.1)), float(rng.uniform(1e-3, 0.1))]
    return scalars + [grad, param, exp_avg, row, col, sq]


def flags_kw(flags):
    return dict(zip(["enable_scale_parameter", "enable_first_moment", "enable_weight_decay"], flags))


NAMES = ["param", "exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"]


def check_against_reference(args, flags, dtype, ulps=16.0):
    before = [np.array(a, copy=True) for a in args[7:]]
    expected = reference(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args], **flags_kw(flags))
    got = fused_ada_factor(*args, **flags_kw(flags))
    assert all(g is a for g, a in zip(got, args[7:])), "returns the arrays passed in"
    factored = np.ndim(args[7]) >= 2
    used = {"param": True, "exp_avg": flags[1], "exp_avg_sq_row": factored, "exp_avg_sq_col": factored,
            "exp_avg_sq": not factored}
    for name, g, e, b in zip(NAMES, got, expected, before):
        if not used[name]:
            assert np.array_equal(g, b), f"{name} is not used and must not change"
        elif g.dtype == np.float16:
            # One float16 ulp: the kernel rounds its float32/float64 value, the reference its float64 value.
            spacing = np.spacing(np.abs(e).astype(np.float16)).astype(np.float64)
            assert np.all(np.abs(g.astype(np.float64) - e) <= spacing), name
        else:
            assert_close(g, e, dtype, ulps, name, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "scale{:d}-m{:d}-wd{:d}".format(*f))
def test_matches_reference(shape, dtype, flags):
    args = make(np.random.default_rng(hash((shape, flags)) % 2**32), shape, dtype)
    check_against_reference(args, flags, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (33,)], ids=str)
@pytest.mark.parametrize("flags", [(False, False, False), (True, True, True)], ids=["plain", "all"])
def test_float16_second_moment_matches_reference(shape, dtype, flags):
    args = make(np.random.default_rng(3), shape, dtype, half=True)
    check_against_reference(args, flags, dtype)
    assert args[11].dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_first_step_from_zero_state(dtype):
    """beta2t = 0 on the first step: the running averages become the first statistics."""
    for shape in [(6,), (4, 6), (2, 3, 5)]:
        args = make(np.random.default_rng(8), shape, dtype, zero_state=True)
        args[3] = 0.0
        check_against_reference(args, (True, True, False), dtype)


def test_zero_gradient_with_zero_eps1_gives_no_nan():
    """eps1 = 0 and all-zero rows/columns/elements: the 1e-30 clamps keep U = 0 (no 0/0)."""
    for shape in [(5,), (3, 4), (2, 2, 3)]:
        args = make(np.random.default_rng(9), shape, np.float64, zero_state=True)
        args[0] = (0.0, 1e-3)
        args[6][...] = 0.0
        old = args[7].copy()
        check_against_reference(args, (True, False, True), np.float64)
        assert np.all(np.isfinite(args[7]))
        wd, alpha = args[4], args[5] * max(1e-3, np.sqrt(np.mean(old ** 2)))
        np.testing.assert_allclose(args[7], old - wd * alpha * old, rtol=1e-14)


def test_clip_threshold_zero_makes_the_update_zero():
    args = make(np.random.default_rng(10), (3, 4), np.float64)
    args[1] = 0.0
    old = args[7].copy()
    check_against_reference(args, (False, False, False), np.float64)
    assert np.array_equal(args[7], old)


def test_clip_scales_a_large_update_down_to_the_threshold():
    """A property, not the reference: with beta2t = 0 and eps1 = 0 the factored U of a rank-1 gradient has
    RMS 1, so with d = 0.5 the applied step (no scaling, no moment, lr = 1) has RMS exactly 0.5."""
    g = np.outer([1.0, 2.0, 3.0], [0.5, 1.0, 4.0, 2.0])
    param, step = np.zeros_like(g), None
    row, col = np.zeros(3), np.zeros(4)
    fused_ada_factor((0.0, 1e-3), 0.5, 0.9, 0.0, 0.0, 1.0, g, param, None, row, col, None)
    step = -param
    assert np.sqrt(np.mean(step ** 2)) == pytest.approx(0.5, rel=1e-14)
    np.testing.assert_allclose(step, 0.5 * np.sign(g), rtol=1e-14)  # rank 1: |U| = 1 everywhere


# ------------------------------------------------------------------------------------------------ global norm

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 3, 4, 5)], ids=str)
def test_global_norm_matches_reference(shape, dtype):
    args = make(np.random.default_rng(40), shape, dtype) + [3.0]
    check_against_reference(args, (True, True, True), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, half", [((7,), False), ((9,), True), ((5, 7), False), ((2, 3, 4, 5), False)],
                         ids=str)
def test_global_norm_is_the_gradient_times_its_reciprocal(shape, half, dtype):
    """FusedAdaFactorWithGlobalNorm multiplies the gradient by 1/global_norm (rounded to the dtype) and does
    nothing else: the same bits as the plain op on that scaled gradient; grad itself is not written."""
    norm = 2.7
    with_norm = make(np.random.default_rng(41), shape, dtype, half=half) + [norm]
    plain = [np.copy(a) if isinstance(a, np.ndarray) else a for a in with_norm[:12]]
    plain[6] = plain[6] * (dtype(1) / dtype(norm))
    grad = with_norm[6].copy()
    fused_ada_factor(*with_norm, **ALL_ON)
    fused_ada_factor(*plain, **ALL_ON)
    assert np.array_equal(with_norm[6], grad)
    for name, a, b in zip(NAMES, with_norm[7:12], plain[7:]):
        assert a.tobytes() == b.tobytes(), name
    assert not np.array_equal(with_norm[7], make(np.random.default_rng(41), shape, dtype, half=half)[7])


@pytest.mark.parametrize("norm", [0.0, 1e-31, -5.0, np.float32(0.0), np.zeros(1), None], ids=repr)
def test_global_norm_below_1e_30_leaves_the_gradient_as_it_is(norm):
    """MindSpore's kernel: a global norm below 1e-30 (zero and negatives included) means no scaling."""
    scaled = make(np.random.default_rng(42), (4, 6), np.float32) + [norm]
    plain = [np.copy(a) if isinstance(a, np.ndarray) else a for a in scaled[:12]]
    fused_ada_factor(*scaled, **ALL_ON)
    fused_ada_factor(*plain, **ALL_ON)
    for name, a, b in zip(NAMES, scaled[7:12], plain[7:]):
        assert a.tobytes() == b.tobytes(), name


def test_with_global_norm_op_is_fused_ada_factor_with_the_13th_input():
    import inspect

    from optkernels.kernels import fused_ada_factor_with_global_norm

    params = inspect.signature(fused_ada_factor_with_global_norm).parameters.values()
    assert [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD] == list(POSITION)
    a = make(np.random.default_rng(43), (3, 5), np.float64) + [0.25]
    b = [np.copy(x) if isinstance(x, np.ndarray) else x for x in a]
    fused_ada_factor_with_global_norm(*a, enable_first_moment=True)
    fused_ada_factor(*b, enable_first_moment=True)
    assert all(np.array_equal(x, y) for x, y in zip(a[7:12], b[7:12]))
    snapshot = np.copy(a[7])
    with pytest.raises(TypeError, match="global_norm"):
        fused_ada_factor_with_global_norm(*a[:12], None)
    assert np.array_equal(a[7], snapshot)


def test_stored_column_and_vector_statistics_are_clamped_to_1e_30():
    """MindSpore's kernel stores max(C, 1e-30) and max(V, 1e-30) (the row statistic R is stored as is)."""
    for shape in [(5,), (3, 4)]:
        args = make(np.random.default_rng(44), shape, np.float32, zero_state=True)
        args[0] = (0.0, 1e-3)
        args[6][...] = 0.0
        fused_ada_factor(*args)
        tiny = np.float32(1e-30)
        if len(shape) >= 2:
            assert np.all(args[9] == 0.0) and np.all(args[10] == tiny)
        else:
            assert np.all(args[11] == tiny)


def _round_to_half(values, v_old_bits=None, beta2t=0.0):
    """Run the float16 statistic pass alone (float64 arrays): v = beta2t*V_old + (1 - beta2t)*g*g."""
    values = np.asarray(values, np.float64)
    n = values.size
    bits = np.zeros(n, np.uint16) if v_old_bits is None else v_old_bits.copy()
    factor = np.empty(n, np.float64)
    _vector_statistic_half.cpu(n, bits, factor, values, _half_table("<f8", "cpu"), np.float64(0.0),
                               np.float64(beta2t), np.float64(1.0 - beta2t))
    return bits, factor


def test_float16_rounding_is_exact_round_to_nearest_even():
    rng = np.random.default_rng(12)
    g = np.concatenate([
        rng.standard_normal(4000) * 10.0 ** rng.uniform(-6, 2.5, 4000),      # all binades, subnormals too
        np.sqrt(np.array([65504.0, 65519.0, 65520.0, 1e6])),                        # around the overflow
        [0.0, np.inf, np.nan],
        # squares that are exact float16 ties (odd 12-bit integers) in several binades, and near ties
        np.array([s * 2.0 ** k for s in range(45, 64, 2) for k in (-14, -9, -3, 0, 2)]),
    ])
    squares = g * g
    bits, factor = _round_to_half(g)
    expected = squares.astype(np.float16)
    assert np.array_equal(bits, expected.view(np.uint16)), "bits differ from NumPy's float16 rounding"
    stored = expected.astype(np.float64)
    finite = np.isfinite(stored)
    np.testing.assert_array_equal(factor[finite], 1.0 / np.sqrt(np.maximum(stored[finite], 1e-30)))


def test_float16_storage_round_trips_every_bit_pattern():
    """beta2t = 1: V + 0 is decoded and re-encoded unchanged for every pattern (NaNs become the quiet NaN;
    -0 becomes +0, since -0 + 0 = +0 in IEEE arithmetic, before rounding)."""
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    bits, _ = _round_to_half(np.zeros(65536), every, beta2t=1.0)
    nan = np.isnan(every.view(np.float16))
    kept = ~nan & (every != 0x8000)
    assert np.array_equal(bits[kept], every[kept])
    assert np.all(bits[nan] == 0x7E00)
    assert bits[0x8000] == 0


def _run_with_threads(threads, shape, dtype, half=False):
    args = make(np.random.default_rng(13), shape, dtype, half=half)
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        fused_ada_factor(*args, **ALL_ON)
    finally:
        numba.set_num_threads(previous)
    return [np.asarray(a).tobytes() for a in args[7:]]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, half", [((301, 257), False), ((3, 61, 130), False), ((70001,), False),
                                         ((20001,), True)], ids=["matrix", "3d", "vector", "vector-f16"])
def test_bitwise_equal_with_one_and_two_threads(shape, half, dtype):
    one = _run_with_threads(1, shape, dtype, half)
    two = _run_with_threads(2, shape, dtype, half)
    again = _run_with_threads(2, shape, dtype, half)
    assert one == two, "1 vs 2 threads"
    assert two == again, "run to run"


def test_empty_parameter_is_a_no_op():
    args = make(np.random.default_rng(1), (0, 3), np.float32)
    out = fused_ada_factor(*args)
    assert out[0] is args[7] and out[0].shape == (0, 3)


def test_unused_slots_may_be_none():
    args = make(np.random.default_rng(2), (4, 5), np.float32)
    args[8], args[11] = None, None
    out = fused_ada_factor(*args)
    assert out[1] is None and out[4] is None


# ---------------------------------------------------------------------------------------------------- errors

POSITION = {name: k for k, name in enumerate(
    ["epsilon", "clip_threshold", "beta1", "beta2t", "weight_decay", "learning_rate", "grad", "param",
     "exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "global_norm"])}


def _readonly(x):
    x = x.copy()
    x.flags.writeable = False
    return x


# (case id, shape, which input, how to break it, exception, name in the message)
BAD = [
    ("epsilon-type", (4,), "epsilon", lambda a: 1e-30, TypeError, "epsilon"),
    ("epsilon-length", (4,), "epsilon", lambda a: (1e-30, 1e-3, 1.0), ValueError, "epsilon"),
    ("epsilon-shape", (4,), "epsilon", lambda a: np.zeros((2, 1)), ValueError, "epsilon"),
    ("eps1-negative", (4,), "epsilon", lambda a: (-1e-30, 1e-3), ValueError, "epsilon[0]"),
    ("eps2-negative", (4,), "epsilon", lambda a: (1e-30, -1e-3), ValueError, "epsilon[1]"),
    ("eps2-string", (4,), "epsilon", lambda a: (1e-30, "x"), TypeError, "epsilon[1]"),
    ("clip-negative", (4,), "clip_threshold", lambda a: -1.0, ValueError, "clip_threshold"),
    ("beta1-above-1", (4,), "beta1", lambda a: 1.5, ValueError, "beta1"),
    ("beta2t-negative", (3, 4), "beta2t", lambda a: -0.1, ValueError, "beta2t"),
    ("beta2t-nan", (3, 4), "beta2t", lambda a: float("nan"), ValueError, "beta2t"),
    ("weight-decay-negative", (4,), "weight_decay", lambda a: -0.1, ValueError, "weight_decay"),
    ("lr-negative", (4,), "learning_rate", lambda a: -0.1, ValueError, "learning_rate"),
    ("lr-string", (4,), "learning_rate", lambda a: "0.1", TypeError, "learning_rate"),
    ("lr-vector", (4,), "learning_rate", lambda a: np.ones(2), ValueError, "learning_rate"),
    ("grad-shape", (3, 4), "grad", lambda a: np.zeros((4, 3), a.dtype), ValueError, "grad"),
    ("grad-dtype", (3, 4), "grad", lambda a: a.astype(np.float64), TypeError, "grad"),
    ("grad-list", (4,), "grad", lambda a: a.tolist(), TypeError, "grad"),
    ("param-int", (3, 4), "param", lambda a: a.astype(np.int32), TypeError, "param"),
    ("param-uint16", (4,), "param", lambda a: a.astype(np.uint16), TypeError, "param"),
    ("param-readonly", (3, 4), "param", _readonly, ValueError, "param"),
    ("param-strided", (3, 4), "param", lambda a: np.zeros((3, 8), a.dtype)[:, ::2], ValueError, "param"),
    ("row-shape", (3, 4), "exp_avg_sq_row", lambda a: np.zeros(4, a.dtype), ValueError, "exp_avg_sq_row"),
    ("row-dtype", (3, 4), "exp_avg_sq_row", lambda a: a.astype(np.float64), TypeError, "exp_avg_sq_row"),
    ("col-shape", (2, 3, 4), "exp_avg_sq_col", lambda a: np.zeros(4, a.dtype), ValueError, "exp_avg_sq_col"),
    ("col-readonly", (3, 4), "exp_avg_sq_col", _readonly, ValueError, "exp_avg_sq_col"),
    ("sq-shape", (4,), "exp_avg_sq", lambda a: np.zeros(5, a.dtype), ValueError, "exp_avg_sq"),
    ("sq-float16-shape", (4,), "exp_avg_sq", lambda a: np.zeros(5, np.float16), ValueError, "exp_avg_sq"),
    ("sq-float16-readonly", (4,), "exp_avg_sq", lambda a: _readonly(a.astype(np.float16)), ValueError,
     "exp_avg_sq"),
    ("sq-int", (4,), "exp_avg_sq", lambda a: a.astype(np.int32), TypeError, "exp_avg_sq"),
    ("exp-avg-shape", (3, 4), "exp_avg", lambda a: np.zeros(3, a.dtype), ValueError, "exp_avg"),
    ("unused-slot-not-array", (3, 4), "exp_avg_sq", lambda a: [0.0], TypeError, "exp_avg_sq"),
    ("global-norm-string", (3, 4), "global_norm", lambda a: "2", TypeError, "global_norm"),
    ("global-norm-vector", (4,), "global_norm", lambda a: np.ones(3), ValueError, "global_norm"),
]


@pytest.mark.parametrize("case, shape, name, breaker, exc, mention", BAD, ids=[b[0] for b in BAD])
def test_bad_argument_raises_and_writes_nothing(case, shape, name, breaker, exc, mention):
    args = make(np.random.default_rng(4), shape, np.float32) + [2.0]  # with a global norm
    args[POSITION[name]] = breaker(args[POSITION[name]])
    snapshot = [np.array(a, copy=True) if isinstance(a, np.ndarray) else None for a in args]
    with pytest.raises(exc, match=re.escape(mention)):
        fused_ada_factor(*args, **ALL_ON)
    for a, s in zip(args, snapshot):
        if s is not None:
            assert np.array_equal(a, s, equal_nan=True), f"{case}: an array was modified by a failed call"


@pytest.mark.parametrize("flag", ["enable_scale_parameter", "enable_first_moment", "enable_weight_decay"])
def test_non_bool_flag_is_a_type_error(flag):
    args = make(np.random.default_rng(5), (3, 4), np.float32)
    snapshot = [np.copy(a) for a in args[6:]]
    with pytest.raises(TypeError, match=flag):
        fused_ada_factor(*args, **{flag: 1})
    assert all(np.array_equal(a, s) for a, s in zip(args[6:], snapshot))


@pytest.mark.parametrize("half", [False, True])
def test_overlapping_state_is_a_value_error(half):
    args = make(np.random.default_rng(6), (6,), np.float32, half=half)
    buffer = np.zeros(12, np.float32)
    args[7], args[8] = buffer[:6], buffer[3:9]  # param and exp_avg share memory
    with pytest.raises(ValueError, match="share memory"):
        fused_ada_factor(*args, enable_first_moment=True)
    if half:
        raw = np.zeros(12, np.float32)
        args[7], args[8] = raw[:6], np.zeros(6, np.float32)
        args[11] = raw[6:].view(np.float16)[:6]  # exp_avg_sq (float16) inside param's buffer? no: after it
        fused_ada_factor(*args)  # disjoint: fine
        args[11] = raw[:3].view(np.float16)  # overlaps param
        with pytest.raises(ValueError, match="exp_avg_sq"):
            fused_ada_factor(*args)


# -------------------------------------------------------------------------------------------------- reference

@pytest.mark.parametrize("shape", [(6,), (3, 4)], ids=str)
def test_reference_is_pure_and_returns_new_float64_arrays(shape):
    args = make(np.random.default_rng(30), shape, np.float32)
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    out = reference(*args, enable_scale_parameter=True, enable_first_moment=True, enable_weight_decay=True)
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    assert len(out) == 5
    for o in out:
        assert isinstance(o, np.ndarray) and o.dtype == np.float64
        assert not any(np.shares_memory(o, a) for a in args if isinstance(a, np.ndarray))
    assert not np.array_equal(out[0], args[7])


def test_reference_by_hand_unfactored_first_step():
    """beta2t = 0, eps1 = 0: V = g², U = sign(g) with RMS 1 (no clip at d = 1);
    alpha = lr·max(eps2, RMS(x))."""
    g = np.array([0.5, -2.0, 3.0, -0.25])
    x = np.array([1.0, -1.0, 2.0, 0.0])
    lr, wd = 0.1, 0.2
    out = reference((0.0, 1e-3), 1.0, 0.9, 0.0, wd, lr, g, x, np.zeros(4), None, None, np.zeros(4),
                    enable_scale_parameter=True, enable_first_moment=True, enable_weight_decay=True)
    alpha = lr * np.sqrt(np.mean(x ** 2))
    m = 0.1 * alpha * np.sign(g)
    np.testing.assert_allclose(out[4], g ** 2, rtol=1e-15)
    np.testing.assert_allclose(out[1], m, rtol=1e-15)
    np.testing.assert_allclose(out[0], x - wd * alpha * x - m, rtol=1e-15)


def test_reference_by_hand_factored_rank_one():
    """A rank-1 gradient a·bᵀ at beta2t = 0, eps1 = 0 has |U| = 1 everywhere; d = 0.25 clips it to 0.25."""
    a, b = np.array([1.0, -3.0]), np.array([2.0, 0.5, -1.0])
    g = np.outer(a, b)
    out = reference((0.0, 1e-3), 0.25, 0.0, 0.0, 0.0, 1.0, g, np.zeros((2, 3)), None, np.zeros(2),
                    np.zeros(3), None)
    np.testing.assert_allclose(out[2], a ** 2 * np.mean(b ** 2), rtol=1e-15)
    np.testing.assert_allclose(out[3], b ** 2 * np.mean(a ** 2), rtol=1e-15)
    np.testing.assert_allclose(out[0], -0.25 * np.sign(g), rtol=1e-14)
