"""The torch-rounded element functions (optkernels.kernels.torch_rules) through optkernels.torch's CUDA path.

Under Numba's CUDA simulator the element functions run as Python on NumPy scalars (each operation rounded in
the array's dtype, ``fma`` exactly), so the CUDA path must give torch CPU's bits, given an IEEE sqrt (what
the CUDA path computes: torch's CUDA sqrt). On a GPU, numba-cuda's compiler may contract other
multiply-adds: there the results are compared within a few ulps."""
import contextlib

import numpy as np
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

CASES = [
    ("Adam", dict(amsgrad=True, weight_decay=0.1, maximize=True, betas=(0.3, 0.99))),
    ("AdamW", dict(lr=0.01)),
    ("Adamax", dict(weight_decay=0.1)),
    ("Adagrad", dict(lr_decay=0.01, initial_accumulator_value=0.1)),
    ("RMSprop", dict(centered=True, momentum=0.5, alpha=0.3)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
]


@contextlib.contextmanager
def _ieee_sqrt():
    sqrt, sqrt_ = torch.Tensor.sqrt, torch.Tensor.sqrt_
    torch.Tensor.sqrt = lambda self: torch.from_numpy(np.sqrt(self.detach().numpy()))
    torch.Tensor.sqrt_ = lambda self: self.copy_(torch.from_numpy(np.sqrt(self.detach().numpy())))
    try:
        yield
    finally:
        torch.Tensor.sqrt, torch.Tensor.sqrt_ = sqrt, sqrt_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,flags", CASES, ids=[c[0] for c in CASES])
def test_cuda_path_gives_torch_cpu_bits(name, flags, dtype):
    gen = torch.Generator().manual_seed(4)
    init = [torch.randn(n, generator=gen, dtype=dtype) for n in (1, 7, 16)]
    theirs = [t.clone().requires_grad_() for t in init]
    ours = [t.clone().to(DEVICE).requires_grad_() for t in init]
    reference = getattr(torch.optim, name)(theirs, foreach=False, **flags)
    with CONTEXT():
        optimizer = getattr(okt, name)(ours, **flags)
        for _ in range(3):
            for a, b in zip(theirs, ours):
                g = torch.randn(a.shape, generator=gen, dtype=dtype)
                a.grad, b.grad = g, g.to(DEVICE)
            with _ieee_sqrt():
                reference.step()
            optimizer.step()
    for a, b in zip(theirs, ours):
        if EXACT:
            assert torch.equal(a, b.cpu())
        else:
            torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_device_path_computes_ieee_sqrt(monkeypatch, dtype):
    """On a CUDA device the roots are IEEE sqrt, what torch's CUDA ``sqrt`` computes, even with
    ``OPTKERNELS_TORCH_SQRT=torch``: the CPU's MKL kernels (1 ulp off IEEE on ~0.7% of inputs) concern CPU
    tensors only."""
    from optkernels.torch._sqrt import ENVIRONMENT

    if not EXACT:
        pytest.skip("bit for bit only under the CUDA simulator (a GPU contracts torch's own multiply-adds)")
    monkeypatch.setenv(ENVIRONMENT, "torch")
    gen = torch.Generator().manual_seed(5)
    init = torch.zeros(1000, dtype=dtype)  # the updates alone: an ulp of a root shows in the parameter
    a, b = init.clone().requires_grad_(), init.clone().to(DEVICE).requires_grad_()
    reference = torch.optim.Adam([a], foreach=False)
    with CONTEXT():
        optimizer = okt.Adam([b])
        for _ in range(3):
            g = torch.randn(1000, generator=gen, dtype=dtype)
            a.grad, b.grad = g, g.clone().to(DEVICE)
            with _ieee_sqrt():
                reference.step()
            optimizer.step()
    assert torch.equal(a, b.cpu())
