"""The torch family's kernels on CUDA: the drop-ins' CUDA path (NAdam, RAdam, Adadelta, ASGD, Rprop, Adafactor,
Muon) against torch.optim on the CPU, and the public kernel functions on device arrays against the CPU kernels.

Under the simulator, CPU tensors stand in for CUDA ones (see test_torch_cuda.py). CUDA roots are IEEE and a GPU
may contract multiply-adds, so the comparison is within a tolerance, not bit for bit."""
import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels import kernels as K  # noqa: E402
from optkernels.kernels import _cuda  # noqa: E402
from optkernels.torch import _views  # noqa: E402

if _cuda.simulator_enabled():
    DEVICE, CONTEXT = "cpu", _views.simulate_cuda
elif torch.cuda.is_available():
    DEVICE, CONTEXT = "cuda", contextlib.nullcontext
else:
    pytest.skip("torch sees no CUDA device and the CUDA simulator is off", allow_module_level=True)

TOLERANCE = {torch.float32: 5e-5, torch.float64: 1e-11}
CASES = [
    ("NAdam", dict(lr=0.01, weight_decay=0.1), [(3, 4), (5,)]),
    ("RAdam", dict(lr=0.01, betas=(0.9, 0.6), decoupled_weight_decay=True, weight_decay=0.1), [(3, 4)]),
    ("Adadelta", dict(weight_decay=0.1, maximize=True), [(3, 4)]),
    ("ASGD", dict(lambd=0.1, t0=1, weight_decay=0.1), [(3, 4)]),
    ("Rprop", dict(lr=0.05), [(3, 4)]),
    ("Adafactor", dict(weight_decay=0.1), [(3, 4), (5,)]),
    ("Muon", dict(lr=0.02), [(4, 3)]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,hypers,shapes", CASES, ids=[c[0] for c in CASES])
def test_cuda_path_matches_torch(name, hypers, shapes, dtype):
    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(s, dtype=dtype, generator=gen) for s in shapes]
    ours = [t.clone().to(DEVICE).requires_grad_() for t in init]
    theirs = [t.clone().requires_grad_() for t in init]
    with CONTEXT():
        opt = getattr(okt, name)(ours, **hypers)
        ref = getattr(torch.optim, name)(theirs, **hypers)
        for _ in range(3):
            for x, y in zip(ours, theirs):
                g = torch.randn(x.shape, dtype=dtype, generator=gen)
                x.grad, y.grad = g.to(DEVICE), g.clone()
            opt.step()
            ref.step()
        if name not in ("Adafactor", "Muon"):
            assert [e[1] for e in opt._plans[0].single] == ["cuda"] * len(shapes)   # the CUDA path ran
    tol = TOLERANCE[dtype] * (100 if name == "Muon" else 1)        # Muon's bf16 Newton-Schulz amplifies
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x.detach().cpu(), y.detach(), rtol=tol, atol=tol)


def _device(a):
    return _cuda.to_device(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_functions_on_device_equal_the_cpu(dtype):
    rng = np.random.default_rng(3)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    calls = [
        (lambda w, s, g: K.torch_nadam(w, *s, g, 0.01, 0.9, 0.999, 1e-8, 2, 0.2, weight_decay=0.1), 2),
        (lambda w, s, g: K.torch_radam(w, *s, g, 0.01, 0.9, 0.999, 1e-8, 7, maximize=True), 2),
        (lambda w, s, g: K.torch_adadelta(w, *s, g, 1.0, 0.9, 1e-6, weight_decay=0.1), 2),
        (lambda w, s, g: K.torch_asgd(w, *s, g, 0.01, 0.5, lambd=0.1), 1),
        (lambda w, s, g: K.torch_rprop(w, *s, g), 2),
        (lambda w, s, g: K.torch_muon_momentum(*s, g, momentum=0.9), 2),
        (lambda w, s, g: K.torch_adafactor(w, g, 3, weight_decay=0.1, variance=s[0]), 1),
    ]
    for call, n_states in calls:
        host = [np.abs(rng.standard_normal(11)).astype(dtype) for _ in range(n_states + 2)]
        device = [_device(a) for a in host]
        call(host[0], host[1:-1], host[-1])
        call(device[0], device[1:-1], device[-1])
        for h, d in zip(host, device):
            np.testing.assert_allclose(_cuda.to_host(d), h, rtol=tol, atol=tol)


def test_factored_adafactor_kernel_on_device_equals_the_cpu():
    rng = np.random.default_rng(4)
    host = [rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4)), np.zeros((2, 3, 1)), np.zeros((2, 1, 4))]
    device = [_device(a) for a in host]
    for t in (1, 2):
        K.torch_adafactor(host[0], host[1], t, row_var=host[2], col_var=host[3])
        K.torch_adafactor(device[0], device[1], t, row_var=device[2], col_var=device[3])
    for h, d in zip(host, device):
        np.testing.assert_allclose(_cuda.to_host(d), h, rtol=1e-13, atol=1e-15)
