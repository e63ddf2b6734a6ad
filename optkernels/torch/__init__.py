"""optkernels as a PyTorch optimizer backend: drop-in ``torch.optim`` classes that run optkernels' kernels on
the tensors' own memory (CPU tensors through NumPy views and multi-tensor loops, CUDA tensors through
``__cuda_array_interface__``), and MindSpore's optimizers over torch parameters.

Importing this package imports torch (``pip install -e ".[torch]"``); ``import optkernels`` never does.
Where torch runs its CPU kernels on OpenMP threads, it also asks Numba for its OpenMP threading layer
(unless a layer was chosen or already started: README, "Threads and processes").
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError("optkernels.torch needs PyTorch: python -m pip install 'optkernels[torch]'") from error

from ..kernels import _threading
from .adagrad import Adagrad, RMSprop
from .adam import Adam, Adamax, AdamW
from .mindspore import FTRL, LARS, AdaFactor, AdamWeightDecay, Lamb, LazyAdam, Momentum, ProximalAdagrad
from .sgd import SGD
from .schedules import ScheduleLR
from .sparse_adam import SparseAdam
from .lion import Lion
from .adopt import ADOPT
from .ademamix import AdEMAMix
from .schedule_free import AdamWScheduleFree, SGDScheduleFree

__all__ = [
    # torch.optim's classes, torch's math
    "Adagrad", "Adam", "AdamW", "Adamax", "RMSprop", "SGD", "SparseAdam",
    # MindSpore's, over torch parameters
    "AdaFactor", "AdamWeightDecay", "FTRL", "LARS", "Lamb", "LazyAdam", "Momentum", "ProximalAdagrad",
    # optkernels' schedules as a torch LR scheduler
    "ScheduleLR",
    # the modern rules (docs/guide/modern_rules.rst)
    "Lion",
    "ADOPT",
    "AdEMAMix",
    "AdamWScheduleFree",
    "SGDScheduleFree",
]

if "parallel backend: OpenMP" in _torch.__config__.parallel_info():
    # torch's OpenMP threads keep spinning after each of its kernels: a TBB worker woken for a step right
    # after the backward pass can lose its core to them (bench/torch_step.py); OpenMP threads share fairly
    _threading.prefer_openmp()
