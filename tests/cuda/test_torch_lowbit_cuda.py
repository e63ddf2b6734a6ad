"""optkernels.torch's 8-bit optimizers and RowWiseAdagrad on the CUDA path (per-tensor CUDA kernels on views
of the tensors), against the same classes on the CPU path. Under Numba's CUDA simulator CPU tensors stand in
for CUDA ones (``_views.simulate_cuda``) and results must be the same bits; a GPU may contract multiply-adds,
so there codes may differ next to a decision midpoint and parameters within 1e-6."""
import contextlib

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.kernels import _cuda  # noqa: E402
from optkernels.torch import _views  # noqa: E402

if _cuda.simulator_enabled():
    DEVICE, CONTEXT, EXACT = "cpu", _views.simulate_cuda, True
elif torch.cuda.is_available():
    DEVICE, CONTEXT, EXACT = "cuda", contextlib.nullcontext, False
else:
    pytest.skip("torch sees no CUDA device and the CUDA simulator is off", allow_module_level=True)


def _close(a, b, what):
    a, b = a.detach().cpu(), b.detach().cpu()
    if EXACT:
        assert torch.equal(a, b), what
    elif a.dtype == torch.uint8:
        assert int((a != b).sum()) <= 3, what
    else:
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), what


@pytest.mark.parametrize("name", ["Adam8bit", "Lion8bit"])
def test_8bit_cuda_path_equals_the_cpu_path(name):
    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(s, generator=gen) * 0.1 for s in ((300,), (7,))]   # one 8-bit, one float32 state
    grads = [[torch.randn(t.shape, generator=gen) * 0.01 for t in init] for _ in range(3)]
    ours = [t.clone().to(DEVICE).requires_grad_() for t in init]
    cpu = [t.clone().requires_grad_() for t in init]
    with CONTEXT():
        opt = getattr(okt, name)(ours, min_8bit_size=256)
        for gs in grads:
            for p, g in zip(ours, gs):
                p.grad = g.clone().to(DEVICE)
            opt.step()
    ref = getattr(okt, name)(cpu, min_8bit_size=256)
    for gs in grads:
        for p, g in zip(cpu, gs):
            p.grad = g.clone()
        ref.step()
    for p, q in zip(ours, cpu):
        _close(p, q, f"{name} parameter")
        for key, value in ref.state[q].items():
            if isinstance(value, torch.Tensor):
                _close(opt.state[p][key], value, f"{name} {key}")


def test_rowwise_adagrad_cuda_path_takes_sparse_gradients():
    gen = torch.Generator().manual_seed(1)
    table = torch.randn(8, 3, generator=gen)
    idx = torch.tensor([5, 1, 5, 0])
    values = torch.randn(4, 3, generator=gen)
    grad = torch.sparse_coo_tensor(idx[None], values, (8, 3))
    ours, cpu = table.clone().to(DEVICE).requires_grad_(), table.clone().requires_grad_()
    with CONTEXT():
        opt = okt.RowWiseAdagrad([ours], lr=0.1, weight_decay_mode="decoupled", weight_decay=0.01)
        ours.grad = grad.to(DEVICE)
        opt.step()
    ref = okt.RowWiseAdagrad([cpu], lr=0.1, weight_decay_mode="decoupled", weight_decay=0.01)
    cpu.grad = grad
    ref.step()
    _close(ours, cpu, "table")
    _close(opt.state[ours]["sum"], ref.state[cpu]["sum"], "sum")
