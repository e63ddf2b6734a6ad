"""The kernels of torch's rules (optkernels.kernels.torch_rules: RMSprop, Adamax, Adam, Adagrad, SGD,
SparseAdam) against their float64 reference (optkernels.reference.torch_rules), and the fma they round with;
no torch needed (tests/test_torch_bits.py checks the bits against torch itself)."""
import numpy as np
import pytest

from optkernels.kernels import torch_rules as K
from optkernels.kernels._intrinsics import fma
from optkernels.kernels.torch_rules import torch_adamax, torch_rms_prop
from optkernels.reference import torch_rules as ref


def _arrays(rng, n, dtype, k):
    return [rng.standard_normal(n).astype(dtype) for _ in range(k)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("momentum", [False, True])
def test_rms_prop_matches_reference(dtype, centered, momentum):
    rng = np.random.default_rng(int(centered) * 2 + int(momentum))
    var, grad, buf, ga = _arrays(rng, 1000, dtype, 4)
    sa = (np.abs(rng.standard_normal(1000)) + ga * ga + 1).astype(dtype)   # > ga²: the centered root is real
    kwargs = dict(momentum=0.7 if momentum else 0.0, momentum_buffer=buf if momentum else None,
                  grad_avg=ga if centered else None)
    expected = ref.torch_rms_prop(var, sa, grad, 0.01, 0.9, 1e-6, **kwargs)
    got = torch_rms_prop(var, sa, grad, 0.01, 0.9, 1e-6, **kwargs)
    assert got[0] is var and len(got) == len(expected)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adamax_matches_reference_over_steps(dtype):
    rng = np.random.default_rng(9)
    var, = _arrays(rng, 500, dtype, 1)
    m, u = np.zeros_like(var), np.zeros_like(var)
    r = [var.astype(np.float64), m.astype(np.float64), u.astype(np.float64)]
    for step in range(1, 6):
        g = rng.standard_normal(500).astype(dtype)
        torch_adamax(var, m, u, g, 0.002, 0.9, 0.999, 1e-3, step)
        r = list(ref.torch_adamax(*r, g, 0.002, 0.9, 0.999, 1e-3, step))
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for got, exp in zip((var, m, u), r):
        np.testing.assert_allclose(got, exp, rtol=tol, atol=tol)
    # epsilon sits inside the max: a zero gradient on a zero state gives u = eps, not 0
    w, m0, u0 = np.ones(2, dtype), np.zeros(2, dtype), np.zeros(2, dtype)
    torch_adamax(w, m0, u0, np.zeros(2, dtype), 0.1, 0.9, 0.999, 0.5, 1)
    np.testing.assert_array_equal(u0, dtype(0.5))


def test_errors_before_any_write():
    var, sa, g = np.ones(3), np.ones(3), np.ones(3)
    with pytest.raises(ValueError, match="alpha"):
        torch_rms_prop(var, sa, g, 0.1, 1.5, 1e-8)
    with pytest.raises(ValueError, match="step"):
        torch_adamax(var, sa, np.ones(3), g, 0.1, 0.9, 0.99, 1e-8, 0)
    with pytest.raises(TypeError):
        torch_rms_prop(var, sa.astype(np.float32), g, 0.1, 0.9, 1e-8)
    np.testing.assert_array_equal(var, 1.0)
    np.testing.assert_array_equal(sa, 1.0)


# ------------------------------------------------------------- torch-rounded element functions vs reference


def test_fma_rounds_once():
    """``fma(a, a, -1)`` keeps the low bits that ``a*a - 1`` rounds away (float32 and float64)."""
    a32 = np.float32(1 + 2.0 ** -12)
    assert fma(a32, a32, np.float32(-1)) == 2.0 ** -11 + 2.0 ** -24
    assert a32 * a32 - np.float32(1) == np.float32(2.0 ** -11)
    a64 = 1 + 2.0 ** -30
    assert fma(a64, a64, -1.0) == 2.0 ** -29 + 2.0 ** -60
    assert a64 * a64 - 1.0 == 2.0 ** -29
    assert np.isnan(fma(np.inf, 0.0, 1.0)) and fma(np.inf, 1.0, 1.0) == np.inf


def _steps(rng, n, dtype, steps):
    return [rng.standard_normal(n).astype(dtype) for _ in range(steps)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("flags", [dict(), dict(amsgrad=True, weight_decay=0.1, maximize=True),
                                   dict(weight_decay=0.2, decoupled=True, beta1=0.4)],
                         ids=["plain", "amsgrad-l2-maximize", "decoupled"])
def test_torch_adam_matches_reference(dtype, flags):
    rng = np.random.default_rng(1)
    lr, beta1, beta2, eps = 0.01, flags.get("beta1", 0.9), 0.999, 1e-6
    wd, decoupled = flags.get("weight_decay", 0.0), flags.get("decoupled", False)
    maximize = flags.get("maximize", False)
    w = rng.standard_normal(999).astype(dtype)
    arrays = [w, np.zeros_like(w), np.zeros_like(w)] + ([np.zeros_like(w)] if flags.get("amsgrad") else [])
    expected = [a.astype(np.float64) for a in arrays]
    kernel = K._torch_adam_amsgrad if flags.get("amsgrad") else K._torch_adam
    for step, g in enumerate(_steps(rng, 999, dtype, 5), start=1):
        kernel.launch("cpu", 999, *arrays, g, *K.adam_scalars(np.dtype(dtype), step, lr, beta1, beta2, eps, wd,
                                                              decoupled, maximize))
        expected = list(ref.torch_adam(*expected[:3], g, lr, beta1, beta2, eps, step, weight_decay=wd,
                                        decoupled_weight_decay=decoupled, maximize=maximize,
                                        max_exp_avg_sq=expected[3] if len(expected) > 3 else None))
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for got, exp in zip(arrays, expected):
        np.testing.assert_allclose(got, exp, rtol=tol, atol=tol)


def test_torch_adagrad_and_sgd_match_reference():
    rng = np.random.default_rng(2)
    d = np.dtype(np.float64)
    w = rng.standard_normal(257)
    a = [w.copy(), np.full_like(w, 0.1)]
    ra = [w.copy(), np.full_like(w, 0.1)]
    s = [w.copy(), np.zeros_like(w)]
    rs = [w.copy(), None]
    for step, g in enumerate(_steps(rng, 257, np.float64, 4), start=1):
        K._torch_adagrad.launch("cpu", 257, *a, g, *K.adagrad_scalars(d, step, 0.1, 0.01, 1e-8, 0.1, True))
        ra = list(ref.torch_adagrad(*ra, g, 0.1, 1e-8, step, lr_decay=0.01, weight_decay=0.1, maximize=True))
        K._torch_sgd_momentum.launch("cpu", 257, *s, g, *K.sgd_scalars(d, step == 1, 0.05, 0.9, 0.0, 0.01, True,
                                                                       False))
        rs = list(ref.torch_sgd(rs[0], g, 0.05, momentum=0.9, momentum_buffer=rs[1], nesterov=True,
                                      weight_decay=0.01))
    for got, exp in zip(a + s, ra + rs):
        np.testing.assert_allclose(got, exp, rtol=1e-13, atol=1e-13)
    plain = w.copy()
    K._torch_sgd.launch("cpu", 257, plain, g, *K.sgd_scalars(d, False, 0.05, 0.0, 0.0, 0.0, False, True))
    np.testing.assert_allclose(plain, ref.torch_sgd(w, g, 0.05, maximize=True)[0], rtol=1e-15)


def test_torch_sparse_adam_matches_reference():
    """Coalesced rows (unique, any order) of a (6, 5) parameter; the other rows never change."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 5))
    arrays = [w.copy(), np.zeros_like(w), np.zeros_like(w)]
    expected = [w.copy(), np.zeros_like(w), np.zeros_like(w)]
    rows = np.array([4, 0, 2], np.int64)
    for step in range(1, 4):
        values = rng.standard_normal((3, 5))
        K._torch_sparse_adam.launch("cpu", values.size, *(a.reshape(-1) for a in arrays), values.reshape(-1),
                                    rows, 5, *K.sparse_adam_scalars(np.dtype(np.float64), step, 0.01, 0.9, 0.999,
                                                                    1e-8))
        expected = list(ref.torch_sparse_adam(*expected, rows, values, 0.01, 0.9, 0.999, 1e-8, step))
    for got, exp in zip(arrays, expected):
        np.testing.assert_allclose(got, exp, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(arrays[0][[1, 3, 5]], w[[1, 3, 5]])


@pytest.mark.parametrize("rows_loop", ["torch_sparse_adam_rows", "torch_sparse_adam_rows_parallel"])
def test_torch_sparse_adam_rows_are_the_element_functions_bits(rows_loop):
    """The row loop (serial and parallel) against the element function: float32, rows in any order, a
    width of 19 (vector body and tail), IEEE and MKL-path sqrt."""
    rng = np.random.default_rng(5)
    rows = np.array([7, 0, 3, 9, 1], np.int64)
    for mkl in (K.IEEE_SQRT, K.MKL_AVX_SQRT):
        a = [rng.standard_normal((10, 19)).astype(np.float32).reshape(-1) for _ in range(2)]
        a.append(np.abs(rng.standard_normal(190)).astype(np.float32))
        b = [x.copy() for x in a]
        values = rng.standard_normal(rows.size * 19).astype(np.float32)
        scalars = K.sparse_adam_scalars(np.dtype(np.float32), 3, 0.01, 0.9, 0.999, 1e-8, mkl)
        K._torch_sparse_adam.launch("cpu", values.size, *a, values, rows, 19, *scalars)
        getattr(K, rows_loop)(*b, values, rows, 19, *scalars)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_division_by_bias_correction_is_the_float32_division():
    """divide_by_constant's float64 product rounds to the float32 quotient for every float32 significand
    (all 2^23 of one binade: the exponent only shifts the result), for the bias corrections of torch's
    default betas (rooted, and unrooted as Schedule-Free AdamW divides) and for divisors whose significand is all ones or a single bit; zeros, inf, NaN too."""
    s = (np.arange(1 << 23, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, np.nan, 3.7e-23, 1.8e19], np.float32)
    divisors = [K.adam_scalars(np.dtype(np.float32), t, 1e-3, 0.9, beta2, 1e-8, 0.0, False, False)[10]
                for beta2 in (0.999, 0.95, 0.0) for t in (1, 2, 7, 1000)]
    divisors += [np.float32(1 - 2.0**-24), np.float32(0.5), np.nextafter(np.float32(0.75), np.float32(1))]
    divisors += [np.float32(1 - 0.999**t) for t in (1, 2, 7, 1000)]  # Schedule-Free AdamW's, unrooted
    for c in divisors:
        got = K.divide_by_constant(s, c, 1.0 / float(c))
        np.testing.assert_array_equal(got.view(np.uint32), (s / c).view(np.uint32), err_msg=f"divisor {c!r}")
        np.testing.assert_array_equal(K.divide_by_constant(special, c, 1.0 / float(c)), special / c)


def test_torch_tail_marks_the_scalar_tail_of_each_torch_chunk():
    """torch_tail (compiled for a bfloat16 array, int32 and int64 scalars) against torch's loop written out:
    ``min(threads, ⌈n/32768⌉)`` chunks of ``⌈n/that⌉`` elements, each ending in ``length mod width`` scalar
    elements; sizes around the chunk and vector boundaries, thread counts 1 to 64, widths 16 and 32."""
    import numba

    from optkernels.kernels._torch_tail import torch_tail, torch_tail_scalars

    @numba.njit
    def marked(n, tail_from, chunk, chunk_tail, like):
        out = np.zeros(n, np.bool_)
        for i in range(np.uint64(n)):
            out[i] = torch_tail(i, tail_from, chunk, chunk_tail, like)
        return out

    cases = [(n, t, w) for n in (1, 31, 32, 33, 32768, 32769, 65539, 98307, 1000003) for t in (1, 2, 3, 64)
             for w in (16, 32)]
    for n, threads, width in cases:
        used = max(1, min(threads, -(-n // 32768)))
        chunk = -(-n // used)
        expected = np.zeros(n, np.bool_)
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            expected[stop - (stop - start) % width:stop] = True
        scalars = torch_tail_scalars(n, threads, width)
        assert scalars[0].dtype == np.int32
        for kind in (np.int32, np.int64):
            got = marked(n, *(kind(s) for s in scalars), np.uint16(0))
            np.testing.assert_array_equal(got, expected, err_msg=f"n={n}, threads={threads}, width={width}")
    assert not marked(100, *torch_tail_scalars(100, 2, 16), np.float32(0)).any()  # float32: never a tail
