"""8-bit blockwise state (LOWBIT.md §1-3): the dynamic maps, blockwise quantization and the 8-bit optimizer
step, kernels against the float32 reference bit for bit and against the spec's worked examples."""
import functools
import hashlib

import numba
import numpy as np
import pytest

from optkernels.kernels import blockwise_optim as bo
from optkernels.kernels.quantization import dequantize_blockwise, dynamic_map, quantize_blockwise
from optkernels.reference import lowbit as ref

f32 = np.float32
SIGNED_SHA = "e732639a65f497b4ad684bb166a4467708255edd5207757de8b8f0c7e1fda89c"
UNSIGNED_SHA = "305f002cc11278fb769d13b25b9fd0c7c83c8402c40a878fe086f4039fde6398"


def _sha(table):
    return hashlib.sha256(np.asarray(table, "<f4").tobytes()).hexdigest()


def _bits(values):
    return np.array(values, np.uint32).view(f32)


# Test loops over the kernels' inline functions, made once per process: a loop defined inside a parametrized
# test is a new dispatcher, compiled afresh for every case with the same argument types.


@functools.cache
def _nearest_all():
    from optkernels.kernels.quantization import nearest_code

    @numba.njit
    def nearest_all(x, mids, start, out):
        for i in range(x.size):
            out[i] = nearest_code(x[i], mids, start)

    return nearest_all


@functools.cache
def _starts(signed: bool):
    """dynamic_start over an array, ``signed`` a compile-time constant as in the kernels."""
    from optkernels.kernels.quantization import dynamic_start

    @numba.njit
    def starts(x, out):
        for i in range(x.size):
            out[i] = dynamic_start(x[i], signed)

    return starts


@functools.cache
def _dynamic_block_search():
    from optkernels.kernels._intrinsics import (
        byte_permutes,
        register_search,
        search_dynamic_block,
        search_dynamic_finite,
        search_dynamic_nonnegative,
    )

    @numba.njit(error_model="numpy")
    def search(out, values, top, keys, nan_low, nonnegative, finite=False):
        for b in range(values.size // 256):
            if nonnegative:
                search_dynamic_nonnegative(out, b * 256, values, b * 256, top, keys, 0, nan_low)
            elif finite:
                search_dynamic_finite(out, b * 256, values, b * 256, top, keys, 0, nan_low)
            else:
                search_dynamic_block(out, b * 256, values, b * 256, top, keys, 0, nan_low)
        return register_search() and byte_permutes()

    return search


@functools.cache
def _requantize():
    @numba.njit(error_model="numpy")  # as the kernels: x/0 is inf or NaN
    def requantize(out, first, scratch, count, top, code, mids, start, negatives, signed, keys, key_base):
        finite = True  # as the kernel: the register search of a dynamic map for a block without NaN
        for k in range(count):
            finite = finite and scratch[k] == scratch[k]
        if not bo._requantize_dynamic(out, first, scratch, 0, count, top, keys, key_base, signed, False,
                                      finite):
            bo._requantize(out, first, scratch, 0, count, top, code, mids, start, negatives, signed, 768,
                           keys, key_base, False)

    return requantize


@functools.cache
def _block_search():
    from optkernels.kernels._intrinsics import register_search, search_block

    @numba.njit(error_model="numpy")
    def search(out, values, top, keys, nan_low):
        for b in range(values.size // 256):
            search_block(out, b * 256, values, b * 256, top, keys, 0, nan_low)
        return register_search()

    return search


def test_maps_match_the_spec_hashes():
    assert _sha(dynamic_map(True)) == SIGNED_SHA
    assert _sha(dynamic_map(False)) == UNSIGNED_SHA
    assert _sha(ref.dynamic_map(True)) == SIGNED_SHA
    assert _sha(ref.dynamic_map(False)) == UNSIGNED_SHA


def test_map_landmarks():
    s, u = dynamic_map(True), dynamic_map(False)
    assert s.view(np.uint32)[[0, 126, 127, 128, 191, 255]].tolist() == [
        0xbf7e3333, 0xb513a3b7, 0, 0x3513a3b7, 0x3ddb3334, 0x3f800000]
    assert np.array_equal(s[128:255], -s[126::-1])
    assert u.view(np.uint32)[[0, 1, 2, 254, 255]].tolist() == [0, 0x34ae7baa, 0x35500998, 0x3f7f199a,
                                                                0x3f800000]


TIE_INPUT = [0x3f800000, 0xbf800000, 0x3f000000, 0xbe800000, 0x3493a3b7, 0x35ff0382, 0x3e766666, 0xb089705f]


@pytest.mark.parametrize("impl", ["kernel", "reference"])
def test_tie_check_of_the_spec(impl):
    a = _bits(TIE_INPUT)
    if impl == "kernel":
        codes, absmax = quantize_blockwise(a, blocksize=256)
        out = dequantize_blockwise(codes, absmax, blocksize=256)
    else:
        codes, absmax = ref.quantize_blockwise(a, blocksize=256)
        out = ref.dequantize_blockwise(codes, absmax, blocksize=256)
    assert codes.tolist() == [255, 0, 219, 53, 128, 128, 200, 127]
    assert absmax.tolist() == [1.0]
    expected = f32([1.0, -0.992968738, 0.500781238, -0.247656241, 5.50000038e-07, 5.50000038e-07, 0.233593747,
                    0.0])
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("signed", [True, False])
def test_every_midpoint_goes_to_the_even_index(signed):
    code = dynamic_map(signed)
    mids = (code[:-1] + code[1:]) * f32(0.5)
    codes, _ = quantize_blockwise(np.concatenate([mids, [f32(1)]]).astype(f32), code=code, blocksize=256)
    lower = np.arange(255)
    assert np.array_equal(codes[:255], np.where(lower % 2 == 0, lower, lower + 1))
    above = np.nextafter(mids, f32(2))
    below = np.nextafter(mids, f32(-2))
    assert np.array_equal(quantize_blockwise(np.append(above, f32(1)), code=code, blocksize=256)[0][:255],
                          lower + 1)
    assert np.array_equal(quantize_blockwise(np.append(below, f32(1)), code=code, blocksize=256)[0][:255], lower)


@pytest.mark.parametrize("n,blocksize", [(1000, 256), (4096 * 2 + 5, 4096), (300, 64)])
def test_quantize_matches_reference(n, blocksize):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * np.exp(rng.uniform(-12, 3, n))).astype(f32)
    a[:blocksize] = 0                                       # a zero block: absmax 0, codes 0
    a[-3] = np.nan                                          # ignored by the maximum, code 0
    for code in (dynamic_map(True), dynamic_map(False)):
        codes, absmax = quantize_blockwise(a.reshape(-1, 1), code=code, blocksize=blocksize)
        rc, ra = ref.quantize_blockwise(a.reshape(-1, 1), code=code, blocksize=blocksize)
        assert np.array_equal(codes, rc) and np.array_equal(absmax, ra)
        assert codes.shape == (n, 1) and absmax[0] == 0 and codes[-3, 0] == 0
        assert np.array_equal(dequantize_blockwise(codes, absmax, code=code, blocksize=blocksize),
                              ref.dequantize_blockwise(rc, ra, code=code, blocksize=blocksize))


def test_quantize_half_inputs_and_outputs_given():
    import ml_dtypes

    a = np.linspace(-3, 3, 600).astype(ml_dtypes.bfloat16)
    out, absmax = np.empty(600, np.uint8), np.empty(3, f32)
    codes, got_absmax = quantize_blockwise(a, out=out, absmax=absmax, blocksize=256)
    assert codes is out and got_absmax is absmax
    rc, ra = ref.quantize_blockwise(a.astype(f32), blocksize=256)
    assert np.array_equal(codes, rc) and np.array_equal(absmax, ra)


@pytest.mark.parametrize("call,error,match", [
    (lambda: quantize_blockwise(np.zeros(4)), TypeError, "A must be"),
    (lambda: quantize_blockwise(np.zeros(4, f32), blocksize=0), ValueError, "blocksize"),
    (lambda: quantize_blockwise(np.zeros(4, f32), code=np.zeros(255, f32)), TypeError, "code"),
    (lambda: quantize_blockwise(np.zeros(4, f32), out=np.zeros(3, np.uint8)), ValueError, "out"),
    (lambda: dequantize_blockwise(np.zeros(4, np.int8), np.zeros(1, f32)), TypeError, "codes"),
    (lambda: dequantize_blockwise(np.zeros(4, np.uint8), np.zeros(2, f32)), ValueError, "absmax"),
])
def test_quantize_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------------------------------------- the 8-bit step

P0 = [0.5, -0.25, 1.0, -1.5, 0.125, 2.0, -0.75, 0.0]
G1 = [0.1, -0.2, 0.05, -0.01, 0.3, -5e-8, 0.0, 0.002]
G2 = [-0.05, -0.1, 0.2, 0.0, 0.25, 0.0005, 0.04, -0.3]
EXAMPLE = [  # (absmax1, absmax2, codes1, codes2, p) after steps 1 and 2, LOWBIT.md §10.1
    (0.0300000086, 8.99988445e-05, [207, 23, 195, 87, 255, 126, 127, 153], [128, 175, 75, 31, 255, 0, 0, 10],
     [0.499000013, -0.248999998, 0.999000013, -1.49899995, 0.123999998, 2.00083327, -0.75, -0.000999995042],
     [0.498995006, -0.248997509, 0.998989999, -1.49898493, 0.123998754, 2.00081325, -0.74999249,
      -0.00099998503]),
    (0.0520000122, 0.000152408044, [182, 32, 217, 93, 255, 142, 182, 30], [113, 159, 152, 25, 255, 3, 63, 196],
     [0.498735487, -0.248062342, 0.998118758, -1.49832726, 0.123008825, 2.00008941, -0.750744104,
      -0.000260504137],
     [0.498725474, -0.248057365, 0.998098731, -1.49829721, 0.123006351, 2.00004935, -0.750729084,
      -0.000260491506]),
]


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_worked_example_10_1(impl, wd):
    p, s1, s2 = f32(P0), np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    a1, a2 = np.zeros(1, f32), np.zeros(1, f32)
    q1, q2 = dynamic_map(True), dynamic_map(False)
    for t, (g, want) in enumerate(zip((G1, G2), EXAMPLE), start=1):
        args = ("adam", f32(g), p, s1, s2, 0.9, 0.999, 0.0, 0.0, 1e-8, t, 1e-3, q1, q2, a1, a2)
        if impl == "kernel":
            bo.optimizer_update_8bit_blockwise(*args, weight_decay=wd)
        else:
            p, s1, s2, a1, a2 = ref.optimizer_update_8bit_blockwise(*args, weight_decay=wd)
        assert a1.tolist() == [f32(want[0])] and a2.tolist() == [f32(want[1])]
        assert s1.tolist() == want[2] and s2.tolist() == want[3]
        assert np.array_equal(p, f32(want[5] if wd else want[4]))


def _problem(name, n, rng):
    p = (0.1 * rng.standard_normal(n)).astype(f32)
    two = name in ("adam", "ademamix")
    blocks = -(-n // 256)
    rows = 2 if name == "ademamix" else 1
    state1 = np.zeros((rows, n) if rows == 2 else n, np.uint8)
    absmax1 = np.zeros((rows, blocks) if rows == 2 else blocks, f32)
    state2 = np.zeros(n, np.uint8) if two else None
    absmax2 = np.zeros(blocks, f32) if two else None
    return p, state1, state2, absmax1, absmax2


HYPER = {  # name: (beta1, beta2, beta3, alpha, eps, lr, wd)
    "adam": (0.9, 0.999, 0.0, 0.0, 1e-8, 1e-3, 0.01),
    "ademamix": (0.9, 0.999, 0.9999, 5.0, 1e-8, 1e-3, 0.01),
    "momentum": (0.9, 0.0, 0.0, 0.0, 0.0, 1e-2, 1e-3),
    "lion": (0.9, 0.99, 0.0, 0.0, 0.0, 1e-4, 0.1),
    "rmsprop": (0.99, 0.0, 0.0, 0.0, 1e-8, 1e-2, 1e-3),
    "adagrad": (0.0, 0.0, 0.0, 0.0, 1e-10, 1e-2, 1e-3),
}


def _step(impl, name, g, state, t):
    b1, b2, b3, alpha, eps, lr, wd = HYPER[name]
    p, s1, s2, a1, a2 = state
    q1, q2 = dynamic_map(True), dynamic_map(False)
    args = (name, g, p, s1, s2, b1, b2, b3, alpha, eps, t, lr, q1, q2, a1, a2)
    if impl == "reference":
        return ref.optimizer_update_8bit_blockwise(*args, weight_decay=wd)
    bo.optimizer_update_8bit_blockwise(*args, weight_decay=wd)
    return state


@pytest.mark.parametrize("name", bo.ALGORITHMS)
def test_60_steps_match_the_reference_bit_for_bit(name):
    rng = np.random.default_rng(7)
    n = 3 * 256 + 37                                        # a partial last block
    kernel, reference = _problem(name, n, rng), _problem(name, n, rng)
    reference = tuple(None if x is None else x.copy() for x in kernel)
    for t in range(1, 61):
        g = (0.01 * rng.standard_normal(n)).astype(f32)
        g[rng.integers(0, n, 3)] = 0
        if t == 30:
            g[5], g[300] = np.nan, np.inf                   # 2-state rules skip them; 1-state ones let them in
        kernel = _step("kernel", name, g, kernel, t)
        reference = _step("reference", name, g, reference, t)
        for got, want, what in zip(kernel, reference, ("p", "state1", "state2", "absmax1", "absmax2")):
            if want is not None:
                assert np.array_equal(got, want, equal_nan=True), f"{name} step {t}: {what}"
    if name in ("adam", "ademamix"):
        assert np.isfinite(kernel[0]).all()


def test_thread_count_does_not_change_the_bits():
    rng = np.random.default_rng(3)
    n = 40 * 256 + 11
    g = (0.01 * rng.standard_normal(n)).astype(f32)
    results = []
    before = numba.get_num_threads()
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            state = _problem("adam", n, np.random.default_rng(4))
            for t in (1, 2, 3):
                _step("kernel", "adam", g, state, t)
            results.append(state)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(*results):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", bo.ALGORITHMS)
def test_32bit_step_matches_the_reference(name):
    rng = np.random.default_rng(11)
    n = 50
    b1, b2, b3, alpha, eps, lr, wd = HYPER[name]
    p = (0.1 * rng.standard_normal(n)).astype(f32)
    s1 = np.zeros((2, n) if name == "ademamix" else n, f32)
    s2 = np.zeros(n, f32) if name in ("adam", "ademamix") else None
    rp, rs1, rs2 = p.copy(), s1.copy(), None if s2 is None else s2.copy()
    for t in range(1, 21):
        g = (0.01 * rng.standard_normal(n)).astype(f32)
        bo.optimizer_update_32bit(name, g, p, s1, b1, eps, t, lr, state2=s2, beta2=b2, beta3=b3, alpha=alpha,
                                  weight_decay=wd)
        rp, rs1, rs2 = ref.optimizer_update_32bit(name, g, rp, rs1, b1, eps, t, lr, state2=rs2, beta2=b2,
                                                  beta3=b3, alpha=alpha, weight_decay=wd)
        assert np.array_equal(p, rp) and np.array_equal(s1, rs1)
        if s2 is not None:
            assert np.array_equal(s2, rs2)


def test_zero_block_and_sign_fix():
    # an all-zero block: absmax 0, state-1 code 0 turned into 255 by the sign fix, state 2 code 0
    p, s1, s2, a1, a2 = _problem("adam", 256, np.random.default_rng(0))
    _step("kernel", "adam", np.zeros(256, f32), (p, s1, s2, a1, a2), 1)
    assert a1.tolist() == [0.0] and (s1 == 255).all() and (s2 == 0).all()


def test_half_parameters_round_once():
    import ml_dtypes

    rng = np.random.default_rng(5)
    p32 = (0.1 * rng.standard_normal(300)).astype(f32)
    gh = (0.01 * rng.standard_normal(300)).astype(ml_dtypes.bfloat16)
    ph = p32.astype(ml_dtypes.bfloat16)
    wide = _problem("adam", 300, rng)
    half = (ph,) + tuple(x.copy() for x in wide[1:])
    wide = (ph.astype(f32),) + wide[1:]
    _step("kernel", "adam", gh.astype(f32), wide, 1)
    _step("kernel", "adam", gh, half, 1)
    assert np.array_equal(half[0], wide[0].astype(ml_dtypes.bfloat16))
    assert np.array_equal(half[1], wide[1])


@pytest.mark.parametrize("change,error,match", [
    (dict(name="sgd"), ValueError, "optimizer_name"),
    (dict(step=0), ValueError, "step"),
    (dict(lr=-1.0), ValueError, "lr"),
    (dict(beta1=1.0), ValueError, "beta1"),
    (dict(absmax1=np.zeros(3, f32)), ValueError, "absmax1"),
    (dict(state2=np.zeros(300, np.int8)), TypeError, "state2"),
    (dict(g=np.zeros(299, f32)), ValueError, "g"),
    (dict(qmap2=np.zeros(256)), TypeError, "qmap2"),
])
def test_errors_leave_every_array_unchanged(change, error, match):
    p, s1, s2, a1, a2 = _problem("adam", 300, np.random.default_rng(1))
    s1[:] = 7
    args = dict(name="adam", g=np.ones(300, f32), p=p, state1=s1, state2=s2, beta1=0.9, beta2=0.999,
                beta3=0.0, alpha=0.0, eps=1e-8, step=1, lr=1e-3, qmap1=dynamic_map(True),
                qmap2=dynamic_map(False), absmax1=a1, absmax2=a2)
    args.update(change)
    before = [x.copy() for x in (p, s1, s2, a1, a2)]
    with pytest.raises(error, match=match):
        bo.optimizer_update_8bit_blockwise(args.pop("name"), *args.values())
    for x, y in zip((p, s1, s2, a1, a2), before):
        assert np.array_equal(x, y)


def test_a_map_too_dense_for_the_start_tables_takes_the_binary_search():
    from optkernels.kernels.quantization import _build_search_tables, search_tables

    # Dense near 0 (too dense for the CUDA grids) and near 0.5 (several midpoints per CPU bucket).
    code = np.unique(np.concatenate([np.linspace(-1e-6, 1e-6, 100), np.linspace(0.5, 0.5005, 100),
                                     np.linspace(-1, 1, 56)]).astype(f32))
    assert code.size == 256
    assert search_tables(code, "cpu")[1][-1] == 0            # the CPU buckets cannot bound the walk here
    assert _build_search_tables(code)[1][-1] == 0            # nor can the CUDA grids
    rng = np.random.default_rng(2)
    a = np.concatenate([rng.uniform(-2e-6, 2e-6, 300), rng.uniform(-1, 1, 200), rng.uniform(0.499, 0.501, 200),
                        (code[:-1] + code[1:]) * f32(0.5), [f32(1)]]).astype(f32)
    codes, absmax = quantize_blockwise(a, code=code, blocksize=64)
    rc, ra = ref.quantize_blockwise(a, code=code, blocksize=64)
    assert np.array_equal(codes, rc) and np.array_equal(absmax, ra)
    for signed in (True, False):
        assert search_tables(dynamic_map(signed), "cpu")[1][-1] == 1
        assert _build_search_tables(dynamic_map(signed))[1][-1] == 1


@pytest.mark.parametrize("signed", [True, False])
def test_nearest_code_at_both_ends_of_every_cpu_bucket(signed):
    # The CPU search starts from the bucket of x's bits (>> 15): its first and last float32 of every
    # bucket (both signs, zeros, subnormals, values above 1, infinities), NaN and every midpoint.
    from optkernels.kernels.quantization import KEY_SHIFT, search_tables

    nearest_all = _nearest_all()
    low = np.arange(1 << (32 - KEY_SHIFT), dtype=np.uint32) << KEY_SHIFT
    x = np.concatenate([low.view(f32), (low | ((1 << KEY_SHIFT) - 1)).view(f32), _bits([0x7F800000, 0xFF800000])])
    code = dynamic_map(signed)
    mids = (code[:-1] + code[1:]) * f32(0.5)
    x = np.concatenate([x, mids, np.nextafter(mids, f32(2)), np.nextafter(mids, f32(-2))])
    out = np.zeros(x.size, np.uint8)
    nearest_all(x, *search_tables(code, "cpu"), out)
    assert np.array_equal(out, ref._nearest(x, code))


def _dynamic_check_points(signed):
    """Sorted float32 values where dynamic_start(x) or the nearest code t may change, with their neighbours:
    j and t are non-decreasing step functions of the float32 x (j: a composition of rounded monotone
    operations, decades meeting at equal codes), so both are constant between consecutive change points of
    either. t changes at the midpoints; j's change points are found by bisection over the bit patterns of
    |x| (monotone), then mirrored. Also both zeros, the infinities and NaNs of both signs."""
    starts = _starts(signed)

    def start(x):
        out = np.zeros(x.size, np.int64)
        starts(np.asarray(x, f32), out)
        return out

    top = 0x7F800000                                        # +inf: j is constant beyond
    lo_j, hi_j = start(_bits([0, top]))
    targets = np.arange(lo_j + 1, hi_j + 1)                 # the first |x| with j >= target, by bisection
    lo, hi = np.zeros(targets.size, np.int64), np.full(targets.size, top, np.int64)
    while (hi - lo > 1).any():
        mid = (lo + hi) // 2
        up = start(_bits(mid.astype(np.uint32))) >= targets
        lo, hi = np.where(up, lo, mid), np.where(up, mid, hi)
    change = np.unique(np.concatenate([hi, hi - 1, np.minimum(hi + 1, top), [0, 1, top]])).astype(np.uint32)
    code = dynamic_map(signed)
    mids = (code[:-1] + code[1:]) * f32(0.5)
    near = np.concatenate([mids, np.nextafter(mids, f32(2)), np.nextafter(mids, f32(-2))])
    x = np.concatenate([_bits(change), -_bits(change), near, -near, _bits([0x7FC00000, 0xFFC00000])])
    return np.sort(x), start


@pytest.mark.parametrize("signed", [True, False])
def test_decade_lines_need_no_clamp_up_to_one(signed):
    # search_dynamic_finite / _nonnegative truncate u = fma(a, A, D) without dynamic_lower's clamp to
    # [C, M]: the same index wherever C - 1 < u < M + 1, which holds for every a <= 1 since u is
    # non-decreasing in a inside a decade (A > 0): checked at each decade's smallest and largest float32.
    from optkernels.kernels._intrinsics import fma
    from optkernels.kernels.quantization import DECADES, SIGNED_LINES, UNSIGNED_LINES

    lines = SIGNED_LINES if signed else UNSIGNED_LINES
    starts = [f32(0.0), *DECADES]
    ends = [np.nextafter(d, f32(0)) for d in DECADES] + [f32(1.0)]
    for (A, D, C, M), lo, hi in zip(lines, starts, ends):
        assert A > 0
        u = [fma(lo, A, D), fma(hi, A, D)]
        assert C - 1 < u[0] <= u[1] < M + 1, (C, M, u)
        assert int(u[0]) >= C and int(u[1]) <= M  # the truncation is the clamp's
    assert [int(line[2]) for line in lines][:2] == ([127, 128] if signed else [0, 2])


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_search_is_exact_on_every_float32(signed):
    # nearest_dynamic(x) = dynamic_start(x) + one midpoint step, exact iff j = dynamic_start(x) <= t <= j + 1
    # with t the nearest code (ties to the even index), checked at every change point of either.
    from optkernels.kernels.quantization import nearest_dynamic, search_tables

    @numba.njit
    def nearest_all(x, mids, out):
        for i in range(x.size):
            out[i] = nearest_dynamic(x[i], mids, signed)

    x, start = _dynamic_check_points(signed)
    code = dynamic_map(signed)
    j, t = start(x), ref._nearest(x, code).astype(np.int64)
    assert (np.diff(j[:-2]) >= 0).all()                     # non-decreasing (NaNs sorted last)
    assert ((t - j >= 0) & (t - j <= 1)).all()
    out = np.zeros(x.size, np.int64)
    nearest_all(x, search_tables(code, "cpu")[0], out)
    assert np.array_equal(out, t)


@pytest.mark.parametrize("signed", [True, False])
def test_register_dynamic_search_at_every_change_point(signed):
    # search_dynamic_block: the start of dynamic_start (its decade from the binade's tables; negative keys,
    # -0.0 and -NaN included, mirrored; NaN as inf) and one threshold of the keys' search (state 1: the
    # sign fix folded in), at every change point of the start or the code (as above) and its neighbours
    # s/top: top 1 and 0.5, tops that are no power of two (a mantissa of all ones among them), tiny and
    # huge ones (s/top then rounds where s*(1/top) may not: the codes are of the exact quotient).
    from optkernels.kernels.quantization import register_search_tables

    search = _dynamic_block_search()
    code = dynamic_map(signed)
    keys = register_search_tables(code, signed)
    assert keys[304:307].tolist() == [1, 0 if signed else 1, 1]
    x, _ = _dynamic_check_points(signed)
    x = x[(np.abs(x) <= 1) | np.isnan(x)]                     # s/top with top = max |s|
    tops = [f32(1.0), f32(0.5), f32(0.7), _bits([0x3FFFFFFF])[0], _bits([0x3F7FFFFF])[0] * f32(2.0**-50),
            f32(2.0**-50), f32(1.5 * 2.0**-51), f32(2.0**100), _bits([0x3FFFFFFF])[0] * f32(2.0**100)]
    for top in tops:
        with np.errstate(under="ignore"):
            s = x * top
        s = np.concatenate([s, np.nextafter(s, f32(np.inf)), np.nextafter(s, -f32(np.inf))])
        s = np.resize(s[(np.abs(s) <= top) | np.isnan(s)], -(-s.size // 256) * 256).astype(f32)
        out = np.zeros(s.size, np.uint8)
        if not search(out, s.copy(), top, keys, not signed, False):
            pytest.skip("no AVX-512 VBMI: search_dynamic_block is not compiled on this CPU (the step keeps "
                        "its loops)")
        with np.errstate(under="ignore"):
            want = ref._nearest(s / top, code).astype(np.int32)
        if signed:
            want = np.where(np.signbit(code[want]) != np.signbit(s), np.where(s > 0, want + 1, want - 1), want)
        assert np.array_equal(out, (want % 256).astype(np.uint8)), top
        if signed:  # finite values (a 2-state rule's m' under a finite absmax): search_dynamic_finite
            keep = s == s
            t = np.resize(s[keep], -(-int(keep.sum()) // 256) * 256).astype(f32)
            out = np.zeros(t.size, np.uint8)
            search(out, t.copy(), top, keys, False, False, True)
            with np.errstate(under="ignore"):
                want = ref._nearest(t / top, code).astype(np.int32)
            want = np.where(np.signbit(code[want]) != np.signbit(t), np.where(t > 0, want + 1, want - 1), want)
            assert np.array_equal(out, (want % 256).astype(np.uint8)), top
        if not signed:  # the values of state 2 (+0 <= s <= top): search_dynamic_nonnegative, the same codes
            keep = ~np.signbit(s) & (s == s)
            t = np.resize(s[keep], -(-int(keep.sum()) // 256) * 256).astype(f32)
            out = np.zeros(t.size, np.uint8)
            search(out, t.copy(), top, keys, True, True)
            with np.errstate(under="ignore"):
                assert np.array_equal(out, ref._nearest(t / top, code).astype(np.uint8)), top


@pytest.mark.parametrize("which", ["dense", "zero signs"])
def test_step_with_a_map_off_the_fast_search_matches_the_reference(which):
    # The step's other loops: a map too dense for the CPU buckets (binary search), and one whose sign bits
    # are not a run of ones then zeros (-0.0 after +0.0: the sign fix looks the code's sign up).
    from optkernels.kernels.quantization import sign_split

    if which == "dense":
        q1 = np.unique(np.concatenate([np.linspace(-1e-6, 1e-6, 100), np.linspace(0.5, 0.5005, 100),
                                       np.linspace(-1, 1, 56)]).astype(f32))
    else:
        q1 = dynamic_map(True)
        q1[127], q1[128] = f32(0.0), f32(-0.0)
        assert sign_split(q1) == -1 and sign_split(dynamic_map(True)) == 127
    rng = np.random.default_rng(5)
    n = 300
    kernel = _problem("adam", n, rng)
    reference = tuple(x.copy() for x in kernel)
    q2 = dynamic_map(False)
    for t in range(1, 6):
        g = (0.01 * rng.standard_normal(n)).astype(f32)
        args = (g, 0.9, 0.999, 0.0, 0.0, 1e-8, t, 1e-3, q1, q2)
        p, s1, s2, a1, a2 = kernel
        bo.optimizer_update_8bit_blockwise("adam", g, p, s1, s2, *args[1:8], q1, q2, a1, a2)
        rp, rs1, rs2, ra1, ra2 = reference
        reference = ref.optimizer_update_8bit_blockwise("adam", g, rp, rs1, rs2, *args[1:8], q1, q2, ra1, ra2)
        for got, want in zip(kernel, reference):
            assert np.array_equal(got, want)


@pytest.mark.parametrize("permutes", [True, False])
def test_table_lookup_register_permutes_and_loop_give_the_table_bits(permutes, monkeypatch):
    # The dequantization of a full block: AVX-512 VBMI byte permutes where the CPU has them (permutes=True),
    # the portable loop (forced) otherwise; both must give table[index]·scale bit for bit.
    from optkernels.kernels import _intrinsics
    from optkernels.kernels.quantization import table_lookup, table_planes

    monkeypatch.setattr(_intrinsics, "BYTE_PERMUTES", permutes)

    @numba.njit(error_model="numpy")  # compiled here, after the switch (no cache)
    def lookup(out, index, table, planes, scale):
        table_lookup(out, 3, index, 5, table, planes, 1024, scale)
        return _intrinsics.byte_permutes()

    rng = np.random.default_rng(3)
    odd = _bits([0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0x00000001, 0x807FFFFF, 0x3F7FFFFF])
    tables = [dynamic_map(True), dynamic_map(False), rng.standard_normal(256).astype(f32)]
    tables[2][:7] = odd
    index = np.concatenate([[0, 0, 0, 0, 0], rng.permutation(256), [255]]).astype(np.uint8)
    for table in tables:
        planes = table_planes(dynamic_map(True), table)  # this table's planes at 1024
        for scale in (f32(1.0), f32(-3.0517578e-05), f32(1.7e38), f32(0.0)):
            out = np.full(262, f32(7.0))
            used = lookup(out, index, table, planes, scale)
            with np.errstate(all="ignore"):
                want = table[index[5:261]] * scale
            assert np.array_equal(out[3:259].view(np.uint32), want.view(np.uint32))
            assert (out[:3] == 7).all() and (out[259:] == 7).all()
    host = _intrinsics._byte_permutes_here(numba.core.registry.cpu_target.target_context)
    assert used == (permutes and host)


def test_sign_fixed_codes_at_both_ends_of_every_cpu_bucket():
    # The state-1 table with bitsandbytes' sign fix in its entries (nearest_code_fixed): the first and last
    # float32 of every bucket, NaNs of both signs, both zeros, infinities and every midpoint with its
    # neighbours, against the reference's nearest code and sign fix (x = s/absmax has the sign of s).
    from optkernels.kernels.quantization import KEY_SHIFT, nearest_code_fixed, search_tables, sign_fix_baked

    @numba.njit
    def fixed_all(x, start, out):
        for i in range(x.size):
            out[i] = nearest_code_fixed(x[i], start)
        return sign_fix_baked(start)

    code = dynamic_map(True)
    low = np.arange(1 << (32 - KEY_SHIFT), dtype=np.uint32) << KEY_SHIFT
    specials = _bits([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x80000000, 0])
    mids = (code[:-1] + code[1:]) * f32(0.5)
    x = np.concatenate([low.view(f32), (low | ((1 << KEY_SHIFT) - 1)).view(f32), specials, mids,
                        np.nextafter(mids, f32(2)), np.nextafter(mids, f32(-2))])
    out = np.zeros(x.size, np.uint8)
    assert fixed_all(x, search_tables(code, "cpu", sign_fix=True)[1], out)
    c = ref._nearest(x, code).astype(np.int32)
    c = np.where(np.signbit(code[c]) != np.signbit(x), np.where(x > 0, c + 1, c - 1), c) % 256
    assert np.array_equal(out, c.astype(np.uint8))
    assert not search_tables(dynamic_map(False), "cpu", sign_fix=True)[1][-3]  # no negative entries


def test_scalar_lookups_give_the_table_entries():
    from optkernels.kernels._intrinsics import scalar_lookups

    @numba.njit
    def look(data, base, count, table):
        scalar_lookups(data, base, count, table)

    table = np.arange(1000, dtype=np.uint32) * np.uint32(2654435761)
    index = np.random.default_rng(4).integers(0, 1000, 41).astype(np.uint32)
    words = np.concatenate([[7, 7], index, [7]]).astype(np.uint32)
    look(words, 2, 41, table)
    assert np.array_equal(words[2:43], table[index]) and words[[0, 1, 43]].tolist() == [7, 7, 7]
    floats = np.concatenate([[f32(1)], index[:40].view(f32), [f32(2)]])  # indices kept as float32 bits
    look(floats, 1, 40, table)
    assert np.array_equal(floats[1:41].view(np.uint32), table[index[:40]]) and floats[[0, 41]].tolist() == [1, 2]


DENSE = np.unique(np.concatenate([np.linspace(-1e-6, 1e-6, 100), np.linspace(0.5, 0.5005, 100),
                                  np.linspace(-1, 1, 56)]).astype(f32))


@pytest.mark.parametrize("case", ["signed, sign fix in the table", "unsigned", "signed, sign fix after the search",
                                  "dense, signed", "dense, unsigned"])
def test_full_block_requantization_matches_the_reference(case):
    # A full block takes the three-loop search (scalar table loads), a partial one the single loop, a full
    # block of a map too dense for the start tables the register search where the CPU has it: all against
    # the reference's nearest code and sign fix, on s/top at every midpoint, its neighbours, both zeros,
    # NaNs of both signs and values beyond the table; top finite, zero and infinite.
    from optkernels.kernels.quantization import (
        REGISTER_WORDS,
        search_tables,
        sign_split,
        step_register_tables,
    )

    requantize = _requantize()
    signed = case != "unsigned" and case != "dense, unsigned"
    code = DENSE if case.startswith("dense") else dynamic_map(signed)
    keys = step_register_tables(code, code)
    key_base = 0 if signed else REGISTER_WORDS
    mids = (code[:-1] + code[1:]) * f32(0.5)
    rng = np.random.default_rng(9)
    pool = np.concatenate([mids, np.nextafter(mids, f32(2)), np.nextafter(mids, f32(-2)), -mids,
                           _bits([0, 0x80000000, 0x7FC00000, 0xFFC00000]), f32([1.5, -1.5, 1.0, -1.0])])
    tables = search_tables(code, "cpu", sign_fix=case.endswith("in the table") or case == "dense, signed")
    negatives = sign_split(code) if signed else -1
    for top in (f32(1.0), f32(0.0), f32(np.inf), f32(3.0)):
        for count in (256, 255):
            x = rng.choice(pool, 256).astype(f32)
            scratch = np.zeros(1024, f32)
            scratch[:256] = x * top if top not in (0, np.inf) else x
            s = scratch[:256].copy()
            out = np.zeros(260, np.uint8)
            requantize(out, 2, scratch, count, top, code, *tables, negatives, signed, keys, key_base)
            with np.errstate(all="ignore"):
                q = s / top
            want = ref._nearest(q, code).astype(np.int32)
            if signed:
                want = np.where(np.signbit(code[want]) != np.signbit(s), np.where(s > 0, want + 1, want - 1), want)
            assert np.array_equal(out[2:2 + count], (want % 256).astype(np.uint8)[:count]), (top, count)


@pytest.mark.parametrize("table", ["signed", "unsigned", "dense"])
@pytest.mark.parametrize("sign_fix", [True, False])
def test_register_search_at_every_threshold(table, sign_fix):
    # search_block counts the thresholds below the key of x = s/top: exact iff every threshold is right,
    # so x at each threshold key and the keys beside it (both signs), both zeros, the infinities and NaNs
    # of both signs, against the reference's nearest code (and the state-1 sign fix); top 1 and 3.
    from optkernels.kernels.quantization import _from_keys, register_search_tables

    search = _block_search()
    code = {"signed": dynamic_map(True), "unsigned": dynamic_map(False), "dense": DENSE}[table]
    keys = register_search_tables(code, sign_fix)
    if table == "unsigned" and sign_fix:  # -0.0 would go to 255 and +0.0 to 0: not monotone, not used
        assert keys[304] == 0
        return
    assert keys[304] == 1 and keys[305] == (0 if sign_fix else 1)
    first = keys[np.r_[0, 16:18, 32:36, 48:56, 64:80, 80:112, 112:176, 176:304]]  # every threshold once
    near = np.concatenate([first - 1, first, first + 1]).astype(np.int64)
    specials = _bits([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x3F800001, 0xBF800001])
    for top in (f32(1.0), f32(3.0)):
        x = np.concatenate([_from_keys(np.clip(near, -2**31, 2**31 - 1)), specials])
        x = x[np.abs(x * top) < np.inf] if top != 1 else x
        s = np.resize(x * top if top != 1 else x, -(-x.size // 256) * 256).astype(f32)
        out = np.zeros(s.size, np.uint8)
        if not search(out, s, top, keys, not sign_fix):
            pytest.skip("no AVX-512F: search_block is not compiled on this CPU (the step keeps its loops)")
        with np.errstate(all="ignore"):
            q = s / top
        want = ref._nearest(q, code).astype(np.int32)
        if sign_fix:
            want = np.where(np.signbit(code[want]) != np.signbit(s), np.where(s > 0, want + 1, want - 1), want)
        assert np.array_equal(out, (want % 256).astype(np.uint8)), (table, sign_fix, top)
