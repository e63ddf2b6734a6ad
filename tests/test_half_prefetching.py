"""The prefetching form of the fused half loop (``Elementwise.prefetch_large_half``, set on the elements of
apply_adam, apply_adam_with_amsgrad and adam_no_update_param): for float16/bfloat16 parameters or gradients
with float32 or half moments, its chunked entry gives the plain fused entry's bits around the part (2**20
per thread), block (64) and prefetch (1024 + 64) bounds, on one part and two; the public entries compile
and run it only where a thread's part holds 2**20 elements or more, with the bits of their plain launch;
and an element function without the flag keeps the plain loop."""

import ml_dtypes
import numba
import numpy as np
import pytest

from optkernels.kernels import _elementwise as E
from optkernels.kernels import adam_no_update_param, apply_adam, apply_adam_with_amsgrad
from optkernels.kernels._threading import parallel_allowed, parallel_launch
from optkernels.kernels.adam import _adam, _adam_amsgrad, _adam_delta

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
f = np.float32

# kernel -> (its arrays' layouts: DeepSpeed's (half parameter and gradient, float32 moments) and all half;
# the second moment's and AMSGrad's maximum's positions (kept >= 0); scalars, Nesterov's last where taken)
KERNELS = {
    "adam": (
        _adam,
        [(BF16, F32, F32, BF16), (F16, F32, F32, F16), (BF16,) * 4],
        (2,),
        [(f(0.05), f(0.9), f(0.1), f(0.001), f(1e-8), nesterov) for nesterov in (False, True)],
    ),
    "amsgrad": (
        _adam_amsgrad,
        [(BF16, F32, F32, F32, BF16), (BF16,) * 5],
        (2, 3),
        [(f(0.05), f(0.1), f(0.001), f(1e-8))],
    ),
    "delta": (
        _adam_delta,
        [(F32, F32, F32, BF16), (F16, F32, F32, F16)],
        (2,),
        [(f(0.05), f(0.9), f(0.1), f(0.999), f(0.001), f(1e-8), nesterov) for nesterov in (False, True)],
    ),
}
SIZES = (1000, 2**20 - 1, 2**20 + 1087, 2**21 - 2, 2**21 + 64 * 37 + 5)


def _arrays(rng, n, dtypes, positive=(2,)):
    arrays = [rng.standard_normal(n, dtype=np.float32) for _ in dtypes]
    for k in positive:
        arrays[k] = np.abs(arrays[k]) + np.float32(0.01)
    return [a.astype(d) for a, d in zip(arrays, dtypes)]


def _bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_prefetching_fused_half_entry_gives_the_plain_entrys_bits(name):
    kernel, layouts, positive, all_scalars = KERNELS[name]
    assert kernel.prefetch_large_half, f"{name}'s large half launches do not prefetch"
    rng = np.random.default_rng(3)
    for dtypes in layouts:
        kinds = E._half_kinds((*(np.empty(1, d) for d in dtypes), *all_scalars[0]))
        plain = E._fused_entry(kernel.py_func, kinds)
        prefetching = E._prefetching_fused_entry(kernel, kinds, ())
        assert plain is not None and prefetching is not plain
        assert prefetching is E._prefetching_fused_entry(kernel, kinds, ()), "not kept with the drivers"
        for n in SIZES:
            arrays = _arrays(rng, n, dtypes, positive)
            for parallel in (False, True):
                for scalars in all_scalars:
                    runs = []
                    for entry in (plain, prefetching):
                        copies = [a.copy() for a in arrays]
                        views = [a.view(np.uint16) if a.dtype.itemsize == 2 else a for a in copies]
                        with parallel_launch(), np.errstate(all="ignore"):
                            entry(parallel and parallel_allowed(), n, *views, *scalars)
                        runs.append(copies)
                    for k, (x, y) in enumerate(zip(*runs)):
                        assert np.array_equal(_bits(x), _bits(y)), (
                            f"{name} {[d.name for d in dtypes]} n={n} parallel={parallel} {scalars[-1]}: "
                            f"array {k} differs"
                        )
                    moved = _bits(runs[1][0]) != _bits(arrays[0])
                    assert moved.sum() > 0.5 * n, "the step moved nothing: the check checks nothing"


def _public_steps(var, m, v, vhat, g):
    """apply_adam, apply_adam_with_amsgrad and adam_no_update_param on copies (bfloat16 parameter and
    gradient, float32 moments); every array they write."""
    adam = [x.copy() for x in (var, m, v)]
    apply_adam(*adam, 0.9**3, 0.999**3, 0.1, 0.9, 0.999, 1e-8, g)
    amsgrad = [x.copy() for x in (var, m, v, vhat)]
    apply_adam_with_amsgrad(*amsgrad, 0.9**3, 0.999**3, 0.1, g)
    moments = [m.copy(), v.copy()]
    delta = adam_no_update_param(*moments, 0.9**3, 0.999**3, 0.1, 0.9, 0.999, 1e-8, g)
    return [*adam, *amsgrad, *moments, delta]


def test_the_public_entries_take_the_prefetching_half_loop_for_large_arrays(monkeypatch):
    """One thread: 2**20 + 5 elements compile and run the prefetching fused loops, 1000 do not; both give
    the bits of the launches with ``prefetch_large_half`` off."""
    kernels = (_adam, _adam_amsgrad, _adam_delta)
    rng = np.random.default_rng(9)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        for n, large in ((1000, False), (2**20 + 5, True)):
            arrays = _arrays(rng, n, (BF16, F32, F32, F32, BF16), (2, 3))
            for kernel in kernels:
                monkeypatch.setattr(kernel, "_half_drivers", {}, raising=False)
            got = _public_steps(*arrays)
            for kernel in kernels:
                compiled = [key for key in kernel._half_drivers if key[0] == "prefetching"]
                assert bool(compiled) == large, (kernel.__name__, n)
            with monkeypatch.context() as patch:
                for kernel in kernels:
                    patch.setattr(kernel, "prefetch_large_half", False)
                want = _public_steps(*arrays)
            for k, (x, y) in enumerate(zip(got, want)):
                assert np.array_equal(_bits(x), _bits(y)), f"n={n}: output {k} differs"
            assert (_bits(got[0]) != _bits(arrays[0])).sum() > 0.5 * n, "nothing moved"
            assert (got[-1] != 0).sum() > 0.9 * n, "no delta"
    finally:
        numba.set_num_threads(threads)


def test_half_launches_of_an_element_without_the_flag_keep_the_plain_loop():
    kernel = E.Elementwise(_adam.py_func)
    assert not kernel.prefetch_large_half
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        n = 2**20 + 5
        arrays = [np.full(n, 0.5, d) for d in (BF16, F32, F32, BF16)]
        expected = [a.copy() for a in arrays]
        _adam.launch("cpu", n, *expected, *KERNELS["adam"][3][0])
        kernel.launch("cpu", n, *arrays, *KERNELS["adam"][3][0])
        assert [key[0] for key in kernel._half_drivers if key[0] == "prefetching"] == []
        assert all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(arrays, expected))
        assert (_bits(arrays[0]) != _bits(np.full(n, 0.5, BF16))).all()
    finally:
        numba.set_num_threads(threads)
