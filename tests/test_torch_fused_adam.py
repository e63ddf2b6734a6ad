"""``optkernels.torch.Adam``/``AdamW(fused=True)`` on CPU tensors give ``torch.optim.Adam``/``AdamW(fused=True)``'s
bits: after every step each parameter, state tensor and (with AMP's ``grad_scale``) gradient is equal bit for
bit to torch's fused CPU step's, for float32, float64, bfloat16 and float16 parameters, every flag, and sizes
1..129 (every tail length of torch's 64-byte vectors and of its 32-byte tail loop) and 65,539. torch's fused
CPU kernels are compiled per CPU capability and optkernels reproduces the AVX-512 ones: elsewhere its
parameters go to torch's own fused step (said once), which the tests check by forcing another capability.
"""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.torch import _fused_adam  # noqa: E402

AVX512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
needs_avx512 = pytest.mark.skipif(
    not AVX512, reason="optkernels reproduces torch's AVX-512 fused kernels; torch's own step runs here"
)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
DTYPE_IDS = ["f32", "f64", "bf16", "f16"]
SIZES = [*range(1, 130), 65539]
STEPS = 4

# every flag alone and together; betas[0] < 0.5 takes torch's other lerp branch
CASES = [
    ("Adam", {}),
    ("Adam", dict(amsgrad=True)),
    ("Adam", dict(maximize=True, weight_decay=0.1)),
    ("Adam", dict(amsgrad=True, maximize=True, weight_decay=0.1, betas=(0.3, 0.99))),
    ("AdamW", {}),
    ("AdamW", dict(amsgrad=True, maximize=True, weight_decay=0.5)),
    ("AdamW", dict(betas=(0.2, 0.9), eps=1e-3, lr=torch.tensor(0.03))),
]
CASE_IDS = [f"{name}-{'-'.join(map(str, kwargs)) or 'plain'}" for name, kwargs in CASES]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits, as integers (NaN payloads and signed zeros compared too)."""
    return t.detach().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _pair(name: str, kwargs: dict, dtype: torch.dtype, sizes=SIZES, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    base = [torch.randn(n, generator=gen).to(dtype) for n in sizes]
    theirs = [b.clone().requires_grad_() for b in base]
    ours = [b.clone().requires_grad_() for b in base]
    kwargs = dict(kwargs)
    lr = kwargs.pop("lr", 1e-2)
    make = lambda lib, params: getattr(lib, name)(  # noqa: E731
        params, lr=lr.clone() if isinstance(lr, torch.Tensor) else lr, fused=True, **kwargs
    )
    return make(torch.optim, theirs), make(okt, ours), theirs, ours, gen


def _grads(theirs, ours, gen, scale=1.0):
    for a, b in zip(theirs, ours):
        g = (torch.randn(a.shape, generator=gen) * scale).to(a.dtype)
        a.grad, b.grad = g.clone(), g.clone()


def _assert_same(t_opt, o_opt, theirs, ours, where: str, grads: bool = False):
    for k, (a, b) in enumerate(zip(theirs, ours)):
        assert _same(a, b), f"{where}: parameter {k} ({a.numel()} elements)"
        if grads:
            assert _same(a.grad, b.grad), f"{where}: gradient {k}"
        state_t, state_o = t_opt.state[a], o_opt.state[b]
        assert list(state_t) == list(state_o)
        for key, value in state_t.items():
            assert _same(value, state_o[key]), f"{where}: {key} of parameter {k} ({a.numel()} elements)"


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,kwargs", CASES, ids=CASE_IDS)
def test_fused_steps_give_torchs_fused_bits(name, kwargs, dtype):
    t_opt, o_opt, theirs, ours, gen = _pair(name, kwargs, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no parameter goes to torch's own step
        for step in range(STEPS):
            _grads(theirs, ours, gen)
            t_opt.step()
            o_opt.step()
            _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1}")
    assert {o_opt.backend_for(p) for p in ours} == {"optkernels"}
    if not isinstance(kwargs.get("lr"), torch.Tensor):  # (a Tensor lr is not the short paths')
        assert o_opt._fast is not None  # the later steps took the short path: the same bits


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_fused_is_not_the_for_loop(dtype):
    """``fused=True`` changes the bits (torch's fused step rounds otherwise than its for-loop step): the
    drop-in follows the switch."""
    t_opt, o_opt, theirs, ours, gen = _pair("Adam", dict(weight_decay=0.1), dtype, sizes=[65539])
    plain = okt.Adam([p := theirs[0].detach().clone().requires_grad_()], lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        _grads(theirs, ours, gen)
        p.grad = ours[0].grad.clone()
        t_opt.step()
        o_opt.step()
        plain.step()
    assert _same(theirs[0], ours[0])
    assert not torch.equal(_bits(p), _bits(ours[0]))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_grad_scale_and_found_inf_as_torchs_fused_step(name, dtype):
    """AMP's ``grad_scale``/``found_inf`` (as ``torch.amp.GradScaler`` sets them): the gradients divided by
    the scale (in float32 for half ones, the quotient used unrounded) and written back as torch writes them;
    a step with ``found_inf`` 1 changes nothing."""
    t_opt, o_opt, theirs, ours, gen = _pair(name, dict(weight_decay=0.1, amsgrad=True), dtype)
    for step, (scale, inf) in enumerate([(None, 0), (1024.0, 0), (3000.0, 0), (512.0, 1), (None, 0), (7.0, 0)]):
        _grads(theirs, ours, gen, scale or 1.0)
        for opt in (t_opt, o_opt):
            opt.__dict__.pop("grad_scale", None)
            opt.__dict__.pop("found_inf", None)
            if scale is not None:
                opt.grad_scale, opt.found_inf = torch.tensor(scale), torch.tensor(float(inf))
        t_opt.step()
        o_opt.step()
        _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1} (scale {scale}, found_inf {inf})", grads=True)
    assert float(o_opt.state[ours[0]]["step"]) == 5.0


@needs_avx512
@pytest.mark.parametrize("name,kwargs", [CASES[0], CASES[4]], ids=["Adam", "AdamW"])
def test_large_lists_take_the_prefetching_loop_with_torchs_fused_bits(name, kwargs):
    """A float32 list whose parts hold 2**20 elements or more on every thread runs the prefetching
    multi-tensor loop (``_fused_adam.prefetch_large``), generic step and short path: torch's bits."""
    import numba

    sizes = [numba.get_num_threads() * 2**20 + 4099, 77]
    t_opt, o_opt, theirs, ours, gen = _pair(name, kwargs, torch.float32, sizes=sizes)
    for step in range(3):
        _grads(theirs, ours, gen)
        t_opt.step()
        o_opt.step()
        _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1}")
    assert o_opt._fast is not None and o_opt._fast.large is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_other_cpu_capabilities_take_torchs_fused_step(monkeypatch, dtype):
    """Where torch's CPU kernels are not the AVX-512 ones, torch's own fused step updates the parameters
    (said once, and by ``backend_for``): torch's bits all the same."""
    monkeypatch.setattr(_fused_adam, "_capability", lambda: "AVX2")
    t_opt, o_opt, theirs, ours, gen = _pair("AdamW", dict(amsgrad=True), dtype, sizes=[7, 1000])
    with pytest.warns(UserWarning, match="fused=True where torch's CPU kernels are AVX2 ones") as said:
        for step in range(2):
            _grads(theirs, ours, gen)
            t_opt.step()
            o_opt.step()
            _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1}")
    assert len([w for w in said if "fused=True" in str(w.message)]) == 1
    assert {o_opt.backend_for(p) for p in ours} == {"torch"}


@needs_avx512
def test_gradients_laid_out_unlike_their_parameter_take_torchs_fused_step():
    """torch's fused kernel pairs the memory of parameter, state and gradient in order: a transposed
    parameter with a gradient of its strides is served (the same bits), one with a contiguous gradient goes
    to torch's own fused step (said once), which keeps torch's bits whatever they are."""
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(33, 17, generator=gen).t()
    theirs = [base.clone().t().contiguous().t().requires_grad_() for _ in range(2)]
    ours = [base.clone().t().contiguous().t().requires_grad_() for _ in range(2)]
    t_opt = torch.optim.Adam(theirs, lr=1e-2, fused=True)
    o_opt = okt.Adam(ours, lr=1e-2, fused=True)
    assert not ours[0].is_contiguous()
    with pytest.warns(UserWarning, match="gradient laid out unlike its parameter") as said:
        for step in range(3):
            for k, (a, b) in enumerate(zip(theirs, ours)):
                g = torch.randn(a.shape, generator=gen)
                g = g.t().contiguous().t() if k == 0 else g.contiguous()  # the parameter's strides, or not
                a.grad, b.grad = g.clone(), g.clone()
            t_opt.step()
            o_opt.step()
            _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1}")
    assert len([w for w in said if "fused=True" in str(w.message)]) == 1
    assert [o_opt.backend_for(p) for p in ours] == ["optkernels", "torch"]


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("amsgrad", [False, True], ids=["plain", "amsgrad"])
def test_nan_and_inf_gradients_write_torchs_nan_bits(dtype, amsgrad):
    """NaN and inf gradients in torch's 64-byte vectors, its 32-byte tail vectors and its scalar loop: the
    same NaN bits as torch's fused step (its vector ``maximum``'s all-ones NaN, its scalar loop's
    ``v̂ < v ? v : v̂`` and half conversions)."""
    t_opt, o_opt, theirs, ours, gen = _pair("Adam", dict(amsgrad=amsgrad), dtype, sizes=[77, 84, 93])
    for step in range(3):
        _grads(theirs, ours, gen)
        for a, b in zip(theirs, ours):
            if step:
                bad = [3, 40, 65, 70, 76, 81] if step == 1 else [5, 66, 80]
                value = float("nan") if step == 1 else float("inf")
                for g in (a.grad, b.grad):
                    g[[k for k in bad if k < g.numel()]] = value
        t_opt.step()
        o_opt.step()
        _assert_same(t_opt, o_opt, theirs, ours, f"step {step + 1}")
