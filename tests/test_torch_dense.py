"""optkernels.torch's drop-in optimizers against torch.optim itself: the same gradients, float32 and
float64, many steps, random hyper-parameters; parameters are updated in place (data_ptr never changes)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

SHAPES = [(3, 5), (17,), (2, 3, 4), (0,), (3000,)]
STEPS = 40
# Relative error allowed after STEPS steps (rounding differs: e.g. torch's denominator √v/√(1-β2^t) + ε is
# our √v + ε√(1-β2^t), and torch's vector code may contract multiply-adds).
TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-12}


def _hypers(name, rng):
    """Random valid hyper-parameters for ``name`` (torch's argument names)."""
    lr = float(10 ** rng.uniform(-3, -1.5))
    wd = float(rng.choice([0.0, 10 ** rng.uniform(-3, -1)]))
    maximize = bool(rng.integers(2))
    betas = (float(rng.uniform(0.0, 0.95)), float(rng.uniform(0.9, 0.9999)))
    if name in ("Adam", "AdamW"):
        return dict(lr=lr, betas=betas, eps=float(10 ** rng.uniform(-8, -3)), weight_decay=wd,
                    amsgrad=bool(rng.integers(2)), maximize=maximize)
    if name == "Adamax":
        return dict(lr=lr, betas=betas, eps=float(10 ** rng.uniform(-8, -3)), weight_decay=wd,
                    maximize=maximize)
    if name == "SGD":
        momentum = float(rng.choice([0.0, rng.uniform(0.1, 0.95)]))
        nesterov = bool(momentum > 0 and rng.integers(2))
        dampening = 0.0 if nesterov else float(rng.choice([0.0, rng.uniform(0, 0.5)]))
        return dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov,
                    maximize=maximize)
    if name == "Adagrad":
        return dict(lr=lr, lr_decay=float(rng.choice([0.0, rng.uniform(0, 0.1)])), weight_decay=wd,
                    initial_accumulator_value=float(rng.choice([0.0, rng.uniform(0, 1)])),
                    eps=float(10 ** rng.uniform(-10, -4)), maximize=maximize)
    if name == "RMSprop":
        return dict(lr=lr, alpha=float(rng.uniform(0.8, 0.999)), eps=float(10 ** rng.uniform(-8, -3)),
                    weight_decay=wd, momentum=float(rng.choice([0.0, rng.uniform(0.1, 0.9)])),
                    centered=bool(rng.integers(2)), maximize=maximize)
    raise AssertionError(name)


def _cover_branches(name, hypers, seed):
    """Seeds 0, 1, 2 pin the flags that choose a kernel, so every kernel is exercised."""
    if name in ("Adam", "AdamW"):
        hypers["amsgrad"] = seed == 1
    elif name == "RMSprop":
        hypers.update(centered=seed != 0, momentum=0.0 if seed == 1 else 0.6)
    elif name == "SGD":
        hypers.update(momentum=0.0 if seed == 0 else 0.8, nesterov=seed == 1,
                      dampening=0.25 if seed == 2 else 0.0)


def _pair(name, hypers, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    init = [torch.randn(s, dtype=dtype, generator=gen) for s in SHAPES]
    ours = [t.clone().requires_grad_() for t in init]
    theirs = [t.clone().requires_grad_() for t in init]
    return (getattr(okt, name)(ours, **hypers), ours,
            getattr(torch.optim, name)(theirs, foreach=False, **hypers), theirs, gen)


def _run(opt_a, a, opt_b, b, gen, steps):
    for _ in range(steps):
        for x, y in zip(a, b):
            g = torch.randn(x.shape, dtype=x.dtype, generator=gen)
            x.grad, y.grad = g.clone(), g.clone()
        opt_a.step()
        opt_b.step()


def _assert_close(a, b, dtype, what=""):
    for x, y in zip(a, b):
        if x.numel() == 0:
            continue
        scale = max(1.0, y.detach().abs().max().item())
        err = (x.detach() - y.detach()).abs().max().item()
        assert err <= TOLERANCE[dtype] * scale, f"{what}: |diff| {err} > {TOLERANCE[dtype]} * {scale}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax", "SGD", "Adagrad", "RMSprop"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_torch_optim(name, dtype, seed):
    rng = np.random.default_rng(seed * 7 + len(name))
    hypers = _hypers(name, rng)
    _cover_branches(name, hypers, seed)
    opt_a, a, opt_b, b, gen = _pair(name, hypers, dtype, seed)
    pointers = [p.data_ptr() for p in a]
    _run(opt_a, a, opt_b, b, gen, STEPS)
    _assert_close(a, b, dtype, f"{name} {hypers}")
    assert [p.data_ptr() for p in a] == pointers
    for p, q in zip(a, b):     # the state too, under torch's names
        for key, value in opt_b.state[q].items():
            mine = opt_a.state[p][key]
            if key == "step":
                assert float(mine) == float(value) == STEPS
            elif value is not None:
                _assert_close([mine], [value], dtype, f"{name} state {key}")


@pytest.mark.parametrize("name", ["Adam", "SGD", "RMSprop"])
def test_state_dict_round_trips_with_torch(name):
    """A torch.optim state_dict loads into ours and ours into torch: training continues identically."""
    hypers = {"Adam": dict(lr=1e-2, amsgrad=True), "SGD": dict(lr=1e-2, momentum=0.9),
              "RMSprop": dict(lr=1e-2, momentum=0.5, centered=True)}[name]
    dtype = torch.float64
    opt_a, a, opt_b, b, gen = _pair(name, hypers, dtype, 5)
    _run(opt_a, a, opt_b, b, gen, 5)
    # swap: ours takes torch's state, a fresh torch takes ours
    a2 = [t.detach().clone().requires_grad_() for t in b]
    b2 = [t.detach().clone().requires_grad_() for t in a]
    ours = getattr(okt, name)(a2, **hypers)
    ours.load_state_dict(opt_b.state_dict())
    theirs = getattr(torch.optim, name)(b2, foreach=False, **hypers)
    theirs.load_state_dict(opt_a.state_dict())
    _run(ours, a2, theirs, b2, gen, 10)
    _assert_close(a2, b2, dtype, name)
    assert float(ours.state[a2[0]].get("step", 15)) == 15


def _mse_closure(opt, w, b, x, y):
    """The closure ``opt.step`` takes: zero the gradients, the mean squared error of ``x @ w + b`` against
    ``y``, its backward pass; returns the loss."""
    def closure():
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        return loss
    return closure


def test_schedulers_closure_zero_grad_and_groups():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(16, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    runs = []
    for cls, (pw, pb) in ((okt.Adam, (w, b)), (torch.optim.Adam, (w2, b2))):
        opt = cls([{"params": [pw]}, {"params": [pb], "lr": 0.05}], lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        closure = _mse_closure(opt, pw, pb, x, y)
        losses = []
        for _ in range(8):
            losses.append(opt.step(closure).item())
            sched.step()
        assert pw.grad is not None
        opt.zero_grad()
        assert pw.grad is None
        runs.append((losses, opt.param_groups[1]["lr"]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    assert runs[0][1] == runs[1][1] == 0.05 * 0.5 ** 2
    assert runs[0][0][-1] < runs[0][0][0]


def test_add_param_group_and_parameters_without_gradients():
    a = torch.ones(3, requires_grad=True)
    c = torch.ones(2, requires_grad=True)
    opt = okt.SGD([a], lr=0.5, momentum=0.9)
    opt.add_param_group({"params": [c], "lr": 0.1})
    a.grad = torch.ones(3)
    opt.step()                                  # c has no gradient: untouched, no state
    assert torch.equal(a.detach(), torch.full((3,), 0.5)) and torch.equal(c.detach(), torch.ones(2))
    assert c not in opt.state or not opt.state[c]
    c.grad = torch.ones(2)
    opt.step()                                   # a: b = 0.9 + 1, w = 0.5 - 0.5*1.9; c: first step
    np.testing.assert_allclose(a.detach().numpy(), 0.5 - 0.5 * 1.9, rtol=1e-6)
    np.testing.assert_allclose(c.detach().numpy(), 0.9, rtol=1e-6)


def test_torch_math_is_not_mindspore_math():
    """torch's Adam differs from MindSpore's in where epsilon sits: with a large eps the two visibly differ
    and ours follows torch."""
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = okt.Adam([w], lr=1.0, eps=0.1)
    w.grad = torch.tensor([0.5], dtype=torch.float64)
    opt.step()
    # torch: m̂ = 0.5, v̂ = 0.25: step = 0.5/(0.5 + 0.1); MindSpore's: lr_t·m/(√v + ε) with m = 0.05,
    # √v = 0.5·√0.001, lr_t = √0.001/0.1
    assert math.isclose(w.item(), -0.5 / 0.6, rel_tol=1e-12)


def test_step_hooks_and_profiler_range():
    """Step pre/post hooks run as torch runs them (a pre-hook may replace the arguments); under torch's
    profiler the step is recorded as torch names it."""
    w = torch.ones(3, requires_grad=True)
    opt = okt.SGD([w], lr=0.5)
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o is opt)))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", o is opt)))
    w.grad = torch.ones(3)
    opt.step()
    assert calls == [("pre", True), ("post", True)]
    assert torch.equal(w.detach(), torch.full((3,), 0.5))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    assert any(e.name == "Optimizer.step#SGD.step" for e in prof.events())


def test_deepcopy_of_model_and_optimizer_is_independent():
    """copy.deepcopy of (parameters, optimizer) gives an optimizer that updates the copies, not the originals
    (launch plans hold addresses: they are rebuilt for the new tensors)."""
    import copy

    w = torch.ones(5, requires_grad=True)
    opt = okt.Adam([w], lr=0.1)
    w.grad = torch.ones(5)
    opt.step()
    w2, opt2 = copy.deepcopy((w, opt))
    assert opt2.param_groups[0]["params"][0] is w2
    before = w.detach().clone()
    w2.grad = torch.ones(5)
    opt2.step()
    assert torch.equal(w.detach(), before)
    assert not torch.equal(w2.detach(), before)
    assert float(opt2.state[w2]["step"]) == 2 and float(opt.state[w]["step"]) == 1


def test_optkernels_schedules_drive_a_torch_optimizer():
    """ScheduleLR: step k runs with lr = schedule(k) (k from 0, MindSpore's global step), for our Adam and
    torch's alike; the trajectories agree."""
    from optkernels.optimizers import CosineDecayLR, WarmUpLR

    schedule = WarmUpLR(0.1, warmup_steps=4)
    runs = []
    for cls in (okt.Adam, torch.optim.Adam):
        w = torch.ones(3, dtype=torch.float64, requires_grad=True)
        opt = cls([w], lr=123.0)
        sched = okt.ScheduleLR(opt, schedule)
        seen = []
        for _ in range(6):
            seen.append(opt.param_groups[0]["lr"])
            w.grad = torch.full((3,), 0.5, dtype=torch.float64)
            opt.step()
            sched.step()
        assert seen == [schedule(k) for k in range(6)]
        runs.append(w.detach().clone())
    assert torch.allclose(runs[0], runs[1], rtol=1e-12)
    assert not torch.equal(runs[0], torch.ones(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="LearningRateSchedule"):
        okt.ScheduleLR(okt.SGD([torch.ones(1, requires_grad=True)]), 0.1)
    two = okt.SGD([{"params": [torch.ones(1, requires_grad=True)]},
                   {"params": [torch.ones(1, requires_grad=True)]}])
    okt.ScheduleLR(two, [schedule, CosineDecayLR(0.0, 0.2, 10)])
    assert [g["lr"] for g in two.param_groups] == [0.0, float(np.float32(0.2))]   # float32 schedules


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "RMSprop"])
def test_no_state_is_reallocated_between_steps(name):
    """State is allocated on the first step only: parameters and state keep their memory, and the plan (the
    address tables) is built once."""
    hypers = {"Adam": dict(amsgrad=True, weight_decay=0.1, maximize=True), "AdamW": {},
              "SGD": dict(momentum=0.9), "RMSprop": dict(centered=True, momentum=0.5)}[name]
    opt_a, a, opt_b, b, gen = _pair(name, hypers, torch.float32, 0)
    _run(opt_a, a, opt_b, b, gen, 1)
    plan = opt_a._plans[0]
    pointers = {id(p): [p.data_ptr()] + [t.data_ptr() for k, t in sorted(opt_a.state[p].items())
                                           if isinstance(t, torch.Tensor)] for p in a}
    _run(opt_a, a, opt_b, b, gen, 10)
    assert opt_a._plans[0] is plan
    assert pointers == {id(p): [p.data_ptr()] + [t.data_ptr() for k, t in sorted(opt_a.state[p].items())
                                                  if isinstance(t, torch.Tensor)] for p in a}
