"""The modern rules' torch drop-ins on their CUDA path (per-tensor CUDA launches; under the simulator, CPU
tensors stand in, see test_torch_cuda.py) equal the same drop-ins on the CPU path, train()/eval() included."""
import contextlib

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
TOLERANCE = {torch.float32: 5e-5, torch.float64: 1e-11}     # a GPU may contract multiply-adds

CASES = [
    ("Lion", dict(lr=0.01, weight_decay=0.1)),
    ("ADOPT", dict(lr=0.01, weight_decay=0.1, maximize=True)),
    ("AdEMAMix", dict(lr=0.01, t_alpha=3, t_beta3=3)),
    ("AdamWScheduleFree", dict(lr=0.01, warmup_steps=2, weight_decay=0.1)),
    ("SGDScheduleFree", dict(lr=0.05, warmup_steps=2)),
]


def _run(name, hypers, init, grads, device, context):
    params = [t.clone().to(device).requires_grad_() for t in init]
    with context():
        opt = getattr(okt, name)(params, **hypers)
        modes = hasattr(opt, "eval")
        if modes:
            opt.train()
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(device)
            opt.step()
        if modes:
            opt.eval()
    return opt, params


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,hypers", CASES, ids=[c[0] for c in CASES])
def test_cuda_path_matches_cpu_path(name, hypers, dtype):
    gen = torch.Generator().manual_seed(1)
    init = [torch.randn(s, dtype=dtype, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, dtype=dtype, generator=gen) for s in SHAPES] for _ in range(3)]
    opt, ours = _run(name, hypers, init, grads, DEVICE, CONTEXT)
    assert [e[1] for e in opt._plans[0].single] == ["cuda"] * len(SHAPES)     # the CUDA path ran
    ref, theirs = _run(name, hypers, init, grads, "cpu", contextlib.nullcontext)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
        for key, value in ref.state[b].items():
            if torch.is_tensor(value) and value.dim():
                torch.testing.assert_close(opt.state[a][key].cpu(), value, rtol=TOLERANCE[dtype],
                                           atol=TOLERANCE[dtype])
