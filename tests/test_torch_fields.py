"""The compiled check of a plan's parameters and gradients (``optkernels.torch._fields``): it gives the
tensors' data addresses exactly while every field is as the plan was built for, and refuses every change a
torch user can make in place, leaving the optimizer's Python checks to raise or route (tests/test_torch_hostile
runs those end to end)."""
import collections

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
fields = pytest.importorskip("optkernels.torch._fields", reason="optkernels.torch did not import")


def _group():
    params = [torch.nn.Parameter(torch.linspace(-1, 1, 6)), torch.nn.Parameter(torch.ones(3, 3)),
              torch.nn.Parameter(torch.zeros(2, 3, 4, dtype=torch.float64)[:, 1:])]
    for k, p in enumerate(params):
        p.grad = torch.full(p.shape, float(k), dtype=p.dtype)
    return params


def _swap_grad(make):
    def change(params):
        params[1].grad = make(params[1])
    return change


CHANGES = {
    "p.data bigger": lambda ps: setattr(ps[0], "data", torch.ones(12)),
    "p.data of the same size, new memory": lambda ps: setattr(ps[0], "data", torch.ones(6)),
    "p.data grown by resize_": lambda ps: ps[0].data.resize_(4000),
    "p.data shrunk by resize_": lambda ps: setattr(ps[0], "data", ps[0].data.resize_(2)),
    "p.data reshaped (same memory)": lambda ps: setattr(ps[0], "data", ps[0].data.view(2, 3)),
    "p.data transposed (same shape)": lambda ps: setattr(ps[1], "data", ps[1].data.t()),
    "p.data of another dtype": lambda ps: setattr(ps[0], "data", ps[0].data.double()),
    "p.data offset view": lambda ps: setattr(ps[0], "data", ps[0].data[1:]),
    "grad None": lambda ps: setattr(ps[1], "grad", None),
    "grad of another shape, same numel": lambda ps: setattr(ps[1].grad, "data", torch.ones(1, 9)),
    "grad resized in place": lambda ps: ps[1].grad.resize_(9),
    "grad transposed (same shape)": _swap_grad(lambda p: torch.ones(3, 3).t()),
    "grad of another dtype": lambda ps: setattr(ps[1].grad, "data", torch.ones(3, 3, dtype=torch.float64)),
    "grad sparse": _swap_grad(lambda p: torch.ones(3, 3).to_sparse()),
    "grad of more elements (through .data)": lambda ps: setattr(ps[1].grad, "data", torch.ones(4, 4)),
    "parameter appended": lambda ps: ps.append(torch.nn.Parameter(torch.ones(2))),
    "parameter removed": lambda ps: ps.pop(),
    "parameters reordered": lambda ps: ps.reverse(),
    "parameter replaced": lambda ps: ps.__setitem__(0, torch.nn.Parameter(torch.ones(6))),
}


def _guard(params):
    at = fields.layout()
    assert at is not None, "the tensor fields were not found in this torch build: steps take the slow path"
    return fields.Guard(params, [p.grad for p in params], at, [p.grad.stride() for p in params])


def test_guard_gives_the_addresses_of_unchanged_and_replaced_gradients():
    params = _group()
    guard = _guard(params)
    expected = [p.data_ptr() for p in params] + [p.grad.data_ptr() for p in params]
    assert guard.addresses(params).tolist() == expected
    params[2].grad = torch.ones_like(params[2].grad)  # a new gradient of the expected layout: accepted
    assert guard.addresses(params).tolist() == expected[:5] + [params[2].grad.data_ptr()]
    assert guard.addresses(tuple(params)) is None  # not a list: left to the Python checks


@pytest.mark.parametrize("change", list(CHANGES))
def test_guard_refuses_every_change(change):
    params = _group()
    guard = _guard(params)
    CHANGES[change](params)
    assert guard.addresses(params) is None


def _state():
    """A group's parameters and an optimizer-like state of them: a step counter and a buffer each."""
    params = _group()
    state = collections.defaultdict(dict)
    for k, p in enumerate(params):
        state[p]["step"] = torch.tensor(1.0)
        state[p]["buf"] = torch.full_like(p, float(k))
    return params, state


def _watch(state, params):
    at, version_at = fields.layout(), fields.dict_version_at()
    assert at is not None and version_at is not None, "fields or dict versions not found: checked through Python"
    entries = [state[p] for p in params]
    return fields.StateWatch(state, entries, [e["buf"] for e in entries], at, version_at)


STATE_CHANGES = {
    "entry replaced by an equal copy": lambda ps, st: st.__setitem__(ps[0], dict(st[ps[0]])),
    "entry cleared": lambda ps, st: st[ps[1]].clear(),
    "entry deleted": lambda ps, st: st.pop(ps[2]),
    "state cleared": lambda ps, st: st.clear(),
    "an entry added (defaultdict)": lambda ps, st: st[torch.ones(1)],
    "buffer replaced": lambda ps, st: st[ps[1]].__setitem__("buf", st[ps[1]]["buf"].clone()),
    "buffer deleted": lambda ps, st: st[ps[1]].pop("buf"),
    "another key of the entry written": lambda ps, st: st[ps[1]].__setitem__("step", torch.tensor(2.0)),
    ".data swapped (same shape)": lambda ps, st: setattr(st[ps[0]]["buf"], "data", torch.zeros(6)),
    ".data of another dtype": lambda ps, st: setattr(st[ps[0]]["buf"], "data", torch.zeros(6, dtype=torch.float64)),
    "set_ to new memory": lambda ps, st: st[ps[1]]["buf"].set_(torch.zeros(3, 3)),
    "set_ to an offset view": lambda ps, st: st[ps[0]]["buf"].set_(torch.zeros(7)[1:]),
    "grown by resize_": lambda ps, st: st[ps[0]]["buf"].resize_(4000),
    "shrunk by resize_": lambda ps, st: st[ps[0]]["buf"].resize_(2),
    "storage moved by resize_": lambda ps, st: st[ps[0]]["buf"].untyped_storage().resize_(4000 * 4),
    "transposed in place": lambda ps, st: st[ps[1]]["buf"].t_(),
    "reshaped through .data (same memory)": lambda ps, st: setattr(st[ps[0]]["buf"], "data",
                                                                   st[ps[0]]["buf"].data.view(2, 3)),
}


@pytest.mark.parametrize("change", list(STATE_CHANGES))
def test_state_watch_refuses_every_change(change):
    """A dict of the state modified or a buffer's memory or fields changed: the watch refuses (the
    optimizer then checks through Python), and a guard watching it refuses too."""
    params, state = _state()
    watch, guard = _watch(state, params), _guard(params)
    guard.watch(watch)
    assert watch.intact() and guard.addresses(params) is not None
    STATE_CHANGES[change](params, state)
    assert not watch.intact()
    assert guard.addresses(params) is None


def test_state_watch_passes_reads_and_an_equal_write():
    """Reads (and writing an entry's own tensor back, which leaves a dict's content as it was) keep the
    watch passing: the steady steps take the compiled check."""
    params, state = _state()
    watch = _watch(state, params)
    buf = state[params[0]]["buf"]
    assert state.get(params[1]) is not None and params[2] in state and len(list(state.items())) == 3
    state[params[0]]["buf"] = buf
    state[params[0]]["buf"].add_(1.0)  # values are not watched: the kernels write them
    assert watch.intact()
    assert float(buf.sum()) == 6.0


def test_dict_version_grows_at_each_modification():
    at = fields.dict_version_at()
    assert at is not None, "dict versions not found in this Python: the state is checked through Python"
    d = {}
    seen = []
    for change in (lambda: d.__setitem__(1, 2), lambda: d.__setitem__(1, 3), lambda: d.pop(1)):
        change()
        seen.append(fields._words(id(d), at + 1)[at])
    assert seen == sorted(set(seen))
