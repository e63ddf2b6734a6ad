"""optkernels.torch.SGD's short path (one group, plain or momentum steps; ``sgd._PlainStep``) against
torch.optim.SGD, bit for bit, through what a training loop does between steps: gradients zeroed in place or
replaced, ``lr`` changed by a schedule, ``p.data`` replaced, a gradient dropped, momentum switched on, a
group added, AMP's ``found_inf`` set, a step hook registered, a closure. Each change either keeps the
short path (the same bits as torch) or sends the step to the generic one, which raises or routes as torch
does."""

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from short_paths import equal, grads, twins  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*own implementation:UserWarning")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", [{}, dict(weight_decay=0.1, maximize=True)])
def test_short_path_keeps_torchs_bits(dtype, kwargs):
    (tp, topt), (op, oopt) = twins("SGD", dtype, **kwargs)
    used = 0
    for k in range(8):
        grads((tp, op), k, fresh=k % 3 == 0)
        if k == 4:  # a schedule's new lr: new scalars on the short path
            topt.param_groups[0]["lr"] = oopt.param_groups[0]["lr"] = 0.0037
        ready = oopt._fast is not None
        topt.step()
        oopt.step()
        used += ready and oopt._fast is not None
        assert equal(tp, op), k
    assert used >= 6, "the short path was not taken"
    assert not oopt.state and not topt.state


def test_changes_between_steps_leave_the_short_path_as_torch_would():
    (tp, topt), (op, oopt) = twins("SGD", torch.float32)
    changes = [
        lambda ps, opt: setattr(ps[1], "data", torch.full((40000,), 0.5)),  # new memory: a new plan
        lambda ps, opt: setattr(ps[0], "grad", None),  # a frozen parameter: not stepped
        lambda ps, opt: opt.param_groups[0].update(momentum=0.9),  # state from here on
        lambda ps, opt: opt.param_groups[0].update(momentum=0.0),
        lambda ps, opt: opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(5))]}),
    ]
    used = 0
    for k in range(12):
        grads((tp, op), k, fresh=False)
        if k % 2 == 0 and k // 2 < len(changes):
            for ps, opt in ((tp, topt), (op, oopt)):
                changes[k // 2](ps, opt)
        ready = oopt._fast is not None
        topt.step()
        oopt.step()
        used += ready and oopt._fast is not None
        assert equal(tp, op), k
        assert list(topt.state_dict()["state"]) == list(oopt.state_dict()["state"]), k
    assert used >= 2, "the short path was not taken"


def test_found_inf_hooks_closure_and_bad_input_take_the_generic_step():
    (tp, topt), (op, oopt) = twins("SGD", torch.float32, fused=None)
    for k in range(2):
        grads((tp, op), k, fresh=False)
        topt.step()
        oopt.step()
    assert oopt._fast is not None
    before = [p.detach().clone() for p in op]
    grads((tp, op), 5, fresh=False)
    oopt.found_inf = torch.ones(())  # AMP's skipped step: nothing written
    oopt.grad_scale = torch.full((), 2.0)
    oopt.step()
    assert equal(before, op)
    del oopt.found_inf, oopt.grad_scale
    calls = []
    handle = oopt.register_step_post_hook(lambda opt, args, kwargs: calls.append(1))
    losses = []
    assert oopt.step(lambda: losses.append(1) or 2.5) == 2.5 and topt.step() is None
    assert calls == [1] and losses == [1]
    handle.remove()
    assert equal(tp, op)
    op[1].grad.data = torch.ones(200, 200)  # another shape: torch's error, nothing written
    oopt.param_groups[0]["lr"] = -1.0
    before = [p.detach().clone() for p in op]
    with pytest.raises(ValueError, match="Invalid learning rate"):
        oopt.step()
    oopt.param_groups[0]["lr"] = 0.01
    with pytest.raises(RuntimeError):
        oopt.step()
    assert equal(before, op)


def test_hooks_and_profiler_around_a_short_path_step():
    """A plain step with step hooks or torch's profiler on runs them as torch does (the short path taken
    inside them)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    (tp, topt), (op, oopt) = twins("SGD", torch.float32)
    for k in range(2):
        grads((tp, op), k, fresh=False)
        topt.step()
        oopt.step()
    calls = []
    handles = [
        oopt.register_step_pre_hook(lambda opt, args, kwargs: calls.append("pre")),
        register_optimizer_step_post_hook(lambda opt, args, kwargs: calls.append("post")),
    ]
    grads((tp, op), 2, fresh=False)
    oopt.step()
    for handle in handles:
        handle.remove()
    topt.step()
    assert calls == ["pre", "post"] and oopt._fast is not None
    with torch.profiler.profile() as profile:
        grads((tp, op), 3, fresh=False)
        oopt.step()
    topt.step()
    assert [e.name for e in profile.events()].count("Optimizer.step#SGD.step") == 1
    assert oopt._fast is not None and equal(tp, op)


def _copied_state(opt):
    """A deep copy of ``opt.state_dict()`` (state tensors cloned)."""
    sd = opt.state_dict()
    state = {k: {n: v.clone() for n, v in s.items()} for k, s in sd["state"].items()}
    return {"state": state, "param_groups": [dict(g) for g in sd["param_groups"]]}


def _replace_buffer(ps, opt):
    buf = opt.state[ps[2]]["momentum_buffer"]
    opt.state[ps[2]]["momentum_buffer"] = buf * 0.5


def _swap_buffer_memory(ps, opt):
    buf = opt.state[ps[1]]["momentum_buffer"]
    buf.data = buf.clone() * 2.0  # the same tensor object, new memory


@pytest.mark.parametrize(
    "dtype, kwargs",
    [
        (torch.float32, dict(momentum=0.9)),
        (torch.float64, dict(momentum=0.8, nesterov=True, weight_decay=0.01)),
        (torch.float32, dict(momentum=0.7, dampening=0.3, maximize=True)),
    ],
)
def test_momentum_steps_on_the_short_path_keep_torchs_bits(dtype, kwargs):
    """After the first step made every buffer, momentum steps take the short path; a state_dict loaded, a
    buffer replaced by hand or its memory swapped, the state cleared send a step to the generic one (which
    re-plans from the state as it is now), an lr change keeps it."""
    (tp, topt), (op, oopt) = twins("SGD", dtype, **kwargs)
    saved = {}
    changes = {
        3: lambda ps, opt: opt.param_groups[0].update(lr=0.0041),
        5: lambda ps, opt: saved.setdefault(id(opt), _copied_state(opt)),
        7: lambda ps, opt: opt.load_state_dict(saved[id(opt)]),
        9: _replace_buffer,
        11: _swap_buffer_memory,
        13: lambda ps, opt: opt.state.clear(),  # torch starts every buffer from the gradient again
    }
    used = 0
    for k in range(16):
        grads((tp, op), k, fresh=k % 4 == 0)
        if k in changes:
            for ps, opt in ((tp, topt), (op, oopt)):
                changes[k](ps, opt)
        ready = oopt._fast is not None
        topt.step()
        oopt.step()
        used += ready and oopt._fast is not None
        assert equal(tp, op), k
        bufs = [(topt.state[p]["momentum_buffer"], oopt.state[q]["momentum_buffer"]) for p, q in zip(tp, op)]
        assert all(torch.equal(a, b) for a, b in bufs), k
    assert used >= 8, "the short path was not taken"
