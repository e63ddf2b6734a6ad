"""Configurations optkernels' kernels do not serve run torch's own implementation (bit for bit torch's
``foreach=False`` results, said once in a warning and by ``backend_for``); layouts they do serve (transposed
and sliced parameters, parameters materialised from ``meta``) run the kernels in place; torch.amp's
GradScaler protocol of fused optimizers is honoured."""
import copy
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

CLASSES = [("Adam", {}), ("AdamW", dict(amsgrad=True)), ("Adamax", {}), ("SGD", dict(momentum=0.9)),
           ("SGD", {}), ("Adagrad", {}), ("RMSprop", dict(momentum=0.5, centered=True))]
IDS = ["Adam", "AdamW-amsgrad", "Adamax", "SGD-momentum", "SGD", "Adagrad", "RMSprop"]


def _grads(params, k):
    for j, p in enumerate(params):
        g = torch.linspace(-1.0, 2.0, p.numel(), dtype=p.dtype).reshape(p.shape) * (k + 1) / (j + 1)
        p.grad = torch.empty_like(p).copy_(g)            # laid out as autograd lays out p's gradient


def _run(lib, name, kwargs, make, steps=3, torch_kwargs=None):
    params = make()
    extra = dict(foreach=False) if lib is torch.optim else {}
    opt = getattr(lib, name)(params, lr=0.05, **kwargs, **extra, **(torch_kwargs or {}))
    for k in range(steps):
        _grads(params, k)
        opt.step()
    return params, opt


def _assert_same(a, b):
    (pa, oa), (pb, ob) = a, b
    for x, y in zip(pa, pb):
        assert torch.equal(x.detach(), y.detach())
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert list(sa) == list(sb)
    for k in sa:
        assert list(sa[k]) == list(sb[k])
        for key in sa[k]:
            x, y = torch.as_tensor(sa[k][key]), torch.as_tensor(sb[k][key])
            assert x.dtype == y.dtype and torch.equal(x, y), key


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=IDS)
def test_complex_parameters_run_torchs_implementation(name, kwargs):
    def make():
        return [torch.linspace(-1, 1, 6).requires_grad_(),
                torch.complex(torch.linspace(0, 1, 5), torch.linspace(1, 2, 5)).requires_grad_()]
    theirs = _run(torch.optim, name, kwargs, make)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ours = _run(okt, name, kwargs, make)
    assert sum("complex64 parameters" in str(w.message) for w in said) == 1       # said once, not per step
    assert torch.equal(ours[0][1].detach(), theirs[0][1].detach())
    for key, value in theirs[1].state.get(theirs[0][1], {}).items():
        assert torch.equal(torch.as_tensor(ours[1].state[ours[0][1]][key]), torch.as_tensor(value)), key
    torch.testing.assert_close(ours[0][0], theirs[0][0])
    assert list(ours[1].state_dict()["state"]) == list(theirs[1].state_dict()["state"])
    assert [ours[1].backend_for(p) for p in ours[0]] == ["optkernels", "torch"]


@pytest.mark.parametrize("name,kwargs", [c for c in CLASSES if c[0] != "Adagrad"],
                         ids=[i for i in IDS if i != "Adagrad"])
def test_differentiable_runs_torchs_implementation(name, kwargs):
    def make():
        return [torch.linspace(-1, 1, 6)]       # torch's differentiable step: parameters not requiring grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _assert_same(_run(okt, name, kwargs, make, torch_kwargs=dict(differentiable=True)),
                     _run(torch.optim, name, kwargs, make, torch_kwargs=dict(differentiable=True)))


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=IDS)
def test_parameters_listed_twice_run_torchs_implementation(name, kwargs):
    def make():
        p = torch.linspace(-1, 1, 6).requires_grad_()
        return [p, p]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _assert_same(_run(okt, name, kwargs, make), _run(torch.optim, name, kwargs, make))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_sparse_gradients_as_torch(momentum):
    results = []
    for lib in (torch.optim, okt):
        emb = torch.nn.Embedding(7, 3, sparse=True)
        with torch.no_grad():
            emb.weight.copy_(torch.linspace(-1, 1, 21).reshape(7, 3))
        opt = lib.SGD(emb.parameters(), lr=0.1, momentum=momentum)
        for ids in ([1, 1, 4], [0, 4, 6]):
            emb.zero_grad()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                (emb(torch.tensor(ids)) ** 2).sum().backward()
                opt.step()
        results.append((emb.weight.detach().clone(), opt.state_dict()["state"]))
    assert torch.equal(results[0][0], results[1][0])
    assert list(results[0][1]) == list(results[1][1])


@pytest.mark.parametrize("name", ["Adagrad", "SparseAdam"])
@pytest.mark.parametrize("dims, dtype", [((4, 3, 2), torch.float64), ((5, 3), torch.float32)],
                         ids=["3-D-float64", "2-D-float32"])
def test_sparse_gradients_of_any_sparse_dim_run_the_kernels(name, dims, dtype):
    """``grad.to_sparse(k)`` of any k goes to the sparse kernels (indices combined into rows): the same
    values as the equivalent row-sparse gradient over the flattened rows, and torch's bits."""
    base = torch.linspace(-1, 1, int(np.prod(dims)), dtype=dtype).reshape(dims)
    mask = (torch.arange(base.numel()).reshape(dims) % 3 == 0).to(dtype)
    for k in range(1, len(dims) + 1):
        results = []
        for lib, flat in ((okt, False), (okt, True), (torch.optim, False)):
            p = base.clone().requires_grad_()
            q = p if not flat else base.clone().reshape(-1, *dims[k:]).requires_grad_()
            opt = getattr(lib, name)([q], lr=0.1)
            for step in range(2):
                g = (mask * (step + 1) - 0.5 * mask * base).to_sparse(k)
                if flat:
                    index = g.coalesce().indices()
                    rows = torch.tensor(np.ravel_multi_index(index.numpy(), dims[:k]))[None]
                    g = torch.sparse_coo_tensor(rows, g.coalesce().values(), q.shape)
                q.grad = g
                opt.step()
                if lib is okt and not flat:
                    assert opt.backend_for(q) == "optkernels"
            results.append(q.detach().reshape(dims).clone())
        assert torch.equal(results[0], results[1]), k
        assert torch.equal(results[0], results[2]), k          # torch's bits (coalesced, its rounding)


def test_sgd_without_momentum_keeps_no_state():
    p = torch.ones(3, requires_grad=True)
    for lib in (torch.optim, okt):
        opt = lib.SGD([p], lr=0.1)
        p.grad = torch.ones(3)
        opt.step()
        assert len(opt.state) == 0 and opt.state_dict()["state"] == {}


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=IDS)
def test_transposed_and_sliced_parameters_run_the_kernels_in_place(name, kwargs):
    """A transposed parameter is updated in its own memory, a sliced one through a contiguous copy written
    back: the same bits as the same values laid out contiguously, state laid out as torch lays it out."""
    base = torch.linspace(-1, 1, 40, dtype=torch.float64).reshape(5, 8)

    def strided():
        return [base.clone().t().requires_grad_(), base.clone()[:, ::2].requires_grad_()]

    def contiguous():
        return [p.detach().contiguous().requires_grad_() for p in strided()]
    odd, plain = _run(okt, name, kwargs, strided), _run(okt, name, kwargs, contiguous)
    for x, y in zip(odd[0], plain[0]):
        assert torch.equal(x.detach(), y.detach())
    assert [odd[1].backend_for(p) for p in odd[0]] == ["optkernels", "optkernels"]
    theirs = _run(torch.optim, name, kwargs, strided)
    for p, q in zip(odd[0], theirs[0]):
        for key, value in odd[1].state[p].items():
            if key != "step":
                assert value.stride() == theirs[1].state[q][key].stride(), key


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=IDS)
def test_meta_parameters_then_materialised_by_to_empty(name, kwargs):
    """An optimizer over a model still on ``meta`` steps as torch's does (torch's implementation, state on
    meta); the model materialised by ``to_empty()`` (new parameters, as torch makes them) runs the kernels."""
    def model(device):
        return torch.nn.Linear(4, 3, device=device, dtype=torch.float64)
    results = []
    for lib in (torch.optim, okt):
        late = model("meta")
        opt = getattr(lib, name)(late.parameters(), lr=0.05, **kwargs)
        _grads(list(late.parameters()), 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.step()
        if lib is okt:
            assert opt.backend_for(late.weight) == "torch"
        state = opt.state_dict()["state"]
        results.append({k: {n: (v.device, v.shape) for n, v in s.items()} for k, s in state.items()})
    assert results[0] == results[1]
    late.to_empty(device="cpu")
    torch.manual_seed(0)
    early = model("cpu")
    with torch.no_grad():
        for a, b in zip(late.parameters(), early.parameters()):
            a.copy_(b)
    opts = [getattr(okt, name)(net.parameters(), lr=0.05, **kwargs) for net in (late, early)]
    assert opts[0].backend_for(late.weight) == "optkernels"
    for k in range(2):
        for net, o in zip((late, early), opts):
            _grads(list(net.parameters()), k)
            o.step()
    for a, b in zip(late.parameters(), early.parameters()):
        assert torch.equal(a.detach(), b.detach())


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "Adagrad"])
def test_grad_scaler_protocol_of_fused_optimizers(name):
    """fused=True takes torch.amp.GradScaler's grad_scale/found_inf, as torch's fused classes do: a step
    with an inf gradient changes nothing; otherwise the step is that of the unscaled gradients (left
    unscaled in p.grad, as torch's fused kernels leave them): Adam/AdamW's that of torch's fused step, the
    others' that of the plain drop-in."""
    kwargs = dict(momentum=0.9) if name == "SGD" else {}
    p = torch.linspace(-1, 1, 9).requires_grad_()
    q = p.detach().clone().requires_grad_()
    r = p.detach().clone().requires_grad_()
    opt = getattr(okt, name)([p], lr=0.1, fused=True, **kwargs)
    if name in ("Adam", "AdamW"):  # torch's fused CPU step, given the unscaled gradients
        plain = getattr(torch.optim, name)([q], lr=0.1, fused=True, **kwargs)
    else:
        plain = getattr(okt, name)([q], lr=0.1, **kwargs)
    theirs = getattr(torch.optim, name)([r], lr=0.1, foreach=False, **kwargs)
    assert opt._step_supports_amp_scaling
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    for k in range(3):
        opt.zero_grad()
        scaler.scale(((p - k) ** 2).sum()).backward()
        if k == 1:
            p.grad[3] = float("inf")
            before = (p.detach().clone(), {n: t.clone() for n, t in opt.state[p].items()})
        scaler.step(opt)
        scaler.update()
        if k == 1:
            assert torch.equal(p.detach(), before[0])
            assert all(torch.equal(opt.state[p][n], t) for n, t in before[1].items())
            continue
        q.grad = 2 * (q.detach() - k)
        r.grad = 2 * (r.detach() - k)
        assert torch.equal(p.grad, q.grad)
        plain.step()
        theirs.step()
        assert torch.equal(p.detach(), q.detach())
        torch.testing.assert_close(p.detach(), r.detach(), rtol=2e-6, atol=1e-7)


def _layout_of(state_dict):
    return ({k: [(n, type(v).__name__, getattr(v, "dtype", None), tuple(getattr(v, "shape", ())))
                 for n, v in s.items()] for k, s in state_dict["state"].items()},
            [sorted(g) for g in state_dict["param_groups"]])


@pytest.mark.parametrize("name,kwargs", CLASSES, ids=IDS)
def test_state_dict_as_torch_and_loads_both_ways(name, kwargs):
    """state_dict() has torch's keys, order, types, dtypes and shapes (fresh and after steps); each loads
    into the other's optimizer and the continuation matches."""
    def make():
        return [torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3).requires_grad_(),
                torch.linspace(0, 2, 5, dtype=torch.float64).requires_grad_()]
    fresh = [getattr(lib, name)(make(), lr=0.05, **kwargs) for lib in (okt, torch.optim)]
    assert _layout_of(fresh[0].state_dict()) == _layout_of(fresh[1].state_dict())
    ours, theirs = _run(okt, name, kwargs, make), _run(torch.optim, name, kwargs, make)
    assert _layout_of(ours[1].state_dict()) == _layout_of(theirs[1].state_dict())
    for source, lib in ((ours, torch.optim), (theirs, okt)):
        params = [p.detach().clone().requires_grad_() for p in source[0]]
        resumed = getattr(lib, name)(params, lr=0.05, **kwargs)
        resumed.load_state_dict(copy.deepcopy(source[1].state_dict()))   # (state_dict() holds references)
        for k in range(3, 5):
            _grads(params, k)
            _grads(source[0], k)
            resumed.step()
            source[1].step()
        for p, q in zip(params, source[0]):
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["Adam", "SGD", "Adagrad"])
def test_fused_with_parameters_torchs_fused_kernels_refuse(name):
    """torch's fused step refuses complex parameters: so does ours (torch's own step, with the group's
    switches), with torch's exception."""
    errors = []
    for lib in (torch.optim, okt):
        z = torch.ones(3, dtype=torch.complex64, requires_grad=True)
        opt = getattr(lib, name)([z], lr=0.1, fused=True)
        z.grad = torch.ones(3, dtype=torch.complex64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError) as error:
                opt.step()
        errors.append(str(error.value))
        assert torch.equal(z.detach(), torch.ones(3, dtype=torch.complex64))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("name,kwargs", [c for c in CLASSES if c[0] != "SGD"],
                         ids=[i for i in IDS if not i.startswith("SGD")])
def test_older_state_dict_with_number_steps_loads_as_torch(name, kwargs):
    """A state_dict whose steps are Python numbers (older torch) loads with float32 tensor steps, as torch's
    classes convert them, and training continues."""
    def make():
        return [torch.linspace(-1, 1, 6, dtype=torch.float64).requires_grad_()]
    source = _run(okt, name, kwargs, make, steps=2)
    saved = copy.deepcopy(source[1].state_dict())
    for state in saved["state"].values():
        state["step"] = float(state["step"])
    loaded = []
    for lib in (okt, torch.optim):
        params = [p.detach().clone().requires_grad_() for p in source[0]]
        opt = getattr(lib, name)(params, lr=0.05, **kwargs)
        opt.load_state_dict(copy.deepcopy(saved))
        step = opt.state[params[0]]["step"]
        assert isinstance(step, torch.Tensor) and step.dtype == torch.float32 and float(step) == 2
        _grads(params, 2)
        opt.step()
        loaded.append(params[0].detach())
    torch.testing.assert_close(loaded[0], loaded[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,kwargs", [c for c in CLASSES if c[0] != "SGD"],
                         ids=[i for i in IDS if not i.startswith("SGD")])
def test_parameters_of_one_group_at_different_steps(name, kwargs):
    """A parameter without a gradient for a while falls behind in steps: each keeps its own count and
    bias corrections, as in torch."""
    results = []
    for lib in (okt, torch.optim):
        a = torch.linspace(-1, 1, 5, dtype=torch.float64).requires_grad_()
        b = torch.linspace(0, 1, 4, dtype=torch.float64).requires_grad_()
        opt = getattr(lib, name)([a, b], lr=0.05, **kwargs)
        for k in range(5):
            _grads([a, b], k)
            if k < 2:
                b.grad = None
            opt.step()
        results.append((a.detach(), b.detach(), float(opt.state[a]["step"]), float(opt.state[b]["step"])))
    (a0, b0, sa0, sb0), (a1, b1, sa1, sb1) = results
    assert (sa0, sb0) == (sa1, sb1) == (5.0, 3.0)
    torch.testing.assert_close(a0, a1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(b0, b1, rtol=1e-12, atol=1e-14)


def test_a_class_without_a_torch_twin_refuses_what_its_kernels_do_not_serve():
    """Lion has no torch.optim class (torch.optim.Optimizer, its base, is none): it is built from its own
    arguments, and a complex parameter, which only torch's step could serve, is a TypeError before any
    parameter is written."""
    q = torch.ones(3, requires_grad=True)
    z = torch.ones(3, dtype=torch.complex64, requires_grad=True)
    opt = okt.Lion([q, z], lr=0.1)
    q.grad, z.grad = torch.ones(3), torch.ones(3, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError, match="Lion"):
            opt.step()
    assert torch.equal(q, torch.ones(3)) and torch.equal(z, torch.ones(3, dtype=torch.complex64))
    z.grad = None
    opt.step()
    assert opt.backend_for(q) == "optkernels" and torch.all(q < 1)


BETAS_CLASSES = [("Adam", {}), ("Adam", dict(amsgrad=True, weight_decay=0.1)), ("AdamW", dict(maximize=True)),
                 ("AdamW", dict(fused=True)), ("Adamax", dict(weight_decay=0.1)), ("NAdam", dict(weight_decay=0.1)),
                 ("NAdam", dict(decoupled_weight_decay=True, weight_decay=0.1)), ("RAdam", dict(maximize=True))]
BETAS_IDS = ["Adam", "Adam-amsgrad-wd", "AdamW-maximize", "AdamW-fused", "Adamax-wd", "NAdam-wd", "NAdam-decoupled",
             "RAdam-maximize"]


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)], ids=["0d", "1", "1x1"])
@pytest.mark.parametrize("lr_tensor", [False, True], ids=["float-lr", "tensor-lr"])
@pytest.mark.parametrize("name,kwargs", BETAS_CLASSES, ids=BETAS_IDS)
def test_tensor_betas_as_torch(name, kwargs, lr_tensor, shape):
    """``betas`` given as 1-element tensors: Adam's, AdamW's and Adamax's steps (whose bias corrections torch
    computes in the tensors' dtype) and NAdam's and RAdam's with tensors of 1 or more dimensions (which torch
    takes otherwise, or refuses) run torch's own step (said once), with the group's switches (fused=True:
    torch's fused kernel); NAdam's and RAdam's with 0-d tensors run the kernels. Parameters and state bit for
    bit torch's, or torch's error."""
    def run(lib):
        params = [torch.linspace(-1, 1, 12).reshape(4, 3).requires_grad_(), torch.linspace(0, 2, 5).requires_grad_()]
        lr = torch.full(shape, 0.05) if lr_tensor else 0.05
        extra = dict(foreach=False) if lib is torch.optim and "fused" not in kwargs else {}
        opt = getattr(lib, name)(params, lr=lr, betas=(torch.full(shape, 0.9), torch.full(shape, 0.99)),
                                 **kwargs, **extra)
        for k in range(4):
            _grads(params, k)
            opt.step()
        return params, opt

    try:
        theirs = run(torch.optim)
    except Exception as error:  # torch refuses a shaped tensor in some classes: so do the drop-ins
        with pytest.raises(type(error), match=re.escape(str(error))):
            run(okt)
        return
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ours = run(okt)
    by_torch = name in ("Adam", "AdamW", "Adamax") or shape != ()
    assert sum("Tensor betas" in str(w.message) for w in said) == by_torch
    assert all(ours[1].backend_for(p) == ("torch" if by_torch else "optkernels") for p in ours[0])
    _assert_same(theirs, ours)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("values", [(0.9, 0.99), (0.8, 0.95)], ids=["same-values", "new-values"])
@pytest.mark.parametrize("name,kwargs", BETAS_CLASSES, ids=BETAS_IDS)
def test_betas_made_tensors_after_steps_as_torch(name, kwargs, values, dtype):
    """``betas`` replaced by 0-d tensors after two steps (the plans and short paths exist, made for float
    betas), with equal or new values: each later step decides again what runs it, as the first step did
    (Adam's, AdamW's and Adamax's: torch's own step), and betas set back to floats return to the kernels.
    Parameters and state bit for bit torch's."""
    def run(lib):
        params = [torch.linspace(-1, 1, 12, dtype=dtype).reshape(4, 3).requires_grad_(),
                  torch.linspace(0, 2, 5, dtype=dtype).requires_grad_()]
        extra = dict(foreach=False) if lib is torch.optim and "fused" not in kwargs else {}
        opt = getattr(lib, name)(params, lr=0.05, betas=(0.9, 0.99), **kwargs, **extra)
        for k in range(6):
            if k == 2:
                opt.param_groups[0]["betas"] = (torch.tensor(values[0]), torch.tensor(values[1]))
            if k == 4:
                opt.param_groups[0]["betas"] = values
            _grads(params, k)
            opt.step()
        return params, opt

    theirs = run(torch.optim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run(okt)
    _assert_same(theirs, ours)
