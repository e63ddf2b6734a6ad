"""divide_by_reciprocal (float32 s/c in float32 steps: a product, three fma, one vfixupimm) gives IEEE
division's bits: every significand of s for the hardest divisors and Adam's, random pairs across the
exponent ranges, signed zeros, infinities and NaN; its special-value fixup without AVX-512 (a select) is
the same; the float32 Adam loop with it equals the loop that divides."""
import functools
import platform
import re
from pathlib import Path

import numba
import numpy as np
import pytest
from numba.extending import intrinsic

from optkernels.kernels import _constant_quotient, _intrinsics
from optkernels.kernels import torch_rules as T
from optkernels.kernels._constant_quotient import (
    QUOTIENT_DIVIDEND_RANGE,
    QUOTIENT_DIVISOR_RANGE,
    divide_by_reciprocal,
)
from optkernels.kernels._elementwise import _many_entry
from optkernels.kernels._intrinsics import quotient_special, zen_target
from optkernels.kernels._threading import parallel_launch

X86 = platform.machine().lower() in ("x86_64", "amd64")
CPU_FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
AVX512 = X86 and "avx512f" in CPU_FLAGS
F = np.float32
SIGNIFICANDS = np.arange(1 << 23, dtype=np.uint32)


@pytest.fixture
def reciprocal_steps(monkeypatch):
    """The reciprocal's steps compiled on every processor (AMD's Zen cores otherwise divide): the
    functions below are compiled on their first call, under this fixture."""
    monkeypatch.setattr(_constant_quotient, "DIVIDE_ON_ZEN", False)


@numba.njit(error_model="numpy")
def _by_constant(s, c, inverse, out):
    for i in range(s.size):
        out[i] = divide_by_reciprocal(s[i], c, inverse)


@numba.njit(error_model="numpy")
def _by_each(s, c, inverse, out):
    for i in range(s.size):
        out[i] = divide_by_reciprocal(s[i], c[i], inverse[i])


def _quotients(s, c):
    out = np.empty_like(s)
    _by_constant(s, F(c), 1.0 / float(c), out)
    return out


def _binade(first):
    return (SIGNIFICANDS + np.uint32(first)).view(F)


@functools.cache
def _hardest_divisors(count):
    """Divisors in [1, 2) whose RN(1/c) is furthest off: the largest C·|ε|, ε = c·RN(1/c) − 1 (the bound of
    the proof's last step), among all 2^23 significands, both signs of ε."""
    c = _binade(0x3F800000)
    eps = c.astype(np.float64) * (F(1) / c).astype(np.float64) - 1.0  # exact: a 48-bit product, Sterbenz
    score = np.abs(eps) * c
    up = np.argpartition(np.where(eps > 0, score, 0), -count)[-count:]
    down = np.argpartition(np.where(eps < 0, score, 0), -count)[-count:]
    return tuple(c[up]) + tuple(c[down])


def test_the_float32_reciprocal_is_rounded_once_for_every_divisor_significand():
    """float32(float64(1/c)) (the y of the steps) is IEEE float32's 1/c for all 2^23 significands, and
    the hardest divisors' |ε| reach the proof's bound C·2^-48 closely (so they test what it claims)."""
    c = _binade(0x3F800000)
    y = (1.0 / c.astype(np.float64)).astype(F)
    np.testing.assert_array_equal(y.view(np.uint32), (F(1) / c).view(np.uint32))
    hardest = np.array(_hardest_divisors(6), F)
    eps = np.abs(hardest.astype(np.float64) * (F(1) / hardest).astype(np.float64) - 1.0)
    bound = hardest.astype(np.float64) * 2.0**23 * 2.0**-48  # C·2^-48
    assert np.all(eps <= bound) and np.all(eps > 0.99 * bound)


@pytest.mark.parametrize("kind", ["hardest", "adam", "edges"])
def test_every_dividend_significand_gives_the_division(kind, reciprocal_steps):
    """All 2^23 significands of s (one binade: the exponent of s only shifts every step, in the ranges),
    against IEEE float32 division, for the 12 hardest divisors, Adam's bias corrections (default and other
    betas, steps 1 to 10^4), and divisors at the edges (1, 1 − 2^-24, 0.5, 0.75, the low end, all ones)."""
    if kind == "hardest":
        divisors = [F(h) * F(2.0**-3) for h in _hardest_divisors(6)]
    elif kind == "adam":
        divisors = [T.adam_scalars(np.dtype(F), t, 1e-3, 0.9, b2, 1e-8, 0.0, False, False)[10]
                    for b2 in (0.999, 0.95, 0.9999, 1 - 2.0**-53) for t in (1, 2, 7, 1000, 10**4)]
    else:
        divisors = [F(1), F(1 - 2.0**-24), F(0.5), F(0.75), F(2.0**-32) * F(1.75), F(2.0**-27) * F(2 - 2.0**-23)]
    s = _binade(0x3F800000)
    for c in divisors:
        got = _quotients(s, c)
        np.testing.assert_array_equal(got.view(np.uint32), (s / c).view(np.uint32), err_msg=f"divisor {c!r}")
    # other binades of s, and negative s, for the last divisor: the same bits as division
    for first in (0x1A800000, 0x5F000000, 0xBF800000):  # 2^-74, 2^63, -1
        s = _binade(first)
        np.testing.assert_array_equal(_quotients(s, c).view(np.uint32), (s / c).view(np.uint32))


def test_random_pairs_and_special_values_give_the_division(reciprocal_steps):
    """Random s (log-uniform over the dividend range, both signs) by random c (log-uniform over the divisor
    range), a divisor per element; then ±0, ±∞, quiet and signalling NaN with payloads, the range's ends:
    the division's bits, NaN payloads included."""
    rng = np.random.default_rng(29)
    n = 1 << 21
    low, high = (np.log2(x) for x in QUOTIENT_DIVIDEND_RANGE)
    s = (np.exp2(rng.uniform(low, high, n)) * rng.choice([-1.0, 1.0], n)).astype(F)
    low, high = (np.log2(x) for x in QUOTIENT_DIVISOR_RANGE)
    c = np.exp2(rng.uniform(low, high, n)).astype(F)
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 0x7F800001,
                        0xFFA00042, 0x7FFFFFFF], np.uint32).view(F)
    ends = np.array([QUOTIENT_DIVIDEND_RANGE[0], QUOTIENT_DIVIDEND_RANGE[1], -QUOTIENT_DIVIDEND_RANGE[1]], F)
    s = np.concatenate([s, np.repeat(special, 5), np.repeat(ends, 5)])
    c = np.concatenate([c, np.tile(F([1, 2.0**-32, 2.0**-27 * 1.5, 0.3, 1 - 2.0**-24]), special.size + ends.size)])
    out = np.empty_like(s)
    _by_each(s, c, 1.0 / c.astype(np.float64), out)
    with np.errstate(invalid="ignore"):
        expected = s / c
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    assert np.isnan(out[n:n + 45]).sum() == 25  # (the NaNs compared by their bits above)


@intrinsic
def _select_only(typingctx, quotient, x, multiplier):
    def codegen(context, builder, signature, args):
        return _intrinsics._quotient_special_select(builder, *args)

    return quotient(quotient, x, multiplier), codegen


def test_quotient_special_without_avx512_is_the_same_select():
    """The select (no AVX-512) and vfixupimm (with it; the select again elsewhere) give every class the
    same bits: the quotient for finite nonzero x, x itself for ±0 and ±∞, x quieted for a NaN; the
    Python version too (NaN payloads aside)."""
    x = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 0x7F800001,
                  0xFFA00042, 0x3F800000, 0xBF800000, 0x00000001, 0x80400000, 0x7F7FFFFF, 0x40490FDB],
                 np.uint32).view(F)
    quotient = np.full(x.size, F(-7.25))
    reps = 64  # the vector body and the scalar tail
    x, quotient = np.tile(x, reps), np.tile(quotient, reps)
    three = F(3)

    @numba.njit(error_model="numpy", cache=False)
    def both(quotient, x, fixed, selected):
        for i in range(x.size):
            fixed[i] = quotient_special(quotient[i], x[i], three)
            selected[i] = _select_only(quotient[i], x[i], three)

    fixed, selected = np.empty_like(x), np.empty_like(x)
    both(quotient, x, fixed, selected)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = np.where((x != 0) & np.isfinite(x), quotient, x * three)
        python = np.array([quotient_special(q, v, three) for q, v in zip(quotient[:14], x[:14])], F)
    np.testing.assert_array_equal(fixed.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(selected.view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(python[~np.isnan(x[:14])], expected[:14][~np.isnan(x[:14])])


def _adam_arrays(seed, n=4099):
    rng = np.random.default_rng(seed)
    var, m, g = (rng.standard_normal(n).astype(F) for _ in range(3))
    v = (np.abs(rng.standard_normal(n)) * F(1e-3)).astype(F)
    v[:12] = [0, -0.0, np.inf, np.nan, 1e-45, 1e-40, 3e-39, 1e30, 3.4e38, -1.0, 0, np.inf]
    g[:12] = [0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1e19, 0]
    return [var, m, v, g]


@pytest.mark.parametrize("mkl", [T.IEEE_SQRT, T.MKL_AVX512_SQRT], ids=["ieee", "Z0"])
@pytest.mark.parametrize("beta2", [0.999, 0.95])
def test_the_float32_adam_loop_gives_the_bits_of_the_loop_that_divides(mkl, beta2):
    """optkernels.torch's float32 Adam element function with the float32 steps (the float64 1/c given)
    and with a division (None given), on data whose roots are zero, subnormal-born, huge, infinite, NaN:
    the same bits in every array, steps 1 to 3 and 10^4."""
    group = T.adam_group_scalars(np.dtype(F), 1e-3, 0.9, beta2, 1e-8, 0.0, False, False, mkl)
    for step in (1, 2, 3, 10**4):
        scalars = T.adam_step_scalars(group, step)
        assert isinstance(scalars[11], float)
        results = []
        for inverse in (scalars[11], None):
            arrays = _adam_arrays(step)
            with np.errstate(all="ignore"):
                T._torch_adam.launch("cpu", arrays[0].size, *arrays, *scalars[:11], inverse, *scalars[12:])
            results.append(arrays)
        for ours, divided in zip(*results):
            np.testing.assert_array_equal(ours.view(np.uint32), divided.view(np.uint32))
        assert np.sum(results[0][0] != _adam_arrays(step)[0]) > 4000  # every finite parameter moved


@pytest.mark.skipif(not AVX512, reason="checks AVX-512 instructions")
def test_the_float32_adam_loop_divides_by_the_constant_without_conversions():
    """The 16-lane Adam loop (Z0 root) holds no float64 conversion: the root's division by the bias
    correction is float32 arithmetic and a second vfixupimmps, one vdivps left per copy of the loop (the
    update's); compiled for AMD's Zen cores, that division is a vdivps (and the root's fixup the only
    one)."""
    group = T.adam_group_scalars(np.dtype(F), 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False, T.MKL_AVX512_SQRT)
    scalars = T.adam_step_scalars(group, 3)
    entry = _many_entry(T._torch_adam.py_func, 4, None, False, True)
    arrays = _adam_arrays(5, 1024)
    chunks = np.array([[0, 0, 1024, 1024]], np.int64)
    addresses = np.array([[a.ctypes.data] for a in arrays], np.int64)
    with parallel_launch(), np.errstate(all="ignore"):
        entry(False, 1, chunks, addresses, np.empty(0, F), *scalars)
    asm = re.sub(r"(?ms)^optkernels\.\w+_v\d+:.*?^\.Lfunc_end\d+:", "", entry.inspect_asm(entry.signatures[0]))
    assert "vcvtps2pd" not in asm and "vcvtpd2ps" not in asm
    # (LLVM may keep several copies of the loop, one per value of a flag: each has both fixups and a division)
    divisions = len(re.findall(r"vdivps\s.*%zmm", asm))
    fixups = len(re.findall(r"vfixupimmps\s.*%zmm", asm))
    reciprocal = divisions >= 1 and fixups == 2 * divisions
    assert reciprocal or (zen_target() and fixups >= 1 and divisions == 2 * fixups)
