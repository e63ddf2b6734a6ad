"""One table of the optimizers drives the generic optimizer tests (trajectories, state round trips, errors).

Each :class:`OptimInfo` row says how to build one optimizer and how to compose its step BY HAND from the
per-parameter ops of a backend module: :mod:`optkernels.reference` (float64, the yardstick) or
:mod:`optkernels.kernels` (in the parameters' dtype, which the optimizer must match bit for bit). The test
side knows the spec's rules (decay flags, centralization filter, loss scale, global step, beta powers) on
its own: nothing here asks the optimizer how it works.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import optkernels.reference as R
from optkernels.kernels.torch_family import nadam_mu
from optkernels.optimizers import (
    ADOPT,
    FTRL,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    AdaMax,
    AdamOffload,
    AdamWeightDecay,
    AdamWScheduleFree,
    AdEMAMix,
    Lamb,
    LazyAdam,
    LearningRateSchedule,
    Lion,
    Momentum,
    NAdam,
    Parameter,
    ProximalAdagrad,
    RAdam,
    RMSProp,
    SGDScheduleFree,
)


def call(backend, name: str, *args, **kwargs) -> tuple:
    """Run ``backend.name``; the kernels return their (updated) state, the reference new float64 arrays."""
    out = getattr(backend, name)(*args, **kwargs)
    return out if isinstance(out, tuple) else (out,)


@dataclass
class Ctx:
    """What the hand-composed step of one parameter needs besides its arrays."""

    lr: float
    powers: dict  # this step's beta powers (already advanced), by name
    t: int  # Lamb's step count (global step after the increment)
    decoupled_wd: float  # AdamWeightDecay/Lamb: the decay of this parameter (0 if its flag is off)
    dtype: Any  # the dtype the composition computes in


@dataclass
class OptimInfo:
    """How to build one optimizer and compose its per-parameter step by hand.

    Attributes:
        id: test id.
        cls: the optimizer class.
        kwargs: constructor arguments besides params, learning_rate, weight_decay, loss_scale.
        slots: slot name -> initial value, in the optimizer's slot order (from the spec).
        step: ``step(backend, w, slots, g, ctx) -> w`` (updates ``slots`` by name).
        decay: 'coupled' (g + wd·ls·w before the kernel; SGD too), 'decoupled' (AdamW, Lamb).
        centralizes: applies gradient centralization to flagged grouped parameters.
        loss_scale: has a ``loss_scale`` argument (and divides by it).
        lr_forms: accepts group and dynamic learning rates (FTRL does not).
        powers: beta-power name -> beta.
        decay_all: every ungrouped parameter is decayed (FTRL).
        counts_always: the global step advances every step (Lamb).
        learning_rate: the fixed learning rate of the scenarios.
        dynamic_wd: accepts a callable constructor weight_decay (LazyAdam does not).
        dynamic_group_wd: accepts a callable group weight_decay (SGD does not).
    """

    id: str
    cls: type
    kwargs: dict
    slots: dict
    step: Callable
    decay: str = "coupled"
    centralizes: bool = True
    loss_scale: bool = True
    lr_forms: bool = True
    powers: dict = field(default_factory=dict)
    decay_all: bool = False
    counts_always: bool = False
    learning_rate: float = 0.01
    dynamic_wd: bool = True
    dynamic_group_wd: bool = True


def _sgd(kw):
    def step(B, w, s, g, c):
        w, s["accum"], s["stat"] = call(
            B,
            "sgd",
            w,
            g,
            c.lr,
            s["accum"],
            kw.get("momentum", 0.0),
            s["stat"],
            dampening=float(kw.get("dampening", 0.0)),
            weight_decay=0.0,
            nesterov=kw.get("nesterov", False),
        )
        return w

    return step


def _momentum(B, w, s, g, c, nesterov=False):
    w, s["moments"] = call(B, "apply_momentum", w, s["moments"], c.lr, g, 0.9, use_nesterov=nesterov)
    return w


def _adam(nesterov=False):
    def step(B, w, s, g, c):
        w, s["moment1"], s["moment2"] = call(
            B,
            "apply_adam",
            w,
            s["moment1"],
            s["moment2"],
            c.powers["beta1_power"],
            c.powers["beta2_power"],
            c.lr,
            0.8,
            0.99,
            1e-6,
            g,
            use_nesterov=nesterov,
        )
        return w

    return step


def _amsgrad(B, w, s, g, c):
    w, s["moment1"], s["moment2"], s["vhat"] = call(
        B,
        "apply_adam_with_amsgrad",
        w,
        s["moment1"],
        s["moment2"],
        s["vhat"],
        c.powers["beta1_power"],
        c.powers["beta2_power"],
        c.lr,
        g,
        beta1=0.8,
        beta2=0.99,
        epsilon=1e-6,
    )
    return w


def _offload(B, w, s, g, c):
    out = call(
        B,
        "adam_no_update_param",
        s["moment1"],
        s["moment2"],
        c.powers["beta1_power"],
        c.powers["beta2_power"],
        c.lr,
        0.8,
        0.99,
        1e-6,
        g,
    )
    if B is R:
        delta, s["moment1"], s["moment2"] = out
        return w + delta
    w += out[0]
    return w


def _adam_weight_decay(B, w, s, g, c):
    w, s["adam_m"], s["adam_v"] = call(
        B, "adam_weight_decay", w, s["adam_m"], s["adam_v"], c.lr, 0.8, 0.99, 1e-6, c.decoupled_wd, g
    )
    return w


def _ada_max(B, w, s, g, c):
    w, s["moment1"], s["moment2"] = call(
        B, "apply_ada_max", w, s["moment1"], s["moment2"], c.powers["beta1_power"], c.lr, 0.8, 0.99, 1e-6, g
    )
    return w


def _adagrad(B, w, s, g, c):
    w, s["accum"] = call(B, "apply_adagrad", w, s["accum"], c.lr, g, update_slots=True)
    return w


def _rmsprop(centered):
    def step(B, w, s, g, c):
        if centered:
            w, s["mean_grad"], s["mean_square"], s["moment"] = call(
                B,
                "apply_centered_rms_prop",
                w,
                s["mean_grad"],
                s["mean_square"],
                s["moment"],
                g,
                c.lr,
                0.8,
                0.5,
                1e-6,
            )
        else:
            w, s["mean_square"], s["moment"] = call(
                B, "apply_rms_prop", w, s["mean_square"], s["moment"], c.lr, g, 0.8, 0.5, 1e-6
            )
        return w

    return step


def _proximal(B, w, s, g, c):
    w, s["accum"] = call(B, "apply_proximal_adagrad", w, s["accum"], c.lr, 0.01, 0.02, g)
    return w


def _ftrl(B, w, s, g, c):
    w, s["moments"], s["linear"] = call(
        B, "apply_ftrl", w, s["moments"], s["linear"], g, c.lr, 0.001, 0.01, -0.5
    )
    return w


def _ftrl_v2(B, w, s, g, c):
    w, s["moments"], s["linear"] = call(
        B, "apply_ftrl_v2", w, s["moments"], s["linear"], g, c.lr, 0.001, 0.01, 0.05, -0.5
    )
    return w


def _lion(B, w, s, g, c):
    w, s["exp_avg"] = call(B, "lion", w, s["exp_avg"], g, c.lr, 0.8, 0.95, c.decoupled_wd)
    return w


def _adopt(decouple):
    def step(B, w, s, g, c):
        k = c.t - 1
        w, s["exp_avg"], s["exp_avg_sq"] = call(
            B, "adopt", w, s["exp_avg"], s["exp_avg_sq"], g, c.lr, 0.8, 0.99, 1e-6,
            c.decoupled_wd if decouple else 0.0, k, k ** 0.25 if k else np.inf, decouple=decouple)
        return w

    return step


SF_KW = dict(warmup_steps=2, r=0.5, weight_lr_power=1.0)
AdEMAMix_KW = dict(beta1=0.8, beta2=0.99, beta3=0.999, alpha=4.0, t_alpha=3, t_beta3=3)


def _ademamix(B, w, s, g, c):
    from optkernels.kernels.ademamix import ademamix_schedule

    alpha, beta3 = ademamix_schedule(c.t, 4.0, 0.8, 0.999, 3, 3)
    w, s["m1"], s["m2"], s["nu"] = call(B, "ademamix", w, s["m1"], s["m2"], s["nu"], g, c.lr, 0.8, 0.99, beta3,
                                        alpha, 1e-8, c.decoupled_wd, c.t)
    return w


_SCHEDULE_FREE_HOST: dict = {}   # per slots dict: (lr_max, weight_sum), the package's per-group averaging state


def _schedule_free(adamw):
    """Schedule-Free with warmup_steps=2, r=0.5, weight_lr_power=1: z starts at w; the averaging weight is
    computed here from the parameter's own learning rates (equal per learning rate, as the optimizer's)."""

    def step(B, w, s, g, c):
        from optkernels.kernels.schedule_free import schedule_free_weight

        k = c.t - 1
        if k == 0:
            s["z"], _SCHEDULE_FREE_HOST[id(s)] = np.array(w, copy=True), (-1.0, 0.0)
        lr_t, lr_max, weight_sum, avg = schedule_free_weight(k, c.lr, 2, 0.5, 1.0, *_SCHEDULE_FREE_HOST[id(s)])
        _SCHEDULE_FREE_HOST[id(s)] = (lr_max, weight_sum)
        if adamw:
            w, s["z"], s["exp_avg_sq"] = call(B, "schedule_free_adamw", w, s["z"], s["exp_avg_sq"], g, lr_t, 0.8,
                                              0.99, 1e-8, c.decoupled_wd, avg, c.t)
        else:
            w, s["z"] = call(B, "schedule_free_sgd", w, s["z"], g, lr_t, 0.8, c.decoupled_wd, avg)
        return w

    return step


def _lamb(B, w, s, g, c):
    w, s["lamb_m"], s["lamb_v"] = call(
        B, "lamb", w, s["lamb_m"], s["lamb_v"], c.lr, 0.8, 0.99, 1e-6, c.decoupled_wd, c.t, g
    )
    return w


ADAM_KW = dict(beta1=0.8, beta2=0.99, eps=1e-6)
ADAM_POWERS = {"beta1_power": 0.8, "beta2_power": 0.99}

OPTIMIZERS = [
    OptimInfo(
        "SGD",
        SGD,
        dict(momentum=0.9, dampening=0.1),
        {"accum": 0.0, "stat": 1.0},
        _sgd(dict(momentum=0.9, dampening=0.1)),
        dynamic_wd=False,
        dynamic_group_wd=False,
    ),
    OptimInfo(
        "SGD-nesterov",
        SGD,
        dict(momentum=0.9, nesterov=True),
        {"accum": 0.0, "stat": 1.0},
        _sgd(dict(momentum=0.9, nesterov=True)),
        dynamic_wd=False,
        dynamic_group_wd=False,
    ),
    OptimInfo("Momentum", Momentum, dict(momentum=0.9), {"moments": 0.0}, _momentum),
    OptimInfo(
        "Momentum-nesterov",
        Momentum,
        dict(momentum=0.9, use_nesterov=True),
        {"moments": 0.0},
        lambda B, w, s, g, c: _momentum(B, w, s, g, c, nesterov=True),
    ),
    OptimInfo("Adam", Adam, ADAM_KW, {"moment1": 0.0, "moment2": 0.0}, _adam(), powers=ADAM_POWERS),
    OptimInfo(
        "Adam-nesterov",
        Adam,
        dict(ADAM_KW, use_nesterov=True),
        {"moment1": 0.0, "moment2": 0.0},
        _adam(True),
        powers=ADAM_POWERS,
    ),
    OptimInfo(
        "Adam-amsgrad",
        Adam,
        dict(ADAM_KW, use_amsgrad=True),
        {"moment1": 0.0, "moment2": 0.0, "vhat": 0.0},
        _amsgrad,
        powers=ADAM_POWERS,
    ),
    OptimInfo(
        "Adam-lazy",
        Adam,
        dict(ADAM_KW, use_lazy=True),
        {"moment1": 0.0, "moment2": 0.0},
        _adam(),
        powers=ADAM_POWERS,
    ),
    OptimInfo(
        "Adam-offload",
        Adam,
        dict(ADAM_KW, use_offload=True),
        {"moment1": 0.0, "moment2": 0.0},
        _offload,
        centralizes=False,
        powers=ADAM_POWERS,
    ),
    OptimInfo(
        "AdamOffload",
        AdamOffload,
        ADAM_KW,
        {"moment1": 0.0, "moment2": 0.0},
        _offload,
        centralizes=False,
        powers=ADAM_POWERS,
    ),
    OptimInfo(
        "LazyAdam",
        LazyAdam,
        ADAM_KW,
        {"moment1": 0.0, "moment2": 0.0},
        _adam(),
        powers=ADAM_POWERS,
        dynamic_wd=False,
    ),
    OptimInfo(
        "AdamWeightDecay",
        AdamWeightDecay,
        ADAM_KW,
        {"adam_m": 0.0, "adam_v": 0.0},
        _adam_weight_decay,
        decay="decoupled",
        centralizes=False,
        loss_scale=False,
    ),
    OptimInfo(
        "AdaMax", AdaMax, ADAM_KW, {"moment1": 0.0, "moment2": 0.0}, _ada_max, powers={"beta1_power": 0.8}
    ),
    OptimInfo("Adagrad", Adagrad, dict(accum=0.1), {"accum": 0.1}, _adagrad),
    OptimInfo(
        "RMSProp",
        RMSProp,
        dict(decay=0.8, momentum=0.5, epsilon=1e-6),
        {"mean_square": 1.0, "moment": 0.0},
        _rmsprop(False),
    ),
    OptimInfo(
        "RMSProp-centered",
        RMSProp,
        dict(decay=0.8, momentum=0.5, epsilon=1e-6, centered=True),
        {"mean_square": 1.0, "moment": 0.0, "mean_grad": 0.0},
        _rmsprop(True),
    ),
    OptimInfo(
        "ProximalAdagrad", ProximalAdagrad, dict(accum=0.1, l1=0.01, l2=0.02), {"accum": 0.1}, _proximal
    ),
    OptimInfo(
        "FTRL",
        FTRL,
        dict(initial_accum=0.1, l1=0.001, l2=0.01),
        {"moments": 0.1, "linear": 0.0},
        _ftrl,
        lr_forms=False,
        decay_all=True,
        learning_rate=0.1,
    ),
    OptimInfo(
        "FTRL-shrinkage",
        FTRL,
        dict(initial_accum=0.1, l1=0.001, l2=0.01, l2_shrinkage=0.05),
        {"moments": 0.1, "linear": 0.0},
        _ftrl_v2,
        lr_forms=False,
        decay_all=True,
        learning_rate=0.1,
    ),
    OptimInfo(
        "Lamb",
        Lamb,
        ADAM_KW,
        {"lamb_m": 0.0, "lamb_v": 0.0},
        _lamb,
        decay="decoupled",
        loss_scale=False,
        counts_always=True,
    ),
    OptimInfo("Lion", Lion, dict(beta1=0.8, beta2=0.95), {"exp_avg": 0.0}, _lion, decay="decoupled",
              centralizes=False, loss_scale=False),
    OptimInfo("ADOPT", ADOPT, dict(beta1=0.8, beta2=0.99), {"exp_avg": 0.0, "exp_avg_sq": 0.0}, _adopt(False),
              centralizes=False, loss_scale=False, counts_always=True),
    OptimInfo("ADOPT-decouple", ADOPT, dict(beta1=0.8, beta2=0.99, decouple=True),
              {"exp_avg": 0.0, "exp_avg_sq": 0.0}, _adopt(True), decay="decoupled", centralizes=False,
              loss_scale=False, counts_always=True),
    OptimInfo("AdEMAMix", AdEMAMix, AdEMAMix_KW, {"m1": 0.0, "m2": 0.0, "nu": 0.0}, _ademamix, decay="decoupled",
              centralizes=False, loss_scale=False, counts_always=True),
    OptimInfo("AdamWScheduleFree", AdamWScheduleFree, dict(SF_KW, beta1=0.8, beta2=0.99),
              {"z": 0.0, "exp_avg_sq": 0.0}, _schedule_free(True), decay="decoupled", centralizes=False,
              loss_scale=False, counts_always=True),
    OptimInfo("SGDScheduleFree", SGDScheduleFree, dict(SF_KW, momentum=0.8), {"z": 0.0}, _schedule_free(False),
              decay="decoupled", centralizes=False, loss_scale=False, counts_always=True),
]



def _nadam(B, w, s, g, c):
    product = np.float32(1.0)
    for k in range(1, c.t + 1):  # torch's float32 mu_product
        product = np.float32(product * np.float32(nadam_mu(0.8, 4e-3, k)))
    w, s["exp_avg"], s["exp_avg_sq"] = call(
        B, "torch_nadam", w, s["exp_avg"], s["exp_avg_sq"], g, c.lr, 0.8, 0.99, 1e-6, c.t, float(product)
    )
    return w


def _radam(B, w, s, g, c):
    w, s["exp_avg"], s["exp_avg_sq"] = call(
        B, "torch_radam", w, s["exp_avg"], s["exp_avg_sq"], g, c.lr, 0.8, 0.7, 1e-6, c.t
    )
    return w


def _adadelta(B, w, s, g, c):
    w, s["square_avg"], s["acc_delta"] = call(
        B, "torch_adadelta", w, s["square_avg"], s["acc_delta"], g, c.lr, 0.9, 1e-6
    )
    return w


# torch.optim's rules as NumPy classes (the step count is the global step)
OPTIMIZERS += [
    OptimInfo("NAdam", NAdam, ADAM_KW, {"exp_avg": 0.0, "exp_avg_sq": 0.0}, _nadam, counts_always=True),
    OptimInfo("RAdam", RAdam, dict(ADAM_KW, beta2=0.7), {"exp_avg": 0.0, "exp_avg_sq": 0.0}, _radam,
              counts_always=True),
    OptimInfo("Adadelta", Adadelta, dict(rho=0.9, eps=1e-6), {"square_avg": 0.0, "acc_delta": 0.0}, _adadelta,
              counts_always=True),
]

OPTIMIZERS_BY_ID = {info.id: info for info in OPTIMIZERS}


class Halving(LearningRateSchedule):
    """lr = start·0.5^step (a test schedule)."""

    def __init__(self, start: float):
        self.start = start

    def __call__(self, global_step):
        return self.start * 0.5 ** int(global_step)


def decay_schedule(step: int) -> float:
    """A dynamic weight decay: 0.01/(1 + step)."""
    return 0.01 / (1 + step)


# Parameter names and shapes of the test model: conv.weight is centralizable (shape[1] = 16), fc.weight not,
# bn.gamma/bn.beta escape the default decay filter.
MODEL = [
    ("conv.weight", (4, 16, 3)),
    ("fc.weight", (3, 5)),
    ("bn.gamma", (5,)),
    ("bn.beta", (5,)),
    ("fc.bias", (3,)),
]

SCENARIOS = ["plain", "decay_scale", "groups", "dynamic", "ordered"]
STEPS = 4


@dataclass
class Scenario:
    """A concrete setup: per parameter its group's lr, wd and gc flag; how to build the optimizer."""

    grouped: bool
    lr: list  # per parameter: a float, a list or a schedule
    wd: list  # per parameter: a float or a callable
    gc: list  # per parameter: the group's grad_centralization flag
    loss_scale: float
    order: list  # optimizer order: indices into MODEL
    build: Callable  # build(params) -> optimizer


def scenario(info: OptimInfo, name: str, dtype) -> Scenario:
    """The scenario ``name`` for ``info`` (within what the optimizer accepts)."""
    base = info.learning_rate
    kw = dict(info.kwargs)
    ls = 1.0
    wd: Any = 0.0
    n = len(MODEL)
    if name in ("plain", "decay_scale", "dynamic"):
        lr: Any = base
        if name == "decay_scale":
            wd, ls = 0.01, (4.0 if info.loss_scale else 1.0)
        if name == "dynamic":
            wd = decay_schedule if info.dynamic_wd else 0.01
            if info.lr_forms:
                lr = Halving(base)
        scale_kw = {"loss_scale": ls} if info.loss_scale else {}

        def build(params, lr=lr, wd=wd):
            return info.cls(params, learning_rate=lr, weight_decay=wd, **scale_kw, **kw)

        return Scenario(False, [lr] * n, [wd] * n, [False] * n, ls, list(range(n)), build)
    # grouped: {conv, fc.weight}: own lr (a table shorter than the run), wd 0.02, gc; {bn.*}: defaults (wd 0);
    # {fc.bias}: own fixed lr and a dynamic wd.  "ordered": order_params reverses the optimizer order.
    ls = 2.0 if info.loss_scale else 1.0
    table = [base * 2, base, base / 2]  # 4 steps: the last one is past the end (lr 0.0)
    g0 = dict(weight_decay=0.02, grad_centralization=True)
    g2 = dict(weight_decay=decay_schedule if info.dynamic_group_wd else 0.03)
    if info.lr_forms:
        g0["lr"] = table
        g2["lr"] = base * 3
    lr0 = table if info.lr_forms else base
    lr2 = base * 3 if info.lr_forms else base
    groups_idx = [[0, 1], [2, 3], [4]]
    lrs = [lr0, lr0, base, base, lr2]
    wds = [0.02, 0.02, 0.0, 0.0, g2["weight_decay"]]
    gcs = [True, True, False, False, False]
    order = [4, 3, 2, 1, 0] if name == "ordered" else [0, 1, 2, 3, 4]
    scale_kw = {"loss_scale": ls} if info.loss_scale else {}

    def build(params):
        by_name = {p.name: p for p in params}
        names = [name_ for name_, _ in MODEL]
        groups = [
            dict(params=[by_name[names[i]] for i in groups_idx[0]], **g0),
            dict(params=[by_name[names[i]] for i in groups_idx[1]]),
            dict(params=[by_name[names[i]] for i in groups_idx[2]], **g2),
        ]
        if name == "ordered":
            groups.append(dict(order_params=[by_name[names[i]] for i in order]))
        # groups without a weight_decay take the constructor's: 0.0 (AdEMAMix's default is 1e-2)
        return info.cls(groups, learning_rate=base, weight_decay=0.0, **scale_kw, **kw)

    return Scenario(True, lrs, wds, gcs, ls, order, build)


def make_data(dtype, seed: int = 0, steps: int = STEPS):
    """Initial parameter values and the gradients of every step (dicts by name), in ``dtype``."""
    rng = np.random.default_rng(seed)
    init = {name: rng.standard_normal(shape).astype(dtype) for name, shape in MODEL}
    grads = [{name: rng.standard_normal(shape).astype(dtype) for name, shape in MODEL} for _ in range(steps)]
    return init, grads


def make_params(init: dict) -> list:
    return [Parameter(np.array(v), name) for name, v in init.items()]


def run_optimizer(info: OptimInfo, sc: Scenario, init: dict, grads: list):
    """Build the optimizer over fresh parameters and run every step; returns (optimizer, params by name)."""
    params = make_params(init)
    opt = sc.build(params)
    names = [MODEL[i][0] for i in sc.order]
    for step_grads in grads:
        assert (
            opt(tuple(step_grads[n] * np.asarray(sc.loss_scale, step_grads[n].dtype) for n in names)) is True
        )
    return opt, {p.name: p for p in params}


def lr_at(spec: Any, t: int) -> float:
    if isinstance(spec, LearningRateSchedule):
        return spec(t)
    if isinstance(spec, list):
        return spec[t] if t < len(spec) else 0.0
    return spec


def wd_at(spec: Any, t: int) -> float:
    return spec(t) if callable(spec) else spec


def compose(info: OptimInfo, sc: Scenario, init: dict, grads: list, backend, dtype):
    """The optimizer's trajectory composed by hand from ``backend``'s per-parameter ops, in ``dtype``.

    Returns (params by name, slots by name -> {slot: array}, final beta powers, final global step).
    """
    dt = np.dtype(dtype)
    names = [name for name, _ in MODEL]
    w = {n: init[n].astype(dt) for n in names}
    slots = {n: {s: np.full(init[n].shape, v, dt) for s, v in info.slots.items()} for n in names}
    # MindSpore's decay flags: ungrouped by name (FTRL: all), grouped by the group's decay.
    if sc.grouped:
        flags = [callable(d) or d > 0 for d in sc.wd]
    else:
        flags = [info.decay_all or ("beta" not in n and "gamma" not in n) for n in names]
    dynamic = any(not isinstance(x, float) for x in sc.lr) or any(callable(x) for x in sc.wd)
    # beta powers: shared, in the parameters' dtype, advanced before each step
    pdt = np.dtype(init[names[0]].dtype)
    powers = {k: pdt.type(1.0) for k in info.powers}
    gs = 0
    for step_grads in grads:
        powers = {k_: pdt.type(powers[k_] * pdt.type(b)) for k_, b in info.powers.items()}
        t = gs
        for i, n in enumerate(names):
            g = (step_grads[n] * np.asarray(sc.loss_scale, step_grads[n].dtype)).astype(dt)
            wd = wd_at(sc.wd[i], t)
            if info.decay == "coupled" and flags[i] and (callable(sc.wd[i]) or wd > 0):
                g = w[n] * dt.type(wd * sc.loss_scale) + g
            if info.centralizes and sc.gc[i] and g.ndim >= 2 and g.shape[1] % 16 == 0:
                g = g - g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)
            if info.loss_scale and sc.loss_scale != 1.0:
                g = g * dt.type(1.0 / sc.loss_scale)
            ctx = Ctx(
                lr=lr_at(sc.lr[i], t),
                powers=powers,
                t=gs + 1,
                decoupled_wd=wd if flags[i] else 0.0,
                dtype=dt,
            )
            w[n] = info.step(backend, w[n], slots[n], g, ctx)
        if dynamic or info.counts_always:
            gs += 1
    return w, slots, powers, gs
