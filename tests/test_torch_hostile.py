"""Hostile input to the optkernels.torch drop-ins, as a torch user can produce it: parameters whose data was
replaced or resized, gradients swapped through ``.data``, states loaded from another model or missing a key.

Each case runs on ``torch.optim`` and on the drop-in: where torch raises, ours raises the same exception type
with the same message, and no parameter or state byte of ours changed (all groups are checked before any
is written; torch itself may have updated an earlier group); where torch runs, ours runs to the same values.
These cases corrupted the heap before the state's shape was checked: each runs in-process, so a regression
fails the whole file loudly.
"""
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

pytestmark = pytest.mark.filterwarnings("ignore:.*own implementation:UserWarning",
                                        "ignore:optimizer contains a parameter group with duplicate")

CLASSES = {
    "Adam": ("Adam", {}),
    "Adam-amsgrad": ("Adam", dict(amsgrad=True)),
    "AdamW": ("AdamW", {}),
    "Adamax": ("Adamax", {}),
    "SGD-momentum": ("SGD", dict(momentum=0.9)),
    "SGD": ("SGD", {}),
    "Adagrad": ("Adagrad", {}),
    "RMSprop": ("RMSprop", dict(momentum=0.5, centered=True)),
}


def _state_dict_of(lib, name, kwargs, size):
    """The state_dict of the same optimizer after one step over parameters of another size."""
    a, q = torch.ones(5, requires_grad=True), torch.ones(size, requires_grad=True)
    opt = getattr(lib, name)([{"params": [a]}, {"params": [q]}], lr=0.1, **kwargs)
    a.grad, q.grad = torch.ones(5), torch.ones(size)
    opt.step()
    return opt.state_dict()


def _drop(key):
    def mutate(lib, name, kwargs, opt, a, p):
        sd = opt.state_dict()
        if 1 not in sd["state"]:            # (SGD without momentum keeps no state)
            return
        if key == "last":
            names = [k for k in sd["state"][1] if k != "step"]
            if not names:
                return
            del sd["state"][1][names[-1]]
        elif key in sd["state"][1]:
            del sd["state"][1][key]
        opt.load_state_dict(sd)
    return mutate


def _set_data(make_data, make_grad):
    def mutate(lib, name, kwargs, opt, a, p):
        p.data = make_data(p)
        p.grad = make_grad(p)
    return mutate


def _set_grad_data(make):
    def mutate(lib, name, kwargs, opt, a, p):
        p.grad.data = make(p)
    return mutate


def _load(size):
    def mutate(lib, name, kwargs, opt, a, p):
        opt.load_state_dict(_state_dict_of(lib, name, kwargs, size))
    return mutate


def _amsgrad_on(lib, name, kwargs, opt, a, p):
    opt.param_groups[1]["amsgrad"] = True


CASES = {
    "bigger p.data": _set_data(lambda p: torch.ones(12), lambda p: torch.ones(12)),
    "smaller p.data": _set_data(lambda p: torch.ones(3), lambda p: torch.ones(3)),
    "p.data grown by resize_": _set_data(lambda p: p.data.resize_(4000).fill_(1.0), lambda p: torch.ones(4000)),
    "p.data shrunk by resize_": _set_data(lambda p: p.data.resize_(2), lambda p: torch.ones(2)),
    "p.data reshaped (same memory)": _set_data(lambda p: p.data.view(2, 3), lambda p: torch.ones(2, 3)),
    "p.data as a row (1, 6)": _set_data(lambda p: p.data.view(1, 6), lambda p: torch.ones(1, 6)),
    "p.data of another dtype": _set_data(lambda p: p.data.double(), lambda p: torch.ones(6, dtype=torch.float64)),
    "grad of another shape, same numel": _set_grad_data(lambda p: torch.ones(2, 3)),
    "grad of fewer elements": _set_grad_data(lambda p: torch.ones(4)),
    "grad of more elements": _set_grad_data(lambda p: torch.ones(4000)),
    "grad of another dtype": _set_grad_data(lambda p: torch.ones(6, dtype=torch.float64)),
    "state of a smaller model": _load(3),
    "state of a bigger model": _load(4000),
    "state missing a tensor": _drop("last"),
    "state missing step": _drop("step"),
    "gradient set to None": lambda lib, name, kwargs, opt, a, p: setattr(p, "grad", None),
}


def _run(lib, label, case):
    name, kwargs = CLASSES[label]
    if case == "amsgrad switched on" and name not in ("Adam", "AdamW"):
        pytest.skip("amsgrad is Adam's flag")
    a = torch.linspace(-1, 1, 5).requires_grad_()
    p = torch.linspace(1, 2, 6).requires_grad_()
    opt = getattr(lib, name)([{"params": [a]}, {"params": [p]}], lr=0.1, **kwargs)
    a.grad, p.grad = torch.full((5,), 0.5), torch.linspace(-0.5, 0.25, 6)
    opt.step()
    before = _snapshot(opt)
    try:
        (CASES.get(case) or _amsgrad_on)(lib, name, kwargs, opt, a, p)
        a.grad = torch.full((5,), -0.5)
        before = _snapshot(opt)
        opt.step()
    except Exception as error:  # the exception is what is compared
        return error, before, opt
    return None, before, opt


def _snapshot(opt):
    """Every parameter's and state tensor's bytes (as uint8: NaN-safe, dtype-exact)."""
    tensors = [p for g in opt.param_groups for p in g["params"]]
    tensors += [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return [(t.dtype, t.shape, t.detach().reshape(-1).clone().view(torch.uint8)) for t in tensors]


@pytest.mark.parametrize("case", list(CASES) + ["amsgrad switched on"])
@pytest.mark.parametrize("label", list(CLASSES))
def test_hostile_step_raises_as_torch_and_changes_nothing(label, case):
    theirs, _, torch_opt = _run(torch.optim, label, case)
    ours, before, our_opt = _run(okt, label, case)
    if theirs is None:
        assert ours is None, f"torch ran, ours raised {ours!r}"
        for mine, its in zip(_snapshot(our_opt), _snapshot(torch_opt)):
            assert mine[:2] == its[:2]
        for g_ours, g_torch in zip(our_opt.param_groups, torch_opt.param_groups):
            for x, y in zip(g_ours["params"], g_torch["params"]):
                torch.testing.assert_close(x, y, rtol=2e-6, atol=1e-7)
        return
    assert type(ours) is type(theirs), f"torch raised {theirs!r}, ours {ours!r}"
    assert str(ours) == str(theirs)
    after = _snapshot(our_opt)
    assert len(after) == len(before)
    for (dtype0, shape0, bytes0), (dtype1, shape1, bytes1) in zip(before, after):
        assert dtype0 == dtype1 and shape0 == shape1 and torch.equal(bytes0, bytes1)


@pytest.mark.parametrize("label", ["Adam", "SGD-momentum", "Adagrad"])
def test_parameter_listed_twice_steps_as_torch(label):
    """torch updates a parameter listed twice in a group twice per step, with one state: so does ours (by
    torch's own implementation, bit for bit)."""
    name, kwargs = CLASSES[label]
    results = []
    for lib in (torch.optim, okt):
        p = torch.linspace(-1, 1, 7).requires_grad_()
        q = torch.linspace(0, 1, 4).requires_grad_()
        opt = getattr(lib, name)([p, q, p], lr=0.1, **kwargs)
        for k in range(3):
            p.grad, q.grad = torch.linspace(-1, 2, 7) * (k + 1), torch.full((4,), 0.5)
            opt.step()
        results.append((p.detach().clone(), opt.state_dict()["state"]))
        if lib is okt:
            assert opt.backend_for(p) == "torch"
    (p0, s0), (p1, s1) = results
    assert torch.equal(p0, p1)
    for k in s0:
        for key in s0[k]:
            assert torch.equal(torch.as_tensor(s0[k][key]), torch.as_tensor(s1[k][key]))


def _state_entries(opt):
    """Per parameter (in group order): None where ``opt.state`` has no entry, else its keys with each
    tensor's dtype, shape and values."""
    out = []
    for p in (p for g in opt.param_groups for p in g["params"]):
        state = opt.state[p] if p in opt.state else None
        out.append(None if state is None else {
            k: (v.dtype, tuple(v.shape), v.detach().clone()) if isinstance(v, torch.Tensor) else v
            for k, v in state.items()})
    return out


@pytest.mark.parametrize("case", ["grad of another shape, same numel", "grad of more elements",
                                  "grad of another dtype"])
@pytest.mark.parametrize("label", ["Adam-amsgrad", "SGD-momentum", "Adagrad", "RMSprop"])
def test_refused_first_step_leaves_torchs_state(label, case):
    """A first step that torch refuses in group 1 after creating its state lazily: ours raises the same and
    leaves the same state entries (keys, dtypes, shapes); the refused parameter's entry, created by the
    step, is torch's bit for bit. (torch has updated group 0 before raising, and counted the refused step
    in a state made by Adagrad's constructor; ours writes no tensor that existed before the step.)"""
    name, kwargs = CLASSES[label]
    if name in ("SGD", "Adagrad") and "dtype" in case:
        pytest.skip(f"torch's {name} takes a gradient of another dtype")
    results = []
    for lib in (torch.optim, okt):
        a = torch.linspace(-1, 1, 5).requires_grad_()
        p = torch.linspace(1, 2, 6).requires_grad_()
        opt = getattr(lib, name)([{"params": [a]}, {"params": [p]}], lr=0.1, **kwargs)
        a.grad, p.grad = torch.full((5,), 0.5), torch.linspace(-0.5, 0.25, 6)
        CASES[case](lib, name, kwargs, opt, a, p)
        with pytest.raises(RuntimeError) as raised:
            opt.step()
        results.append((str(raised.value), _state_entries(opt)))
    (error0, state0), (error1, state1) = results
    assert error0 == error1
    assert [None if s is None else {k: v[:2] for k, v in s.items()} for s in state0] == \
           [None if s is None else {k: v[:2] for k, v in s.items()} for s in state1]
    assert state0[1] is not None
    for key, (_dtype, _shape, value) in state0[1].items():  # dtypes and shapes: compared above
        if name == "Adagrad" and key == "step":  # made by the constructor: torch counted the refused step
            assert float(state1[1][key][2]) == 0.0 and float(value) == 1.0
            continue
        assert torch.equal(value, state1[1][key][2]), key


LATE_CASES = {
    "p.data replaced (same shape)": lambda p: setattr(p, "data", torch.full((2, 3), 0.5)),
    "grad transposed in place": lambda p: p.grad.t_(),
    "grad.data of another shape": lambda p: setattr(p.grad, "data", torch.ones(3, 2)),
    "grad.data a view (6,)": lambda p: setattr(p.grad, "data", p.grad.data.view(6)),
}


def _after_steady_steps(lib, name, kwargs):
    """A (2, 3) parameter and ``lib``'s optimizer ``name`` after three steps over the same gradient object
    (written in place)."""
    p = torch.linspace(1, 2, 6).reshape(2, 3).requires_grad_()
    p.grad = torch.zeros(2, 3)
    opt = getattr(lib, name)([p], lr=0.1, **kwargs)
    for k in range(3):
        p.grad.copy_(torch.linspace(-0.5, 0.25, 6).reshape(2, 3) * (k + 1))
        opt.step()
    return p, opt


@pytest.mark.parametrize("case", list(LATE_CASES))
@pytest.mark.parametrize("label", ["Adam", "SGD-momentum", "SGD"])
def test_change_after_steady_steps(label, case):
    """After steps over the same gradient objects (zeroed in place: the re-checks are skipped while nothing
    moved), a parameter or gradient changed at the same address or a new one: ours raises what torch raises
    or steps to torch's values."""
    name, kwargs = CLASSES[label]
    out = []
    for lib in (torch.optim, okt):
        p, opt = _after_steady_steps(lib, name, kwargs)
        LATE_CASES[case](p)
        try:
            opt.step()
        except Exception as error:  # the exception is what is compared
            out.append((type(error), str(error)))
            continue
        out.append(p.detach().clone())
    if isinstance(out[0], tuple):
        assert out[1] == out[0]
    else:
        assert isinstance(out[1], torch.Tensor), f"torch ran, ours raised {out[1]}"
        torch.testing.assert_close(out[1], out[0], rtol=2e-6, atol=1e-7)


STATE_NAMES = {"Adam": "exp_avg", "Adam-amsgrad": "max_exp_avg_sq", "SGD-momentum": "momentum_buffer",
               "RMSprop": "square_avg"}
STATE_CASES = {
    "replaced": lambda state, name: state.__setitem__(name, state[name].clone() * 0.5),
    ".data swapped": lambda state, name: setattr(state[name], "data", state[name].clone() * 0.5),
    "set_": lambda state, name: state[name].set_(state[name].clone() * 0.5),
    "storage moved": lambda state, name: state[name].untyped_storage().resize_(1 << 16),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
@pytest.mark.parametrize("label", list(STATE_NAMES))
def test_state_changed_after_steady_steps(label, case):
    """After steady steps, a state tensor replaced by hand or its memory swapped (``.data =``): ours steps
    the new tensor to torch's values (a launch table holding the old address wrote a stale or freed buffer)."""
    name, kwargs = CLASSES[label]
    out = []
    for lib in (torch.optim, okt):
        p, opt = _after_steady_steps(lib, name, kwargs)
        STATE_CASES[case](opt.state[p], STATE_NAMES[label])
        for k in range(2):
            p.grad.copy_(torch.linspace(-0.25, 0.5, 6).reshape(2, 3) * (k + 1))
            opt.step()
        out.append((p.detach().clone(), opt.state[p][STATE_NAMES[label]].clone()))
    for ours, theirs in zip(out[1], out[0]):
        torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=1e-7)


ENTRY_CASES = {
    "entry replaced by an equal copy": lambda opt, p: opt.state.__setitem__(p, dict(opt.state[p])),
    "entry replaced, buffers halved": lambda opt, p: opt.state.__setitem__(
        p, {k: v * 0.5 if k != "step" else v.clone() for k, v in opt.state[p].items()}),
    "entry cleared": lambda opt, p: opt.state[p].clear(),
    "state cleared": lambda opt, p: opt.state.clear(),
    "another entry added": lambda opt, p: opt.state[torch.ones(1)],
}


@pytest.mark.parametrize("case", list(ENTRY_CASES))
@pytest.mark.parametrize("label", list(STATE_NAMES))
def test_state_entry_changed_after_steady_steps(label, case):
    """After steady steps, the optimizer's state dict or a parameter's entry modified (the state tensors
    themselves untouched): ours steps from the state torch steps from, to torch's values."""
    name, kwargs = CLASSES[label]
    out = []
    for lib in (torch.optim, okt):
        p, opt = _after_steady_steps(lib, name, kwargs)
        ENTRY_CASES[case](opt, p)
        for k in range(2):
            p.grad.copy_(torch.linspace(-0.25, 0.5, 6).reshape(2, 3) * (k + 1))
            opt.step()
        out.append((p.detach().clone(), opt.state[p][STATE_NAMES[label]].clone()))
    for ours, theirs in zip(out[1], out[0]):
        torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=1e-7)
