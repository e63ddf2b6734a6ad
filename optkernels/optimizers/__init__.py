"""Optimizer classes over NumPy (or CUDA) parameters with MindSpore's ``nn.optim`` API.

Each optimizer drives the kernels of :mod:`optkernels.kernels` (and :mod:`optkernels.sparse` for row-sparse
gradients); the base :class:`Optimizer` composes weight decay, gradient centralization and loss-scale
division around them once, for all. Names, defaults, group keys, properties and errors are MindSpore's
(OPTIMIZERS.md); each class's docstring gives its update rule.

Example::

    import numpy as np
    from optkernels.optimizers import Momentum, Parameter

    w = Parameter(np.ones((4, 16), np.float32), "fc.weight")
    opt = Momentum([w], learning_rate=0.1, momentum=0.9)
    opt((np.full((4, 16), 0.5, np.float32),))       # one gradient per parameter, in order
"""

from .ada_factor import AdaFactor
from .ada_max import AdaMax
from .adagrad import Adagrad
from .adam import Adam
from .adam_offload import AdamOffload
from .adam_weight_decay import AdamWeightDecay
from .ademamix import AdEMAMix
from .adopt import ADOPT
from .any_precision import AnyPrecisionAdamW
from .dynamic_lr import *  # noqa: F403  -- MindSpore's lr list functions
from .dynamic_lr import __all__ as _dynamic_lr
from .ftrl import FTRL
from .lamb import Lamb
from .lars import LARS
from .lazy_adam import LazyAdam
from .lion import Lion
from .loss_scale import *  # noqa: F403  -- loss-scale managers and the skip-on-overflow step
from .loss_scale import __all__ as _loss_scale
from .lowbit import Adagrad8bit, Adam8bit, AdamW8bit, AdEMAMix8bit, Lion8bit, RMSprop8bit, SGD8bit
from .momentum import Momentum
from .muon import Muon, MuonWithAdamW
from .optimizer import Optimizer, default_decay_filter
from .parameter import Parameter
from .proximal_adagrad import ProximalAdagrad
from .rmsprop import RMSProp
from .rowwise_adagrad import RowWiseAdagrad
from .schedule_free import AdamWScheduleFree, SGDScheduleFree
from .schedules import *  # noqa: F403  -- the learning-rate schedules
from .schedules import __all__ as _schedules
from .sgd import SGD
from .thor import Thor, ThorLayer, thor, thor_inverses
from .torch_adafactor import TorchAdafactor
from .torch_family import ASGD, Adadelta, NAdam, RAdam, Rprop

__all__ = [
    "AdaFactor",
    "AdaMax",
    "Adagrad",
    "Adam",
    "AdamOffload",
    "AdamWeightDecay",
    "FTRL",
    "LARS",
    "Lamb",
    "LazyAdam",
    "Momentum",
    "Optimizer",
    "Parameter",
    "ProximalAdagrad",
    "RMSProp",
    "SGD",
    "Thor",
    "ThorLayer",
    "default_decay_filter",
    "thor",
    "thor_inverses",
    *_schedules,
    *_dynamic_lr,
    *_loss_scale,
    "NAdam",
    "RAdam",
    "Adadelta",
    "ASGD",
    "Rprop",
    "Lion",
    "ADOPT",
    "AdEMAMix",
    "Adam8bit",
    "AdamW8bit",
    "AdEMAMix8bit",
    "Lion8bit",
    "SGD8bit",
    "RMSprop8bit",
    "Adagrad8bit",
    "RowWiseAdagrad",
    "TorchAdafactor",
    "Muon",
    "MuonWithAdamW",
    "AdamWScheduleFree",
    "SGDScheduleFree",
    "AnyPrecisionAdamW",
]
