"""The compiled check of a plan's parameters and gradients (``optkernels.torch._fields``): it gives the
tensors' data addresses exactly while every field is as the plan was built for, and refuses every change a
torch user can make in place, leaving the optimizer's Python checks to raise or route (tests/test_torch_hostile
runs those end to end)."""
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
