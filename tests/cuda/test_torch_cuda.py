"""optkernels.torch's CUDA path: per-tensor CUDA kernel launches on views of the tensors' memory
(``__cuda_array_interface__``), the pre-step into a buffer allocated once, sparse gradients to the sparse
CUDA kernels.

On a GPU the tensors are torch CUDA tensors. Under Numba's CUDA simulator torch has no CUDA tensors, so CPU
tensors stand in (``optkernels.torch._views.simulate_cuda``: wrapped as the simulator's device arrays without
a copy); that exercises the adapter's CUDA code path and the CUDA kernels' Python source, not device memory,
torch's CUDA allocator or streams. Results are compared with torch.optim on the CPU."""
import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.kernels import _cuda  # noqa: E402
from optkernels.torch import _views  # noqa: E402

if _cuda.simulator_enabled():
    DEVICE, CONTEXT = "cpu", _views.simulate_cuda
elif torch.cuda.is_available():
    DEVICE, CONTEXT = "cuda", contextlib.nullcontext
else:
    pytest.skip("torch sees no CUDA device and the CUDA simulator is off", allow_module_level=True)

SHAPES = [(3, 4), (5,)]
# A GPU may contract multiply-adds (the simulator runs the Python source: no contraction).
TOLERANCE = {torch.float32: 5e-5, torch.float64: 1e-11}

CASES = [
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.05)),
    ("AdamW", dict(lr=0.01, maximize=True)),
    ("Adamax", dict(lr=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1)),
    ("Adagrad", dict(lr=0.05, lr_decay=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,hypers", CASES, ids=[c[0] for c in CASES])
def test_cuda_path_matches_torch(name, hypers, dtype):
    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(s, dtype=dtype, generator=gen) for s in SHAPES]
    ours = [t.clone().to(DEVICE).requires_grad_() for t in init]
    theirs = [t.clone().requires_grad_() for t in init]
    pointers = [p.data_ptr() for p in ours]
    with CONTEXT():
        opt = getattr(okt, name)(ours, **hypers)
        ref = getattr(torch.optim, name)(theirs, foreach=False, **hypers)
        for _ in range(3):
            for x, y in zip(ours, theirs):
                g = torch.randn(x.shape, dtype=dtype, generator=gen)
                x.grad, y.grad = g.to(DEVICE), g.clone()
            opt.step()
            ref.step()
        plan = opt._plans[0]
        assert [e[1] for e in plan.single] == ["cuda"] * len(SHAPES) and not plan.cpu   # the CUDA path ran
    assert [p.data_ptr() for p in ours] == pointers
    for x, y in zip(ours, theirs):
        err = (x.detach().cpu() - y.detach()).abs().max().item()
        assert err <= TOLERANCE[dtype] * max(1.0, y.detach().abs().max().item())


def test_cuda_sparse_adam_embedding():
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(12, 3, generator=gen)
    tables = [torch.nn.Embedding(12, 3, sparse=True) for _ in range(2)]
    for t in tables:
        with torch.no_grad():
            t.weight.copy_(weight)
    ours, theirs = tables[0].to(DEVICE), tables[1]
    with CONTEXT():
        opt = okt.SparseAdam(ours.parameters(), lr=0.05)
        ref = torch.optim.SparseAdam(theirs.parameters(), lr=0.05)
        ids = torch.tensor([1, 4, 4, 7])
        for _ in range(2):
            for table, o in ((ours, opt), (theirs, ref)):
                table.zero_grad()
                table(ids.to(table.weight.device)).sum().backward()
                o.step()
    a, b = ours.weight.detach().cpu(), theirs.weight.detach()
    assert (a - b).abs().max().item() <= 1e-5
    untouched = [r for r in range(12) if r not in (1, 4, 7)]
    assert torch.equal(a[untouched], weight[untouched])


def test_cuda_mindspore_named_lazy_adam_equals_numpy_class():
    from optkernels import optimizers as npo

    rng = np.random.default_rng(2)
    data = rng.standard_normal((6, 2)).astype(np.float32)
    grads = [rng.standard_normal((6, 2)).astype(np.float32) for _ in range(2)]
    t = torch.nn.Parameter(torch.from_numpy(data.copy()).to(DEVICE))
    ref_array = data.copy()
    with CONTEXT():
        opt = okt.LazyAdam([("w", t)], learning_rate=0.01)
        ref = npo.LazyAdam([npo.Parameter(ref_array, "w")], learning_rate=0.01)
        for g in grads:
            t.grad = torch.from_numpy(g.copy()).to(DEVICE)
            opt.step()
            ref([g])
    np.testing.assert_allclose(t.detach().cpu().numpy(), ref_array, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_cuda_parameters_run_torchs_implementation(dtype):
    """float16/bfloat16 tensors are updated by the kernels on the CPU only (torch's __cuda_array_interface__
    does not export bfloat16): a CUDA one is updated by torch's own Adam (the same bits as torch.optim.Adam
    with foreach=False); the MindSpore-named classes refuse it at construction, nothing written."""
    p = torch.linspace(-1, 1, 4, device=DEVICE).to(dtype).requires_grad_()
    q = p.detach().clone().requires_grad_()
    with CONTEXT():
        opt = okt.Adam([p], lr=0.1)
        assert opt.backend_for(p) == "torch"
        reference = torch.optim.Adam([q], lr=0.1, foreach=False)
        for k in range(2):
            p.grad = torch.linspace(0.25, 1, 4, device=DEVICE).to(dtype) * (k + 1)
            q.grad = p.grad.clone()
            with pytest.warns(UserWarning, match="own implementation") if k == 0 else contextlib.nullcontext():
                opt.step()
            reference.step()
        assert torch.equal(p.detach(), q.detach())
        before = p.detach().clone()
        with pytest.raises(TypeError, match="CPU only"):
            okt.LazyAdam([("w", p)])
    assert torch.equal(p.detach(), before)
