"""optkernels as a PyTorch optimizer backend: drop-in ``torch.optim`` classes that run optkernels' kernels on
the tensors' own memory (CPU tensors through NumPy views and multi-tensor loops, CUDA tensors through
``__cuda_array_interface__``), and MindSpore's optimizers over torch parameters.

Importing this package imports torch (``pip install -e ".[torch]"``); ``import optkernels`` never does.
Where torch runs its CPU kernels on OpenMP threads, it also asks Numba for its OpenMP threading layer
(unless a layer was chosen or already started: README, "Threads and processes").
"""

from __future__ import annotations

try:
    import torch as _torch
except ImportError as error:  # pragma: no cover - exercised only without torch
    from .._install import install_hint

    raise ImportError(f"optkernels.torch needs PyTorch: {install_hint('torch')}") from error

from ..kernels import _threading
from .adafactor import Adafactor
from .adagrad import Adagrad, RMSprop
from .adam import Adam, Adamax, AdamW
from .ademamix import AdEMAMix
from .adopt import ADOPT
from .any_precision import AnyPrecisionAdamW
from .lion import Lion
from .lowbit import Adagrad8bit, Adam8bit, AdamW8bit, AdEMAMix8bit, Lion8bit, RMSprop8bit, SGD8bit
from .mindspore import FTRL, LARS, AdaFactor, AdamWeightDecay, Lamb, LazyAdam, Momentum, ProximalAdagrad
from .muon import Muon, MuonWithAdamW
from .rowwise_adagrad import RowWiseAdagrad
from .schedule_free import AdamWScheduleFree, SGDScheduleFree
from .schedules import ScheduleLR
from .sgd import SGD
from .sparse_adam import SparseAdam
from .torch_family import ASGD, Adadelta, NAdam, RAdam, Rprop

__all__ = [
    # torch.optim's classes, torch's math
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "RMSprop",
    "SGD",
    "SparseAdam",
    # MindSpore's, over torch parameters
    "AdaFactor",
    "AdamWeightDecay",
    "FTRL",
    "LARS",
    "Lamb",
    "LazyAdam",
    "Momentum",
    "ProximalAdagrad",
    # optkernels' schedules as a torch LR scheduler
    "ScheduleLR",
    # the rest of torch.optim's element-wise family, torch's math
    "NAdam",
    "RAdam",
    "Adadelta",
    "ASGD",
    "Rprop",
    "Adafactor",
    "Muon",
    # Muon on the hidden matrices, AdamW on the rest
    "MuonWithAdamW",
    # the modern rules (docs/guide/modern_rules.rst)
    "Lion",
    "ADOPT",
    "AdEMAMix",
    # bitsandbytes' 8-bit optimizers
    "Adam8bit",
    "AdamW8bit",
    "Lion8bit",
    "AdEMAMix8bit",
    "SGD8bit",
    "RMSprop8bit",
    "Adagrad8bit",
    # FBGEMM's row-wise Adagrad for embedding tables
    "RowWiseAdagrad",
    "AdamWScheduleFree",
    "SGDScheduleFree",
    # torchdistx's AnyPrecisionAdamW (Kahan-compensated bfloat16 updates)
    "AnyPrecisionAdamW",
]

if "parallel backend: OpenMP" in _torch.__config__.parallel_info():
    # torch's OpenMP threads keep spinning after each of its kernels: a TBB worker woken for a step right
    # after the backward pass can lose its core to them (bench/torch_step.py); OpenMP threads share fairly.
    # Numba's OpenMP layer then runs on torch's libgomp, whose thread count its start would reset: kept.
    _threading.prefer_openmp((_torch.get_num_threads, _torch.set_num_threads))
