"""Same bits whatever the thread count and from run to run; the float32 Adam loop is vectorised."""
import importlib
import platform
import re

import numba
import numpy as np
import pytest

from optable import OPS, draw, draw_attrs, run_kernel

# Larger than several of Lamb's reduction chunks, and split across threads.
SHAPE = (301, 257)


def _run_with_threads(op, dtype, threads):
    rng = np.random.default_rng(5)
    inputs, attrs = draw(op, rng, SHAPE, dtype), draw_attrs(op, rng, dtype)
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        out = run_kernel(op, inputs, attrs)
    finally:
        numba.set_num_threads(previous)
    return out


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_bitwise_equal_with_one_and_two_threads(op, dtype):
    one = _run_with_threads(op, dtype, 1)
    two = _run_with_threads(op, dtype, 2)
    again = _run_with_threads(op, dtype, 2)
    for name in one:
        assert one[name].tobytes() == two[name].tobytes(), f"{op.name}.{name}: 1 vs 2 threads"
        assert two[name].tobytes() == again[name].tobytes(), f"{op.name}.{name}: run to run"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
@pytest.mark.parametrize("dtype, suffix", [(np.float32, "ps"), (np.float64, "pd")])
def test_apply_adam_cpu_loop_is_vectorised(dtype, suffix):
    """Packed sqrt and div in the compiled loop: no scalar fallback from the error model or float64 promotion."""
    from optkernels.kernels.adam import _adam

    loop = _adam.cpu_uncached()
    x = np.ones(64, dtype)
    s = dtype(0.5)
    loop(x.size, x, x.copy(), x.copy(), x.copy(), s, s, s, s, s, False)
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(rf"\bv?sqrt{suffix}\b", asm), f"no packed sqrt{suffix} in apply_adam's loop"
    assert re.search(rf"\bv?div{suffix}\b", asm), f"no packed div{suffix} in apply_adam's loop"
    if dtype == np.float32:
        assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 loop promoted to float64"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
def test_apply_adam_bfloat16_loop_is_vectorised():
    """The fused bfloat16 Adam loop (each half array widened and rounded back in the loop) keeps packed
    float32 sqrt and div: the integer conversions do not scalarise it."""
    from optkernels.kernels import _elementwise
    from optkernels.kernels.adam import _adam

    kinds = ("bf16",) * 4 + (None,) * 6
    loop = numba.njit(parallel=True, cache=False, error_model="numpy")(
        _elementwise._fused_driver(_adam.py_func, kinds).py_func)
    bits = np.full(64, 0x3F80, np.uint16)                          # bfloat16 1.0
    s = np.float32(0.5)
    loop(bits.size, _elementwise._workspace(4), bits, bits.copy(), bits.copy(), bits.copy(), s, s, s, s, s,
         False)
    assert bits[0] != 0x3F80, "the loop did not update var"
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(r"\bv?sqrtps\b", asm), "no packed sqrtps in the bfloat16 apply_adam loop"
    assert re.search(r"\bv?divps\b", asm), "no packed divps in the bfloat16 apply_adam loop"
    assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "bfloat16 loop promoted to float64"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
def test_torch_adam_bfloat16_loop_is_vectorised():
    """optkernels.torch.Adam's bfloat16 loop (torch's per-operation rounding and scalar-tail test) keeps packed
    float32 sqrt and div and converts no index to float64."""
    from optkernels.kernels import _elementwise
    from optkernels.kernels import torch_rules as T

    scalars = T.adam_scalars(np.dtype(np.float32), 3, 1.0, 0.9, 0.999, 1e-8, 0.0, False, False)
    scalars = scalars[:-3] + T.torch_tail_scalars(70000, 2, 32)
    kinds = ("bf16",) * 4 + (None,) * len(scalars)
    flags = tuple((4 + k, s) for k, s in enumerate(scalars) if s is True or s is False)
    loop = _elementwise._fused_split_driver(T._torch_adam.py_func, kinds, flags, cache=False)
    bits = np.full(64, 0x3F80, np.uint16)                          # bfloat16 1.0
    loop(False, 2, bits.size, 2, bits, bits.copy(), bits.copy(), bits.copy(), *scalars)  # 2 parts
    assert bits[0] != 0x3F80, "the loop did not update var"
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(r"\bv?sqrtps\b", asm) and re.search(r"\bv?divps\b", asm), "no packed sqrtps/divps"
    assert not re.search(r"\bv?(sqrt|div)[sp]d\b|cvtu?qq2pd", asm), "bfloat16 loop promoted to float64"


def test_torch_adam_bfloat16_parts_give_the_same_bits():
    """The bfloat16 loop split around torch's tails runs one part per thread: cut into 1, 2, 3 or 7 parts
    (bounds inside torch's chunks, next to and inside their tails), every array ends with the same bits."""
    from optkernels.kernels import _elementwise
    from optkernels.kernels import torch_rules as T

    n = 70001
    scalars = T.adam_scalars(np.dtype(np.float32), 3, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False)
    scalars = scalars[:-3] + T.torch_tail_scalars(n, 3, 32)
    kinds = ("bf16",) * 4 + (None,) * len(scalars)
    flags = tuple((4 + k, s) for k, s in enumerate(scalars) if s is True or s is False)
    loop = _elementwise._fused_split_driver(T._torch_adam.py_func, kinds, flags)
    rng = np.random.default_rng(2)
    start = [(rng.standard_normal(n) * 0.1).astype(np.float32).view(np.uint32) >> 16 for _ in range(4)]
    start[2] = start[2] & 0x7FFF                                    # exp_avg_sq: non-negative
    ends = []
    for parts in (1, 2, 3, 7):
        arrays = [a.astype(np.uint16) for a in start]
        loop(False, parts, n, parts, *arrays, *scalars)  # (on this thread: the bits do not depend on it)
        ends.append(arrays)
    assert not np.array_equal(ends[0][0], start[0]), "the loop did not update var"
    for parts, arrays in zip((2, 3, 7), ends[1:]):
        for name, a, b in zip(("var", "exp_avg", "exp_avg_sq"), ends[0], arrays):
            assert np.array_equal(a, b), f"{name}: {parts} parts differ from one"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
@pytest.mark.parametrize("dtype, suffix", [(np.float32, "ps"), (np.float64, "pd")])
def test_apply_adam_chunk_worker_is_vectorised_and_no_parallel_loop_is_compiled(dtype, suffix):
    """The CPU launch runs the chunked entry (kernels/_chunks): packed sqrt and div in its part loop, and a
    launch compiles no parallel loop (the parfor driver ``_adam.cpu`` is never compiled)."""
    from optkernels.kernels import _chunks
    from optkernels.kernels.adam import _adam

    x = np.ones(64, dtype)
    s = dtype(0.5)
    arguments = (x, x.copy(), x.copy(), x.copy(), s, s, s, s, s, False)
    fresh = _chunks.entry(_adam.py_func, cache=False)
    fresh(False, x.size, *(a.copy() if isinstance(a, np.ndarray) else a for a in arguments))
    asm = fresh.inspect_asm(fresh.signatures[0])
    assert re.search(rf"\bv?sqrt{suffix}\b", asm), f"no packed sqrt{suffix} in apply_adam's chunk worker"
    assert re.search(rf"\bv?div{suffix}\b", asm), f"no packed div{suffix} in apply_adam's chunk worker"
    if dtype == np.float32:
        assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 worker promoted to float64"
    _adam.launch("cpu", x.size, *arguments)
    parallel_loop = vars(_adam).get("cpu")  # built (not compiled) by `python -m optkernels info`
    assert x[0] != 1 and (parallel_loop is None or not parallel_loop.signatures), "a parallel loop compiled"


def test_multi_tensor_launch_loop_is_vectorised():
    """The loop a multi-tensor launch runs (torch's SGD rule, float32) is vectorised: a scalar loop there
    ran 5-7x slower. With ``chunked_many`` that is the chunked entry's part loop (rows of views made from
    addresses), else the parallel loop of ``many``."""
    from numba import types

    from optkernels.kernels import _elementwise
    from optkernels.kernels import torch_rules as T

    sgd = T._torch_sgd
    scalars = T.sgd_scalars(np.dtype(np.float32), True, 1e-3, 0, 0, 0, False, False)
    arg_types = (types.int64[:, ::1], types.int64[:, ::1], types.float32[::1], *map(numba.typeof, scalars))
    if sgd.chunked_many:
        compiled = _elementwise._many_entry(sgd.py_func, 2, None, False)
        signature = (types.boolean, types.int64, *arg_types)
    else:
        compiled = sgd.many_uncached(2)
        signature = arg_types
    compiled.compile(signature)
    assert re.search(r"<\d+ x float>", compiled.inspect_llvm(signature)), "the multi-tensor loop is scalar"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
def test_schedule_free_adamw_float32_loop_takes_packed_products():
    """The chunked loop that ``schedule_free_adamw`` launches is vectorised, its division by ``1 − β2^t`` a
    packed float64 product (``divide_by_constant`` inlined: a called helper left the loop scalar)."""
    from optkernels.kernels import _chunks
    from optkernels.kernels import schedule_free as S
    from optkernels.kernels._threading import parallel_launch

    entry = _chunks.entry(S._schedule_free_adamw.py_func, cache=False, prefetch=S._schedule_free_adamw.prefetch)
    arrays = [np.full(1000, 0.5, np.float32) for _ in range(4)]
    scalars = S.schedule_free_adamw_scalars(np.float32, 2.5e-3, 0.9, 0.999, 1e-8, 0.0, 0.2, 5)
    with parallel_launch():
        entry(False, arrays[0].size, *arrays, *scalars)
    asm = entry.inspect_asm(entry.signatures[0])
    for packed in (r"vcvtps2pd\s+%[xyz]mm\d+, %[yz]mm", r"vmulpd\s+%[yz]mm", r"vsqrtps\s+%[yz]mm", r"vdivps\s+%[yz]mm"):
        assert re.search(packed, asm), f"no {packed.split(chr(92))[0]} on packed registers: the loop is scalar"


@pytest.mark.parametrize("rule", ["adopt", "lion"])
def test_prefetching_part_loop_gives_the_plain_loops_bits(rule):
    """The prefetching part loop (``entry(prefetch=True)``: a part of 2**20 elements or more in blocks of 64,
    prefetching until 1088 elements remain) runs each element as the plain loop does: the same bits for
    sizes around those bounds, on one part or two."""
    from optkernels.kernels import _chunks
    from optkernels.kernels._threading import parallel_allowed, parallel_launch

    A, L = (importlib.import_module(f"optkernels.kernels.{name}") for name in ("adopt", "lion"))

    module = {"adopt": A, "lion": L}[rule]
    element = getattr(module, f"_{rule}")
    assert element.prefetch, f"{rule}'s launch does not prefetch"
    count, scalars = {
        "adopt": (4, A.adopt_scalars(np.float32, 1e-3, 0.9, 0.9999, 1e-6, 0.01, 5, 5**0.25)),
        "lion": (3, L.lion_scalars(np.float32, 1e-4, 0.9, 0.99, 0.1)),
    }[rule]
    plain = _chunks.entry(element.py_func, cache=False)
    prefetching = _chunks.entry(element.py_func, cache=False, prefetch=True)
    rng = np.random.default_rng(3)
    for n in (1, 1000, 2**20 - 1, 2**20, 2**20 + 1087, 2**21 - 2, 2**21 + 64 * 37 + 5):
        arrays = [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]
        arrays[2 if rule == "adopt" else 1] = np.abs(arrays[2 if rule == "adopt" else 1])
        for parallel in (False, True):
            a = [x.copy() for x in arrays]
            b = [x.copy() for x in arrays]
            with parallel_launch(), np.errstate(all="ignore"):
                plain(parallel and parallel_allowed(), n, *a, *scalars)
                prefetching(parallel and parallel_allowed(), n, *b, *scalars)
            for k, (x, y) in enumerate(zip(a, b)):
                assert x.tobytes() == y.tobytes(), f"{rule} n={n} parallel={parallel}: array {k} differs"
            assert a[0].tobytes() != arrays[0].tobytes(), "the step moved nothing: the check checks nothing"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86 instructions")
@pytest.mark.parametrize("on_zen", [True, False])
def test_prefetching_part_loop_is_vectorised_and_prefetches(monkeypatch, on_zen):
    """ADOPT's prefetching part loop keeps packed float32 roots and divisions (the blocks are not left
    scalar) and holds the prefetches; compiled for AMD's Zen cores (unless told otherwise), none."""
    from optkernels.kernels import _chunks
    from optkernels.kernels._intrinsics import zen_target
    from optkernels.kernels._threading import parallel_launch

    A = importlib.import_module("optkernels.kernels.adopt")
    monkeypatch.setattr(_chunks, "PREFETCH_ON_ZEN", on_zen)
    entry = _chunks.entry(A._adopt.py_func, cache=False, prefetch=True)
    arrays = [np.full(1000, 0.5, np.float32) for _ in range(4)]
    scalars = A.adopt_scalars(np.float32, 1e-3, 0.9, 0.9999, 1e-6, 0.0, 5, 5**0.25)
    with parallel_launch():
        entry(False, arrays[0].size, *arrays, *scalars)
    asm = entry.inspect_asm(entry.signatures[0])
    for packed in (r"vsqrtps\s+%[yz]mm", r"vdivps\s+%[yz]mm"):
        assert re.search(packed, asm), f"no {packed.split(chr(92))[0]} in the prefetching part loop"
    assert bool(re.search(r"prefetcht0\s", asm)) == (on_zen or not zen_target())


def test_a_guarded_entry_does_not_prefetch():
    from optkernels.kernels import _chunks

    A = importlib.import_module("optkernels.kernels.adopt")
    guard = _chunks.GuardedEntry(prelude=None, checked=0, rounding=None, host=0, lead=4)
    with pytest.raises(ValueError, match="guarded entry"):
        _chunks.entry(A._adopt.py_func, cache=False, guard=guard, prefetch=True)
