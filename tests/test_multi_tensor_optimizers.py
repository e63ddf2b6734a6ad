"""Optimizers update their CPU parameters with one multi-tensor launch per group and step, with the same bits
as the public kernels called per parameter; bad gradients still write nothing; parameters that share memory
keep the per-parameter order."""
import numba
import numpy as np
import pytest

import optim_table
import optkernels.kernels as K
from optim_table import OPTIMIZERS, OPTIMIZERS_BY_ID, compose, make_data, run_optimizer, scenario
from optkernels.kernels import _elementwise
from optkernels.kernels._multi_tensor import CHUNK
from optkernels.optimizers import SGD, Adam, Parameter
from optkernels.sparse import RowSparse

# A model with tensors over several chunks, an empty one and 1-element ones; 'bn.*' escape the
# default decay filter.
BIG_MODEL = [
    ("embed.weight", (CHUNK // 16 + 3, 16)),
    ("conv.weight", (4, 16, 3)),
    ("fc.weight", (3, 5)),
    ("bn.gamma", (5,)),
    ("bn.beta", (5,)),
    ("empty.weight", (0, 4)),
    ("one.bias", (1,)),
    ("scale", (1, 1)),
    ("big.weight", (2 * CHUNK + 7,)),
]

# The optimizers whose dense update is one element-wise kernel (multi-tensor launches).
MULTI = ["SGD", "SGD-nesterov", "Momentum", "Momentum-nesterov", "Adam", "Adam-nesterov", "Adam-amsgrad",
         "Adam-lazy", "LazyAdam", "AdamWeightDecay", "AdaMax", "Adagrad", "RMSProp", "RMSProp-centered",
         "ProximalAdagrad", "FTRL", "FTRL-shrinkage"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", ["plain", "decay_scale", "dynamic"])
@pytest.mark.parametrize("info", OPTIMIZERS, ids=lambda i: i.id)
def test_big_model_trajectory_equals_public_kernels_bit_for_bit(info, name, dtype, monkeypatch):
    monkeypatch.setattr(optim_table, "MODEL", BIG_MODEL)
    sc = scenario(info, name, dtype)
    init, grads = make_data(dtype, seed=2, steps=3)
    opt, params = run_optimizer(info, sc, init, grads)
    w, slots, _, _ = compose(info, sc, init, grads, K, dtype)
    state = opt.state_dict()
    for n, p in params.items():
        np.testing.assert_array_equal(p.data, w[n], err_msg=f"{info.id}/{name}: {n}")
        for s, value in slots[n].items():
            np.testing.assert_array_equal(state[f"{s}.{n}"], value, err_msg=f"{info.id}/{name}: {s}.{n}")


# ------------------------------------------------------------------ multi-tensor vs per-parameter launches


def _mixed_model(dtype, rng):
    shapes = [(3, 16, 2), (40, 16), (7,), (0,), (1,), (CHUNK + 9,), (5, 3), ()]
    names = ["conv.w", "emb.w", "bn.gamma", "empty.w", "one.b", "big.w", "fc.w", "s"]
    return [(n, rng.standard_normal(s).astype(dtype)) for n, s in zip(names, shapes)]


def _mixed_groups(params, info):
    """Groups: own lr table + decay + centralization; defaults; own lr + dynamic decay."""
    lr = info.learning_rate
    g0 = dict(params=params[:2], weight_decay=0.02, grad_centralization=True)
    g2 = dict(params=params[5:], weight_decay=lambda step: 0.01 / (1 + step))
    if info.lr_forms:
        g0["lr"] = [lr * 2, lr, lr / 2]
        g2["lr"] = lr * 3
    extra = {"loss_scale": 2.0} if info.loss_scale else {}
    if not info.dynamic_group_wd:   # SGD: a fixed group decay
        g2["weight_decay"] = 0.03
    return [g0, dict(params=params[2:5]), g2], extra


def _run(info, dtype, multi, sparse, steps=4):
    rng = np.random.default_rng(7)
    model = _mixed_model(dtype, rng)
    params = [Parameter(v.copy(), n) for n, v in model]
    groups, extra = _mixed_groups(params, info)
    opt = info.cls(groups, learning_rate=info.learning_rate, **extra, **info.kwargs)
    opt._multi_tensor = multi
    for _ in range(steps):
        grads = [rng.standard_normal(p.shape).astype(dtype) for p in params]
        grads[2] = np.stack([grads[2], grads[2]], axis=1)[:, 0]           # not C-contiguous
        if sparse:                                                         # emb.w: a row-sparse gradient
            idx = rng.choice(40, 6).astype(np.int64)
            grads[1] = RowSparse(idx, rng.standard_normal((6, 16)).astype(dtype), (40, 16))
        opt(grads)
    return opt, params


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("info_id", MULTI)
def test_multi_tensor_step_equals_per_parameter_launches(info_id, dtype):
    info = OPTIMIZERS_BY_ID[info_id]
    sparse = info_id in ("Adam", "Adam-lazy", "LazyAdam", "Adagrad", "ProximalAdagrad", "FTRL")
    opt, params = _run(info, dtype, True, sparse)
    ref_opt, ref_params = _run(info, dtype, False, sparse)
    assert opt._launches.kernel_groups and not ref_opt._launches.kernel_groups
    assert len(opt._launches.sequential) == 0
    _assert_same_bits(info_id, opt, params, ref_opt, ref_params)


def _assert_same_bits(label, opt, params, ref_opt, ref_params):
    """Parameters and every state entry of two optimizers, bit for bit."""
    for p, q in zip(params, ref_params):
        assert p.data.tobytes() == q.data.tobytes(), f"{label}: {p.name}"
    state, ref_state = opt.state_dict(), ref_opt.state_dict()
    assert state.keys() == ref_state.keys()
    for k in state:
        assert state[k].tobytes() == ref_state[k].tobytes(), f"{label}: {k}"


class _Counter:
    """Counts the element-wise launches (single- and multi-tensor) made while it is installed."""

    def __init__(self, monkeypatch):
        self.single, self.many = 0, 0
        launch, launch_many = _elementwise.Elementwise.launch, _elementwise.Elementwise.launch_many

        def counted_launch(kernel, *args, **kwargs):
            self.single += 1
            return launch(kernel, *args, **kwargs)

        def counted_many(kernel, *args, **kwargs):
            self.many += 1
            return launch_many(kernel, *args, **kwargs)

        monkeypatch.setattr(_elementwise.Elementwise, "launch", counted_launch)
        monkeypatch.setattr(_elementwise.Elementwise, "launch_many", counted_many)


def _model(count, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 3000, count)
    params = [Parameter(rng.standard_normal(s).astype(dtype), f"p{k}") for k, s in enumerate(sizes)]
    grads = [rng.standard_normal(s).astype(dtype) for s in sizes]
    return params, grads


def test_a_100_tensor_step_is_one_launch_per_group(monkeypatch):
    params, grads = _model(100)
    plain, scaled = Adam(params, 1e-3), Adam([Parameter(p.data.copy(), p.name) for p in params], 1e-3,
                                               weight_decay=0.01, loss_scale=1024.0)
    two_rates = Adam([dict(params=params[:30], lr=0.1), dict(params=params[30:])], 1e-3)
    some_decayed = Adam([dict(params=params[:30], weight_decay=0.1), dict(params=params[30:])], 1e-3,
                        loss_scale=2.0)
    counter = _Counter(monkeypatch)
    plain(grads)
    assert (counter.single, counter.many) == (0, 1)
    scaled(grads)                                   # decay + unscale in the launch's prologue
    assert (counter.single, counter.many) == (0, 2)
    two_rates(grads)
    assert (counter.single, counter.many) == (0, 4)
    some_decayed(grads)                             # two pre-steps: decay and unscale, unscale only
    assert (counter.single, counter.many) == (0, 6)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
def test_multi_tensor_step_same_bits_with_one_and_two_threads():
    results = []
    for threads in (1, 2, 2):
        params, grads = _model(30, seed=3)
        params.append(Parameter(np.linspace(-1, 1, 3 * CHUNK + 1, dtype=np.float32), "big"))
        grads.append(np.linspace(1, -1, 3 * CHUNK + 1, dtype=np.float32))
        opt = Adam(params, 1e-3, weight_decay=0.01, loss_scale=8.0)
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            for _ in range(3):
                opt(grads)
        finally:
            numba.set_num_threads(previous)
        results.append(b"".join(p.data.tobytes() for p in params) + b"".join(
            v.tobytes() for v in opt.state_dict().values()))
    assert results[0] == results[1] == results[2]


# ----------------------------------------------------------------------------------------------- errors


def _snapshot(opt):
    return [p.data.copy() for p in opt.parameters], opt.state_dict()


@pytest.mark.parametrize("position", [0, 17, 39])
@pytest.mark.parametrize(
    "make_bad, exc, match",
    [
        (lambda g: np.ones(g.size + 1, g.dtype), ValueError, "has shape"),
        (lambda g: g.astype(np.float64), TypeError, "has dtype float64"),
        (lambda g: g.astype(">f4"), TypeError, "has dtype >f4"),
        (lambda g: g.tolist(), TypeError, "must be a NumPy array"),
        (lambda g: None, TypeError, "must be a NumPy array"),
        (lambda g: RowSparse(np.zeros(1, np.int64), np.ones(1, g.dtype), g.shape), TypeError, "row-sparse"),
    ],
)
def test_a_bad_gradient_among_many_writes_nothing_and_names_it(position, make_bad, exc, match):
    params, grads = _model(40, seed=5)
    opt = SGD(params, 0.1, momentum=0.9)          # SGD refuses row-sparse gradients
    opt(grads)                                     # the launch groups exist
    snap = _snapshot(opt)
    bad = list(grads)
    bad[position] = make_bad(grads[position])
    with pytest.raises(exc, match=match) as info:
        opt(bad)
    assert f"p{position}" in str(info.value)
    values, state = snap
    for p, v in zip(opt.parameters, values):
        assert p.data.tobytes() == v.tobytes()
    for k, v in opt.state_dict().items():
        assert v.tobytes() == state[k].tobytes(), k


# ---------------------------------------------------------------------------------- shared memory


@pytest.mark.parametrize("layout", ["same array", "overlapping views"])
def test_parameters_sharing_memory_keep_the_per_parameter_order(layout):
    def build(multi):
        base = np.linspace(-1.0, 1.0, 12)
        if layout == "same array":
            a, b = base, base
        else:
            a, b = base[:8], base[4:]
        params = [Parameter(a, "a"), Parameter(np.ones(5), "c"), Parameter(b, "b")]
        opt = Adam(params, 0.1)
        opt._multi_tensor = multi
        return opt, base

    opt, base = build(True)
    ref, ref_base = build(False)
    rng = np.random.default_rng(0)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape) for p in opt.parameters]
        opt(grads)
        ref([g.copy() for g in grads])
    assert not opt._launches.kernel_groups            # fell back to one launch per parameter, in order
    assert base.tobytes() == ref_base.tobytes()


def _unaligned(values):
    """A writeable view of ``values`` whose data starts one byte past an aligned address."""
    raw = bytearray(values.nbytes + 1)
    out = np.frombuffer(raw, values.dtype, values.size, offset=1).reshape(values.shape)
    out[...] = values
    assert not out.flags.aligned and out.flags.c_contiguous and out.flags.writeable
    return out


def test_unaligned_gradients_and_parameters_give_the_same_bits():
    """An unaligned gradient is copied for the launch; an unaligned parameter is updated by itself."""
    def build(multi):
        rng = np.random.default_rng(4)
        params = [Parameter(_unaligned(rng.standard_normal(50).astype(np.float32)), "odd")] + [
            Parameter(rng.standard_normal(s).astype(np.float32), f"p{s}") for s in (3, 40, 7)]
        opt = Adam(params, 0.01, weight_decay=0.1, loss_scale=4.0)
        opt._multi_tensor = multi
        return opt, params

    (opt, params), (ref, ref_params) = build(True), build(False)
    rng = np.random.default_rng(5)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        grads[2] = _unaligned(grads[2])
        opt(grads)
        ref([g.copy() for g in grads])
    assert opt._launches.sequential == [0] and len(opt._launches.grouped) == 3
    for p, q in zip(params, ref_params):
        assert p.data.tobytes() == q.data.tobytes(), p.name


# ------------------------------------------------------------------ slots in one allocation per dtype

@pytest.mark.parametrize("info_id", ["Adam", "Adagrad", "FTRL", "RMSProp-centered"])
def test_slots_sharing_one_allocation_give_the_same_bits(info_id, monkeypatch):
    """Above ``SLAB_BYTES`` the slots of all parameters are views of one allocation per slot and dtype (each on
    its own cache lines, filled with the slot's initial value); the trajectory is the one of separate arrays."""
    from optkernels.optimizers import optimizer as optimizer_module

    info = OPTIMIZERS_BY_ID[info_id]
    sparse = info_id in ("Adam", "Adagrad", "FTRL")
    monkeypatch.setattr(optimizer_module, "SLAB_BYTES", 1 << 62)
    ref_opt, ref_params = _run(info, np.float32, True, sparse)
    monkeypatch.setattr(optimizer_module, "SLAB_BYTES", 0)
    opt, params = _run(info, np.float32, True, sparse)
    for slot in opt._slot_names:
        arrays = [plan.slots[slot] for plan in opt._local_plans]
        assert all(a.base is not None for a in arrays), slot
        assert len({id(a.base) for a in arrays}) == 1, f"{slot}: not one allocation"
        starts = sorted(a.ctypes.data for a in arrays if a.size)
        assert all(s % 64 == 0 for s in starts), slot
        spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays if a.size)
        assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), f"{slot}: views overlap"
    _assert_same_bits(info_id, opt, params, ref_opt, ref_params)
