"""Bad input to optkernels.torch raises as torch users expect (torch's error types and messages where torch
defines them), before any tensor changes; ``import optkernels`` never imports torch."""
import inspect
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

DROP_INS = [okt.Adam, okt.AdamW, okt.Adamax, okt.SGD, okt.Adagrad, okt.RMSprop]


def test_import_optkernels_does_not_import_torch():
    code = ("import sys, optkernels, optkernels.kernels, optkernels.optimizers, optkernels.sparse; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_non_leaf_complex_integer_mindspore_names():
    leaf = torch.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        okt.LazyAdam([leaf * 2])
    with pytest.raises(TypeError, match="complex"):
        okt.LazyAdam([torch.ones(3, dtype=torch.complex64, requires_grad=True)])
    with pytest.raises(TypeError, match="int64"):
        okt.LazyAdam([torch.ones(3, dtype=torch.int64)])


def _constructor_error(cls, params, kwargs):
    try:
        cls(params, **kwargs)
    except Exception as error:  # the exception is what is compared
        return error
    return None


@pytest.mark.parametrize("params,kwargs", [
    (lambda: [torch.ones(3, requires_grad=True) * 2], {}),                      # non-leaf
    (lambda: torch.ones(3, requires_grad=True), {}),                            # a tensor, not an iterable
    (lambda: {torch.ones(3, requires_grad=True)}, {}),                          # a set
    (lambda: [], {}),                                                           # empty
    (lambda: ["not a tensor"], {}),
    (lambda: [torch.ones(3, requires_grad=True)], dict(lr=torch.tensor([0.1, 0.2]))),
    (lambda: [torch.ones(3, requires_grad=True)], dict(fused=True, differentiable=True)),
    (lambda: [torch.ones(3, requires_grad=True)], dict(fused=True, foreach=True)),
    (lambda: [torch.ones(3, dtype=torch.complex64, requires_grad=True)], {}),   # accepted, as torch does
    (lambda: [torch.ones(3, dtype=torch.int64)], {}),
    (lambda: [torch.ones(3, requires_grad=True)], dict(betas=(0.9, torch.tensor(0.99)))),
    (lambda: [torch.ones(3, requires_grad=True)], dict(betas=(torch.tensor(0.9), torch.tensor([0.99, 0.9])))),
])
@pytest.mark.parametrize("cls", DROP_INS + [okt.SparseAdam])
def test_constructor_raises_as_torch(cls, params, kwargs):
    """Constructor arguments are judged by the torch.optim class of the same name: same exception type and
    message (or none)."""
    torch_cls = getattr(torch.optim, cls.__name__)
    accepted = inspect.signature(torch_cls.__init__).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    theirs = _constructor_error(torch_cls, params(), kwargs)
    ours = _constructor_error(cls, params(), kwargs)
    assert type(ours) is type(theirs) and str(ours) == str(theirs), (theirs, ours)


@pytest.mark.parametrize("cls,kwargs,message", [
    (okt.Adam, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (okt.Adam, dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0"),
    (okt.Adam, dict(eps=-1.0), "Invalid epsilon value"),
    (okt.AdamW, dict(weight_decay=-0.1), "Invalid weight_decay value"),
    (okt.SGD, dict(momentum=-0.5), "Invalid momentum value"),
    (okt.SGD, dict(nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    (okt.Adagrad, dict(lr_decay=-1.0), "Invalid lr_decay value"),
    (okt.RMSprop, dict(alpha=-0.1), "Invalid alpha value"),
    (okt.SparseAdam, dict(lr=0.0), "Invalid learning rate"),
])
def test_hyper_parameters_with_torchs_messages(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls([torch.ones(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match=message):
        getattr(torch.optim, cls.__name__)([torch.ones(2, requires_grad=True)], **kwargs)


@pytest.mark.parametrize("cls", DROP_INS)
def test_a_failed_step_changes_nothing(cls):
    a = torch.ones(4, requires_grad=True)
    b = torch.ones(3, dtype=torch.float64, requires_grad=True)
    opt = cls([{"params": [a]}, {"params": [b]}], lr=0.1)
    a.grad = torch.ones(4)                  # (torch itself refuses a gradient of another shape or dtype)
    b.grad = torch.ones(3, dtype=torch.float64)
    opt.param_groups[1]["lr"] = -0.5                             # set after construction
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.step()
    assert torch.equal(a.detach(), torch.ones(4))
    assert torch.equal(b.detach(), torch.ones(3, dtype=torch.float64))
    assert not opt.state or all(float(s.get("step", 0)) == 0 for s in opt.state.values())
    opt.param_groups[1]["lr"] = 0.1
    b.grad = torch.ones(6, dtype=torch.float64)[::2]             # a strided gradient is fine, as in torch
    opt.step()
    assert not torch.equal(a.detach(), torch.ones(4)) and not torch.equal(b.detach(), torch.ones(3))
