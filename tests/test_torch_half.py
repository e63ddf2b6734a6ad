"""optkernels.torch on float16 and bfloat16 CPU parameters: where a class keeps optkernels' half contract
(float32 math, each updated tensor rounded once to its dtype, to nearest even), checked bit for bit against
the same optimizer run one step in float32 on the upcast tensors (the torch-named classes give
torch.optim's half bits instead: test_torch_bits); state in the
parameter's dtype (as torch keeps it), tensors updated in place; MindSpore-named classes equal to the NumPy
classes on the same half arrays."""
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels import optimizers as npo  # noqa: E402
from optkernels.sparse import RowSparse  # noqa: E402

HALF = [torch.bfloat16, torch.float16]
NUMPY_HALF = {torch.bfloat16: np.dtype(ml_dtypes.bfloat16), torch.float16: np.dtype(np.float16)}
SHAPES = [(6, 5), (13,), (0,)]

# (class, keyword arguments): classes without a torch.optim twin keep optkernels' half contract; the
# torch-named ones give torch.optim's half bits instead (test_torch_bits)
CASES = [
    ("Lion", dict(lr=1e-2, weight_decay=0.1)),
    ("ADOPT", dict(lr=1e-2)),
]


def _bits(t):
    return t.detach().view(torch.int16).clone()


def _snapshot(opt, params):
    return [{k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in opt.state[p].items()}
            for p in params]


def _reference_step(name, kwargs, params, states, grads):
    """One step of the same optimizer in float32 on the upcast parameters, gradients and state, every
    updated tensor then rounded to the half dtype: the contract of a half step."""
    dtype = params[0].dtype
    p32 = [p.detach().float().clone().requires_grad_() for p in params]
    opt = getattr(okt, name)(p32, **kwargs)
    for p, state in zip(p32, states):
        if not state and name == "Adagrad":    # the only non-zero initial state, held in the half dtype
            for value in opt._state_of(p, opt.param_groups[0]).values():
                if value.dim():
                    value.copy_(value.to(dtype).float())
            continue
        if not state:
            continue
        opt.state[p] = {k: (v.float().clone() if isinstance(v, torch.Tensor) and v.dim() else
                            (v.clone() if isinstance(v, torch.Tensor) else v)) for k, v in state.items()}
    for p, g in zip(p32, grads):
        p.grad = g.float()
    opt.step()
    return [p.detach().to(dtype) for p in p32], [
        {k: v.to(dtype) for k, v in opt.state[p].items() if isinstance(v, torch.Tensor) and v.dim()}
        for p in p32]


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_each_step_is_the_float32_step_rounded_once(name, kwargs, dtype):
    gen = torch.Generator().manual_seed(7)
    params = [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in SHAPES]
    opt = getattr(okt, name)(params, **kwargs)
    pointers = [p.data_ptr() for p in params]
    for _ in range(4):
        grads = [torch.randn(s, generator=gen).to(dtype) for s in SHAPES]
        states = _snapshot(opt, params)
        want_params, want_states = _reference_step(name, kwargs, params, states, grads)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for k, p in enumerate(params):
            assert torch.equal(_bits(p), _bits(want_params[k])), (k, p, want_params[k])
            for key, value in want_states[k].items():
                assert opt.state[p][key].dtype == dtype, key
                assert torch.equal(_bits(opt.state[p][key]), _bits(value)), (k, key)
    assert [p.data_ptr() for p in params] == pointers
    assert any(not torch.equal(p.float(), torch.zeros_like(p.float())) for p in params)


def test_mixed_dtypes_in_one_group():
    """float32 parameters take the multi-tensor loop, bfloat16 ones their own launches: each ends as it
    would alone."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(30, generator=gen).requires_grad_()
    b = torch.randn(20, generator=gen).to(torch.bfloat16).requires_grad_()
    a1, b1 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    together = okt.Adam([a, b], lr=1e-2, weight_decay=0.01)
    alone = [okt.Adam([a1], lr=1e-2, weight_decay=0.01), okt.Adam([b1], lr=1e-2, weight_decay=0.01)]
    for _ in range(3):
        ga, gb = torch.randn(30, generator=gen), torch.randn(20, generator=gen).to(torch.bfloat16)
        a.grad, b.grad, a1.grad, b1.grad = ga.clone(), gb.clone(), ga.clone(), gb.clone()
        together.step()
        for opt in alone:
            opt.step()
    assert torch.equal(a, a1)
    assert torch.equal(_bits(b), _bits(b1))
    plan = together._plans[0]
    assert [entry[:2] for entry in plan.single] == [(1, "cpu")] and len(plan.cpu) == 1


@pytest.mark.parametrize("name", ["SparseAdam", "Adagrad"])
def test_sparse_gradients_on_a_bfloat16_embedding(name):
    """A sparse step on a bfloat16 table is the float32 sparse step on the upcast table, rounded once; rows
    without a lookup are untouched."""
    gen = torch.Generator().manual_seed(9)
    table = torch.randn(30, 4, generator=gen).to(torch.bfloat16)
    ids = torch.tensor([3, 7, 3, 11, 7, 3])
    rows = torch.randn(6, 4, generator=gen).to(torch.bfloat16)
    p = table.clone().requires_grad_()
    p32 = table.float().clone().requires_grad_()
    kwargs = dict(lr=0.05)
    ours, reference = getattr(okt, name)([p], **kwargs), getattr(okt, name)([p32], **kwargs)
    p.grad = torch.sparse_coo_tensor(ids[None], rows, (30, 4), check_invariants=True)
    p32.grad = torch.sparse_coo_tensor(ids[None], rows.float(), (30, 4), check_invariants=True)
    ours.step()
    reference.step()
    assert torch.equal(_bits(p), _bits(p32.detach().to(torch.bfloat16)))
    untouched = torch.ones(30, dtype=torch.bool)
    untouched[ids] = False
    assert torch.equal(_bits(p[untouched]), _bits(table[untouched]))
    for key, value in reference.state[p32].items():
        if isinstance(value, torch.Tensor) and value.dim():
            assert torch.equal(_bits(ours.state[p][key]), _bits(value.to(torch.bfloat16))), key


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name,kwargs", [("LazyAdam", dict(learning_rate=0.01)),
                                         ("Momentum", dict(learning_rate=0.1, momentum=0.9)),
                                         ("Lamb", dict(learning_rate=0.01)),
                                         ("AdamWeightDecay", dict(learning_rate=0.01, weight_decay=0.1,
                                                                  master_weights=True))])
def test_mindspore_classes_equal_the_numpy_classes(name, kwargs, dtype):
    rng = np.random.default_rng(4)
    data = {k: rng.standard_normal(s).astype(np.float32).astype(NUMPY_HALF[dtype])
            for k, s in (("w", (6, 4)), ("b", (4,)))}

    def tensor(a):
        return torch.from_numpy(a.copy().view(np.int16)).view(dtype)

    tensors = {k: torch.nn.Parameter(tensor(a)) for k, a in data.items()}
    arrays = {k: a.copy() for k, a in data.items()}
    ours = getattr(okt, name)(list(tensors.items()), **kwargs)
    reference = getattr(npo, name)([npo.Parameter(a, k) for k, a in arrays.items()], **kwargs)
    for _ in range(4):
        grads = {k: rng.standard_normal(a.shape).astype(np.float32).astype(a.dtype) for k, a in data.items()}
        for k, t in tensors.items():
            t.grad = tensor(grads[k])
        ours.step()
        reference.step([grads[k] for k in data])
    for k in data:
        np.testing.assert_array_equal(tensors[k].detach().view(torch.int16).numpy(), arrays[k].view(np.int16))
        assert not np.array_equal(arrays[k].view(np.int16), data[k].view(np.int16))


def test_sparse_gradient_to_a_mindspore_class_on_bfloat16():
    rng = np.random.default_rng(6)
    table = rng.standard_normal((12, 3)).astype(np.float32).astype(ml_dtypes.bfloat16)
    t = torch.nn.Parameter(torch.from_numpy(table.copy().view(np.int16)).view(torch.bfloat16))
    array = table.copy()
    ours = okt.LazyAdam([("e", t)], learning_rate=0.01)
    reference = npo.LazyAdam([npo.Parameter(array, "e")], learning_rate=0.01)
    ids = np.array([1, 5, 1, 9])
    rows = rng.standard_normal((4, 3)).astype(np.float32).astype(ml_dtypes.bfloat16)
    t.grad = torch.sparse_coo_tensor(torch.from_numpy(ids)[None],
                                     torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16), (12, 3),
                                     check_invariants=True)
    ours.step()
    reference.step([RowSparse(ids, rows, (12, 3))])
    np.testing.assert_array_equal(t.detach().view(torch.int16).numpy(), array.view(np.int16))
