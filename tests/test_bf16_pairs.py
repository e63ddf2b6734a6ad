"""The paired vector body of the all-bfloat16 split loops (kernels/_bf16_pairs): two elements per 32-bit word,
the same bits as the one-element loop, special values, odd part bounds and torch's tails included."""
import platform
import re

import numba
import numpy as np
import pytest

from optkernels.kernels import _bf16_pairs, _elementwise, _lowp
from optkernels.kernels import torch_rules as T
from optkernels.kernels._threading import parallel_launch
from optkernels.kernels._torch_tail import tail_variants

X86 = platform.machine().lower() in ("x86_64", "amd64")

# bfloat16 bits of values outside the usual: ±0, ±inf, NaNs (quiet, signalling-looking, negative), the
# smallest and largest subnormals and normals, and neighbours of 1
_SPECIAL = np.array(
    [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F,
     0x3F80, 0x3F81, 0x3F7F, 0xBF80],
    np.uint16,
)


def _adam_scalars(n, threads, decoupled=False):
    scalars = T.adam_scalars(np.dtype(np.float32), 3, 1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled, False)
    return scalars[:-3] + T.torch_tail_scalars(n, threads, 32)


def _loop(py_func, kinds, scalars, paired, first=4):
    flags = tuple((first + k, s) for k, s in enumerate(scalars) if s is True or s is False)
    before = _elementwise.PAIRED
    _elementwise.PAIRED = paired
    try:
        return _elementwise._fused_split_driver(py_func, kinds, flags, cache=False)
    finally:
        _elementwise.PAIRED = before


def _arrays(n, seed, count=4):
    rng = np.random.default_rng(seed)
    arrays = [(rng.standard_normal(n) * 0.1).astype(np.float32).view(np.uint32) >> 16 for _ in range(count)]
    arrays = [a.astype(np.uint16) for a in arrays]
    arrays[2] &= np.uint16(0x7FFF)  # a second moment: non-negative
    for a in arrays:
        where = rng.choice(n, size=min(n, 3 * _SPECIAL.size), replace=False)
        a[where] = np.resize(rng.permutation(_SPECIAL), where.size)
    return arrays


@pytest.mark.parametrize("decoupled", [False, True])
def test_paired_adam_loop_gives_the_one_element_loops_bits(decoupled):
    """Adam's bfloat16 loop, paired and not, over 1001 elements with torch's tails of 3 threads (chunks of 334:
    part bounds and tails at odd indices), cut into 1, 2 and 3 parts: every array ends with the same bits,
    special values (NaN, ±inf, ±0, subnormals) included."""
    n = 1001
    scalars = _adam_scalars(n, 3, decoupled)
    kinds = ("bf16",) * 4 + (None,) * len(scalars)
    loops = {paired: _loop(T._torch_adam.py_func, kinds, scalars, paired) for paired in (False, True)}
    start = _arrays(n, 11)
    for parts in (1, 2, 3):
        ends = {}
        for paired, loop in loops.items():
            arrays = [a.copy() for a in start]
            with parallel_launch():
                loop(False, parts, n, parts, *arrays, *scalars)
            ends[paired] = arrays
        assert not np.array_equal(ends[True][0], start[0]), "the loop did not update var"
        for name, a, b in zip(("var", "exp_avg", "exp_avg_sq", "grad"), ends[False], ends[True]):
            assert np.array_equal(a, b), f"{name}: paired loop differs ({parts} parts)"


def test_paired_amsgrad_loop_gives_the_one_element_loops_bits():
    """AMSGrad's loop (a fifth array, torch.maximum's NaN bits): paired and not, the same bits."""
    n = 517
    scalars = _adam_scalars(n, 2)
    kinds = ("bf16",) * 5 + (None,) * len(scalars)
    start = _arrays(n, 12, 5)
    start[3] &= np.uint16(0x7FFF)  # max_exp_avg_sq: non-negative
    ends = []
    for paired in (False, True):
        loop = _loop(T._torch_adam_amsgrad.py_func, kinds, scalars, paired, first=5)
        arrays = [a.copy() for a in start]
        with parallel_launch():
            loop(False, 1, n, 1, *arrays, *scalars)
        ends.append(arrays)
    for a, b in zip(*ends):
        assert np.array_equal(a, b)


@pytest.mark.skipif(not X86, reason="checks x86 instructions")
def test_the_paired_adam_loop_has_no_widening_shuffle():
    """The paired loop's vector body loads whole words (no vpmovzxwd from memory) and packs with a shift and
    an or (no vpmovdw) in a loop that still divides and takes square roots in packed form."""
    n = 4096
    scalars = _adam_scalars(n, 1)
    loop = _loop(T._torch_adam.py_func, ("bf16",) * 4 + (None,) * len(scalars), scalars, True)
    arrays = _arrays(n, 13)
    with parallel_launch():
        loop(False, 1, n, 1, *arrays, *scalars)
    bodies = [
        body
        for body in _single_block_loops(loop.inspect_asm(loop.signatures[0]))
        if re.search(r"\bvsqrtps\b", body) and re.search(r"\bvdivps\b", body)
    ]
    assert bodies, "no packed loop with sqrt and div"
    assert any("vpmovzxwd" not in body and "vpmovdw" not in body for body in bodies)


def _single_block_loops(asm):
    """The bodies of the loops of ``asm`` that are one basic block: from a label to a jump back to it, no
    other label between (whatever order the compiler lays the blocks out in)."""
    lines, where, bodies = asm.splitlines(), {}, []
    for k, line in enumerate(lines):
        label = re.match(r"^(\.LBB\d+_\d+):", line)
        if label:
            where[label.group(1)] = k
        jump = re.match(r"^\s+j\w+\s+(\.LBB\d+_\d+)$", line)
        if jump and jump.group(1) in where:
            body = "\n".join(lines[where[jump.group(1)] + 1 : k])
            if not re.search(r"(?m)^\.LBB\d+_\d+:", body):
                bodies.append(body)
    return bodies


def test_paired_source_rewrites_only_loads_statements_and_stores():
    """paired_source: Adam's body becomes a function of two elements (its locals renamed for the second);
    a body that uses the index or an array otherwise than through its loaded local is left alone."""
    kinds = ("bf16",) * 4 + (None,) * 19
    _, element = _lowp.fused_element(T._torch_adam.py_func, kinds)
    body, _, _ = tail_variants(element, "i")
    name, source = _bf16_pairs.paired_source(body, "i")
    assert name.endswith("_body_pair")
    assert source.count("_load_pair(") == 4 and source.count("_store_pair_keeping_nan(") == 3
    assert "m__high, v__high = torch_adam_moments(" in source
    assert _bf16_pairs.paired_source(body.replace("tail = False", "tail = i > 3"), "i") is None
    assert _bf16_pairs.paired_source(body.replace("tail = False", "tail = var[0] > 3"), "i") is None
    assert _bf16_pairs.paired_source(body.replace("    tail = False", "    return"), "i") is None


_STORE_PAIR = _bf16_pairs.NAMES["_store_pair"]
_STORE_PAIR_KEEPING_NAN = _bf16_pairs.NAMES["_store_pair_keeping_nan"]


@numba.njit(error_model="numpy")
def _round_trip(words, low, high, out, keep):
    for k in range(words.size):
        low[k], high[k] = _bf16_pairs._low_bf16(words[k]), _bf16_pairs._high_bf16(words[k])
        if keep:
            _STORE_PAIR_KEEPING_NAN(out, 2 * k, low[k] * np.float32(1.0078125), high[k])
        else:
            _STORE_PAIR(out, 2 * k, low[k] * np.float32(1.0078125), high[k])


@pytest.mark.parametrize("keep", [False, True])
def test_pair_conversions_widen_exactly_and_round_as_lowp(keep):
    """Every bfloat16 bit pattern: both halves widen to its float32; a pair store writes what _lowp's rounding
    writes for each value (ties to even; NaN quieted, or its bits kept)."""
    k = np.arange(2**16, dtype=np.uint32)
    low, high = np.empty(2**16, np.float32), np.empty(2**16, np.float32)
    out = np.empty(2**17, np.uint16)
    _round_trip(k | (k << 16), low, high, out, keep)
    exact = (k << 16).view(np.float32)
    assert np.array_equal(low.view(np.uint32), exact.view(np.uint32))
    assert np.array_equal(high.view(np.uint32), exact.view(np.uint32))
    def written(bits):
        rounded = bits + np.where(bits & 0x10000, 0x8000, 0x7FFF).astype(np.uint32)
        if not keep:
            nan = (bits & 0x7FFFFFFF) > 0x7F800000
            rounded = np.where(nan, (bits | 0x400000) & 0xFFC00000, rounded)
        return (rounded >> 16).astype(np.uint16)

    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (exact * np.float32(1.0078125)).view(np.uint32)  # 1 + 2**-7: ties, carries, NaNs
    assert np.array_equal(out[0::2], written(scaled))
    assert np.array_equal(out[1::2], written(k << 16))
