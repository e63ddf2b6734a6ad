"""optkernels.torch's bitsandbytes drop-ins: bit for bit the NumPy classes, bitsandbytes' state_dict keys,
dtypes and shapes, and a state saved by ``bitsandbytes.optim.Adam8bit`` loaded and continued."""
import importlib.util

import numpy as np
import pytest
import torch

import optkernels.optimizers as O
import optkernels.torch as OT
from optkernels.kernels.quantization import dynamic_map
from optkernels.reference import lowbit as ref

f32 = np.float32
CLASSES = [
    ("Adam8bit", dict(lr=1e-3)),
    ("AdamW8bit", dict(lr=1e-3)),
    ("AdEMAMix8bit", dict(lr=1e-3, t_alpha=5)),
    ("Lion8bit", dict(lr=1e-4, weight_decay=0.1)),
    ("SGD8bit", dict(lr=1e-2, momentum=0.9, weight_decay=1e-3)),
    ("RMSprop8bit", dict(lr=1e-2, alpha=0.9)),
    ("Adagrad8bit", dict(lr=1e-2)),
]
SHAPES = [(20, 300), (7, 3)]
HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
NO_BNB = "bitsandbytes is not installed (pip install 'optkernels[test]')"


def _data(steps, seed=0):
    rng = np.random.default_rng(seed)
    params = [(0.1 * rng.standard_normal(s)).astype(f32) for s in SHAPES]
    grads = [[(0.01 * rng.standard_normal(s)).astype(f32) for s in SHAPES] for _ in range(steps)]
    return params, grads


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=[c[0] for c in CLASSES])
def test_torch_drop_in_equals_the_numpy_class(name, kwargs):
    params, grads = _data(8)
    tparams = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    topt = getattr(OT, name)(tparams, **kwargs)
    nopt = getattr(O, name)([p.copy() for p in params], **kwargs)
    for gs in grads:
        for p, g in zip(tparams, gs):
            p.grad = torch.from_numpy(g.copy())
        topt.step()
        nopt.step(gs)
    for k, p in enumerate(tparams):
        assert np.array_equal(p.detach().numpy(), nopt._arrays[k])
        state = topt.state[p]
        assert state["step"] == 8 and isinstance(state["step"], int)
        for key, value in nopt.state[k].items():
            if key != "step":
                assert np.array_equal(state[key].numpy(), value), f"{name} {key}"


def _structure(sd):
    out = {}
    for k, s in sd["state"].items():
        q = s["__bnb_optimizer_quant_state__"]
        out[k] = (sorted(set(s) - {"__bnb_optimizer_quant_state__"}), type(s["step"]),
                  {key: (v.dtype, tuple(v.shape)) for key, v in q.items()})
    return out


@pytest.mark.skipif(not HAS_BNB, reason=NO_BNB)
@pytest.mark.parametrize("name,kwargs", CLASSES, ids=[c[0] for c in CLASSES])
def test_state_dict_layout_is_bitsandbytes(name, kwargs):
    import bitsandbytes as bnb

    params, grads = _data(1)
    ours = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    theirs = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    a, b = getattr(OT, name)(ours, **kwargs), getattr(bnb.optim, name)(theirs, **kwargs)
    for p, q, g in zip(ours, theirs, grads[0]):
        p.grad, q.grad = torch.from_numpy(g.copy()), torch.from_numpy(g.copy())
    a.step()
    b.step()
    sa, sb = a.state_dict(), b.state_dict()
    assert _structure(sa) == _structure(sb)
    assert sa["param_groups"] == sb["param_groups"]
    for key in ("qmap1", "qmap2"):
        if key in sb["state"][0]["__bnb_optimizer_quant_state__"]:
            assert torch.equal(sa["state"][0]["__bnb_optimizer_quant_state__"][key],
                               sb["state"][0]["__bnb_optimizer_quant_state__"][key])


@pytest.mark.skipif(not HAS_BNB, reason=NO_BNB)
def test_bitsandbytes_adam8bit_state_loads_and_continues():
    import bitsandbytes as bnb

    torch.manual_seed(0)
    w = torch.randn(64, 80) * 0.1
    grads = [torch.randn_like(w) * 0.01 for _ in range(15)]
    theirs = torch.nn.Parameter(w.clone())
    b = bnb.optim.Adam8bit([theirs])
    for g in grads[:5]:
        theirs.grad = g.clone()
        b.step()
    saved = b.state_dict()
    ours = torch.nn.Parameter(theirs.detach().clone())
    a = OT.Adam8bit([ours])
    a.load_state_dict(saved)
    q = saved["state"][0]["__bnb_optimizer_quant_state__"]
    state = a.state[ours]
    assert state["step"] == 5
    for key in ("state1", "state2", "absmax1", "absmax2", "qmap1", "qmap2"):
        assert torch.equal(state[key], q[key]) and state[key].dtype == q[key].dtype
    # the first step from bitsandbytes' state is the reference's step from it, bit for bit
    want = ref.optimizer_update_8bit_blockwise(
        "adam", grads[5].numpy(), ours.detach().numpy(), q["state1"].numpy(), q["state2"].numpy(), 0.9, 0.999,
        0.0, 0.0, 1e-8, 6, 1e-3, q["qmap1"].numpy(), q["qmap2"].numpy(), q["absmax1"].numpy(),
        q["absmax2"].numpy())
    ours.grad = grads[5].clone()
    a.step()
    assert np.array_equal(ours.detach().numpy(), want[0])
    assert np.array_equal(state["state1"].numpy(), want[1]) and np.array_equal(state["absmax2"].numpy(), want[4])
    # and the run stays with bitsandbytes' own (its CPU path rounds small states differently, LOWBIT §5.2):
    # bitsandbytes' test tolerances on the parameter error
    theirs.grad = grads[5].clone()
    b.step()
    for g in grads[6:]:
        ours.grad, theirs.grad = g.clone(), g.clone()
        a.step()
        b.step()
    err = (ours - theirs).abs().detach()
    assert err.mean() < 6e-5
    assert (err / theirs.detach().abs().clamp_min(1e-3)).mean() < 6e-4


def test_our_state_dict_loads_into_a_fresh_optimizer_and_continues():
    params, grads = _data(6, seed=4)
    a_params = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    a = OT.AdEMAMix8bit(a_params)
    for gs in grads[:3]:
        for p, g in zip(a_params, gs):
            p.grad = torch.from_numpy(g.copy())
        a.step()
    b_params = [torch.nn.Parameter(p.detach().clone()) for p in a_params]
    b = OT.AdEMAMix8bit(b_params)
    b.load_state_dict(a.state_dict())
    for gs in grads[3:]:
        for p, q, g in zip(a_params, b_params, gs):
            p.grad, q.grad = torch.from_numpy(g.copy()), torch.from_numpy(g.copy())
        a.step()
        b.step()
    for p, q in zip(a_params, b_params):
        assert torch.equal(p, q)


def test_bfloat16_parameter_keeps_float32_quant_state_on_load():
    p = torch.nn.Parameter(torch.randn(5000).to(torch.bfloat16))
    opt = OT.Adam8bit([p])
    p.grad = torch.randn(5000).to(torch.bfloat16) * 0.01
    opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    other = OT.Adam8bit([q])
    other.load_state_dict(opt.state_dict())
    assert other.state[q]["absmax1"].dtype == torch.float32 and other.state[q]["qmap1"].dtype == torch.float32
    assert torch.equal(other.state[q]["qmap1"], torch.from_numpy(dynamic_map(True)))
