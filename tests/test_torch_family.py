"""torch.optim's NAdam, RAdam, Adadelta, ASGD and Rprop at every layer.

* the drop-ins (``optkernels.torch``) against ``torch.optim.<Name>(foreach=False)``: parameters and every state
  tensor bit for bit after each of 8 steps, float32 and float64, sizes 1, 7, 16, 1000 and 65,539 in one group
  (vector bodies and tails), over the flags; ``state_dict`` both ways with a bit-identical continuation;
  torch's error types and messages (bfloat16 and float16: test_torch_bits' half table);
* the float64 reference against the worked examples of MODERN.md (printed with 17 digits: exact);
* the kernels against the reference (float64, 1e-12 relative: the kernels fuse multiply-adds, the reference
  does not) and the NumPy optimizer classes against the kernels composed by hand (bit for bit).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import optkernels.torch as ot
from optkernels import kernels as K
from optkernels import optimizers as O
from optkernels import reference as R
from optkernels.kernels import torch_family as KF

SIZES = (1, 7, 16, 1000, 65539)
STEPS = 8

# (class name, constructor kwargs): each flag of each class at least once
ROWS = [
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True, betas=(0.4, 0.9))),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, betas=(0.6, 0.5))),
    ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True, betas=(0.9, 0.7))),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.5, weight_decay=0.1, maximize=True)),
    ("ASGD", dict()),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=3, weight_decay=0.1, maximize=True)),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.1, etas=(0.3, 1.5), step_sizes=(0.05, 0.2), maximize=True)),
]


def _ids(row):
    name, kw = row
    return name + "-" + ("-".join(f"{k}={v}" for k, v in kw.items()) or "defaults")


def _pair(name, kw, dtype, sizes=SIZES, seed=0):
    g = torch.Generator().manual_seed(seed)
    ours = [torch.randn(n, generator=g, dtype=dtype) for n in sizes]
    theirs = [p.clone() for p in ours]
    return (getattr(torch.optim, name)(theirs, foreach=False, **kw), theirs,
            getattr(ot, name)(ours, foreach=False, **kw), ours)


def _grads(params, g):
    grads = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
    for k in range(0, len(grads), 3):     # exact zeros and repeated signs exercise Rprop's branches
        grads[k][::5] = 0
    return grads


def _assert_same(torch_opt, theirs, our_opt, ours, what):
    for k, (p, q) in enumerate(zip(theirs, ours)):
        assert torch.equal(p, q), f"{what}: parameter {k} ({p.numel()} elements) differs"
        a, b = torch_opt.state[p], our_opt.state[q]
        assert set(a) == set(b), f"{what}: state keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, f"{what}: state {key}"
            assert torch.equal(a[key], b[key]), f"{what}: state {key} of parameter {k} differs"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("row", ROWS, ids=_ids)
def test_drop_in_is_bit_identical_to_torch(row, dtype):
    name, kw = row
    torch_opt, theirs, our_opt, ours = _pair(name, kw, dtype)
    g = torch.Generator().manual_seed(1)
    for step in range(1, STEPS + 1):
        for p, q, grad in zip(theirs, ours, _grads(theirs, g)):
            p.grad, q.grad = grad, grad.clone()
        torch_opt.step()
        our_opt.step()
        _assert_same(torch_opt, theirs, our_opt, ours, f"{name} step {step}")
    assert torch_opt.state_dict()["param_groups"] == our_opt.state_dict()["param_groups"]


@pytest.mark.parametrize("name", ["NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"])
def test_state_dict_round_trips_both_ways(name):
    kw = dict(weight_decay=0.1) if name != "Rprop" else {}
    torch_opt, theirs, our_opt, ours = _pair(name, kw, torch.float32, sizes=(7, 1000))
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        for p, q, grad in zip(theirs, ours, _grads(theirs, g)):
            p.grad, q.grad = grad, grad.clone()
        torch_opt.step()
        our_opt.step()
    # swap: torch continues from our state, ours from torch's
    ours_saved, theirs_saved = copy.deepcopy(our_opt.state_dict()), copy.deepcopy(torch_opt.state_dict())
    torch_opt.load_state_dict(ours_saved)
    our_opt.load_state_dict(theirs_saved)
    for _ in range(4):
        for p, q, grad in zip(theirs, ours, _grads(theirs, g)):
            p.grad, q.grad = grad, grad.clone()
        torch_opt.step()
        our_opt.step()
    _assert_same(torch_opt, theirs, our_opt, ours, f"{name} after load_state_dict")


def test_parameters_without_gradients_are_skipped_as_torch_skips_them():
    torch_opt, theirs, our_opt, ours = _pair("NAdam", dict(weight_decay=0.1), torch.float64, sizes=(5, 6, 7))
    g = torch.Generator().manual_seed(3)
    for step in range(4):
        for k, (p, q, grad) in enumerate(zip(theirs, ours, _grads(theirs, g))):
            skip = k == step % 3
            p.grad, q.grad = (None, None) if skip else (grad, grad.clone())
        torch_opt.step()
        our_opt.step()
    _assert_same(torch_opt, theirs, our_opt, ours, "NAdam with missing gradients")


ERRORS = [
    ("NAdam", dict(lr=-1.0)), ("NAdam", dict(eps=-1.0)), ("NAdam", dict(betas=(1.0, 0.9))),
    ("NAdam", dict(betas=(0.9, -0.1))), ("NAdam", dict(weight_decay=-1.0)), ("NAdam", dict(momentum_decay=-1.0)),
    ("NAdam", dict(lr=torch.tensor([0.1, 0.2]))),
    ("RAdam", dict(lr=-1.0)), ("RAdam", dict(betas=(0.9, 1.0))), ("RAdam", dict(eps=-1e-8)),
    ("RAdam", dict(weight_decay=-0.5)),
    ("Adadelta", dict(lr=-1.0)), ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(eps=-1.0)),
    ("Adadelta", dict(weight_decay=-1.0)),
    ("ASGD", dict(lr=-1.0)), ("ASGD", dict(weight_decay=-1.0)),
    ("Rprop", dict(lr=-1.0)), ("Rprop", dict(etas=(1.5, 1.2))), ("Rprop", dict(etas=(0.5, 0.9))),
]


@pytest.mark.parametrize("row", ERRORS, ids=_ids)
def test_invalid_arguments_raise_as_torch(row):
    name, kw = row
    with pytest.raises(Exception) as expected:
        getattr(torch.optim, name)([torch.zeros(3)], **kw)
    with pytest.raises(type(expected.value)) as got:
        getattr(ot, name)([torch.zeros(3)], **kw)
    assert str(got.value) == str(expected.value)


def test_unchecked_arguments_are_accepted_as_torch_accepts_them():
    ot.ASGD([torch.zeros(3)], lambd=-1.0, alpha=-2.0, t0=-5.0)
    ot.Rprop([torch.zeros(3)], step_sizes=(1.0, 0.1))
    ot.Adadelta([torch.zeros(3)], rho=1.0)


def test_sparse_gradient_is_torchs_runtime_error():
    p = torch.zeros(4, 3)
    opt = ot.NAdam([p])
    p.grad = torch.zeros(4, 3).to_sparse()
    with pytest.raises(RuntimeError, match="NAdam does not support sparse gradients"):
        opt.step()


# ------------------------------------------------------------------------ MODERN.md's worked examples

P0 = np.array([0.5, -1.0, 2.0])
G = [np.array([0.1, -0.3, 0.0]), np.array([-0.2, -0.1, 0.4]), np.array([0.05, 0.2, 0.4])]

NADAM_STEPS = {  # NAdam(lr=0.01, weight_decay=0.1): p after steps 1 and 2, decoupled after 1 and 2
    False: ([0.48943548279095322, -0.98943548235076506, 1.9894354826148779],
            [0.49640803566446262, -0.9842154374580464, 1.9793235054516445]),
    True: ([0.48893548314310381, -0.98843548243880264, 1.998],
           [0.49751212204548168, -0.98354272645344587, 1.9855521956875519]),
}
RADAM_STEPS = {1: [0.4985, -0.996, 1.998], 2: [0.49857973684210527, -0.99305473684210521, 1.9938957894736842],
               5: [0.49746730456576027, -0.98719260160241273, 1.9806381266214119],
               6: [0.49740675465069617, -0.98704767823789552, 1.9803917758557419],
               7: [0.49727734190203626, -0.98682405466153766, 1.9800960954845566]}
ADADELTA_STEPS = [
    ([0.4968384248340445, -0.99683782115637654, 1.9968381175504386],
     [0.0022500000000000003, 0.015999999999999997, 0.0039999999999999992],
     [9.9955575299866681e-07, 9.9993750390600607e-07, 9.997500624843786e-07]),
    ([0.50008534748027489, -0.99475534761527618, 1.9925746279607204],
     [0.0042844947210553957, 0.018387361284000543, 0.039562067408105882],
     [1.9538508447591914e-06, 1.3336133584537191e-06, 2.717509404399573e-06]),
]
ASGD_STEPS = [  # (p, ax, eta, mu) after each step of ASGD(lr=0.01, lambd=0.1, alpha=0.75, t0=0, weight_decay=0.1)
    ([0.49800000004470352, -0.99500000011175871, 1.9960000000894071], None, 0.009992506355047226, 1.0),
    ([0.49900324768266091, -0.99201224071137617, 1.9880139890102746], None, 0.0099850259721279144, 0.5),
    ([0.49750748430639702, -0.99202819230816741, 1.9800499043587791],
     [0.49825536599452896, -0.99202021650977179, 1.9840319466845269], 0.0099775586277246475,
     0.3333333432674408),
]
RPROP_STEPS = [
    ([0.48999999999999999, -0.98999999999999999, 2], [0.10000000000000001, -0.29999999999999999, 0],
     [0.01, 0.01, 0.01]),
    ([0.48999999999999999, -0.97799999999999998, 1.99], [0, -0.10000000000000001, 0.40000000000000002],
     [0.0050000000000000001, 0.012, 0.01]),
    ([0.48499999999999999, -0.97799999999999998, 1.978], [0.050000000000000003, 0, 0.40000000000000002],
     [0.0050000000000000001, 0.0060000000000000001, 0.012]),
]


def _near_spec(tensor, expected):
    """The drop-in against a worked example of a rule with a square root: the spec's numbers are torch's
    on the spec's machine; torch's CPU sqrt (MKL's) rounds differently on other CPUs, so within 2 ulps
    (the bit-for-bit check against torch itself is :func:`test_drop_in_is_bit_identical_to_torch`)."""
    np.testing.assert_array_max_ulp(tensor.numpy(), np.array(expected), maxulp=2)


@pytest.mark.parametrize("decoupled", [False, True])
def test_nadam_worked_example(decoupled):
    w, m, v, prod = P0, np.zeros(3), np.zeros(3), np.float32(1.0)
    p = torch.tensor(P0)
    opt = ot.NAdam([p], lr=0.01, weight_decay=0.1, decoupled_weight_decay=decoupled)
    for t, expected in enumerate(NADAM_STEPS[decoupled], 1):
        prod = np.float32(prod * np.float32(KF.nadam_mu(0.9, 4e-3, t)))
        w, m, v = R.torch_nadam(w, m, v, G[t - 1], 0.01, 0.9, 0.999, 1e-8, t, float(prod), weight_decay=0.1,
                                decoupled_weight_decay=decoupled)
        p.grad = torch.tensor(G[t - 1])
        opt.step()
        assert w.tolist() == expected
        _near_spec(p, expected)
    assert opt.state[p]["mu_product"].item() == 0.20259919762611389


def test_radam_worked_example():
    w, m, v = P0, np.zeros(3), np.zeros(3)
    p = torch.tensor(P0)
    opt = ot.RAdam([p], lr=0.01, weight_decay=0.1)
    for t in range(1, 8):
        g = G[(t - 1) % 3]
        w, m, v = R.torch_radam(w, m, v, g, 0.01, 0.9, 0.999, 1e-8, t, weight_decay=0.1)
        p.grad = torch.tensor(g)
        opt.step()
        if t in RADAM_STEPS:
            assert w.tolist() == RADAM_STEPS[t], t
            _near_spec(p, RADAM_STEPS[t])
    assert KF.radam_rectification(0.999, 5)[0] == 4.9959980003950477
    assert KF.radam_rectification(0.999, 6)[0] == 5.994163751655833


def test_adadelta_worked_example():
    w, s, a = P0, np.zeros(3), np.zeros(3)
    p = torch.tensor(P0)
    opt = ot.Adadelta([p], lr=1.0, weight_decay=0.1)
    for t, (ew, es, ea) in enumerate(ADADELTA_STEPS, 1):
        w, s, a = R.torch_adadelta(w, s, a, G[t - 1], 1.0, 0.9, 1e-6, weight_decay=0.1)
        p.grad = torch.tensor(G[t - 1])
        opt.step()
        assert (w.tolist(), s.tolist(), a.tolist()) == (ew, es, ea)
        _near_spec(p, ew)
        _near_spec(opt.state[p]["acc_delta"], ea)


def test_asgd_worked_example():
    w, ax, eta, mu = P0, np.zeros(3), float(np.float32(0.01)), 1.0
    p = torch.tensor(P0)
    opt = ot.ASGD([p], lr=0.01, lambd=0.1, alpha=0.75, t0=0, weight_decay=0.1)
    for t, (ew, eax, eeta, emu) in enumerate(ASGD_STEPS, 1):
        w, ax = R.torch_asgd(w, ax, G[t - 1], eta, mu, lambd=0.1, weight_decay=0.1)
        nxt = KF.asgd_next(0.01, 0.1, 0.75, 0, t)
        eta, mu = float(np.float32(nxt[0])), float(np.float32(nxt[1]))
        p.grad = torch.tensor(G[t - 1])
        opt.step()
        assert w.tolist() == ew and p.tolist() == ew
        assert ax.tolist() == (eax or ew) and opt.state[p]["ax"].tolist() == (eax or ew)
        assert (eta, mu) == (eeta, emu) == (opt.state[p]["eta"].item(), opt.state[p]["mu"].item())


def test_rprop_worked_example():
    w, prev, size = P0, np.zeros(3), np.full(3, 0.01)
    p = torch.tensor(P0)
    opt = ot.Rprop([p], lr=0.01)
    for t, (ew, eprev, esize) in enumerate(RPROP_STEPS, 1):
        w, prev, size = R.torch_rprop(w, prev, size, G[t - 1])
        p.grad = torch.tensor(G[t - 1])
        opt.step()
        assert (w.tolist(), prev.tolist(), size.tolist()) == (ew, eprev, esize)
        assert p.tolist() == ew and opt.state[p]["step_size"].tolist() == esize


def test_rprop_nan_gradient_leaves_the_element_as_torch():
    w, prev, size = K.torch_rprop(np.array([1.0, 2.0]), np.array([0.5, 0.5]), np.array([0.1, 0.1]),
                                  np.array([np.nan, 1.0]))
    assert w[0] == 1.0 and size[0] == 0.1 and np.isnan(prev[0])
    ref = R.torch_rprop([1.0, 2.0], [0.5, 0.5], [0.1, 0.1], [np.nan, 1.0])
    assert ref[0].tolist() == w.tolist() and ref[2].tolist() == size.tolist()


# ------------------------------------------------------------------------ kernels and NumPy classes

def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


KERNELS = {  # name -> (kernel call, reference call); states after the parameter, kwargs for both
    "nadam": (lambda B, w, s, g, t: B.torch_nadam(w, *s, g, 0.01, 0.9, 0.999, 1e-8, t, 0.45 ** t,
                                                  weight_decay=0.1, maximize=True), 2),
    "nadam-decoupled": (lambda B, w, s, g, t: B.torch_nadam(w, *s, g, 0.01, 0.5, 0.9, 1e-8, t, 0.3 ** t,
                                                            weight_decay=0.1, decoupled_weight_decay=True), 2),
    "radam": (lambda B, w, s, g, t: B.torch_radam(w, *s, g, 0.01, 0.9, 0.5 if t < 3 else 0.999, 1e-8, 4 * t,
                                                  weight_decay=0.1), 2),
    "adadelta": (lambda B, w, s, g, t: B.torch_adadelta(w, *s, g, 0.7, 0.9, 1e-6, weight_decay=0.1,
                                                        maximize=True), 2),
    "asgd": (lambda B, w, s, g, t: B.torch_asgd(w, *s, g, 0.01, 1.0 if t == 1 else 0.5, lambd=0.1,
                                                weight_decay=0.1), 1),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_matches_reference_in_float64(name):
    call, n_states = KERNELS[name]
    rng = np.random.default_rng(5)
    w = _rand(rng, 1003, np.float64)
    states = [np.abs(_rand(rng, 1003, np.float64, 0.1)) for _ in range(n_states)]
    rw, rs = w.copy(), [s.copy() for s in states]
    for t in range(1, 5):
        g = _rand(rng, 1003, np.float64)
        out = call(K, w, states, g, t)
        ref = call(R, rw, rs, g, t)
        rw, rs = ref[0], list(ref[1:])
        for a, b in zip(out, ref):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_rprop_kernel_matches_reference_exactly():
    rng = np.random.default_rng(6)
    w, prev, size = _rand(rng, 999, np.float64), np.zeros(999), np.full(999, 0.01)
    ref = (w.copy(), prev.copy(), size.copy())
    for _ in range(6):
        g = _rand(rng, 999, np.float64)
        g[::7] = 0
        K.torch_rprop(w, prev, size, g, etas=(0.4, 1.3), step_sizes=(1e-3, 0.03))
        ref = R.torch_rprop(*ref, g, etas=(0.4, 1.3), step_sizes=(1e-3, 0.03))
        assert [a.tolist() for a in (w, prev, size)] == [a.tolist() for a in ref]


def test_kernel_refuses_bad_input_before_writing():
    w, m, v, g = (np.ones(4, np.float32) for _ in range(4))
    with pytest.raises(ValueError, match="beta1"):
        K.torch_nadam(w, m, v, g, 0.01, 1.0, 0.999, 1e-8, 1, 0.5)
    with pytest.raises(ValueError, match="step"):
        K.torch_radam(w, m, v, g, 0.01, 0.9, 0.999, 1e-8, 0)
    with pytest.raises(ValueError, match="eta"):
        K.torch_rprop(w, m, v, g, etas=(1.0, 1.2))
    with pytest.raises(TypeError):
        K.torch_adadelta(w, m, v.astype(np.float64), g, 1.0, 0.9, 1e-6)
    assert all(np.array_equal(a, np.ones(4, np.float32)) for a in (w, m, v, g))


def _hand(name, dtype, lr, t, w, slots, g, extra):
    """One step of the NumPy class's rule composed from the public kernels (coupled decay 0.1 done by
    hand as the base class does it: ``g + w·wd``)."""
    g = (w * dtype(0.1) + g).astype(dtype) if name != "Rprop" else g
    if name == "NAdam":
        extra["prod"] = np.float32(extra.get("prod", np.float32(1)) * np.float32(KF.nadam_mu(0.9, 4e-3, t)))
        K.torch_nadam(w, *slots, g, lr, 0.9, 0.999, 1e-8, t, float(extra["prod"]))
    elif name == "RAdam":
        K.torch_radam(w, *slots, g, lr, 0.9, 0.999, 1e-8, t)
    elif name == "Adadelta":
        K.torch_adadelta(w, *slots, g, lr, 0.9, 1e-6)
    elif name == "ASGD":
        eta, mu = extra.get("eta", float(np.float32(lr))), extra.get("mu", 1.0)
        K.torch_asgd(w, *slots, g, eta, mu, lambd=1e-4)
        e, m = KF.asgd_next(lr, 1e-4, 0.75, 1e6, t)
        extra["eta"], extra["mu"] = float(np.float32(e)), float(np.float32(m))
    else:
        K.torch_rprop(w, *slots, g)


CLASSES = {"NAdam": ("exp_avg", "exp_avg_sq"), "RAdam": ("exp_avg", "exp_avg_sq"),
           "Adadelta": ("square_avg", "acc_delta"), "ASGD": ("ax",), "Rprop": ("prev", "step_size")}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_numpy_class_equals_its_kernels_and_resumes(name, dtype):
    rng = np.random.default_rng(7)
    shapes = [(3, 5), (17,)]
    params = [O.Parameter(_rand(rng, s, dtype), f"w{k}") for k, s in enumerate(shapes)]
    kw = dict(weight_decay=0.1) if name != "Rprop" else {}
    opt = getattr(O, name)(params, learning_rate=0.01, **kw)
    hand = [p.data.copy() for p in params]
    slots = [[np.full(s, 0.01 if n == "step_size" else 0.0, dtype) for n in CLASSES[name]] for s in shapes]
    extras = [{} for _ in shapes]
    history, saved = [], None
    for t in range(1, 7):
        grads = [_rand(rng, s, dtype) for s in shapes]
        history.append(grads)
        opt(grads)
        for w, sl, g, ex in zip(hand, slots, grads, extras):
            _hand(name, dtype, 0.01, t, w, sl, g, ex)
        if t == 3:
            saved = (copy.deepcopy(opt.state_dict()), [p.data.copy() for p in params])
    for k, (p, w, sl) in enumerate(zip(params, hand, slots)):
        assert np.array_equal(p.data, w)
        for n, s in zip(CLASSES[name], sl):
            assert np.array_equal(getattr(opt, n)[k].data, s), n
    # resume: a fresh optimizer loaded with step 3's state continues as the original did
    state, data = saved
    fresh_params = [O.Parameter(d.copy(), f"w{k}") for k, d in enumerate(data)]
    fresh = getattr(O, name)(fresh_params, learning_rate=0.01, **kw)
    fresh.load_state_dict(state)
    for grads in history[3:]:
        fresh(grads)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(fresh_params, params))


def test_numpy_class_matches_reference_in_float64():
    rng = np.random.default_rng(8)
    p = O.Parameter(_rand(rng, (4, 6), np.float64), "w")
    opt = O.RAdam([p], learning_rate=0.01, beta2=0.9)
    w, m, v = p.data.copy(), np.zeros((4, 6)), np.zeros((4, 6))
    for t in range(1, 9):
        g = _rand(rng, (4, 6), np.float64)
        opt((g,))
        w, m, v = R.torch_radam(w, m, v, g, 0.01, 0.9, 0.9, 1e-8, t)
        np.testing.assert_allclose(p.data, w, rtol=1e-12, atol=1e-15)


def test_numpy_class_arguments_are_checked():
    p = O.Parameter(np.zeros(3, np.float32), "w")
    with pytest.raises(ValueError, match="beta1"):
        O.NAdam([p], beta1=1.0)
    with pytest.raises(TypeError, match="rho"):
        O.Adadelta([p], rho="0.9")
    with pytest.raises(ValueError, match="etas"):
        O.Rprop([p], etas=(0.5, 0.9))
    with pytest.raises(TypeError, match="decoupled_weight_decay"):
        O.RAdam([p], decoupled_weight_decay=1)
