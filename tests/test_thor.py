"""thor (MindSpore nn.thor) over a NumPy model: the preconditioned update against a direct NumPy computation
of KERNELS §18 written here (explicit inverses, no Cholesky), the refresh schedule of the factors, the
module docstring's worked example, and every documented bad argument."""
import importlib
import re
import textwrap
import warnings

import numpy as np
import pytest

from optable import assert_close
from optkernels.optimizers import LearningRateSchedule, Parameter, ThorLayer, thor, thor_inverses

# The package exports the function thor, which hides the module of the same name as an attribute.
thor_module = importlib.import_module("optkernels.optimizers.thor")


class Net:
    """The protocol at its smallest: the layer records and the parameters in gradient order."""

    def __init__(self, layers, extra=()):
        self.layers, self.extra = list(layers), list(extra)

    def thor_layers(self):
        return self.layers

    def trainable_params(self):
        return [p for layer in self.layers for p in (layer.weight, layer.bias) if p is not None] + self.extra


def dense_net(rng, dtype=np.float64, c_out=3, c_in=4, bias=True):
    w = Parameter(rng.standard_normal((c_out, c_in)).astype(dtype), "fc.weight")
    b = Parameter(rng.standard_normal(c_out).astype(dtype), "fc.bias") if bias else None
    return Net([ThorLayer(w, "dense", bias=b)])


def set_statistics(layer, rng, n=8):
    c_out, k = layer.weight.shape[0], layer.weight.size // layer.weight.shape[0]
    layer.inputs = rng.standard_normal((n, k))
    layer.output_grads = rng.standard_normal((n, c_out)) * 0.3


def direct_preconditioned(grad, inputs, output_grads, damping, batch_size, loss_scale, fm=1.0, damping_a=None,
                          damping_g=None):
    """KERNELS §18 with explicit inverses: G'^-1 · grad · A'^-1 (grad already divided by the loss scale)."""
    n = inputs.shape[0]
    a = inputs.T @ inputs / n
    g = output_grads.T @ output_grads / n
    damping_a = damping if damping_a is None else damping_a
    damping_g = damping if damping_g is None else damping_g
    a_inv = fm * np.linalg.inv(a + np.sqrt(damping_a) * np.eye(a.shape[0]))
    g_scaled = g * batch_size ** 2 / loss_scale ** 2
    g_inv = fm * np.linalg.inv(g_scaled + np.sqrt(damping_g) * np.eye(g.shape[0]))
    return g_inv @ grad.reshape(g.shape[0], -1) @ a_inv


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dense_update_matches_the_direct_formula(dtype):
    rng = np.random.default_rng(0)
    net = dense_net(rng, dtype)
    layer = net.layers[0]
    set_statistics(layer, rng)
    w0, b0 = layer.weight.data.astype(np.float64), layer.bias.data.astype(np.float64)
    gw, gb = (rng.standard_normal(w0.shape).astype(dtype), rng.standard_normal(b0.shape).astype(dtype))
    ls, lr, wd, lam, bs = 4.0, np.array([0.1, 0.05]), 0.01, 0.05, 8
    opt = thor(net, lr, np.array([lam, 0.2]), 0.9, weight_decay=wd, loss_scale=ls, batch_size=bs, frequency=2)
    assert opt.is_thor_step
    opt([gw, gb])
    pw = direct_preconditioned(gw.astype(np.float64) / ls, layer.inputs, layer.output_grads, lam, bs, ls) \
        + wd * w0
    pb = gb.astype(np.float64) / ls + wd * b0            # the bias: not preconditioned
    assert_close(layer.weight.data, w0 - 0.1 * pw, dtype, 64.0, "weight", w0)
    assert_close(layer.bias.data, b0 - 0.1 * pb, dtype, 16.0, "bias", b0)
    assert_close(opt.moments[0].data, pw, dtype, 64.0, "moments")
    # Second step: not a THOR step; the kept inverses (built with damping[0]) are reused, momentum applies.
    assert not opt.is_thor_step
    first = layer.inputs, layer.output_grads
    layer.inputs = layer.output_grads = None              # not read on this step
    w1, m1 = layer.weight.data.astype(np.float64), pw
    gw2 = rng.standard_normal(w0.shape).astype(dtype)
    opt([gw2, gb])
    pw2 = direct_preconditioned(gw2.astype(np.float64) / ls, *first, lam, bs, ls) + wd * w1
    m2 = 0.9 * m1 + pw2
    assert_close(layer.weight.data, w1 - 0.05 * m2, dtype, 64.0, "weight, step 2", w1)


def test_nesterov_clip_and_decay_filter():
    rng = np.random.default_rng(1)
    net = dense_net(rng)
    layer = net.layers[0]
    set_statistics(layer, rng)
    w0, b0 = layer.weight.data.copy(), layer.bias.data.copy()
    gw, gb = rng.standard_normal(w0.shape) * 50.0, rng.standard_normal(b0.shape) * 50.0
    opt = thor(net, [0.1], np.array(0.02), 0.8, weight_decay=0.1, use_nesterov=True, enable_clip_grad=True,
               decay_filter=lambda p: "bias" not in p.name, batch_size=8)
    opt([gw, gb])
    pw = direct_preconditioned(gw, layer.inputs, layer.output_grads, 0.02, 8, 1.0) + 0.1 * w0
    pw = pw / max(np.linalg.norm(pw), 1.0)
    pb = gb / max(np.linalg.norm(gb), 1.0)                 # no decay: filtered out
    # Nesterov on the first step (zero moments): w − (g·lr + (μ·0 + g)·μ·lr)
    np.testing.assert_allclose(layer.weight.data, w0 - (pw * 0.1 + pw * 0.8 * 0.1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(layer.bias.data, b0 - (pb * 0.1 + pb * 0.8 * 0.1), rtol=1e-12, atol=1e-15)
    assert np.linalg.norm(opt.moments[0].data) == pytest.approx(1.0, rel=1e-12)


def test_conv_layer_uses_normalisers_and_fm():
    """A conv weight (C_out, C_in, kh, kw) is preconditioned as (C_out, C_in·kh·kw), with the damping divided
    by the normalisers and both inverses multiplied by sqrt(1/a_normalizer); a_cov/g_cov given directly."""
    rng = np.random.default_rng(2)
    w = Parameter(rng.standard_normal((4, 2, 3, 3)), "conv.weight")
    patches = rng.standard_normal((50, 18))
    douts = rng.standard_normal((50, 4)) * 0.1
    layer = ThorLayer(w, "conv", a_cov=patches.T @ patches / 50, g_cov=douts.T @ douts / 50,
                      a_normalizer=25.0, g_normalizer=16.0)
    w0 = w.data.copy()
    g = rng.standard_normal(w0.shape)
    opt = thor(Net([layer]), np.array([0.2]), [0.3], 0.0, batch_size=2)
    opt([g])
    fm = np.sqrt(1.0 / 25.0)
    pre = direct_preconditioned(g, patches, douts, 0.3, 2, 1.0, fm=fm, damping_a=0.3 / 25.0,
                                damping_g=0.3 / 16.0)
    np.testing.assert_allclose(w.data, w0 - 0.2 * pre.reshape(w0.shape), rtol=1e-11, atol=1e-14)


def test_inverses_are_those_of_thor_inverses_and_symmetric():
    rng = np.random.default_rng(3)
    net = dense_net(rng)
    set_statistics(net.layers[0], rng)
    opt = thor(net, np.array([0.1]), np.array([0.01]), 0.9, batch_size=8)
    opt([np.zeros((3, 4)), np.zeros(3)])
    a = net.layers[0].inputs.T @ net.layers[0].inputs / 8
    g = net.layers[0].output_grads.T @ net.layers[0].output_grads / 8
    a_inv, g_inv = thor_inverses(a, g, 0.01, batch_size=8)
    assert np.array_equal(opt.matrix_a_inv[0], a_inv) and np.array_equal(opt.matrix_g_inv[0], g_inv)
    np.testing.assert_allclose(a_inv @ (a + 0.1 * np.eye(4)), np.eye(4), atol=1e-12)
    np.testing.assert_allclose(g_inv @ (g * 64 + 0.1 * np.eye(3)), np.eye(3), atol=1e-12)


def test_factors_refresh_exactly_every_frequency_steps():
    """frequency = 3: THOR steps 0, 3, 6 read the statistics and damping[cov_step]; steps in between reuse the
    kept (stale) inverses, and the update on every step equals the direct formula with those."""
    rng = np.random.default_rng(4)
    net = dense_net(rng, bias=False)
    layer = net.layers[0]
    damping = np.linspace(0.01, 0.08, 8)
    opt = thor(net, np.full(8, 0.05), damping, 0.0, batch_size=8, frequency=3)
    used, refreshed = None, []
    for step in range(8):
        assert opt.is_thor_step == (step % 3 == 0)
        assert opt.cov_step == step
        if step % 3 == 0:
            set_statistics(layer, rng)
            used = (layer.inputs, layer.output_grads, damping[step])
        else:
            layer.inputs, layer.output_grads = None, None  # would raise if read
        before_inv = opt.matrix_a_inv[0]
        w0 = layer.weight.data.copy()
        g = rng.standard_normal(w0.shape)
        opt([g])
        expected = w0 - 0.05 * direct_preconditioned(g, used[0], used[1], used[2], 8, 1.0)
        np.testing.assert_allclose(layer.weight.data, expected, rtol=1e-11, atol=1e-14,
                                   err_msg=f"step {step}")
        if opt.matrix_a_inv[0] is not before_inv:
            refreshed.append(step)
    assert refreshed == [0, 3, 6]


def test_missing_statistics_on_a_thor_step_raise_before_writing():
    rng = np.random.default_rng(5)
    net = dense_net(rng)
    opt = thor(net, np.array([0.1, 0.1]), np.array([0.01, 0.01]), 0.9)
    w0, b0 = net.layers[0].weight.data.copy(), net.layers[0].bias.data.copy()
    with pytest.raises(ValueError, match="fc.weight"):
        opt([np.ones((3, 4)), np.ones(3)])
    net.layers[0].inputs = np.ones((5, 4))
    net.layers[0].output_grads = np.ones((4, 3))
    with pytest.raises(ValueError, match="output_grads"):
        opt([np.ones((3, 4)), np.ones(3)])
    net.layers[0].output_grads = np.ones((5, 3))
    with pytest.raises(ValueError, match="positive definite"):   # rank-1 statistics, damping 0 below
        thor(net, np.array([0.1]), np.array([0.0]), 0.9)([np.ones((3, 4)), np.ones(3)])
    assert np.array_equal(net.layers[0].weight.data, w0) and np.array_equal(net.layers[0].bias.data, b0)
    assert opt.cov_step == 0 and opt.global_step == 0


def test_layers_must_stay_the_same():
    rng = np.random.default_rng(6)
    net = dense_net(rng)
    set_statistics(net.layers[0], rng)
    opt = thor(net, np.array([0.1]), np.array([0.01]), 0.9)
    other = dense_net(np.random.default_rng(7))
    set_statistics(other.layers[0], rng)
    net.layers = other.layers
    with pytest.raises(ValueError, match="same layers"):
        opt([np.ones((3, 4)), np.ones(3)])


def test_parameters_outside_thor_layers_get_plain_momentum():
    rng = np.random.default_rng(8)
    extra = Parameter(np.ones(5), "ln.gamma")
    frozen = Parameter(np.ones(2), "frozen", requires_grad=False)
    net = dense_net(rng)
    net.extra = [extra, frozen]
    set_statistics(net.layers[0], rng)
    opt = thor(net, np.array([0.5]), np.array([0.01]), 0.9, loss_scale=2.0)
    assert [p.name for p in opt.parameters] == ["fc.weight", "fc.bias", "ln.gamma"]
    opt([np.zeros((3, 4)), np.zeros(3), np.full(5, 4.0)])
    np.testing.assert_allclose(extra.data, 1.0 - 0.5 * 2.0)


def test_damping_schedule_and_table_past_its_end():
    class Damp(LearningRateSchedule):
        def __call__(self, step):
            return 0.01 * (step + 1)

    rng = np.random.default_rng(9)
    net = dense_net(rng)
    set_statistics(net.layers[0], rng)
    opt = thor(net, np.full(3, 0.1), Damp(), 0.0, batch_size=8, frequency=2)
    for _ in range(3):
        opt([np.zeros((3, 4)), np.zeros(3)])
    a = net.layers[0].inputs.T @ net.layers[0].inputs / 8
    np.testing.assert_allclose(np.linalg.inv(opt.matrix_a_inv[0]), a + np.sqrt(0.03) * np.eye(4), atol=1e-12)
    table = thor(net, np.full(3, 0.1), [0.01], 0.0, batch_size=8, frequency=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # cov_step 1: not a THOR step, damping not read
        table([np.zeros((3, 4)), np.zeros(3)])
        table([np.zeros((3, 4)), np.zeros(3)])
    with pytest.warns(UserWarning, match="damping"):      # cov_step 2, past the table: damping 0.0
        table([np.zeros((3, 4)), np.zeros(3)])
    np.testing.assert_allclose(np.linalg.inv(table.matrix_a_inv[0]), a, atol=1e-10)


def test_worked_example_in_the_module_docstring():
    """Runs the docstring's example verbatim; THOR's final loss is below half of Momentum's."""
    code = textwrap.dedent(thor_module.__doc__.split("Worked example")[1].split("::\n", 1)[1])
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code, "thor-worked-example", "exec"), namespace)  # our own docstring
    losses = namespace["losses"]
    assert losses["thor"] < 0.5 * losses["momentum"], losses


# ---------------------------------------------------------------------------------------------------- errors

def _good():
    rng = np.random.default_rng(10)
    return dict(net=dense_net(rng), learning_rate=np.array([0.1]), damping=np.array([0.01]), momentum=0.9)


class NoProtocol:
    pass


class BadKindNet(Net):
    def __init__(self):
        super().__init__([ThorLayer(Parameter(np.ones((2, 2)), "w"), "attention")])


class BadRankNet(Net):
    def __init__(self):
        super().__init__([ThorLayer(Parameter(np.ones((2, 2, 2)), "w"), "dense")])


class NotAParameterNet(Net):
    def __init__(self):
        super().__init__([ThorLayer(np.ones((2, 2)), "dense")])


BAD = [
    ("net-without-protocol", dict(net=NoProtocol()), TypeError, "thor_layers"),
    ("layer-kind", dict(net=BadKindNet()), ValueError, "kind"),
    ("weight-rank", dict(net=BadRankNet()), ValueError, "rank"),
    ("weight-not-parameter", dict(net=NotAParameterNet()), TypeError, "weight"),
    ("lr-float", dict(learning_rate=0.1), TypeError, "learning_rate"),
    ("lr-negative", dict(learning_rate=np.array([-0.1])), ValueError, "learning rate"),
    ("lr-string", dict(learning_rate="0.1"), TypeError, "learning rate"),
    ("damping-float", dict(damping=0.01), TypeError, "damping"),
    ("damping-none", dict(damping=None), TypeError, "damping"),
    ("damping-negative", dict(damping=[-0.01]), ValueError, "damping"),
    ("damping-matrix", dict(damping=np.ones((2, 2))), ValueError, "damping"),
    ("damping-strings", dict(damping=["a"]), TypeError, "damping"),
    ("momentum-int", dict(momentum=0), TypeError, "momentum"),
    ("momentum-negative", dict(momentum=-0.1), ValueError, "momentum"),
    ("frequency-float", dict(frequency=10.0), TypeError, "frequency"),
    ("frequency-bool", dict(frequency=True), TypeError, "frequency"),
    ("frequency-one", dict(frequency=1), ValueError, "frequency"),
    ("batch-size-zero", dict(batch_size=0), ValueError, "batch_size"),
    ("batch-size-float", dict(batch_size=32.0), TypeError, "batch_size"),
    ("nesterov-int", dict(use_nesterov=1), TypeError, "use_nesterov"),
    ("clip-int", dict(enable_clip_grad=1), TypeError, "enable_clip_grad"),
    ("decay-filter", dict(decay_filter=True), TypeError, "decay_filter"),
    ("split-indices", dict(split_indices="0,1"), TypeError, "split_indices"),
    ("split-indices-range", dict(split_indices=[0, 99]), ValueError, "split_indices"),
    ("split-indices-order", dict(split_indices=[1, 0]), ValueError, "split_indices"),
    ("loss-scale-zero", dict(loss_scale=0.0), ValueError, "loss_scale"),
    ("weight-decay-negative", dict(weight_decay=-0.1), ValueError, "weight_decay"),
]


@pytest.mark.parametrize("case, change, exc, mention", BAD, ids=[b[0] for b in BAD])
def test_bad_argument_raises(case, change, exc, mention):
    kwargs = {**_good(), **change}
    with pytest.raises(exc, match=re.escape(mention)):
        thor(**kwargs)


def test_validation_order_base_then_momentum_then_frequency_then_learning_rate():
    with pytest.raises(ValueError, match="loss_scale"):
        thor(**{**_good(), "loss_scale": -1.0, "momentum": 1})
    with pytest.raises(TypeError, match="momentum"):
        thor(**{**_good(), "momentum": 1, "frequency": 1})
    with pytest.raises(ValueError, match="frequency"):
        thor(**{**_good(), "frequency": 1, "learning_rate": 0.1})


def test_state_dict_round_trip_resumes_between_thor_steps_bit_identically():
    def fresh():
        rng = np.random.default_rng(11)
        net = dense_net(rng)
        return net, thor(net, np.full(8, 0.05), np.full(8, 0.02), 0.9, weight_decay=0.01, frequency=3,
                         batch_size=8)

    stats_rng = np.random.default_rng(12)
    stats = [(stats_rng.standard_normal((8, 4)), stats_rng.standard_normal((8, 3))) for _ in range(8)]
    grads = [(stats_rng.standard_normal((3, 4)), stats_rng.standard_normal(3)) for _ in range(8)]

    def run(net, opt, steps):
        for k in steps:
            net.layers[0].inputs, net.layers[0].output_grads = stats[k]
            opt(list(grads[k]))

    net_a, opt_a = fresh()
    run(net_a, opt_a, range(8))
    net_b, opt_b = fresh()
    run(net_b, opt_b, range(4))                            # stop after cov_step 3's refresh, before step 4
    saved = opt_b.state_dict()
    assert saved["cov_step"] == 4 and saved["matrix_a_inv.fc.weight"].shape == (4, 4)
    net_c, opt_c = fresh()
    for p, q in zip(net_c.trainable_params(), net_b.trainable_params()):
        p.set_data(q.data)
    opt_c.load_state_dict(saved)
    assert opt_c.cov_step == 4 and not opt_c.is_thor_step
    run(net_c, opt_c, range(4, 8))
    for p, q in zip(net_c.trainable_params(), net_a.trainable_params()):
        assert np.array_equal(p.data, q.data), p.name
    saved["cov_step"] = np.array(-1)
    with pytest.raises(ValueError, match="cov_step"):
        opt_c.load_state_dict(saved)


# ------------------------------------------------------------------------------------ Embedding and LayerNorm

def embedding_and_layernorm_net(rng, dtype=np.float64, vocab=7, dim=3):
    table = Parameter(rng.standard_normal((vocab, dim)).astype(dtype), "emb.table")
    gamma = Parameter(rng.standard_normal(dim).astype(dtype), "ln.gamma")
    beta = Parameter(rng.standard_normal(dim).astype(dtype), "ln.beta")
    return Net([ThorLayer(table, "embedding"), ThorLayer(gamma, "layernorm", bias=beta)])


def set_embedding_statistics(layer, rng, shape=(4, 5)):
    vocab, dim = layer.weight.shape
    layer.inputs = rng.integers(0, vocab, shape)
    layer.output_grads = rng.standard_normal((int(np.prod(shape)), dim)) * 0.3


def direct_embedding(grad, ids, output_grads, damping, batch_size, loss_scale):
    """KERNELS §18, Embedding: A = id counts, A'^-1 = 1/(A/batch_size + sqrt(λ)), G'^-1 explicit."""
    vocab = grad.shape[0]
    a = np.bincount(ids.reshape(-1), minlength=vocab).astype(np.float64)
    g = output_grads.T @ output_grads / output_grads.shape[0]
    a_inv = 1.0 / (a / batch_size + np.sqrt(damping))
    g_inv = np.linalg.inv(g * batch_size ** 2 / loss_scale ** 2 + np.sqrt(damping) * np.eye(g.shape[0]))
    return (a_inv[:, None] * grad) @ g_inv


def direct_layernorm(grad, damping, batch_size):
    return grad / (grad * grad / batch_size + np.sqrt(damping))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_and_layernorm_updates_match_the_direct_formulas(dtype):
    rng = np.random.default_rng(20)
    net = embedding_and_layernorm_net(rng, dtype)
    emb, ln = net.layers
    set_embedding_statistics(emb, rng)
    ls, lr, lam, bs = 2.0, np.array([0.1, 0.05, 0.02]), np.array([0.05, 0.2, 0.4]), 8
    opt = thor(net, lr, lam, 0.9, loss_scale=ls, batch_size=bs, frequency=2)
    params = [emb.weight, ln.weight, ln.bias]
    moments = [np.zeros(p.shape) for p in params]
    first_stats = emb.inputs, emb.output_grads
    for step in range(3):
        before = [p.data.astype(np.float64) for p in params]
        grads = [rng.standard_normal(p.shape).astype(dtype) for p in params]
        if step == 1:
            emb.inputs = emb.output_grads = None      # not a THOR step: the kept A'^-1, G'^-1 are used
        if step == 2:
            set_embedding_statistics(emb, rng)
            first_stats = emb.inputs, emb.output_grads
            thor_damping = lam[2]
        elif step == 0:
            thor_damping = lam[0]
        g = [x.astype(np.float64) / ls for x in grads]
        pre = [direct_embedding(g[0], *first_stats, thor_damping, bs, ls),
               direct_layernorm(g[1], lam[step], bs), direct_layernorm(g[2], lam[step], bs)]
        opt(grads)
        for k, (p, b, q) in enumerate(zip(params, before, pre)):
            moments[k] = 0.9 * moments[k] + q
            assert_close(p.data, b - lr[step] * moments[k], dtype, 64.0, f"{p.name}, step {step}", b)
    assert opt.matrix_a_inv[0].shape == (7,) and opt.matrix_g_inv[0].shape == (3, 3)
    assert opt.matrix_a_inv[1] is None and opt.matrix_g_inv[1] is None


def test_embedding_precomputed_counts_equal_the_ids():
    results = []
    for precomputed in (False, True):
        net = embedding_and_layernorm_net(np.random.default_rng(22))
        emb = net.layers[0]
        set_embedding_statistics(emb, np.random.default_rng(23))
        if precomputed:
            emb.a_cov = np.bincount(emb.inputs.reshape(-1), minlength=7)
            emb.g_cov = emb.output_grads.T @ emb.output_grads / emb.output_grads.shape[0]
            emb.inputs = emb.output_grads = None
        opt = thor(net, np.array([0.1]), np.array([0.03]), 0.9, batch_size=4)
        opt([np.full((7, 3), 0.5), np.ones(3), np.ones(3)])
        results.append(emb.weight.data.copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-13)
    a_inv, g_inv = thor_inverses(np.array([1.0, 0.0]), np.eye(2), 0.04, kind="embedding", batch_size=2)
    np.testing.assert_allclose(a_inv, [1 / (0.5 + 0.2), 1 / 0.2])
    np.testing.assert_allclose(g_inv, np.eye(2) / (4.0 + 0.2))


@pytest.mark.parametrize("change, exc, mention", [
    (lambda e: setattr(e, "inputs", e.inputs.astype(np.float64)), TypeError, "token ids"),
    (lambda e: setattr(e, "inputs", e.inputs + 7), ValueError, "[0, 7)"),
    (lambda e: setattr(e, "output_grads", e.output_grads[:, :2]), ValueError, "output_grads"),
    (lambda e: setattr(e, "a_cov", np.ones((7, 7))), ValueError, "a_cov"),
    (lambda e: setattr(e, "inputs", None), ValueError, "no statistics"),
], ids=["float-ids", "id-out-of-range", "grads-shape", "a-cov-matrix", "missing"])
def test_bad_embedding_statistics_raise_before_writing(change, exc, mention):
    rng = np.random.default_rng(24)
    net = embedding_and_layernorm_net(rng)
    emb = net.layers[0]
    set_embedding_statistics(emb, rng)
    change(emb)
    opt = thor(net, np.array([0.1]), np.array([0.03]), 0.9)
    before = [p.data.copy() for p in net.trainable_params()]
    with pytest.raises(exc, match=re.escape(mention)):
        opt([np.ones((7, 3)), np.ones(3), np.ones(3)])
    assert all(np.array_equal(p.data, b) for p, b in zip(net.trainable_params(), before))
    assert opt.cov_step == 0


def test_embedding_id_never_seen_with_zero_damping_is_an_error():
    net = embedding_and_layernorm_net(np.random.default_rng(25))
    emb = net.layers[0]
    emb.inputs = np.array([0, 1, 1])                    # ids 2..6 never occur: A = 0 there
    emb.output_grads = np.ones((3, 3))
    opt = thor(net, np.array([0.1]), np.array([0.0]), 0.9)
    with pytest.raises(ValueError, match="increase the damping"):
        opt([np.ones((7, 3)), np.ones(3), np.ones(3)])


def test_embedding_and_layernorm_records_are_validated():
    table = Parameter(np.ones((4, 2)), "emb")
    with pytest.raises(ValueError, match="no bias"):
        thor(Net([ThorLayer(table, "embedding", bias=Parameter(np.ones(2), "b"))]), np.array([0.1]),
             np.array([0.1]), 0.9)
    with pytest.raises(ValueError, match="rank"):
        thor(Net([ThorLayer(Parameter(np.ones(4), "e"), "embedding")]), np.array([0.1]), np.array([0.1]), 0.9)
    gamma, beta = Parameter(np.ones(3), "g"), Parameter(np.ones(3), "b")

    class OnlyGamma(Net):
        def trainable_params(self):
            return [gamma]

    with pytest.raises(ValueError, match="bias of LayerNorm"):
        thor(OnlyGamma([ThorLayer(gamma, "layernorm", bias=beta)]), np.array([0.1]), np.array([0.1]), 0.9)


def test_state_dict_with_embedding_and_layernorm_resumes_bit_identically():
    def fresh():
        net = embedding_and_layernorm_net(np.random.default_rng(26))
        return net, thor(net, np.full(6, 0.05), np.linspace(0.01, 0.06, 6), 0.9, frequency=3, batch_size=4)

    rng = np.random.default_rng(27)
    stats = [(rng.integers(0, 7, (2, 3)), rng.standard_normal((6, 3))) for _ in range(6)]
    grads = [[rng.standard_normal((7, 3)), rng.standard_normal(3), rng.standard_normal(3)] for _ in range(6)]

    def run(net, opt, steps):
        for k in steps:
            net.layers[0].inputs, net.layers[0].output_grads = stats[k]
            opt(grads[k])

    net_a, opt_a = fresh()
    run(net_a, opt_a, range(6))
    net_b, opt_b = fresh()
    run(net_b, opt_b, range(2))
    saved = opt_b.state_dict()
    assert saved["matrix_a_inv.emb.table"].shape == (7,) and "matrix_a_inv.ln.gamma" not in saved
    net_c, opt_c = fresh()
    for p, q in zip(net_c.trainable_params(), net_b.trainable_params()):
        p.set_data(q.data)
    opt_c.load_state_dict(saved)
    run(net_c, opt_c, range(2, 6))
    for p, q in zip(net_c.trainable_params(), net_a.trainable_params()):
        assert np.array_equal(p.data, q.data), p.name
