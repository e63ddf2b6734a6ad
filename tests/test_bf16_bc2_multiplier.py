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


@pytest.mark.parametrize("beta2, step", [(0.999, 1), (0.999, 2), (0.999, 777), (0.999, 2933), (0.999, 2934),
                                         (0.999, 4923), (0.9999, 775), (0.9999, 776), (0.5, 3), (0.0, 1),
                                         (0.999, 20000)])
def test_the_multiplier_gives_the_quotients_bfloat16_for_every_root(beta2, step):
    """Where bf16_bc2_multiplier gives y, bfloat16(float32(r·y)) is bfloat16(float32(r/c)) for every bfloat16
    root r; where it gives None (steps 2934 and 4923 of β2 = 0.999, 775 of 0.9999), some r differs."""
    c = _c(beta2, step)
    y = T.bf16_bc2_multiplier(beta2, step)
    with np.errstate(over="ignore"):
        divided = (ROOTS / c).astype(BF16).view(np.uint16)
        multiplied = (ROOTS * (y if y is not None else np.float32(1 / float(c)))).astype(BF16).view(np.uint16)
    if (beta2, step) in ((0.999, 2934), (0.999, 4923), (0.9999, 775)):
        assert y is None and not np.array_equal(divided, multiplied)
    else:
        assert y is not None and y == np.float32(1 / float(c))
        assert np.array_equal(divided, multiplied)


def test_half_scalars_carry_the_multiplier_only_where_it_holds():
    group = T.adam_group_scalars(np.dtype(np.float32), 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False)
    for step in (5, 2934):
        plain, half = T.adam_step_scalars(group, step), T.adam_half_step_scalars(group, step)
        k = len(group[4]) + 1
        assert half[:k] + half[k + 1:] == plain[:k] + plain[k + 1:]
        if step == 2934:
            assert half[k] == plain[k] and type(half[k]) is float
        else:
            assert type(half[k]) is np.float32 and half[k] == np.float32(plain[k])


def _same(a, b):
    return torch.equal(a.detach().view(torch.int16), b.detach().view(torch.int16))


@pytest.mark.parametrize("amsgrad", [False, True])
def test_bfloat16_adam_steps_around_a_division_step_are_torch_bits(amsgrad):
    """optkernels.torch.Adam on bfloat16 from torch's state at step 2931: steps 2932 .. 2936 (2934 divides,
    the others multiply), the same bits as torch.optim.Adam(foreach=False) at every step."""
    gen = torch.Generator().manual_seed(3)
    init = torch.randn(4099, generator=gen).to(torch.bfloat16)
    theirs, ours = init.clone().requires_grad_(), init.clone().requires_grad_()
    reference = torch.optim.Adam([theirs], lr=1e-2, amsgrad=amsgrad, foreach=False)
    theirs.grad = torch.randn(4099, generator=gen).to(torch.bfloat16)
    reference.step()
    state = reference.state_dict()
    state["state"][0]["step"] = torch.tensor(2931.0)
    reference.load_state_dict(copy.deepcopy(state))  # (a loaded 'step' tensor is not copied)
    optimizer = okt.Adam([ours], lr=1e-2, amsgrad=amsgrad)
    optimizer.load_state_dict(copy.deepcopy(state))
    ours.data.copy_(theirs.detach())
    for step in range(2932, 2937):
        g = (torch.randn(4099, generator=gen) * (step - 2930)).to(torch.bfloat16)
        theirs.grad, ours.grad = g, g.clone()
        reference.step()
        optimizer.step()
        assert _same(theirs, ours), f"step {step}: parameter"
        for key, value in reference.state[theirs].items():
            if value.dim():
                assert _same(value, optimizer.state[ours][key]), f"step {step}: {key}"
