"""Dense optimizer update kernels (MindSpore's ``ops`` names and input order), for the CPU and CUDA.

Every function takes MindSpore's inputs positionally in MindSpore's order and MindSpore's attributes as
keyword-only arguments, updates its state arrays in place and returns them. NumPy arrays run on the CPU (a
parallel Numba loop); CUDA arrays (Numba device arrays, or anything with ``__cuda_array_interface__``:
CuPy, PyTorch CUDA tensors) run on the GPU through numba-cuda. Scalars may be Python or NumPy numbers, or
0-d or shape-(1,) arrays; they are converted to the arrays' dtype (float32 or float64), so float32 updates
are computed in float32 as MindSpore's kernels do. All validation happens before any array is written.
float16 and bfloat16 (``ml_dtypes.bfloat16``) arrays are computed in float32 and each updated array is
rounded once to its storage dtype: bit-identical to the float32 kernel on upcast copies (see ``_lowp``;
:func:`stochastic_rounding` for stochastic write-back).
"""

from . import _cache_locator  # noqa: F401  (first: every cached function below is stamped by it)
from ._lowp import stochastic_rounding
from .ada_factor import fused_ada_factor, fused_ada_factor_with_global_norm
from .ada_max import apply_ada_max
from .adagrad import apply_adagrad, apply_adagrad_v2
from .adam import adam_no_update_param, apply_adam, apply_adam_with_amsgrad
from .adam_weight_decay import adam_weight_decay
from .ademamix import ademamix
from .adopt import adopt
from .any_precision import any_precision_adamw
from .blockwise_optim import optimizer_update_8bit_blockwise, optimizer_update_32bit
from .ftrl import apply_ftrl, apply_ftrl_v2
from .lamb import lamb
from .lars import lars_update
from .lion import lion
from .momentum import apply_momentum
from .proximal_adagrad import apply_proximal_adagrad
from .quantization import dequantize_blockwise, dynamic_map, quantize_blockwise
from .rms_prop import apply_centered_rms_prop, apply_rms_prop
from .schedule_free import schedule_free_adamw, schedule_free_eval, schedule_free_sgd, schedule_free_train
from .sgd import sgd
from .torch_adafactor import torch_adafactor
from .torch_family import (
    torch_adadelta,
    torch_asgd,
    torch_muon_momentum,
    torch_nadam,
    torch_radam,
    torch_rprop,
)

__all__ = [
    "adam_no_update_param",
    "adam_weight_decay",
    "apply_ada_max",
    "apply_adagrad",
    "apply_adagrad_v2",
    "apply_adam",
    "apply_adam_with_amsgrad",
    "apply_centered_rms_prop",
    "apply_ftrl",
    "apply_ftrl_v2",
    "apply_momentum",
    "apply_proximal_adagrad",
    "apply_rms_prop",
    "lamb",
    "lars_update",
    "sgd",
    "fused_ada_factor",
    "fused_ada_factor_with_global_norm",
    "stochastic_rounding",
    "torch_nadam",
    "torch_radam",
    "torch_adadelta",
    "torch_asgd",
    "torch_rprop",
    "torch_muon_momentum",
    "torch_adafactor",
    "lion",
    "adopt",
    "ademamix",
    "dynamic_map",
    "quantize_blockwise",
    "dequantize_blockwise",
    "optimizer_update_8bit_blockwise",
    "optimizer_update_32bit",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "schedule_free_eval",
    "schedule_free_train",
    "any_precision_adamw",
]
