"""What the short-path tests of optkernels.torch share (tests/test_torch_*_short_path.py): the same
parameters under torch.optim (``foreach=False``) and optkernels.torch, gradients for both, a bitwise
comparison, and the steps that must leave the short path (AMP's ``found_inf``, hooks, a closure, bad input)."""

import pytest
import torch

import optkernels.torch as okt

SIZES = (7, 40000, 1000)  # a tail, a tensor of several chunks and threads, a small one


def _random(n, gen, dtype):
    wide = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    return torch.randn(n, generator=gen, dtype=wide).to(dtype)


def twins(cls, dtype, sizes=SIZES, **kwargs):
    """``[(params, torch optimizer), (params, optkernels optimizer)]``: class ``cls`` over the same
    parameters, ``lr=0.01`` and ``kwargs``."""
    gen = torch.Generator().manual_seed(3)
    base = [_random(n, gen, dtype) for n in sizes]
    out = []
    for lib, extra in ((torch.optim, dict(foreach=False)), (okt, {})):
        ps = [torch.nn.Parameter(b.clone()) for b in base]
        out.append((ps, getattr(lib, cls)(ps, lr=0.01, **kwargs, **extra)))
    return out


def grads(ps_pair, k, fresh):
    """The same gradients (seed ``k``) on both lists: new tensors where ``fresh``, else copied in place."""
    gen = torch.Generator().manual_seed(100 + k)
    for p, q in zip(*ps_pair):
        g = _random(p.shape, gen, p.dtype)
        for t in (p, q):
            if fresh or t.grad is None:
                t.grad = g.clone()
            else:
                t.grad.copy_(g)


def bits(t):
    """A tensor to compare bit for bit (half tensors as their int16 bits; NaN payloads included)."""
    return t.view(torch.int16) if t.element_size() == 2 else t


def equal(a, b):
    return all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b))


def same_state(topt, oopt, tp, op):
    """Both optimizers' states: the same keys, the same step values and dtypes, the same bits."""
    for p, q in zip(tp, op):
        s, t = topt.state[p], oopt.state[q]
        assert set(s) == set(t)
        for name in s:
            if name == "step":
                assert float(s[name]) == float(t[name]) and s[name].dtype == t[name].dtype
            else:
                assert torch.equal(bits(s[name]), bits(t[name])), name


def step_both(pair, short):
    """One step of each optimizer of ``twins``; True where ours took the short path (``short(opt)`` before
    and after the step), after checking the parameters are equal."""
    (tp, topt), (op, oopt) = pair
    ready = short(oopt)
    topt.step()
    oopt.step()
    assert equal(tp, op)
    return ready and short(oopt)


def check_steps_that_leave_the_short_path(pair, short):
    """AMP's skipped step (``found_inf``: nothing written), a post hook and a closure (the generic step, the
    same bits), then a gradient of another shape and a negative lr: errors, nothing written."""
    (tp, topt), (op, oopt) = pair
    for k in range(2):
        grads((tp, op), k, fresh=False)
        topt.step()
        oopt.step()
    assert short(oopt)
    before = [p.detach().clone() for p in op]
    grads((tp, op), 5, fresh=False)
    oopt.found_inf = torch.ones(())
    oopt.grad_scale = torch.full((), 2.0)
    oopt.step()
    assert equal(before, op)
    assert [float(oopt.state[p]["step"]) for p in op] == [2.0] * 3
    del oopt.found_inf, oopt.grad_scale
    calls = []
    handle = oopt.register_step_post_hook(lambda opt, args, kwargs: calls.append(1))
    losses = []
    assert oopt.step(lambda: losses.append(1) or 2.5) == 2.5 and topt.step() is None
    assert calls == [1] and losses == [1]
    handle.remove()
    assert equal(tp, op)
    grads((tp, op), 6, fresh=False)
    topt.step()
    oopt.step()
    assert short(oopt) and equal(tp, op)
    op[1].grad.data = torch.ones(200, 200, dtype=op[1].dtype)
    oopt.param_groups[0]["lr"] = -1.0
    before = [p.detach().clone() for p in op]
    with pytest.raises(ValueError, match="Invalid learning rate"):
        oopt.step()
    oopt.param_groups[0]["lr"] = 0.01
    with pytest.raises(RuntimeError):
        oopt.step()
    assert equal(before, op)
    assert [float(oopt.state[p]["step"]) for p in op] == [4.0] * 3
