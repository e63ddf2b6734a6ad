"""The modern rules' torch drop-ins against their canonical packages on the same gradients (float64 within
1e-12 relative, float32 within a few ulps, parameters and state), against the worked examples of MODERN.md
§8-11, and the NumPy classes of optkernels.optimizers equal to the drop-ins bit for bit."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels import optimizers as nko  # noqa: E402
from optkernels.optimizers import Parameter  # noqa: E402

SHAPES = [(7, 5), (13,), (2, 3, 4)]
STEPS = 6
# relative to the largest magnitude of the compared tensor
TOLERANCE = {torch.float64: 1e-12, torch.float32: 16 * float(np.finfo(np.float32).eps)}

P0 = [0.5, -1.0, 2.0]                                            # MODERN §0.4
G = [[0.1, -0.3, 0.0], [-0.2, -0.1, 0.4], [0.05, 0.2, 0.4]]


@dataclass
class Rule:
    """One drop-in and its canonical class, with the configurations to compare.

    Attributes:
        name: the class name in optkernels.torch and optkernels.optimizers.
        canonical: ``canonical(dtype) -> cls(params, **kwargs)``, the canonical optimizer for that dtype
            (importorskip inside).
        configs: constructor keyword arguments (torch names), each compared on its own.
        numpy: ``numpy(params, torch_kwargs) -> the NumPy optimizer`` for the same configuration.
        state_map: canonical state name -> ``f(state) -> tensor`` of ours to compare with, by our name.
        modes: the rule has train()/eval() (schedule-free).
    """

    name: str
    canonical: Callable[[], Any]
    configs: list
    numpy: Callable
    state_map: dict = field(default_factory=dict)
    modes: bool = False


def _lion_pytorch(dtype):
    return pytest.importorskip("lion_pytorch", reason="lion-pytorch is a test dependency").Lion


def _lion_numpy(params, kw):
    beta1, beta2 = kw.get("betas", (0.9, 0.99))
    return nko.Lion(params, learning_rate=kw["lr"], beta1=beta1, beta2=beta2,
                    weight_decay=kw.get("weight_decay", 0.0),
                    decoupled_weight_decay=kw.get("decoupled_weight_decay", False))


def _adopt(dtype):
    return pytest.importorskip("adopt", reason="torch-adopt is a test dependency").ADOPT


def _adopt_numpy(params, kw):
    if kw.get("maximize"):
        pytest.skip("the NumPy classes have no maximize")
    beta1, beta2 = kw.get("betas", (0.9, 0.9999))
    extra = {"clip_lambda": kw["clip_lambda"]} if "clip_lambda" in kw else {}
    return nko.ADOPT(params, learning_rate=kw["lr"], beta1=beta1, beta2=beta2, eps=kw.get("eps", 1e-6),
                     weight_decay=kw.get("weight_decay", 0.0), decouple=kw.get("decouple", False), **extra)


def _ademamix(dtype):
    """float32: bitsandbytes' AdEMAMix (its CPU backend, float32 state); float64: its reference class (the
    real one computes in float32 whatever the dtype), one group per parameter (the reference class
    compounds the warmups across the parameters of a group, MODERN §10.1)."""
    bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is a test dependency")
    if dtype == torch.float32:
        return bnb.optim.AdEMAMix
    from bitsandbytes.optim.ademamix import _ReferenceAdEMAMix

    return lambda params, **kw: _ReferenceAdEMAMix([{"params": [p]} for p in params], **kw)


def _ademamix_numpy(params, kw):
    beta1, beta2, beta3 = kw.get("betas", (0.9, 0.999, 0.9999))
    return nko.AdEMAMix(params, learning_rate=kw["lr"], beta1=beta1, beta2=beta2, beta3=beta3,
                        alpha=kw.get("alpha", 5.0), t_alpha=kw.get("t_alpha"), t_beta3=kw.get("t_beta3"),
                        eps=kw.get("eps", 1e-8), weight_decay=kw.get("weight_decay", 1e-2))


def _m1_m2(state):
    return torch.stack([state["m1"], state["m2"]])


def _schedulefree(name):
    def canonical(dtype):
        return getattr(pytest.importorskip("schedulefree", reason="schedulefree is a test dependency"), name)

    return canonical


def _sf_adamw_numpy(params, kw):
    beta1, beta2 = kw.get("betas", (0.9, 0.999))
    return nko.AdamWScheduleFree(params, learning_rate=kw["lr"], beta1=beta1, beta2=beta2, eps=kw.get("eps", 1e-8),
                                 weight_decay=kw.get("weight_decay", 0.0), warmup_steps=kw.get("warmup_steps", 0),
                                 r=kw.get("r", 0.0), weight_lr_power=kw.get("weight_lr_power", 2.0))


def _sf_sgd_numpy(params, kw):
    return nko.SGDScheduleFree(params, learning_rate=kw["lr"], momentum=kw.get("momentum", 0.9),
                               weight_decay=kw.get("weight_decay", 0.0), warmup_steps=kw.get("warmup_steps", 0),
                               r=kw.get("r", 0.0), weight_lr_power=kw.get("weight_lr_power", 2.0))


RULES = [
    Rule("Lion", _lion_pytorch,
         [dict(lr=0.01, weight_decay=0.1), dict(lr=3e-3, betas=(0.8, 0.95), weight_decay=0.5),
          dict(lr=0.02, betas=(0.9, 0.99), weight_decay=0.3, decoupled_weight_decay=True)],
         _lion_numpy),
    Rule("ADOPT", _adopt,
         [dict(lr=0.01, weight_decay=0.1, decouple=True), dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.05),
          dict(lr=0.01, eps=1e-3, clip_lambda=None, maximize=True, weight_decay=0.02)],
         _adopt_numpy),
    Rule("AdEMAMix", _ademamix,
         [dict(lr=0.01, alpha=5.0, weight_decay=0.1, t_alpha=4, t_beta3=4),
          dict(lr=3e-3, betas=(0.8, 0.99, 0.999), alpha=2.0, weight_decay=0.0),
          dict(lr=0.01, eps=1e-6, t_beta3=10)],
         _ademamix_numpy,
         state_map={"state1": _m1_m2, "m1_m2": _m1_m2, "state2": lambda s: s["nu"], "nu": lambda s: s["nu"]}),
    Rule("AdamWScheduleFree", _schedulefree("AdamWScheduleFree"),
         [dict(lr=0.01, weight_decay=0.1, warmup_steps=2),
          dict(lr=0.005, betas=(0.8, 0.99), r=0.5, weight_lr_power=1.0), dict(lr=0.02, warmup_steps=10, eps=1e-6)],
         _sf_adamw_numpy, modes=True),
    Rule("SGDScheduleFree", _schedulefree("SGDScheduleFree"),
         [dict(lr=0.1, momentum=0.9, weight_decay=0.1, warmup_steps=2), dict(lr=0.05, momentum=0.5, r=1.0,
                                                                              weight_lr_power=3.0)],
         _sf_sgd_numpy, modes=True),
]

RULES_BY_NAME = {rule.name: rule for rule in RULES}


def _data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    init = [torch.tensor(rng.standard_normal(s), dtype=dtype) for s in SHAPES]
    grads = [[torch.tensor(rng.standard_normal(s), dtype=dtype) for s in SHAPES] for _ in range(STEPS)]
    return init, grads


def _run(cls, kwargs, init, grads, modes, lr_change=True):
    """Run ``cls`` over copies of ``init``; the learning rate is halved before the 4th step (a schedule)."""
    params = [torch.nn.Parameter(t.clone()) for t in init]
    opt = cls(params, **kwargs)
    if modes:
        opt.train()
    for k, step in enumerate(grads):
        if lr_change and k == 3:
            for group in opt.param_groups:
                group["lr"] = group["lr"] / 2
        for p, g in zip(params, step):
            p.grad = g.clone()        # schedulefree writes into p.grad
        opt.step()
    if modes:
        opt.eval()
    return opt, params


def _close(ours, theirs, dtype, what):
    a, b = ours.detach().double().numpy(), theirs.detach().double().numpy()
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-300)
    err = float(np.abs(a - b).max(initial=0.0)) / scale
    assert err <= TOLERANCE[dtype], f"{what}: relative error {err:.3g} > {TOLERANCE[dtype]:.3g}"


CONFIGS = [(rule, k) for rule in RULES for k in range(len(rule.configs))]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("rule, k", CONFIGS, ids=[f"{r.name}-{k}" for r, k in CONFIGS])
def test_drop_in_matches_canonical_package(rule, k, dtype):
    canonical = rule.canonical(dtype)
    kwargs = rule.configs[k]
    init, grads = _data(dtype, seed=k)
    ours, p_ours = _run(getattr(okt, rule.name), kwargs, init, grads, rule.modes)
    theirs, p_theirs = _run(canonical, kwargs, init, grads, rule.modes)
    for j, (a, b) in enumerate(zip(p_ours, p_theirs)):
        _close(a, b, dtype, f"param {j}")
        state_a, state_b = ours.state[a], theirs.state[b]
        for name, value in state_b.items():
            if not torch.is_tensor(value) or value.dim() == 0:
                continue
            mine = rule.state_map[name](state_a) if name in rule.state_map else state_a[name]
            _close(mine, value, dtype, f"param {j} state {name}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=["f64", "f32", "bf16"])
@pytest.mark.parametrize("rule, k", CONFIGS, ids=[f"{r.name}-{k}" for r, k in CONFIGS])
def test_numpy_class_equals_drop_in_bit_for_bit(rule, k, dtype):
    kwargs = rule.configs[k]
    init, grads = _data(torch.float32 if dtype == torch.bfloat16 else dtype, seed=10 + k)
    init = [t.to(dtype) for t in init]
    grads = [[g.to(dtype) for g in step] for step in grads]
    ours, p_ours = _run(getattr(okt, rule.name), kwargs, init, grads, rule.modes, lr_change=False)
    params = [Parameter(t.clone().view(torch.int16).numpy().view(_np_dtype(dtype)), f"w{j}")
              for j, t in enumerate(init)]
    opt = rule.numpy(params, kwargs)
    if rule.modes:
        opt.train()
    for step in grads:
        opt([g.clone().view(torch.int16).numpy().view(_np_dtype(dtype)) if dtype == torch.bfloat16
             else g.numpy().copy() for g in step])
    if rule.modes:
        opt.eval()
    for j, (p, q) in enumerate(zip(p_ours, params)):
        mine = p.detach().view(torch.int16).numpy() if dtype == torch.bfloat16 else p.detach().numpy()
        theirs = q.data.view(np.int16) if dtype == torch.bfloat16 else q.data
        assert np.array_equal(mine.view(np.uint8), np.ascontiguousarray(theirs).view(np.uint8)), f"param {j}"


def _np_dtype(dtype):
    import ml_dtypes

    return {torch.float64: np.float64, torch.float32: np.float32, torch.bfloat16: ml_dtypes.bfloat16}[dtype]


def _worked(cls, kwargs, steps, modes=False):
    p = torch.nn.Parameter(torch.tensor(P0, dtype=torch.float64))
    opt = cls([p], **kwargs)
    if modes:
        opt.train()
    out = []
    for g in G[:steps]:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        out.append((p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}))
    return opt, p, out


def _assert_spec(actual, expected, what):
    np.testing.assert_allclose(actual.detach().numpy() if torch.is_tensor(actual) else actual, expected, rtol=4e-16,
                               atol=1e-18, err_msg=what)


def test_lion_worked_example():
    """MODERN §8.2: automl Lion(lr=0.01, weight_decay=0.1), two steps."""
    _, _, out = _worked(okt.Lion, dict(lr=0.01, weight_decay=0.1), 2)
    _assert_spec(out[0][0], [0.48949999999999999, -0.98899999999999999, 1.998], "step 1 p")
    _assert_spec(out[0][1]["exp_avg"], [0.0010000000000000009, -0.0030000000000000027, 0], "step 1 m")
    _assert_spec(out[1][0], [0.49901050000000002, -0.97801099999999996, 1.986002], "step 2 p")
    _assert_spec(out[1][1]["exp_avg"], [-0.0010100000000000009, -0.003970000000000003, 0.0040000000000000036],
                 "step 2 m")


def test_lion_decoupled_decay_follows_the_schedule_shape():
    """lucidrains' decoupled_weight_decay: the decay is lr_t·wd/lr₀ (a halved lr halves the decay)."""
    p = torch.nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    opt = okt.Lion([p], lr=0.1, weight_decay=0.5, decoupled_weight_decay=True)
    opt.param_groups[0]["lr"] = 0.05
    p.grad = torch.zeros(1, dtype=torch.float64)
    opt.step()
    assert p.item() == 2.0 * (1.0 - 0.05 * (0.5 / 0.1))


def test_lion_constructor_checks_are_lucidrains():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(AssertionError):
        okt.Lion([p], lr=0.0)
    with pytest.raises(AssertionError):
        okt.Lion([p], betas=(0.9, 1.5))
    okt.Lion([p], betas=(1.0, 1.0))            # 1 is allowed, as lucidrains allows it


ADOPT_STEPS = {   # MODERN §9.2, ADOPT(lr=0.01, weight_decay=0.1, decouple=True)
    "p": [[0.5, -1, 2], [0.50049999999999994, -0.9986666666666667, 1.9970000000000001],
          [0.50039957498312915, -0.9980346962982718, 1.9929137928849974]],
    "exp_avg": [None, [-0.099999999999999978, -0.033333333333333333, 0.099999999999999978],
                [-0.040007498312921753, 0.036669629827175108, 0.20892071150027208]],
    "exp_avg_sq": [[0.010000000000000002, 0.089999999999999997, 0],
                   [0.010003000000000001, 0.089992000000000003, 1.5999999999998241e-05], None],
}


def test_adopt_worked_examples():
    """MODERN §9.2: decoupled decay (element 2 divides by eps on its first update and is clipped at 1), no
    decay, and clip_lambda=None (the unclipped run that moves element 2 to -398)."""
    _, _, out = _worked(okt.ADOPT, dict(lr=0.01, weight_decay=0.1, decouple=True), 3)
    for k, (p, state) in enumerate(out):
        _assert_spec(p, ADOPT_STEPS["p"][k], f"step {k + 1} p")
        for name in ("exp_avg", "exp_avg_sq"):
            if ADOPT_STEPS[name][k] is not None:
                _assert_spec(state[name], ADOPT_STEPS[name][k], f"step {k + 1} {name}")
    _, _, out = _worked(okt.ADOPT, dict(lr=0.01), 3)
    _assert_spec(out[1][0], [0.501, -0.9996666666666667, 1.9990000000000001], "no decay, step 2")
    _assert_spec(out[2][0], [0.50140007498312922, -1.0000333629649385, 1.9969107928849974], "no decay, step 3")
    _, _, out = _worked(okt.ADOPT, dict(lr=0.01, clip_lambda=None), 3)
    _assert_spec(out[1][0], [0.502, -0.9996666666666667, -398], "unclipped, step 2")
    _assert_spec(out[2][0], [0.50330007498312923, -1.0000333629649385, -758.10000000000002], "unclipped, step 3")


def test_adopt_errors_are_torch_adopts():
    p = torch.nn.Parameter(torch.zeros(2))
    for kwargs, message in ((dict(lr=-1.0), "Invalid learning rate"), (dict(eps=-1.0), "Invalid epsilon value"),
                            (dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0"),
                            (dict(weight_decay=-1.0), "Invalid weight_decay value")):
        with pytest.raises(ValueError, match=message):
            okt.ADOPT([p], **kwargs)
    with pytest.raises(RuntimeError, match="`fused` is not currently supported"):
        okt.ADOPT([p], fused=True)
    p.grad = torch.sparse_coo_tensor([[0]], [1.0], (2,))
    with pytest.raises(RuntimeError, match="ADOPT does not support sparse gradients"):
        okt.ADOPT([p]).step()


def test_ademamix_worked_examples():
    """MODERN §10.2: bitsandbytes' reference, lr=0.01, alpha=5, weight_decay=0.1, t_alpha=t_beta3=4; the CUDA
    kernel's decay order and the run without warmups, step 2."""
    kw = dict(lr=0.01, alpha=5.0, weight_decay=0.1, t_alpha=4, t_beta3=4)
    _, _, out = _worked(okt.AdEMAMix, kw, 2)
    (p1, s1), (p2, s2) = out
    _assert_spec(p1, [0.48949501594260592, -0.98899501527560707, 1.998], "step 1 p")
    _assert_spec(s1["m1"], [0.0099999999999999985, -0.029999999999999992, 0], "step 1 m1")
    _assert_spec(s1["m2"], [3.988046313977423e-05, -0.00011964138941932266, 0], "step 1 m2")
    _assert_spec(s1["nu"], [1.0000000000000011e-05, 9.0000000000000073e-05, 0], "step 1 nu")
    _assert_spec(p2, [0.49266656981103107, -0.97927977054193383, 1.9885535697838441], "step 2 p")
    _assert_spec(s2["m1"], [-0.010999999999999998, -0.036999999999999991, 0.039999999999999994], "step 2 m1")
    _assert_spec(s2["m2"], [-8.7579895641272799e-08, -0.0001395975224768807, 7.992014980788831e-05], "step 2 m2")
    _assert_spec(s2["nu"], [4.9990000000000055e-05, 9.9910000000000092e-05, 0.00016000000000000018], "step 2 nu")
    _, _, out = _worked(okt.AdEMAMix, dict(kw, decay_after_update=True), 2)
    _assert_spec(out[1][0], [0.49267290374122003, -0.97929849177139183, 1.9885610182140603], "CUDA order")
    _, _, out = _worked(okt.AdEMAMix, dict(lr=0.01, alpha=5.0, weight_decay=0.1), 2)
    _assert_spec(out[1][0], [0.49266970315751679, -0.97928642082471085, 1.9885535627277824], "no warmup")


def test_ademamix_schedule_values():
    """MODERN §10.2: α_1 = 1.25, β3_1 = 0.99960119536860226, α_2 = 2.5, β3_2 = 0.99980019962548028."""
    from optkernels.kernels.ademamix import ademamix_schedule

    assert ademamix_schedule(1, 5.0, 0.9, 0.9999, 4, 4) == pytest.approx((1.25, 0.99960119536860226), rel=1e-15)
    assert ademamix_schedule(2, 5.0, 0.9, 0.9999, 4, 4) == pytest.approx((2.5, 0.99980019962548028), rel=1e-15)
    assert ademamix_schedule(9, 5.0, 0.9, 0.9999, 4, 4) == (5.0, 0.9999)      # capped after the warmup
    assert ademamix_schedule(3, 5.0, 0.9, 0.9999, None, 0) == (5.0, 0.9999)   # None or 0: no warmup


def test_ademamix_errors_are_bitsandbytes():
    p = torch.nn.Parameter(torch.zeros(2))
    for kwargs, message in ((dict(lr=-1.0), "Invalid learning rate"), (dict(eps=-1.0), "Invalid epsilon value"),
                            (dict(betas=(0.9, 0.999, 1.0)), "Invalid beta parameter at index 2"),
                            (dict(weight_decay=-1.0), "Invalid weight_decay value"),
                            (dict(optim_bits=8), "32-bit state only")):
        with pytest.raises(ValueError, match=message):
            okt.AdEMAMix([p], **kwargs)


@pytest.mark.parametrize("name, kwargs, expected", [
    ("AdamWScheduleFree", dict(lr=0.01, weight_decay=0.1, warmup_steps=2), dict(
        y1=[0.49475000049999995, -0.99450000016666662, 1.9990000000000001],
        y2=[0.50471501930054763, -0.99001662482997799, 1.9857671686986216],
        z2=[0.5069024624518873, -0.98903246926826582, 1.9828624008519775],
        x2=[0.5044719700615099, -0.99012597544794601, 1.9860899206815821])),
    ("SGDScheduleFree", dict(lr=0.1, momentum=0.9, weight_decay=0.1, warmup_steps=2), dict(
        y1=[0.49249999999999999, -0.97999999999999998, 1.99],
        y2=[0.50486149999999996, -0.96376399999999995, 1.940882],
        z2=[0.507575, -0.96019999999999994, 1.9300999999999999],
        x2=[0.50456000000000001, -0.96415999999999991, 1.94208])),
])
def test_schedule_free_worked_examples(name, kwargs, expected):
    """MODERN §11.5: two steps in train mode (step 1: c = 1, so y = z), then eval() gives x; the group's
    scheduled_lr and averaging state follow the warmup."""
    opt, p, out = _worked(getattr(okt, name), kwargs, 2, modes=True)
    (y1, s1), (y2, s2) = out
    _assert_spec(y1, expected["y1"], "step 1 y")
    _assert_spec(s1["z"], expected["y1"], "step 1 z")
    _assert_spec(y2, expected["y2"], "step 2 y")
    _assert_spec(s2["z"], expected["z2"], "step 2 z")
    group = opt.param_groups[0]
    assert group["k"] == 2 and group["scheduled_lr"] == kwargs["lr"] and group["lr_max"] == kwargs["lr"]
    opt.eval()
    _assert_spec(p.detach(), expected["x2"], "eval x")
    opt.eval()                                        # a no-op in eval mode
    _assert_spec(p.detach(), expected["x2"], "eval twice")
    with pytest.raises(Exception, match="Optimizer was not in train mode"):
        opt.step()
    opt.train()
    np.testing.assert_allclose(p.detach().numpy(), expected["y2"], rtol=1e-15)


def test_schedule_free_step_needs_train_mode_from_the_start():
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    opt = okt.AdamWScheduleFree([p])
    with pytest.raises(Exception, match="Optimizer was not in train mode"):
        opt.step()
    assert opt.param_groups[0]["k"] == 0 and "z" not in opt.state[p]


def test_schedule_free_failed_step_leaves_group_state():
    p, q = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt = okt.SGDScheduleFree([p, q], lr=0.1)
    opt.train()
    p.grad, q.grad = torch.ones(3), torch.sparse_coo_tensor([[0]], [1.0], (2,))    # q's: sparse, refused
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        opt.step()
    group = opt.param_groups[0]
    assert (group["k"], group["weight_sum"], group["lr_max"]) == (0, 0.0, -1.0)
    assert torch.equal(p.detach(), torch.zeros(3))


def test_schedule_free_sgd_errors_are_the_packages():
    p = torch.nn.Parameter(torch.zeros(2))
    for kwargs, message in ((dict(lr=-1.0), "Invalid learning rate"), (dict(weight_decay=-1.0), "Invalid weight_decay"),
                            (dict(momentum=1.0), "Momentum must be between 0 and 1 exclusive")):
        with pytest.raises(ValueError, match=message):
            okt.SGDScheduleFree([p], **kwargs)


def test_numpy_schedule_free_state_round_trip_in_eval_mode():
    """Save in eval mode, resume into a fresh optimizer: the continued run is bit-identical."""
    rng = np.random.default_rng(5)
    init = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(6)]

    def build(values):
        p = Parameter(np.array(values), "w")
        return p, nko.AdamWScheduleFree([p], learning_rate=0.01, warmup_steps=3, weight_decay=0.01)

    p, opt = build(init)
    for g in grads[:3]:
        opt([g])
    opt.eval()
    saved_state, saved_param = opt.state_dict(), p.data.copy()
    opt.train()
    for g in grads[3:]:
        opt([g])
    q, other = build(saved_param)
    other.load_state_dict(saved_state)
    assert not other.train_mode
    with pytest.raises(RuntimeError, match="not in train mode"):
        other([grads[3]])
    other.train()
    for g in grads[3:]:
        other([g])
    assert np.array_equal(q.data, p.data)


def test_ademamix_loads_a_bitsandbytes_state_and_continues_its_run():
    bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is a test dependency")
    init, grads = _data(torch.float32, seed=3)
    kwargs = dict(lr=0.01, weight_decay=0.1, t_alpha=4, t_beta3=4)
    params = [torch.nn.Parameter(t.clone()) for t in init]
    theirs = bnb.optim.AdEMAMix(params, **kwargs)
    for k, step in enumerate(grads):
        if k == 3:
            mine = [torch.nn.Parameter(p.detach().clone()) for p in params]
            ours = okt.AdEMAMix(mine, **kwargs)
            ours.load_state_dict(theirs.state_dict())
            assert set(ours.state[mine[0]]) == {"step", "m1", "m2", "nu"}
        for p, g in zip(params, step):
            p.grad = g.clone()
        theirs.step()
        if k >= 3:
            for p, g in zip(mine, step):
                p.grad = g.clone()
            ours.step()
    for a, b in zip(mine, params):
        _close(a, b, torch.float32, "param after resuming")


def _schedule_free_events(cls, steady, monkeypatch):
    """A Schedule-Free run through the events that change what a step sees (new gradient tensors, an lr
    change, a frozen parameter, a transposed gradient, a refused sparse one, a group added, a state loaded),
    with the steady step allowed or not; returns the parameters, the optimizer and the steady launches."""
    from optkernels.torch import _fields
    from optkernels.torch import schedule_free as sf_module

    launched = []
    launch = _fields.Guard.launch
    monkeypatch.setattr(_fields.Guard, "launch", lambda *a: launched.append(launch(*a)) or launched[-1])
    if not steady:
        monkeypatch.setattr(sf_module, "_steady_plans", lambda opt: None)
    rng = np.random.default_rng(7)
    params = [torch.nn.Parameter(torch.tensor(rng.standard_normal(s), dtype=torch.float32))
              for s in [(40, 900), (33,), (5, 7)]]
    extra = torch.nn.Parameter(torch.tensor(rng.standard_normal(11), dtype=torch.float32))
    opt = cls(params[:2] + params[2:], lr=0.05, weight_decay=0.01, warmup_steps=3)
    opt.train()

    def grads(skip=()):
        for j, p in enumerate(params + ([extra] if len(opt.param_groups) > 1 else [])):
            p.grad = None if j in skip else torch.tensor(rng.standard_normal(p.shape), dtype=torch.float32)

    for k in range(12):
        grads(skip=(1,) if k == 4 else ())
        if k == 3:
            opt.param_groups[0]["lr"] = 0.02
        if k == 5:
            params[2].grad = params[2].grad.t().contiguous().t()      # laid out as the transpose
        if k == 6:
            params[1].grad = params[1].grad.to_sparse()
            with pytest.raises(RuntimeError, match="does not support sparse gradients"):
                opt.step()
            grads()
        if k == 8:
            opt.add_param_group({"params": [extra], "lr": 0.1})
            grads()
        if k == 10:
            opt.load_state_dict(opt.state_dict())
        opt.step()
    return params + [extra], opt, launched


@pytest.mark.parametrize("name", ["SGDScheduleFree", "AdamWScheduleFree"])
def test_schedule_free_steady_steps_equal_full_steps(name, monkeypatch):
    """The steady step (a group's guard check and launch in one compiled call) takes the steps where
    nothing but the gradients' memory changed, the full step every other, and both leave the same bits."""
    cls = getattr(okt, name)
    with monkeypatch.context() as m:
        p_full, full, none = _schedule_free_events(cls, False, m)
    p_fast, fast, launched = _schedule_free_events(cls, True, monkeypatch)
    assert none == [] and launched.count(True) >= 4, launched
    for a, b in zip(p_fast, p_full):
        assert torch.equal(a, b) and torch.equal(fast.state[a]["z"], full.state[b]["z"])
    for g, h in zip(fast.param_groups, full.param_groups):
        assert {k: v for k, v in g.items() if k != "params"} == {k: v for k, v in h.items() if k != "params"}
    assert [g["k"] for g in fast.param_groups] == [12, 4]    # the refused step counted nowhere
