"""optkernels.torch.AnyPrecisionAdamW against torchdistx's step written with torch's own CPU ops (the op
sequence of LOWBIT.md §9.3; torchdistx itself does not install beside torch 2.x here: its test runs where it
does), bit for bit, and against the float64 reference; torchdistx's defaults, state and errors."""
import importlib.util
import inspect

import ml_dtypes
import pytest

torch = pytest.importorskip("torch")

from optkernels.reference import lowbit as ref  # noqa: E402
from optkernels.torch import AnyPrecisionAdamW  # noqa: E402

bf16 = torch.bfloat16


def torchdistx_step(p, g, state, lr, betas, eps, wd, kahan):
    """torchdistx's AnyPrecisionAdamW step, op for op, in torch."""
    b1, b2 = betas
    if wd:
        p.mul_(1 - lr * wd)
    state["step"] += 1
    step = state["step"]
    state["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
    state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
    step_size = lr / (1 - b1 ** step)
    centered_variance = (state["exp_avg_sq"].sqrt() / ((1 - b2 ** step) ** 0.5)).add_(eps, alpha=1)
    if kahan:
        state["compensation"].addcdiv_(state["exp_avg"], centered_variance, value=-step_size)
        temp = p.detach().clone()
        p.add_(state["compensation"])
        state["compensation"].add_(temp.sub_(p))
    else:
        p.addcdiv_(state["exp_avg"], centered_variance, value=-step_size)


def _np(t):
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == bf16 else t.numpy()


CASES = [  # (param, momentum, variance, compensation, kahan, weight decay)
    (bf16, torch.float32, bf16, bf16, True, 0.01),
    (bf16, torch.float32, bf16, bf16, False, 0.0),
    (bf16, bf16, bf16, torch.float32, True, 0.0),
    (torch.float32, torch.float32, torch.float32, bf16, True, 0.1),
    (bf16, bf16, bf16, bf16, False, 0.01),
    (torch.float32, bf16, torch.float32, bf16, True, 0.0),
]


@pytest.mark.parametrize("dtypes", CASES)
def test_steps_equal_torch_ops_and_the_reference(dtypes):
    pd, md, vd, cd, kahan, wd = dtypes
    gen = torch.Generator().manual_seed(0)
    # vector loops and their scalar tails; with bfloat16 moments of bfloat16 gradients, torch's scalar tail
    # loop rounds (1−β1)·g to bfloat16 before adding (its vector loop does not): no tail then
    n = 1024 if md == pd == bf16 else 1027
    ours = torch.randn(n, generator=gen).to(pd)
    theirs = ours.clone()
    opt = AnyPrecisionAdamW([ours], lr=2e-3, weight_decay=wd, use_kahan_summation=kahan, momentum_dtype=md,
                            variance_dtype=vd, compensation_buffer_dtype=cd)
    state = {"step": torch.tensor(0.0), "exp_avg": torch.zeros(n, dtype=md), "exp_avg_sq": torch.zeros(n, dtype=vd),
             "compensation": torch.zeros(n, dtype=cd)}
    want = (_np(ours).copy(), _np(state["exp_avg"]).copy(), _np(state["exp_avg_sq"]).copy(),
            _np(state["compensation"]).copy() if kahan else None)
    for t in range(1, 26):
        g = (torch.randn(n, generator=gen) * 10.0 ** (t % 5 - 3)).to(pd)
        ours.grad = g.clone()
        opt.step()
        torchdistx_step(theirs, g, state, 2e-3, (0.9, 0.999), 1e-8, wd, kahan)
        want = ref.any_precision_adamw(*want[:3], _np(g), t, want[3], lr=2e-3, weight_decay=wd)
        got = opt.state[ours]
        names = ["exp_avg", "exp_avg_sq"] + (["compensation"] if kahan else [])
        assert torch.equal(ours.view(torch.int16 if pd == bf16 else torch.int32),
                           theirs.view(torch.int16 if pd == bf16 else torch.int32)), t
        for name in names:
            assert got[name].dtype == state[name].dtype
            assert bytes(_np(got[name]).tobytes()) == bytes(_np(state[name]).tobytes()), (name, t)
        assert _np(ours).tobytes() == want[0].tobytes(), t
    assert got["step"].dtype == torch.float32 and float(got["step"]) == 25.0


@pytest.mark.skipif(importlib.util.find_spec("torchdistx") is None,
                    reason="torchdistx is not installed (no wheel for this torch)")
def test_equals_torchdistx():
    from torchdistx.optimizers import AnyPrecisionAdamW as Theirs

    a = torch.randn(300).to(bf16)
    b = a.clone()
    ours = AnyPrecisionAdamW([a], use_kahan_summation=True, weight_decay=0.01)
    theirs = Theirs([b], use_kahan_summation=True, weight_decay=0.01)
    for _ in range(10):
        g = torch.randn(300).to(bf16)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_constructor_has_torchdistx_arguments_and_defaults():
    params = inspect.signature(AnyPrecisionAdamW).parameters
    assert {k: v.default for k, v in list(params.items())[1:]} == dict(
        lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, use_kahan_summation=False,
        momentum_dtype=torch.float32, variance_dtype=torch.bfloat16, compensation_buffer_dtype=torch.bfloat16)


@pytest.mark.parametrize("kwargs,error", [(dict(lr=-1.0), ValueError), (dict(betas=(0.9, 1.0)), ValueError),
                                          (dict(momentum_dtype=torch.float16), ValueError),
                                          (dict(variance_dtype="bf16"), TypeError)])
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        AnyPrecisionAdamW([torch.zeros(3)], **kwargs)


def test_bad_parameters_raise_before_any_write():
    good, bad = torch.ones(4, dtype=bf16), torch.ones(4, dtype=torch.float16)
    good.grad, bad.grad = torch.ones(4, dtype=bf16), torch.ones(4, dtype=torch.float16)
    opt = AnyPrecisionAdamW([good, bad])
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        opt.step()
    assert torch.equal(good, torch.ones(4, dtype=bf16)) and len(opt.state) == 0
    emb = torch.nn.Embedding(5, 2, sparse=True)
    emb(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        AnyPrecisionAdamW(emb.parameters()).step()
