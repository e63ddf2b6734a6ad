"""Every documented TypeError/ValueError/KeyError/RuntimeError of the optimizers, with the argument named."""

import numpy as np
import pytest

from optim_table import Halving
from optkernels.optimizers import (
    FTRL,
    LARS,
    SGD,
    Adagrad,
    Adam,
    AdaMax,
    AdamOffload,
    AdamWeightDecay,
    Lamb,
    LazyAdam,
    Momentum,
    Parameter,
    ProximalAdagrad,
    RMSProp,
)


def params(n=2, dtype=np.float32):
    return [Parameter(np.ones((2, 3), dtype), f"w{k}") for k in range(n)]


# ----------------------------------------------------------------------------------------------- base class


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        (None, ValueError, "parameters"),
        (5, TypeError, "parameters"),
        ("ab", TypeError, "parameters"),
        ([], ValueError, "empty"),
    ],
)
def test_parameters_argument(bad, exc, match):
    with pytest.raises(exc, match=match):
        Momentum(bad, 0.1, 0.9)


def test_parameters_must_be_all_parameters_or_all_dicts():
    p = params()
    with pytest.raises(TypeError, match="all elements"):
        Momentum([p[0], {"params": [p[1]]}], 0.1, 0.9)
    with pytest.raises(TypeError, match="all elements"):
        Momentum([p[0], np.ones(3)], 0.1, 0.9)


def test_duplicate_names_ungrouped_are_a_value_error():
    a, b = Parameter(np.ones(2), "w"), Parameter(np.zeros(2), "w")
    with pytest.raises(ValueError, match="'w' appears twice"):
        Momentum([a, b], 0.1, 0.9)


@pytest.mark.parametrize(
    "bad, exc",
    [
        ("1", TypeError),
        (None, TypeError),
        (True, TypeError),
        (0.0, ValueError),
        (-2.0, ValueError),
        (float("inf"), ValueError),
        (0, ValueError),
    ],
)
def test_loss_scale(bad, exc):
    with pytest.raises(exc, match="loss_scale"):
        Momentum(params(), 0.1, 0.9, loss_scale=bad)


def test_loss_scale_int_is_converted():
    assert Momentum(params(), 0.1, 0.9, loss_scale=4).loss_scale == 4.0


@pytest.mark.parametrize(
    "bad, exc",
    [
        (None, TypeError),
        ("0.1", TypeError),
        (True, TypeError),
        ({"lr": 0.1}, TypeError),
        (["a", "b"], TypeError),
        (-0.1, ValueError),
        (float("nan"), ValueError),
        (np.ones((2, 2)), ValueError),
        ([0.1, -0.1], ValueError),
        ([], ValueError),
        (np.array(["x"]), TypeError),
        (-1, ValueError),
    ],
)
def test_learning_rate(bad, exc):
    with pytest.raises(exc, match="learning rate"):
        Momentum(params(), bad, 0.9)


@pytest.mark.parametrize(
    "bad, exc",
    [
        (-0.1, ValueError),
        ("0.1", TypeError),
        (True, TypeError),
        (None, TypeError),
        (float("nan"), ValueError),
    ],
)
def test_weight_decay(bad, exc):
    with pytest.raises(exc, match="weight_decay"):
        Momentum(params(), 0.1, 0.9, weight_decay=bad)


def test_group_errors():
    a, b, c = params(3)
    with pytest.raises(KeyError, match="foo"):
        Momentum([{"params": [a], "foo": 1}], 0.1, 0.9)
    with pytest.raises(KeyError, match="'params'"):
        Momentum([{"lr": 0.1}], 0.1, 0.9)
    with pytest.raises(ValueError, match="empty"):
        Momentum([{"params": []}], 0.1, 0.9)
    with pytest.raises(TypeError, match="1th item of 'params'"):
        Momentum([{"params": [a, np.ones(3)]}], 0.1, 0.9)
    with pytest.raises(TypeError, match="'params' of group 0"):
        Momentum([{"params": a}], 0.1, 0.9)
    with pytest.raises(TypeError, match="grad_centralization"):
        Momentum([{"params": [a], "grad_centralization": 1}], 0.1, 0.9)
    with pytest.raises(RuntimeError, match="w0"):
        Momentum([{"params": [a, b]}, {"params": [a]}], 0.1, 0.9)
    with pytest.raises(RuntimeError, match="w0"):
        Momentum([{"params": [a, a]}], 0.1, 0.9)
    with pytest.raises(ValueError, match="one length"):
        Momentum([{"params": [a], "lr": [0.1, 0.2]}, {"params": [b], "lr": [0.1, 0.2, 0.3]}], 0.1, 0.9)
    with pytest.raises(ValueError, match="one length"):
        Momentum([{"params": [a], "lr": [0.1, 0.2]}], [0.1, 0.2, 0.3], 0.9)
    with pytest.raises(ValueError, match="weight_decay"):
        Momentum([{"params": [a], "weight_decay": -1.0}], 0.1, 0.9)
    with pytest.raises(ValueError, match="learning rate"):
        Momentum([{"params": [a], "lr": -1.0}], 0.1, 0.9)


def test_order_params_errors():
    a, b, c = params(3)
    with pytest.raises(ValueError, match="only that key"):
        Momentum([{"params": [a, b]}, {"order_params": [b, a], "lr": 0.1}], 0.1, 0.9)
    with pytest.raises(TypeError, match="order_params"):
        Momentum([{"params": [a, b]}, {"order_params": 3}], 0.1, 0.9)
    with pytest.raises(ValueError, match="order_params' has 1"):
        Momentum([{"params": [a, b]}, {"order_params": [a]}], 0.1, 0.9)
    with pytest.raises(ValueError, match="w1 is not in 'order_params'"):
        Momentum([{"params": [a, b]}, {"order_params": [a, c]}], 0.1, 0.9)
    with pytest.raises(ValueError, match="twice"):
        Momentum([{"params": [a, b]}, {"order_params": [a, a]}], 0.1, 0.9)


# ----------------------------------------------------------------------------------------------- optimizers

CASES = [
    (SGD, dict(momentum="0.9"), TypeError, "momentum"),
    (SGD, dict(momentum=-0.1), ValueError, "momentum"),
    (SGD, dict(dampening=None), TypeError, "dampening"),
    (SGD, dict(dampening=-1.0), ValueError, "dampening"),
    (SGD, dict(nesterov=1), TypeError, "nesterov"),
    (SGD, dict(nesterov=True), ValueError, "nesterov"),
    (SGD, dict(nesterov=True, momentum=0.9, dampening=0.1), ValueError, "nesterov"),
    (SGD, dict(weight_decay=lambda step: 0.1), TypeError, "weight_decay"),
    (Momentum, dict(learning_rate=0.1, momentum=0), TypeError, "momentum"),
    (Momentum, dict(learning_rate=0.1, momentum=-0.5), ValueError, "momentum"),
    (Momentum, dict(learning_rate=0.1, momentum=0.9, use_nesterov="no"), TypeError, "use_nesterov"),
    (Adam, dict(beta1=1), TypeError, "beta1"),
    (Adam, dict(beta1=1.0), ValueError, "beta1"),
    (Adam, dict(beta2=0.0), ValueError, "beta2"),
    (Adam, dict(eps=0.0), ValueError, "eps"),
    (Adam, dict(eps=1), TypeError, "eps"),
    (Adam, dict(use_locking=1), TypeError, "use_locking"),
    (Adam, dict(use_nesterov=None), TypeError, "use_nesterov"),
    (Adam, dict(use_amsgrad="y"), TypeError, "use_amsgrad"),
    (Adam, dict(use_lazy=1), TypeError, "use_lazy"),
    (Adam, dict(use_offload=0), TypeError, "use_offload"),
    (Adam, dict(use_lazy=True, use_offload=True), ValueError, "use_lazy"),
    (Adam, dict(use_amsgrad=True, use_lazy=True), ValueError, "use_amsgrad"),
    (Adam, dict(use_amsgrad=True, use_offload=True), ValueError, "use_amsgrad"),
    (Adam, dict(use_lazzy=True), TypeError, "use_lazzy"),
    (AdamOffload, dict(beta2=1.5), ValueError, "beta2"),
    (LazyAdam, dict(weight_decay=0), TypeError, "weight_decay"),
    (LazyAdam, dict(weight_decay=lambda step: 0.1), TypeError, "weight_decay"),
    (LazyAdam, dict(weight_decay=-0.1), ValueError, "weight_decay"),
    (AdamWeightDecay, dict(loss_scale=1.0), TypeError, "loss_scale"),
    (AdamWeightDecay, dict(eps=-1e-6), ValueError, "eps"),
    (AdaMax, dict(beta1=0.0), ValueError, "beta1"),
    (AdaMax, dict(eps="1e-8"), TypeError, "eps"),
    (Adagrad, dict(accum=1), TypeError, "accum"),
    (Adagrad, dict(accum=-0.1), ValueError, "accum"),
    (Adagrad, dict(update_slots=1), TypeError, "update_slots"),
    (RMSProp, dict(momentum=0), TypeError, "momentum"),
    (RMSProp, dict(decay=1), TypeError, "decay"),
    (RMSProp, dict(decay=-0.1), ValueError, "decay"),
    (RMSProp, dict(decay=1.5), ValueError, "decay"),
    (RMSProp, dict(epsilon=0.0), ValueError, "epsilon"),
    (RMSProp, dict(centered="x"), TypeError, "centered"),
    (RMSProp, dict(use_locking=None), TypeError, "use_locking"),
    (ProximalAdagrad, dict(l1=-0.1), ValueError, "l1"),
    (ProximalAdagrad, dict(l2=1), TypeError, "l2"),
    (ProximalAdagrad, dict(accum=-1.0), ValueError, "accum"),
    (ProximalAdagrad, dict(use_locking=1), TypeError, "use_locking"),
    (FTRL, dict(learning_rate=[0.1, 0.2]), ValueError, "dynamic or group learning rate"),
    (FTRL, dict(learning_rate=Halving(0.1)), ValueError, "dynamic or group learning rate"),
    (FTRL, dict(learning_rate=1), TypeError, "learning_rate"),
    (FTRL, dict(learning_rate=np.array(0.1)), TypeError, "learning_rate"),
    (FTRL, dict(learning_rate=0.0), ValueError, "learning_rate"),
    (FTRL, dict(l2_shrinkage=-0.1), ValueError, "l2_shrinkage"),
    (FTRL, dict(l2_shrinkage="0.1"), TypeError, "l2_shrinkage"),
    (FTRL, dict(lr_power=0.5), ValueError, "lr_power"),
    (FTRL, dict(lr_power=-1), TypeError, "lr_power"),
    (FTRL, dict(initial_accum=-1.0), ValueError, "initial_accum"),
    (FTRL, dict(l1=0), TypeError, "l1"),
    (FTRL, dict(l2=-0.1), ValueError, "l2"),
    (FTRL, dict(use_locking="no"), TypeError, "use_locking"),
    (Lamb, dict(learning_rate=0.1, loss_scale=2.0), TypeError, "loss_scale"),
    (Lamb, dict(learning_rate=0.1, beta1=1.0), ValueError, "beta1"),
    (Lamb, dict(learning_rate=0.1, eps=0), TypeError, "eps"),
    (Lamb, dict(), TypeError, "learning_rate"),
    (Momentum, dict(learning_rate=0.1), TypeError, "momentum"),
]


@pytest.mark.parametrize(
    "cls, kwargs, exc, match", CASES, ids=[f"{c.__name__}-{'-'.join(k)}-{e.__name__}" for c, k, e, _ in CASES]
)
def test_constructor_errors(cls, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cls(params(), **kwargs)


def test_ftrl_refuses_group_lr():
    a, b = params()
    with pytest.raises(ValueError, match="group learning rate"):
        FTRL([{"params": [a], "lr": 0.1}, {"params": [b]}])


def test_lars_errors():
    inner = Momentum(params(), 0.1, 0.9)
    with pytest.raises(TypeError, match="optimizer"):
        LARS("momentum")
    with pytest.raises(TypeError, match="epsilon"):
        LARS(inner, epsilon=1)
    with pytest.raises(TypeError, match="coefficient"):
        LARS(inner, coefficient="0.001")
    with pytest.raises(TypeError, match="use_clip"):
        LARS(inner, use_clip=1)
    with pytest.raises(TypeError, match="lars_filter"):
        LARS(inner, lars_filter="bias")
    a, b = params()
    grouped_dynamic = Momentum([{"params": [a], "lr": [0.1, 0.2]}, {"params": [b]}], [0.1, 0.1], 0.9)
    with pytest.raises(ValueError, match="use_clip"):
        LARS(grouped_dynamic, use_clip=True)
    LARS(grouped_dynamic, use_clip=False)


def test_parameter_errors():
    with pytest.raises(TypeError, match="name"):
        Parameter(np.ones(2), "")
    with pytest.raises(TypeError, match="name"):
        Parameter(np.ones(2), None)
    with pytest.raises(TypeError, match="dtype int64"):
        Parameter(np.ones(2, np.int64), "w")
    with pytest.raises(ValueError, match="C-contiguous"):
        Parameter(np.ones((4, 4))[:, ::2], "w")
    readonly = np.ones(3)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        Parameter(readonly, "w")
    with pytest.raises(TypeError, match="requires_grad"):
        Parameter(np.ones(2), "w", requires_grad=1)
    with pytest.raises(ValueError, match="shape"):
        Parameter(np.ones(2), "w").set_data(np.ones(3))


# ----------------------------------------------------------------------------------------------- step


def _snapshot(opt):
    return [p.data.copy() for p in opt.parameters], opt.state_dict()


def _assert_unchanged(opt, snap):
    values, state = snap
    for p, v in zip(opt.parameters, values):
        assert np.array_equal(p.data, v)
    now = opt.state_dict()
    for k, v in state.items():
        assert np.array_equal(now[k], v), k


@pytest.mark.parametrize(
    "bad_last, exc, match",
    [
        (np.ones((3, 2), np.float32), ValueError, "gradient of w1 has shape"),
        (np.ones((2, 3), np.float64), TypeError, "gradient of w1 has dtype"),
        ([[1.0] * 3] * 2, TypeError, "gradient of w1 must be a NumPy array"),
        (None, TypeError, "gradient of w1"),
    ],
)
def test_bad_gradient_writes_nothing(bad_last, exc, match):
    opt = Adam(params(), learning_rate=[0.1, 0.2], weight_decay=0.1, loss_scale=2.0)
    opt((np.ones((2, 3), np.float32),) * 2)
    snap, step = _snapshot(opt), opt.global_step
    with pytest.raises(exc, match=match):
        opt((np.ones((2, 3), np.float32), bad_last))
    _assert_unchanged(opt, snap)
    assert opt.global_step == step == 1


def test_gradients_container_errors():
    opt = Momentum(params(), 0.1, 0.9)
    with pytest.raises(TypeError, match="gradients"):
        opt(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="got 1 gradients for 2 parameters"):
        opt((np.ones((2, 3), np.float32),))


def test_bad_schedule_value_writes_nothing():
    class Negative(Halving):
        def __call__(self, step):
            return -1.0 if step == 1 else 0.1

    opt = Momentum(params(), Negative(0.1), 0.9)
    grads = (np.ones((2, 3), np.float32),) * 2
    opt(grads)
    snap = _snapshot(opt)
    with pytest.raises(ValueError, match="schedule Negative returned -1.0"):
        opt(grads)
    _assert_unchanged(opt, snap)
    assert opt.global_step == 1


def test_bad_dynamic_weight_decay_value_writes_nothing():
    opt = Momentum(params(), 0.1, 0.9, weight_decay=lambda step: float("nan"))
    snap = _snapshot(opt)
    with pytest.raises(ValueError, match="dynamic weight decay returned nan"):
        opt((np.ones((2, 3), np.float32),) * 2)
    _assert_unchanged(opt, snap)
    assert opt.global_step == 0


def test_get_lr_parameter_errors():
    a, b = params()
    opt = Momentum([a], 0.1, 0.9)
    with pytest.raises(TypeError, match="'param' must be a Parameter or a list"):
        opt.get_lr_parameter((a,))
    with pytest.raises(TypeError, match="every item must be a Parameter"):
        opt.get_lr_parameter([a, "b"])
    with pytest.raises(ValueError, match="w1 is not in the optimizer"):
        opt.get_lr_parameter(b)


def test_target_and_unique_setters():
    opt = Momentum(params(), 0.1, 0.9)
    assert opt.target == "CPU"
    with pytest.raises(NotImplementedError, match="target"):
        opt.target = "CPU"
    adam = Adam(params())
    with pytest.raises(TypeError, match="target"):
        adam.target = 1
    with pytest.raises(ValueError, match="target"):
        adam.target = "TPU"
    with pytest.raises(ValueError, match="cannot be 'GPU'"):
        adam.target = "GPU"
    adam.target = "CPU"
    assert adam.target == "CPU"
    ftrl = FTRL(params())
    ftrl.target = "GPU"  # FTRL/ProximalAdagrad: type and membership only
    assert ftrl.target == "GPU"
    with pytest.raises(ValueError, match="target"):
        ftrl.target = "cpu"
    with pytest.raises(TypeError, match="unique"):
        adam.unique = 1
    adam.unique = False
    assert adam.unique is False
