"""The blocks of torch's bfloat16 Adam loop (kernels/_bf16_adam_block): the pair loop's bits for every flag,
quotient and eps, over every bfloat16 pattern of ``v``; and the scaling argument of the table, in NumPy."""

import itertools
import platform

import numpy as np
import pytest

from optkernels.kernels import _bf16_adam_block as B
from optkernels.kernels import _elementwise
from optkernels.kernels import torch_rules as T
from optkernels.kernels._threading import parallel_launch

X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_blocks = pytest.mark.skipif(
    not (X86 and B.word_permutes()), reason="the blocks permute words with AVX-512 BW (vpermi2w)"
)

# bfloat16 bits of values outside the usual: ±0, ±inf, NaNs, subnormals, extreme normals
_SPECIAL = np.array(
    [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80],
    np.uint16,
)
_INV, _EPS, _BETA2, _ONE_MINUS_BETA2 = 11, 12, 8, 9  # positions in adam_scalars' tuple


def _scalars(
    n, step=3, *, multiply=True, eps=1e-8, beta2=0.999, betas1=0.9, wd=0.0, decoupled=False, maximize=False
):
    scalars = list(
        T.adam_scalars(np.dtype(np.float32), step, 1e-3, betas1, beta2, eps, wd, decoupled, maximize)
    )
    if multiply:
        y = T.bf16_bc2_multiplier(beta2, step)
        assert y is not None
        scalars[_INV] = y
    return tuple(scalars[:-3]) + T.torch_tail_scalars(n, 2, 32)


def _loops(scalars):
    flags = tuple((4 + k, s) for k, s in enumerate(scalars) if s is True or s is False)
    kinds = ("bf16",) * 4 + (None,) * len(scalars)
    return [
        _elementwise._fused_split_driver(
            T._torch_adam.py_func, kinds, flags, cache=False, part=T._torch_adam.part_scalar, blocks=blocks
        )
        for blocks in (None, B.any_target_pair_blocks)
    ]


def _run_both(scalars, start, parts=2):
    pair, block = _loops(scalars)
    ends = []
    for loop in (pair, block):
        arrays = [a.copy() for a in start]
        with parallel_launch():
            loop(parts > 1, parts, start[0].size, parts, *arrays, *scalars)
        ends.append(arrays)
    asm = block.inspect_asm(block.signatures[0])
    assert "vpermi2w" in asm or "vpermt2w" in asm, "the loop has no blocks"
    return ends


def _bits(n, seed, scale=0.1):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal(n) * scale).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@needs_blocks
@pytest.mark.parametrize("multiply", [True, False])
@pytest.mark.parametrize("eps", [1e-8, 0.0, 1e-3, 0.5])
def test_blocks_give_the_pair_loops_bits_for_every_v(multiply, eps):
    """With β2 = 1 (``v' = v``), ``v`` runs through all 65536 bfloat16 patterns, the positive normal ones in
    order (whole blocks of them), the others shuffled, and gradients with special values: the step's arrays
    end with the pair loop's bits, with the quotient multiplied or divided and an
    ``eps`` negligible, zero or large (where more blocks compute their denominators)."""
    n = 65536 + 1001
    scalars = list(_scalars(n, multiply=multiply, eps=eps))
    scalars[_BETA2], scalars[_ONE_MINUS_BETA2] = np.float32(1.0), np.float32(0.0)
    scalars = tuple(scalars)
    patterns = np.arange(65536, dtype=np.uint16)
    normal = (patterns >= 0x0080) & (patterns < 0x7F80)  # positive, normal, finite: in order (whole blocks)
    others = np.random.default_rng(1).permutation(patterns[~normal])
    v = np.concatenate([patterns[normal], others, _bits(1001, 2)])
    g = _bits(n, 3, 0.01)
    g[::4099] = _SPECIAL[np.arange(g[::4099].size) % _SPECIAL.size]
    start = [_bits(n, 4, 1e-4), _bits(n, 5, 0.1), v, g]  # p small: its update shows every d
    pair, block = _run_both(scalars, start)
    for name, a, b in zip(("var", "exp_avg", "exp_avg_sq"), pair, block):
        assert np.array_equal(a, b), f"{name}: the blocks differ in {np.count_nonzero(a != b)} elements"
    assert not np.array_equal(pair[0], start[0])


@needs_blocks
@pytest.mark.parametrize(
    "maximize,wd,decoupled,beta1",
    [
        (m, w, d, b)
        for m, (w, d), b in itertools.product(
            (False, True), ((0.0, False), (0.1, False), (0.1, True)), (0.9, 0.3)
        )
    ],
)
def test_blocks_give_the_pair_loops_bits_for_every_flag(maximize, wd, decoupled, beta1):
    """maximize, coupled or decoupled weight decay, the lerp's two forms (``1 − β1`` below and above 0.5),
    an early step (its own multiplier), random states with special values in every array: the same bits."""
    n = 20011
    scalars = _scalars(n, step=2, betas1=beta1, wd=wd, decoupled=decoupled, maximize=maximize)
    start = [_bits(n, 6, 1e-4), _bits(n, 7, 0.01), _bits(n, 8, 1e-3) & np.uint16(0x7FFF), _bits(n, 9, 0.01)]
    for k, a in enumerate(start):
        a[k::997] = _SPECIAL[np.arange(a[k::997].size) % _SPECIAL.size]
    for parts in (1, 2):
        pair, block = _run_both(scalars, start, parts)
        for name, a, b in zip(("var", "exp_avg", "exp_avg_sq"), pair, block):
            assert np.array_equal(a, b), f"{name}: the blocks differ ({parts} parts)"


def _rounded(x):
    """float32 ``x`` rounded to bfloat16 (ties to even), as float32: finite positive values only."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return (((bits + ((bits >> 16) & 1) + 0x7FFF) >> 16) << 16).view(np.float32)


@pytest.mark.parametrize("beta2", [0.999, 0.5, 0.99999])
def test_the_tables_scaling_argument_holds_for_every_positive_normal_v(beta2):
    """NumPy, independent of the compiled code: for every positive normal finite bfloat16 ``v``, torch's
    ``q(v) = R(R(R(√v)/c))`` equals the table entry of ``v``'s low 8 bits (``q`` of ``w`` = bits ``0x4000
    + k``) with ``(j − 64) << 7`` added to its bits, and ``R(q + R(ε)) = q`` where ``q ≥ B``
    (``_bf16_adam_block._eps_bound``'s rule), for the steps' quotients and eps of several sizes."""
    bits = np.arange(0x0080, 0x7F80, dtype=np.uint32)
    v = (bits << 16).view(np.float32)
    w = ((np.arange(256, dtype=np.uint32) + 0x4000) << 16).view(np.float32)
    for step in (1, 2, 10, 1000, 100000):
        c = np.float32((1 - beta2**step) ** 0.5)
        y = T.bf16_bc2_multiplier(beta2, step)
        for multiply in [False, True] if y is not None else [False]:
            q = _rounded(_rounded(np.sqrt(v)) * y if multiply else _rounded(np.sqrt(v)) / c)
            roots = _rounded(np.sqrt(w))
            entries = _rounded(roots * y if multiply else roots / c).view(np.uint32) >> 16
            assert np.all((entries >= B._ENTRY_LOW) & (entries <= B._ENTRY_HIGH))
            table = entries[bits & 0xFF] + (((bits >> 8) & 0x7F) << 7) - (64 << 7)
            assert np.array_equal(q.view(np.uint32) >> 16, table)
            for eps in (1e-8, 1e-6, 3e-4, 1e-30):
                e = _rounded(np.float32(eps))
                exponent = max(int(e.view(np.uint32)) >> 23, 1)
                bound = np.float32(2.0 ** (exponent + 10 - 127))
                kept = q >= bound
                assert np.array_equal(_rounded(q[kept] + e), q[kept])
                assert kept.any()
