"""optkernels.torch's torch.optim classes against torch's own optimizer database (``optim_db`` of
``torch.testing._internal.common_optimizers``: per class, the constructor arguments torch tests, the invalid
ones with the error torch expects, the implementations it supports), on the CPU:

* every input of ``optim_inputs_func``, alone and with each of torch's implementation switches the class has
  on the CPU (``differentiable``, ``fused``), on float32 and float64 parameters of several shapes (a 0-d
  one, a transposed matrix) over steps with a frozen parameter and a parameter without gradient: parameters
  and state bit for bit as ``torch.optim.<Name>(foreach=False)`` (what the kernels do not serve,
  differentiable or complex, runs torch's own implementation: the same bits);
* every input of ``optim_error_inputs_func``: torch's error type and message, and a step that raises leaves
  the parameters as they were;
* what torch's own optimizer tests ask of an optimizer on the CPU, checked against torch.optim's bits
  where torch changes anything: ``state_dict`` round trips both ways (and through ``torch.save`` with
  ``weights_only``, named parameters, older states without the newer switches, non-tensor steps), parameter
  groups (per-group decay and lr, ``add_param_group``), hooks on steps and on ``(load_)state_dict``,
  ``deepcopy``, printing, ``zero_grad``, no-op steps, tensor learning rates, complex parameters, sparse
  gradients, schedulers, ``fused=True`` with ``found_inf`` and parameters on ``meta``.

torch's sqrt is MKL's here: optkernels reproduces it with ``OPTKERNELS_TORCH_SQRT=torch`` (set here), and where
it is a kernel optkernels does not reproduce, torch's roots are made IEEE (test_torch_bits).
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
_FROZEN = torch.backends.flags_frozen()
common = pytest.importorskip(
    "torch.testing._internal.common_optimizers",
    reason="torch's optimizer test database needs expecttest (pip install -e '.[test]')",
)
if not _FROZEN:  # torch's test utilities freeze torch.backends' flags on import: not for the other tests
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from torch.optim.optimizer import (  # noqa: E402
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from optkernels.torch._sqrt import ENVIRONMENT  # noqa: E402
from test_torch_bits import SAME_SQRT, _ieee_sqrt  # noqa: E402

#: torch's database rows of the classes optkernels.torch stands in for (LBFGS has no drop-in)
INFOS = {info.name: info for info in common.optim_db if isinstance(getattr(okt, info.name, None), type)}
NAMES = sorted(INFOS)
STEPS = 4
SPARSE_ONLY = {name for name, info in INFOS.items() if info.only_supports_sparse_grads}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """torch on one thread: its bfloat16 matmuls (Muon's Newton–Schulz) on tiny matrices wait tens of
    milliseconds for a second thread on a loaded machine; both sides run alike, the bits are compared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _torch_sqrt(monkeypatch):
    """optkernels computes torch's own roots; torch's warnings about our fallbacks are not failures."""
    monkeypatch.setenv(ENVIRONMENT, "torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _impls(info) -> list[str]:
    """torch's implementation switches the class has on the CPU (foreach is not a CPU implementation)."""
    return [f for f in ("differentiable", "fused") if f in info.supported_impls and
            (f != "fused" or "cpu" in info.supports_fused_on)]


def _inputs(name: str, dtype=torch.float32) -> list:
    return INFOS[name].optim_inputs_func(device="cpu", dtype=dtype)


def _variants(name: str) -> list[tuple[int, str | None]]:
    """(index of an input, the switch set on it or None)."""
    return [(k, flag) for k in range(len(_inputs(name))) for flag in [None, *_impls(INFOS[name])]]


#: The classes whose ``fused=True`` gives torch's fused CPU bits (the others give the for-loop's).
FUSED_BITS = ("Adam", "AdamW")


def _kwargs(name: str, k: int, flag: str | None = None, dtype=torch.float32, torch_side: bool = False) -> dict:
    """Input ``k``'s constructor arguments (a fresh copy: a tensor lr is not shared), with ``flag`` set; torch's
    side runs its single-tensor path (``foreach=False``) where it has another, and where ours runs fused, so
    that both give the for-loop's bits; except Adam/AdamW's ``fused=True``, which reproduces torch's fused CPU
    step: torch's side runs it too."""
    kwargs = copy.deepcopy(_inputs(name, dtype)[k].kwargs)
    info = INFOS[name]
    if flag is not None:
        kwargs[flag] = True
    if torch_side and not (name in FUSED_BITS and kwargs.get("fused")):
        kwargs.pop("fused", None)
        if "foreach" in info.supported_impls:
            kwargs["foreach"] = False
    return kwargs


def _shapes(name: str) -> list[tuple]:
    """Parameter shapes: a matrix, a vector, a 0-d tensor and a 3-d batch (Muon: matrices only)."""
    if name == "Muon":
        return [(6, 4), (3, 5), (5, 3)]
    if name == "SparseAdam":
        return [(6, 4), (5,), (2, 3, 4)]
    return [(6, 4), (5,), (), (2, 3, 4)]


def _make(name: str, dtype, gen, transposed: bool = False) -> list[torch.Tensor]:
    out = []
    for shape in _shapes(name):
        t = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        if transposed and t.dim() == 2:
            t = torch.randn(shape[::-1], generator=gen, dtype=torch.float64).to(dtype).t()
        out.append(t)
    return out


def _twin(tensors: list[torch.Tensor], differentiable: bool = False) -> list[torch.Tensor]:
    """Parameters with the values (and strides) of ``tensors``: leaves, or for ``differentiable=True`` the
    non-leaf results of a graph (torch's differentiable step writes them in place under autograd)."""
    out = []
    for t in tensors:
        leaf = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t.detach()).requires_grad_()
        out.append(leaf.clone() if differentiable else leaf)
    return out


def _grad(name: str, p: torch.Tensor, gen) -> torch.Tensor:
    g = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
    if name in SPARSE_ONLY:
        if g.dim():
            g[: g.shape[0] // 2] = 0  # rows without a gradient
        return g.to_sparse()
    return g


def _set_grads(name, pairs, gen, step):
    """The same gradient on both parameters of each pair; on step 2 the second parameter has none (frozen),
    on step 3 none has any (a no-op step)."""
    for k, (a, b) in enumerate(pairs):
        if step == 3 or (step == 2 and k == 1):
            a.grad = b.grad = None
            continue
        g = _grad(name, a, gen)
        a.grad, b.grad = g, g.clone()


def _same(a, b) -> bool:
    """Equal values of equal types; tensors bit for bit, NaN where the other has NaN (float16 with eps 1e-8)."""
    if isinstance(a, torch.Tensor) and a.is_sparse:
        return isinstance(b, torch.Tensor) and b.is_sparse and _same(a.to_dense(), b.to_dense())
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and (a.dtype, a.shape, a.layout) == (b.dtype, b.shape, b.layout)):
            return False
        a, b = a.detach(), b.detach()
        if a.is_floating_point() and a.isnan().any():
            return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        return torch.equal(a, b)
    return type(a) is type(b) and a == b


def _assert_same_state(theirs, ours, params_t, params_o, where: str) -> None:
    for k, (a, b) in enumerate(zip(params_t, params_o)):
        assert _same(a, b), f"{where}: parameter {k} differs"
        state_a, state_b = theirs.state.get(a, {}), ours.state.get(b, {})
        assert list(state_a) == list(state_b), f"{where}: parameter {k}'s state keys differ"
        for key, value in state_a.items():
            assert _same(value, state_b[key]), f"{where}: parameter {k}'s {key} differs"
    assert len(theirs.state) == len(ours.state), f"{where}: a state entry torch does not make"


def _sqrt_patch(name: str, dtype):
    """torch with IEEE roots where optkernels does not reproduce torch's own on this machine."""
    same = SAME_SQRT.get(dtype, True)
    return contextlib.nullcontext if same or name in ("SGD", "Adamax", "ASGD", "Rprop") else _ieee_sqrt


def _run_pair(name, theirs, ours, params_t, params_o, gen, dtype, steps=STEPS, where=""):
    patch = _sqrt_patch(name, dtype)
    for step in range(steps):
        _set_grads(name, list(zip(params_t, params_o)), gen, step)
        with patch():
            theirs.step()
        ours.step()
        _assert_same_state(theirs, ours, params_t, params_o, f"{where}step {step + 1}")


def _pair(name, kwargs_t, kwargs_o, dtype, gen, transposed=False, differentiable=False):
    init = _make(name, dtype, gen, transposed)
    params_t, params_o = _twin(init, differentiable), _twin(init, differentiable)
    theirs = getattr(torch.optim, name)(params_t, **kwargs_t)
    ours = getattr(okt, name)(params_o, **kwargs_o)
    return theirs, ours, params_t, params_o


def _variant_id(name, k, flag):
    desc = _inputs(name)[k].desc.replace(" ", "_").replace(",", "")
    return f"{name}-{k}-{desc}" + (f"-{flag}" if flag else "")


VARIANTS = [(name, k, flag) for name in NAMES for k, flag in _variants(name)]


# ---------------------------------------------------------------------------------------------------- (a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,k,flag", VARIANTS, ids=[_variant_id(*v) for v in VARIANTS])
def test_optim_db_inputs_give_torch_bits(name, k, flag, dtype):
    """Each of torch's inputs (and switches) on float32 and float64 parameters, one of them transposed: bit for
    bit as torch's for-loop after every step, a frozen parameter and a step without gradients included."""
    gen = torch.Generator().manual_seed(17 * k + len(name))
    kwargs_t = _kwargs(name, k, flag, dtype, torch_side=True)
    kwargs_o = _kwargs(name, k, flag, dtype)
    theirs, ours, params_t, params_o = _pair(
        name, kwargs_t, kwargs_o, dtype, gen, transposed=True, differentiable=flag == "differentiable"
    )
    _run_pair(name, theirs, ours, params_t, params_o, gen, dtype)
    if flag != "differentiable":
        assert {ours.backend_for(p) for p in params_o} <= {"optkernels", "torch"}


# ---------------------------------------------------------------------------------------------------- (b)


def _error_inputs(name):
    info = INFOS[name]
    if info.optim_error_inputs_func is None:
        return []
    return info.optim_error_inputs_func(device="cpu", dtype=torch.float32)


ERRORS = [(name, k) for name in NAMES for k in range(len(_error_inputs(name)))]


def _error_id(name, k):
    return f"{name}-{k}-" + _error_inputs(name)[k].optimizer_error_input.desc.replace(" ", "_")[:60]


@pytest.mark.parametrize("name,k", ERRORS, ids=[_error_id(*e) for e in ERRORS])
def test_optim_db_error_inputs_raise_torchs_errors(name, k):
    """torch's error type and message for each invalid input, at construction or at the step; a step that
    raises has written nothing."""
    error = _error_inputs(name)[k]
    given = error.optimizer_error_input
    cls = getattr(okt, name)
    expect = pytest.warns if issubclass(error.error_type, Warning) else pytest.raises
    if error.error_on == common.OptimizerErrorEnum.CONSTRUCTION_ERROR:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            with expect(error.error_type, match=error.error_regex):
                cls(given.params, **given.kwargs)
        return
    # torch's class on an identical copy of the input, for what its failed step leaves
    twin_params = copy.deepcopy(given.params)
    reference = getattr(torch.optim, name)(twin_params, **copy.deepcopy(given.kwargs))
    optimizer = cls(given.params, **given.kwargs)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    before = [p.detach().clone() for p in params]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with expect(error.error_type, match=error.error_regex):
            optimizer.step()
        with contextlib.suppress(Exception):
            reference.step()
    if not issubclass(error.error_type, Warning):
        for p, b in zip(params, before):
            assert torch.equal(p.detach(), b) or (p.isnan().all() and b.isnan().all())
        theirs, ours = reference.state_dict()["state"], optimizer.state_dict()["state"]
        assert list(theirs) == list(ours)  # what torch creates before it raises, and nothing else
        for key, value in theirs.items():
            assert list(value) == list(ours[key])


# ---------------------------------------------------------------------------------------------------- (c)


def _all_inputs(name, skip=("differentiable",)):
    """torch's inputs of the class with each implementation switch the class has on the CPU (the list torch's
    tests iterate), as (kwargs for ours, kwargs for torch's for-loop)."""
    out = []
    for k in range(len(_inputs(name))):
        for flag in [None, *_impls(INFOS[name])]:
            if flag in skip:
                continue
            out.append((_kwargs(name, k, flag), _kwargs(name, k, flag, torch_side=True)))
    return out


def _model_step(name, optimizer, params, inputs):
    """A forward and backward pass of ``sum((W x + b)^2)``-like losses over ``params``, then a step."""
    optimizer.zero_grad()
    loss = sum((p * x).sum() ** 2 for p, x in zip(params, inputs))
    loss.backward()
    if name in SPARSE_ONLY:
        for p in params:
            p.grad = p.grad.to_sparse()
    optimizer.step()
    return loss


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trips_both_ways(name):
    """torch's state loads into ours and ours into torch (and ours into ours, through ``torch.save`` and
    ``weights_only`` loading), each continuing bit for bit; ``state_dict()`` is torch's, key for key."""
    gen = torch.Generator().manual_seed(3)
    for kwargs_o, kwargs_t in _all_inputs(name):
        init = _make(name, torch.float32, gen)
        inputs = [torch.randn(t.shape, generator=gen) for t in init]
        runs = {}
        for side, cls, kwargs in (("t", torch.optim, kwargs_t), ("o", okt, kwargs_o)):
            params = _twin(init)
            opt = getattr(cls, name)(params, **copy.deepcopy(kwargs))
            for _ in range(3):
                _model_step(name, opt, params, inputs)
            runs[side] = (opt, params)
        (opt_t, p_t), (opt_o, p_o) = runs["t"], runs["o"]
        _assert_same_state(opt_t, opt_o, p_t, p_o, f"{kwargs_o}: primed: ")
        sd_t, sd_o = opt_t.state_dict(), opt_o.state_dict()
        assert list(sd_t["state"]) == list(sd_o["state"])
        for key in sd_t["state"]:
            assert list(sd_t["state"][key]) == list(sd_o["state"][key])
            for field, value in sd_t["state"][key].items():
                assert _same(value, sd_o["state"][key][field])
        assert set(sd_t["param_groups"][0]) == set(sd_o["param_groups"][0])
        buffer = io.BytesIO()
        torch.save(sd_o, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        assert list(loaded["state"]) == list(sd_o["state"])
        # crossed: a torch optimizer continues from ours, ours from torch's, and a new one of ours from ours
        crossed = []
        for source, cls, kwargs in ((sd_o, torch.optim, kwargs_t), (sd_t, okt, kwargs_o), (loaded, okt, kwargs_o)):
            params = _twin(p_t)
            opt = getattr(cls, name)(params, **copy.deepcopy(kwargs))
            source = copy.deepcopy(source)
            for group in source["param_groups"]:  # each keeps its implementation (a state carries its own)
                group.update({k: v for k, v in opt.param_groups[0].items() if k in ("fused", "foreach")})
            opt.load_state_dict(source)
            crossed.append((opt, params))
        for _ in range(3):
            _model_step(name, opt_t, p_t, inputs)
            for opt, params in crossed:
                _model_step(name, opt, params, inputs)
            for opt, params in crossed:
                _assert_same_state(opt_t, opt, p_t, params, f"{kwargs_o}: after loading: ")


@pytest.mark.parametrize("name", NAMES)
def test_older_state_dicts_and_number_steps_load(name):
    """A state without the switches added after the class first shipped, and one whose steps are numbers, load
    into ours and step as into torch's."""
    info = INFOS[name]
    gen = torch.Generator().manual_seed(5)
    for kwargs_o, kwargs_t in _all_inputs(name):
        init = _make(name, torch.float32, gen)
        inputs = [torch.randn(t.shape, generator=gen) for t in init]
        runs = []
        for cls, kwargs in ((torch.optim, kwargs_t), (okt, kwargs_o)):
            params = _twin(init)
            opt = getattr(cls, name)(params, **copy.deepcopy(kwargs))
            for _ in range(2):
                _model_step(name, opt, params, inputs)
            runs.append((opt, params))
        for edit in ("older", "numbers"):
            sd = copy.deepcopy(runs[0][0].state_dict())
            for group in sd["param_groups"]:
                if edit == "older":
                    for flag in info.not_og_supported_flags:
                        group.pop(flag, None)
            for state in sd["state"].values():
                if edit == "numbers" and isinstance(state.get("step"), torch.Tensor):
                    state["step"] = state["step"].item()
            for opt, params in runs:
                opt.load_state_dict(copy.deepcopy(sd))
                _model_step(name, opt, params, inputs)
            _assert_same_state(runs[0][0], runs[1][0], runs[0][1], runs[1][1], f"{kwargs_o} {edit}: ")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in SPARSE_ONLY])
def test_named_parameters_and_state_dict_determinism(name):
    """Named parameters: ``param_names`` kept through a load; a state loaded into a fresh optimizer over equal
    parameters continues as the original, and the two ``state_dict()`` then agree."""
    gen = torch.Generator().manual_seed(9)
    for kwargs_o, _ in _all_inputs(name):
        init = _make(name, torch.float32, gen)
        inputs = [torch.randn(t.shape, generator=gen) for t in init]
        params = _twin(init)
        opt = getattr(okt, name)([(f"p{i}", p) for i, p in enumerate(params)], **copy.deepcopy(kwargs_o))
        for _ in range(3):
            _model_step(name, opt, params, inputs)
        params_c = _twin(params)
        opt_c = getattr(okt, name)(params_c, **copy.deepcopy(kwargs_o))
        opt_c.load_state_dict(copy.deepcopy(opt.state_dict()))
        assert opt_c.state_dict()["param_groups"][0]["param_names"] == [f"p{i}" for i in range(len(params))]
        for _ in range(3):
            _model_step(name, opt, params, inputs)
            _model_step(name, opt_c, params_c, inputs)
            _assert_same_state(opt, opt_c, params, params_c, f"{kwargs_o}: ")
        a, b = opt.state_dict(), opt_c.state_dict()
        for key in a["state"]:
            for field, value in a["state"][key].items():
                assert _same(value, b["state"][key][field])
        assert a["param_groups"] == b["param_groups"]


@pytest.mark.parametrize("name", NAMES)
def test_param_groups_and_add_param_group(name):
    """Per-group weight decay and learning rate (one group with lr 1e-28), and a group added after the first
    steps: bit for bit as torch's."""
    gen = torch.Generator().manual_seed(11)
    for kwargs_o, kwargs_t in _all_inputs(name):
        init = _make(name, torch.float32, gen)
        inputs = [torch.randn(t.shape, generator=gen) for t in init]
        extra = torch.randn(init[0].shape, generator=gen)
        runs = []
        for cls, kwargs in ((torch.optim, kwargs_t), (okt, kwargs_o)):
            kwargs = copy.deepcopy(kwargs)
            params = _twin(init)
            first = dict(params=[params[0]], **kwargs)
            second = dict(params=params[1:2], **{**kwargs, "weight_decay": 0.0})
            third = dict(params=params[2:])
            outer = {"lr": 1e-28}
            if name == "Rprop":
                outer["step_sizes"] = (0, 50)
            for key in ("foreach", "fused", "differentiable"):
                if key in kwargs:
                    outer[key] = kwargs[key]
            opt = getattr(cls, name)([first, second, third], **outer)
            for _ in range(2):
                _model_step(name, opt, params, inputs)
            late = _twin([extra])[0]
            opt.add_param_group(dict(params=[late], **{k: v for k, v in kwargs.items() if k != "lr"}))
            for _ in range(2):
                _model_step(name, opt, params + [late], inputs + [inputs[0]])
            runs.append((opt, params + [late]))
        _assert_same_state(runs[0][0], runs[1][0], runs[0][1], runs[1][1], f"{kwargs_o}: ")


def _recorder(calls: list, label: str):
    """A step hook that appends ``label`` to ``calls``."""
    return lambda *args: calls.append(label)


@pytest.mark.parametrize("name", NAMES)
def test_hooks(name):
    """Step pre/post hooks (the optimizer's and the global ones, in torch's order, removable) and the hooks of
    ``state_dict`` and ``load_state_dict`` (``prepend`` included)."""
    for kwargs_o, _ in _all_inputs(name, skip=()):
        params = [torch.ones(2, 2)]  # no gradient: each step runs its hooks only
        opt = getattr(okt, name)(params, **copy.deepcopy(kwargs_o))
        calls = []
        handles = [
            register_optimizer_step_pre_hook(_recorder(calls, "global pre")),
            register_optimizer_step_post_hook(_recorder(calls, "global post")),
            opt.register_step_pre_hook(_recorder(calls, "pre")),
            opt.register_step_post_hook(_recorder(calls, "post")),
        ]
        try:
            opt.step()
            opt.step()
        finally:
            for handle in handles:
                handle.remove()
        opt.step()
        assert calls == ["global pre", "pre", "post", "global post"] * 2

        opt.register_state_dict_pre_hook(lambda o: o.state.__setitem__("marker", 1))
        opt.register_state_dict_post_hook(lambda o, sd: {**sd, "seen": sd["state"].pop("marker", None)})
        sd = opt.state_dict()
        assert sd["seen"] == 1 and "marker" not in sd["state"]
        opt.register_load_state_dict_pre_hook(lambda o, sd: sd["param_groups"][0].__setitem__("lr", 0.002))

        def replace(o, sd):
            sd = copy.deepcopy(sd)
            sd["param_groups"][0]["lr"] = 0.003
            return sd

        opt.register_load_state_dict_pre_hook(replace, prepend=True)
        opt.register_load_state_dict_post_hook(lambda o: o.state.__setitem__("loaded", o.param_groups[0]["lr"]))
        sd.pop("seen")
        opt.load_state_dict(sd)
        assert opt.param_groups[0]["lr"] == 0.002 and opt.state["loaded"] == 0.002


@pytest.mark.parametrize("name", NAMES)
def test_deepcopy_printing_zero_grad_and_no_ops(name):
    """``deepcopy`` keeps every public attribute and continues as the original; ``repr`` is torch's;
    ``zero_grad`` as torch's; a step without gradients changes nothing and returns the closure's loss; a
    state entry after a step is made exactly where torch makes one."""
    gen = torch.Generator().manual_seed(13)
    for kwargs_o, kwargs_t in _all_inputs(name, skip=()):
        differentiable = bool(kwargs_o.get("differentiable"))
        init = _make(name, torch.float32, gen)
        params = _twin(init, differentiable)
        params_t = _twin(init, differentiable)
        opt = getattr(okt, name)(params, **copy.deepcopy(kwargs_o))
        ref = getattr(torch.optim, name)(params_t, **copy.deepcopy(kwargs_t))
        printed = getattr(torch.optim, name)(_twin(init), **copy.deepcopy(kwargs_o))
        assert repr(opt) == repr(printed)  # the defaults' types too: "weight_decay: 0", not "0.0"
        assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == [
            {k: v for k, v in g.items() if k != "params"} for g in printed.param_groups
        ]
        before = [p.detach().clone() for p in params]
        assert opt.step(lambda: torch.tensor(7.0)).item() == 7.0
        assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))
        assert len(opt.state) == len(ref.state)  # none, or what torch's constructor makes (Adagrad)
        if differentiable:
            continue
        _set_grads(name, list(zip(params_t, params)), gen, 0)
        ref.step()
        opt.step()
        _assert_same_state(ref, opt, params_t, params, f"{kwargs_o}: ")
        assert all(len(state) > 0 for state in opt.state.values())  # no empty entry (SGD without momentum)
        twin = copy.deepcopy(opt)
        public = {k for k in opt.__dict__ if not k.startswith("_")}
        assert public == {k for k in twin.__dict__ if not k.startswith("_")}
        twin_params = [p for g in twin.param_groups for p in g["params"]]
        _set_grads(name, list(zip(params, twin_params)), gen, 0)
        for p_t, p in zip(params_t, params):
            p_t.grad = p.grad.clone()
        for o in (opt, twin, ref):
            o.step()
        _assert_same_state(opt, twin, params, twin_params, f"{kwargs_o} deepcopy: ")
        _assert_same_state(ref, opt, params_t, params, f"{kwargs_o}: ")
        opt.zero_grad(set_to_none=False)
        ref.zero_grad(set_to_none=False)
        assert all(_same(a.grad, b.grad) for a, b in zip(params_t, params))
        opt.zero_grad()
        assert all(p.grad is None for p in params)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in SPARSE_ONLY])
def test_zero_gradients_and_tensor_lr(name):
    """Zero gradients (with and without weight decay) step as torch's; each input with its learning rate as a
    0-d tensor steps as torch's with the same tensor (or both refuse it)."""
    gen = torch.Generator().manual_seed(19)
    for kwargs_o, kwargs_t in _all_inputs(name):
        for lr_tensor in (False, True):
            ko, kt = copy.deepcopy(kwargs_o), copy.deepcopy(kwargs_t)
            if lr_tensor:
                lr = float(ko.get("lr", INFOS[name].optim_cls([torch.zeros(2, 2)]).defaults["lr"]))
                ko["lr"], kt["lr"] = torch.tensor(lr), torch.tensor(lr)
            init = _make(name, torch.float32, gen)
            params_t, params_o = _twin(init), _twin(init)
            try:
                theirs = getattr(torch.optim, name)(params_t, **kt)
            except ValueError as error:
                with pytest.raises(ValueError, match=str(error)[:40]):
                    getattr(okt, name)(params_o, **ko)
                continue
            ours = getattr(okt, name)(params_o, **ko)
            for step in range(2):
                for a, b in zip(params_t, params_o):
                    a.grad = torch.zeros_like(a) if step == 0 else torch.randn(a.shape, generator=gen)
                    b.grad = a.grad.clone()
                theirs.step()
                ours.step()
                _assert_same_state(theirs, ours, params_t, params_o, f"{ko} step {step}: ")


@pytest.mark.parametrize("shape", [(1,), (1, 1)], ids=["1", "1x1"])
@pytest.mark.parametrize("name", NAMES)
def test_one_element_tensor_lr_of_any_shape(name, shape):
    """A learning rate given as a 1-element tensor of shape (1,) or (1, 1), each input (and switch): torch
    squeezes it to 0-d in its steps; the parameters and state (ASGD's 0-d ``eta`` included) as torch's, bit
    for bit, frozen parameters and no-op steps included (or both refuse the tensor alike)."""
    for j, (kwargs_o, kwargs_t) in enumerate(_all_inputs(name)):
        gen = torch.Generator().manual_seed(47 + j)
        lr = float(kwargs_o.get("lr", INFOS[name].optim_cls([torch.zeros(2, 2)]).defaults["lr"]))
        kwargs_o["lr"], kwargs_t["lr"] = torch.full(shape, lr), torch.full(shape, lr)
        try:
            theirs, ours, params_t, params_o = _pair(name, kwargs_t, kwargs_o, torch.float32, gen)
        except ValueError as error:
            with pytest.raises(ValueError, match=re.escape(str(error))):
                getattr(okt, name)(_make(name, torch.float32, gen), **kwargs_o)
            continue
        _run_pair(name, theirs, ours, params_t, params_o, gen, torch.float32, where=f"{kwargs_o}: ")


def _complex_params(dtype):
    gen = torch.Generator().manual_seed(23)
    return [
        torch.randn(6, 4, generator=gen, dtype=dtype),
        torch.randn(5, generator=gen, dtype=dtype),
        torch.randn(6, 4, generator=gen, dtype=torch.float32),  # a real one beside them
    ]


@pytest.mark.parametrize("name", [n for n in NAMES if INFOS[n].supports_complex])
def test_complex_parameters(name):
    """Complex parameters (torch's own step) beside a real one (the kernels): bit for bit as torch's, and as
    ours over ``view_as_real`` of the same parameters within float32's tolerance (as torch's own complex and
    real steps agree: complex products round otherwise)."""
    gen = torch.Generator().manual_seed(29)
    for kwargs_o, kwargs_t in _all_inputs(name, skip=("differentiable", "fused")):
        init = _complex_params(torch.complex64)
        params_t, params_o = _twin(init), _twin(init)
        as_real = _twin([torch.view_as_real(t) if t.is_complex() else t for t in init])
        theirs = getattr(torch.optim, name)(params_t, **copy.deepcopy(kwargs_t))
        ours = getattr(okt, name)(params_o, **copy.deepcopy(kwargs_o))
        real = getattr(okt, name)(as_real, **copy.deepcopy(kwargs_o))
        for step in range(3):
            for a, b, r in zip(params_t, params_o, as_real):
                g = torch.randn(r.shape, generator=gen)
                r.grad = g
                a.grad = torch.view_as_complex(g.clone()) if a.is_complex() else g.clone()
                b.grad = a.grad.clone()
            for opt in (theirs, ours, real):
                opt.step()
            _assert_same_state(theirs, ours, params_t, params_o, f"{kwargs_o} step {step}: ")
            for b, r in zip(params_o, as_real):  # torch's complex arithmetic rounds otherwise than its real
                torch.testing.assert_close(torch.view_as_real(b.detach()) if b.is_complex() else b.detach(), r)


def _sparse_grad(p, rows, values):
    return torch.sparse_coo_tensor(rows[None], values, p.shape)


@pytest.mark.parametrize("name", [n for n in NAMES if INFOS[n].supports_sparse or INFOS[n].only_supports_sparse_grads])
def test_uncoalesced_sparse_gradients(name):
    """Uncoalesced sparse gradients (a row given twice, in two parts) as torch's, float32 and float64."""
    gen = torch.Generator().manual_seed(31)
    for kwargs_o, kwargs_t in _all_inputs(name, skip=("differentiable", "fused")):
        for dtype in (torch.float32, torch.float64):
            init = [torch.randn(6, 3, generator=gen, dtype=dtype), torch.randn(4, generator=gen, dtype=dtype)]
            params_t, params_o = _twin(init), _twin(init)
            theirs = getattr(torch.optim, name)(params_t, **copy.deepcopy(kwargs_t))
            ours = getattr(okt, name)(params_o, **copy.deepcopy(kwargs_o))
            for step in range(4):
                for a, b in zip(params_t, params_o):
                    rows = torch.tensor([step % a.shape[0], 1, step % a.shape[0]])
                    values = torch.randn((3,) + a.shape[1:], generator=gen, dtype=dtype)
                    a.grad, b.grad = _sparse_grad(a, rows, values), _sparse_grad(b, rows, values.clone())
                try:
                    with _sqrt_patch(name, dtype)():
                        theirs.step()
                except RuntimeError as error:  # weight decay with sparse gradients: torch's error
                    with pytest.raises(type(error), match=re.escape(str(error))):
                        ours.step()
                    break
                ours.step()
                _assert_same_state(theirs, ours, params_t, params_o, f"{kwargs_o} {dtype} step {step}: ")


@pytest.mark.parametrize("name", NAMES)
def test_schedulers_and_non_contiguous_parameters(name):
    """torch's schedulers of the class (StepLR, ReduceLROnPlateau, ...) over non-contiguous parameters, 12
    steps: as torch's."""
    info = INFOS[name]
    gen = torch.Generator().manual_seed(37)
    for schedulers in info.scheduler_inputs:
        for k in range(len(_inputs(name))):
            kwargs_o, kwargs_t = _kwargs(name, k), _kwargs(name, k, torch_side=True)
            base = [torch.randn(*s, 2, generator=gen)[..., 0] for s in _shapes(name)]
            params_t, params_o = _twin(base), _twin(base)
            inputs = [torch.randn(t.shape, generator=gen) for t in base]
            theirs = getattr(torch.optim, name)(params_t, **kwargs_t)
            ours = getattr(okt, name)(params_o, **kwargs_o)
            pairs = [([s(theirs) for s in schedulers], theirs, params_t), ([s(ours) for s in schedulers], ours, params_o)]
            for _ in range(12):
                for scheds, opt, params in pairs:
                    loss = _model_step(name, opt, params, inputs)
                    for s in scheds:
                        s.step(loss.item()) if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau) else s.step()
            _assert_same_state(theirs, ours, params_t, params_o, f"{kwargs_o} {schedulers}: ")


FUSED = [n for n in NAMES if "fused" in INFOS[n].supported_impls and "cpu" in INFOS[n].supports_fused_on]


@pytest.mark.parametrize("name", FUSED)
def test_fused_found_inf_and_meta_parameters(name):
    """``fused=True``: a step with ``found_inf`` set changes nothing (steps stay 0), with ``grad_scale`` the
    gradients are unscaled first; parameters on ``meta`` are refused at the step with torch's error, and step
    once materialised (``to_empty``)."""
    for k in range(len(_inputs(name))):
        kwargs = _kwargs(name, k, "fused")
        params = [torch.ones(3, 2), torch.ones(4)]
        for p in params:
            p.grad = torch.ones_like(p)
        opt = getattr(okt, name)(params, **kwargs)
        opt.grad_scale = torch.ones(1)
        opt.found_inf = torch.ones(())
        opt.step()
        assert all(torch.equal(p, torch.ones_like(p)) for p in params)
        for p in params:
            if "step" in opt.state.get(p, {}):
                assert float(opt.state[p]["step"]) == 0.0

        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
        opt = getattr(okt, name)(model.parameters(), **kwargs)
        with torch.device("meta"):
            for p in model.parameters():
                p.grad = torch.rand_like(p)
        with pytest.raises(RuntimeError, match="`fused=True` requires all the params to be floating point Tensors"):
            opt.step()
        opt.zero_grad(set_to_none=True)
        model.to_empty(device="cpu")
        for p in model.parameters():
            p.grad = torch.rand_like(p)
        opt.step()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", FUSED)
def test_fused_half_parameters_give_for_loop_bits(name, dtype):
    """``fused=True`` on bfloat16/float16 parameters: torch's for-loop bits (what torch's own tests compare the
    fused path with, within a tolerance); Adam/AdamW: torch's fused bits."""
    for k in range(len(_inputs(name))):
        gen = torch.Generator().manual_seed(41 + k)
        theirs, ours, params_t, params_o = _pair(
            name, _kwargs(name, k, "fused", torch_side=True), _kwargs(name, k, "fused"), dtype, gen
        )
        _run_pair(name, theirs, ours, params_t, params_o, gen, dtype, steps=3, where=f"input {k}: ")


@pytest.mark.parametrize("name", NAMES)
def test_float64_default_dtype_step_counters(name):
    """With float64 as torch's default dtype torch keeps its 0-d state ('step', ...) in float64 (float32 for
    ``fused=True``): so do the drop-ins, with the same bits."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for flag in [None, *[f for f in _impls(INFOS[name]) if f == "fused"]]:
            gen = torch.Generator().manual_seed(43)
            theirs, ours, params_t, params_o = _pair(
                name, _kwargs(name, 0, flag, torch_side=flag is None), _kwargs(name, 0, flag), torch.float64, gen
            )
            if flag == "fused":  # torch's own fused kernels, for the dtype of its counters
                theirs = getattr(torch.optim, name)(params_t, **_kwargs(name, 0, flag))
            for step in range(2):
                _set_grads(name, list(zip(params_t, params_o)), gen, step)
                theirs.step()
                ours.step()
            for a, b in zip(params_t, params_o):
                for key, value in theirs.state.get(a, {}).items():
                    other = ours.state[b][key]
                    assert not isinstance(value, torch.Tensor) or value.dtype == other.dtype, key
            if flag is None:
                _assert_same_state(theirs, ours, params_t, params_o, "float64 default: ")
    finally:
        torch.set_default_dtype(default)
