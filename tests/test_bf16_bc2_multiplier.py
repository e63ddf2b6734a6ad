"""Adam's division by bias_correction2**0.5 of a bfloat16 root as a multiplication (torch_rules'
bf16_bc2_multiplier): checked against every bfloat16 root, and torch's bits at steps on both sides."""
import copy

import ml_dtypes
import numpy as np
import pytest
import torch

import optkernels.torch as okt
from optkernels.kernels import torch_rules as T

BF16 = ml_dtypes.bfloat16
# every non-negative bfloat16 root but NaN: zeros, subnormals, normals, +inf
ROOTS = (np.arange(0, 0x7F81, dtype=np.uint32) << 16).view(np.float32)


def _c(beta2, step):
    return np.float32((1 - beta2 ** float(step)) ** 0.5)  # adam_step_scalars' bias_correction2**0.5


# (0.999, 2934), (0.999, 4923), (0.9999, 775): float32(1/c) is wrong for some root, a neighbour is not;
# (0.99999, 54601): no multiplier within 4 units in the last place gives every root's bits
DIVIDES = (0.99999, 54601)


@pytest.mark.parametrize("beta2, step", [(0.999, 1), (0.999, 2), (0.999, 777), (0.999, 2933), (0.999, 2934),
                                         (0.999, 4923), (0.9999, 775), (0.9999, 776), (0.5, 3), (0.0, 1),
                                         (0.999, 20000), DIVIDES])
def test_the_multiplier_gives_the_quotients_bfloat16_for_every_root(beta2, step):
    """Where bf16_bc2_multiplier gives y, bfloat16(float32(r·y)) is bfloat16(float32(r/c)) for every bfloat16
    root r; y is float32(1/c) except at the steps where that is wrong for some r; None only where every
    float32 within 4 units in the last place of float32(1/c) is wrong for some r."""
    c = _c(beta2, step)
    y = T.bf16_bc2_multiplier(beta2, step)
    nearest = np.float32(1 / float(c))
    with np.errstate(over="ignore"):
        divided = (ROOTS / c).astype(BF16).view(np.uint16)
        candidates = [nearest]
        for _ in range(4):
            candidates = [np.nextafter(candidates[0], np.float32(0)), *candidates,
                          np.nextafter(candidates[-1], np.float32(np.inf))]
        right = [z for z in candidates if np.array_equal((ROOTS * z).astype(BF16).view(np.uint16), divided)]
    if (beta2, step) == DIVIDES:
        assert y is None and not right
    else:
        assert y is not None and y in right
        assert (y == nearest) == ((beta2, step) not in ((0.999, 2934), (0.999, 4923), (0.9999, 775)))


@pytest.mark.parametrize("beta2, step", [(0.999, 5), (0.999, 2934), DIVIDES])
def test_half_scalars_carry_the_multiplier_only_where_it_holds(beta2, step):
    group = T.adam_group_scalars(np.dtype(np.float32), 1e-3, 0.9, beta2, 1e-8, 0.0, False, False)
    plain, half = T.adam_step_scalars(group, step), T.adam_half_step_scalars(group, step)
    k = len(group[4]) + 1
    assert half[:k] + half[k + 1:] == plain[:k] + plain[k + 1:]
    if (beta2, step) == DIVIDES:
        assert half[k] == plain[k] and type(half[k]) is float  # the float64 1/c: the kernel divides
    else:
        assert type(half[k]) is np.float32 and half[k] == T.bf16_bc2_multiplier(beta2, step)


def _same(a, b):
    return torch.equal(a.detach().view(torch.int16), b.detach().view(torch.int16))


@pytest.mark.parametrize("n", [4099, 70001], ids=["computed", "tabled"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("beta2, first", [(0.999, 2932), (DIVIDES[0], DIVIDES[1] - 2)])
def test_bfloat16_adam_steps_around_the_checked_steps_are_torch_bits(amsgrad, beta2, first, n, monkeypatch):
    """optkernels.torch.Adam on bfloat16 from torch's state: five steps from ``first`` (one by a neighbour
    of float32(1/c) at 2934 with β2 = 0.999, one dividing at 54601 with β2 = 0.99999), the same bits as
    torch.optim.Adam(foreach=False) at every step; the larger tensor with the table of denominators (whose
    launches change their scalars' types at the dividing step and back)."""
    from optkernels.torch import _half_step

    monkeypatch.setattr(_half_step, "DENOMINATOR_TABLE_FROM", 10000)  # per thread: 70001 elements take it
    gen = torch.Generator().manual_seed(3)
    init = torch.randn(n, generator=gen).to(torch.bfloat16)
    theirs, ours = init.clone().requires_grad_(), init.clone().requires_grad_()
    reference = torch.optim.Adam([theirs], lr=1e-2, betas=(0.9, beta2), amsgrad=amsgrad, foreach=False)
    theirs.grad = torch.randn(n, generator=gen).to(torch.bfloat16)
    reference.step()
    state = reference.state_dict()
    state["state"][0]["step"] = torch.tensor(float(first - 1))
    reference.load_state_dict(copy.deepcopy(state))  # (a loaded 'step' tensor is not copied)
    optimizer = okt.Adam([ours], lr=1e-2, betas=(0.9, beta2), amsgrad=amsgrad)
    optimizer.load_state_dict(copy.deepcopy(state))
    ours.data.copy_(theirs.detach())
    for step in range(first, first + 5):
        g = (torch.randn(n, generator=gen) * (step - first + 1)).to(torch.bfloat16)
        theirs.grad, ours.grad = g, g.clone()
        reference.step()
        optimizer.step()
        assert _same(theirs, ours), f"step {step}: parameter"
        for key, value in reference.state[theirs].items():
            if value.dim():
                assert _same(value, optimizer.state[ours][key]), f"step {step}: {key}"


@pytest.mark.parametrize("beta1, beta2, lr", [(0.9, 0.999, 1e-3), (0.5, 0.99999, 3.0), (0.0, 0.95, 0.0),
                                              (0.9, 0.0, 1e-2)])
def test_step_blocks_hold_each_steps_half_scalars(beta1, beta2, lr):
    """adam_half_step_block's values (from step 1, across block bounds, at the dividing step and far steps),
    and the drop-in's _half_step_scalars made from them: adam_half_step_scalars' values, types and bits."""
    q = torch.nn.Parameter(torch.zeros(4).bfloat16())
    opt = okt.Adam([q], lr=lr, betas=(beta1, beta2))
    group = opt.param_groups[0]
    per_group = opt._group_scalars(group, np.dtype(np.float32))
    steps = [*range(1, 600), 1023, 1024, 1025, DIVIDES[1] - 1, DIVIDES[1], DIVIDES[1] + 1, 10**6, 2, 511, 512]
    blocks = set()
    for step in steps:
        want = T.adam_half_step_scalars(per_group, step)[:-3]
        block = T.adam_half_step_block(per_group, step)
        blocks.add(block[0])
        for got in (T.adam_half_block_scalars(per_group, block, step), opt._half_step_scalars(group, per_group, step)):
            assert len(got) == len(want)
            for a, b in zip(want, got):
                assert type(a) is type(b), (step, a, b)
                assert a is b or np.array(a).tobytes() == np.array(b).tobytes(), (step, a, b)
    assert {1, 512, 1024}.issubset(blocks)


def test_step_blocks_follow_an_lr_that_changes_every_step():
    """A scheduler's new float lr each step (and a second group with other betas): the drop-in's
    _half_step_scalars keep adam_half_step_scalars' values and bits, from the blocks of the betas (lr is
    not part of a block)."""
    q, r = (torch.nn.Parameter(torch.zeros(4).bfloat16()) for _ in range(2))
    opt = okt.Adam([{"params": [q]}, {"params": [r], "betas": (0.5, 0.99)}], lr=1e-3)
    for step in range(1, 1100, 7):
        for k, group in enumerate(opt.param_groups):
            group["lr"] = 1e-3 * (1 + k) / step
            per_group = opt._group_scalars(group, np.dtype(np.float32))
            want = T.adam_half_step_scalars(per_group, step)[:-3]
            assert repr(opt._half_step_scalars(group, per_group, step)) == repr(want), (step, k)
    assert len(opt._half_blocks) == 6  # (two groups' betas, three blocks each)


def test_step_scalars_of_betas_outside_torchs_ranges_raise_at_their_own_step():
    """betas set past torch's checks (β1 > 1: 1 − β1^t overflows at a later step of the block; β2 > 1: a
    complex root): the drop-in's _half_step_scalars gives each earlier step's scalars and raises at the
    step adam_half_step_scalars raises at."""
    q = torch.nn.Parameter(torch.zeros(4).bfloat16())
    opt = okt.Adam([q], lr=1e-3)
    group = opt.param_groups[0]
    group["betas"] = (1.5, 0.999)
    per_group = opt._group_scalars(group, np.dtype(np.float32))
    bad = next(t for t in range(1, 4000) if not _finite_power(1.5, t))  # 1.5**t overflows from here
    assert bad % T.HALF_STEP_BLOCK  # (a later step of its block overflows before it)
    want = T.adam_half_step_scalars(per_group, bad - 1)[:-3]
    assert repr(opt._half_step_scalars(group, per_group, bad - 1)) == repr(want)
    with pytest.raises(OverflowError):
        T.adam_half_step_scalars(per_group, bad)
    with pytest.raises(OverflowError):
        opt._half_step_scalars(group, per_group, bad)
    group["betas"] = (0.9, 1.5)
    per_group = opt._group_scalars(group, np.dtype(np.float32))
    with pytest.raises(TypeError):
        opt._half_step_scalars(group, per_group, 3)


def _finite_power(x, t):
    try:
        return x ** float(t) < float("inf")
    except OverflowError:
        return False
