"""The modern rules' NumPy classes: constructor checks (type and range errors naming the argument), a step
that fails leaves everything as it was, sparse gradients refused, defaults as the canonical packages'."""
import numpy as np
import pytest

from optkernels.optimizers import ADOPT, AdamWScheduleFree, AdEMAMix, Lion, Parameter, SGDScheduleFree
from optkernels.sparse import RowSparse


def _param(values=(0.5, -1.0, 2.0), name="w"):
    return Parameter(np.array(values), name)


BAD = [
    (Lion, dict(beta1=1.5), ValueError, "beta1"),
    (Lion, dict(beta2="0.9"), TypeError, "beta2"),
    (Lion, dict(decoupled_weight_decay=1), TypeError, "decoupled_weight_decay"),
    (Lion, dict(learning_rate=0.0, decoupled_weight_decay=True), ValueError, "initial learning rate"),
    (ADOPT, dict(beta1=1.0), ValueError, "beta1"),
    (ADOPT, dict(eps=-1e-6), ValueError, "eps"),
    (ADOPT, dict(clip_lambda=0.25), TypeError, "clip_lambda"),
    (ADOPT, dict(decouple="yes"), TypeError, "decouple"),
    (AdEMAMix, dict(beta3=1.0), ValueError, "beta3"),
    (AdEMAMix, dict(alpha=-1.0), ValueError, "alpha"),
    (AdEMAMix, dict(t_alpha=-5), ValueError, "t_alpha"),
    (AdEMAMix, dict(decay_after_update=None), TypeError, "decay_after_update"),
    (AdamWScheduleFree, dict(beta1=0.0), ValueError, "beta1"),
    (AdamWScheduleFree, dict(warmup_steps=2.5), TypeError, "warmup_steps"),
    (AdamWScheduleFree, dict(warmup_steps=-1), ValueError, "warmup_steps"),
    (SGDScheduleFree, dict(momentum=1.0), ValueError, "momentum"),
    (SGDScheduleFree, dict(r="0"), TypeError, "'r'"),
]


@pytest.mark.parametrize("cls, kwargs, exc, name", BAD, ids=[f"{c.__name__}-{n}" for c, _, _, n in BAD])
def test_bad_hyper_parameter_raises_naming_it(cls, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        cls([_param()], **kwargs)


def test_defaults_are_the_canonical_packages():
    p = [_param()]
    lion, adopt, ademamix = Lion(p), ADOPT(p), AdEMAMix(p)
    sf_adamw, sf_sgd = AdamWScheduleFree(p), SGDScheduleFree(p)
    assert (lion.get_lr(), lion.beta1, lion.beta2, lion.weight_decay) == (1e-4, 0.9, 0.99, 0.0)
    assert (adopt.get_lr(), adopt.beta1, adopt.beta2, adopt.eps, adopt.weight_decay) == (1e-3, 0.9, 0.9999, 1e-6,
                                                                                         0.0)
    assert adopt.clip_lambda(16.0) == 2.0 and not adopt.decouple
    assert (ademamix.get_lr(), ademamix.beta1, ademamix.beta2, ademamix.beta3, ademamix.alpha, ademamix.eps,
            ademamix.weight_decay) == (1e-3, 0.9, 0.999, 0.9999, 5.0, 1e-8, 1e-2)
    assert (sf_adamw.get_lr(), sf_adamw.beta1, sf_adamw.beta2, sf_adamw.eps, sf_adamw.warmup_steps, sf_adamw.r,
            sf_adamw.weight_lr_power) == (0.0025, 0.9, 0.999, 1e-8, 0, 0.0, 2.0)
    assert (sf_sgd.get_lr(), sf_sgd.momentum, sf_sgd.weight_lr_power) == (1.0, 0.9, 2.0)


@pytest.mark.parametrize("cls", [Lion, ADOPT, AdEMAMix, AdamWScheduleFree, SGDScheduleFree])
def test_sparse_gradients_are_refused(cls):
    p = Parameter(np.ones((4, 2)), "emb")
    opt = cls([p])
    with pytest.raises(TypeError, match="row-sparse"):
        opt([RowSparse(np.array([1]), np.ones((1, 2)), (4, 2))])
    assert np.array_equal(p.data, np.ones((4, 2)))


def test_adopt_bad_clip_bound_raises_before_anything_changes():
    p = _param()
    opt = ADOPT([p], learning_rate=0.1, clip_lambda=lambda k: -1.0)
    opt([np.array([0.1, 0.2, 0.3])])                 # the first call takes no clip bound
    before = (p.data.copy(), opt.exp_avg_sq[0].data.copy(), opt.global_step)
    with pytest.raises(ValueError, match="clip"):
        opt([np.array([0.1, 0.2, 0.3])])
    assert np.array_equal(p.data, before[0]) and np.array_equal(opt.exp_avg_sq[0].data, before[1])
    assert opt.global_step == before[2]


def test_adopt_first_step_moves_nothing_and_the_global_step_counts():
    p = _param()
    opt = ADOPT([p], learning_rate=0.1, weight_decay=0.5, decouple=True)
    opt([np.array([0.1, -0.3, 0.0])])
    assert np.array_equal(p.data, [0.5, -1.0, 2.0]) and opt.global_step == 1
    np.testing.assert_array_equal(opt.exp_avg_sq[0].data, np.array([0.1, -0.3, 0.0]) ** 2)
