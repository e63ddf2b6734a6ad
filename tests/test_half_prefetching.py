"""The prefetching form of the fused half loop (``Elementwise.prefetch_large_half``, set on apply_adam's
element): for float16/bfloat16 parameters and gradients with float32 or half moments, its chunked entry
gives the plain fused entry's bits around the part (2**20 per thread), block (64) and prefetch (1024 + 64)
bounds, on one part and two, Nesterov or not; ``apply_adam`` compiles and runs it only where a thread's
part holds 2**20 elements or more, with the bits of its plain launch; and kernels that do not set the flag
keep the plain loop."""

import ml_dtypes
import numba
import numpy as np
import pytest

from optkernels.kernels import _elementwise as E
from optkernels.kernels import apply_adam
from optkernels.kernels._threading import parallel_allowed, parallel_launch
from optkernels.kernels.adam import _adam, _adam_delta

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)

# (var, m, v, gradient): the DeepSpeed layout (half parameter and gradient, float32 moments), all half
LAYOUTS = {
    "bf16-f32-moments": (BF16, F32, F32, BF16),
    "f16-f32-moments": (F16, F32, F32, F16),
    "all-bf16": (BF16, BF16, BF16, BF16),
}
SIZES = (1000, 2**20 - 1, 2**20 + 1087, 2**21 - 2, 2**21 + 64 * 37 + 5)


def _arrays(rng, n, dtypes):
    var, m, v, g = (rng.standard_normal(n, dtype=np.float32) for _ in range(4))
    return [a.astype(d) for a, d in zip((var, m, np.abs(v) + np.float32(0.01), g), dtypes)]


def _scalars(nesterov):
    f = np.float32
    return (f(0.05), f(0.9), f(0.1), f(0.001), f(1e-8), nesterov)


def _bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_prefetching_fused_half_entry_gives_the_plain_entrys_bits(layout):
    dtypes = LAYOUTS[layout]
    kinds = E._half_kinds((*(np.empty(1, d) for d in dtypes), *_scalars(False)))
    plain = E._fused_entry(_adam.py_func, kinds)
    prefetching = E._prefetching_fused_entry(_adam, kinds, ())
    assert plain is not None and prefetching is not plain
    assert prefetching is E._prefetching_fused_entry(_adam, kinds, ()), "not kept with the drivers"
    rng = np.random.default_rng(3)
    for n in SIZES:
        arrays = _arrays(rng, n, dtypes)
        for parallel in (False, True):
            for nesterov in (False, True):
                runs = []
                for entry in (plain, prefetching):
                    copies = [a.copy() for a in arrays]
                    views = [a.view(np.uint16) if a.dtype.itemsize == 2 else a for a in copies]
                    with parallel_launch(), np.errstate(all="ignore"):
                        entry(parallel and parallel_allowed(), n, *views, *_scalars(nesterov))
                    runs.append(copies)
                for k, (x, y) in enumerate(zip(*runs)):
                    assert np.array_equal(_bits(x), _bits(y)), (
                        f"{layout} n={n} parallel={parallel} nesterov={nesterov}: array {k} differs"
                    )
                moved = _bits(runs[1][0]) != _bits(arrays[0])
                assert moved.sum() > 0.5 * n, "the step moved nothing: the check checks nothing"


def test_apply_adam_takes_the_prefetching_half_loop_for_large_arrays(monkeypatch):
    """One thread: 2**20 + 5 bfloat16 elements compile and run the prefetching fused loop, 1000 do not;
    both give the bits of the launch with ``prefetch_large_half`` off."""
    rng = np.random.default_rng(9)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        for n, large in ((1000, False), (2**20 + 5, True)):
            arrays = _arrays(rng, n, LAYOUTS["bf16-f32-moments"])
            monkeypatch.setattr(_adam, "_half_drivers", {}, raising=False)
            got = [a.copy() for a in arrays]
            apply_adam(*got[:3], 0.9**3, 0.999**3, 0.1, 0.9, 0.999, 1e-8, got[3])
            compiled = [key for key in _adam._half_drivers if key[0] == "prefetching"]
            assert bool(compiled) == large, n
            with monkeypatch.context() as patch:
                patch.setattr(_adam, "prefetch_large_half", False)
                want = [a.copy() for a in arrays]
                apply_adam(*want[:3], 0.9**3, 0.999**3, 0.1, 0.9, 0.999, 1e-8, want[3])
            for k, (x, y) in enumerate(zip(got, want)):
                assert np.array_equal(_bits(x), _bits(y)), f"n={n}: array {k} differs"
            assert (_bits(got[0]) != _bits(arrays[0])).sum() > 0.5 * n, "nothing moved"
    finally:
        numba.set_num_threads(threads)


def test_half_launches_of_kernels_without_the_flag_keep_the_plain_loop(monkeypatch):
    assert _adam.prefetch_large_half and not _adam_delta.prefetch_large_half
    monkeypatch.setattr(_adam_delta, "_half_drivers", {}, raising=False)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        n = 2**20 + 5
        m, v = (np.full(n, 0.5, np.float32) for _ in range(2))
        g = np.full(n, 0.25, BF16)
        out = np.empty(n, np.float32)
        f = np.float32
        _adam_delta.launch("cpu", n, out, m, v, g, f(1e-3), f(0.9), f(0.1), f(0.999), f(0.001), f(1e-8), True)
        assert not [key for key in _adam_delta._half_drivers if key[0] == "prefetching"]
        assert np.all(out != 0)
    finally:
        numba.set_num_threads(threads)
