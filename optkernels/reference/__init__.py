"""Plain-NumPy float64 golden reference for MindSpore's optimizer update ops.

Contract (the Numba kernels in :mod:`optkernels.kernels` / :mod:`optkernels.sparse` use the same names and
signatures):

* One function per MindSpore op, in snake case (``ops.ApplyAdam`` -> :func:`apply_adam`). Inputs are
  positional in MindSpore's input order; MindSpore's primitive attributes are keyword-only, with MindSpore's
  names and defaults.
* Pure: inputs are never modified. Every array and scalar input is converted to float64 (a scalar may be a
  Python number, a NumPy scalar, or a 0-d or shape-(1,) array; its single element is used), all arithmetic is
  float64, and the result is a tuple of NEW float64 arrays: the updated state arrays in input order.
  Exceptions: :func:`adam_no_update_param` returns ``(delta, m, v)``; :func:`lars_update` returns
  ``(new_gradient,)``.
* The formulas, their order of operations and association are those of ``KERNELS.md``; where MindSpore's
  CPU kernel departs from its documentation (or from TensorFlow), each function's docstring says which one
  it follows and why.
* IEEE semantics: division by zero and invalid operations give ``inf``/``nan`` silently, as in the kernels.
* Minimal validation: arrays that must agree in shape raise ``ValueError`` naming the argument; there are no
  range checks on hyper-parameters.
* Row-sparse ops take ``(grad, indices)`` with ``grad.shape == (len(indices),) + var.shape[1:]``; they drop
  out-of-range indices, sum duplicated rows (:func:`merge_duplicates`) and apply one update per distinct row.

Nothing here imports Numba or the kernel modules: the reference must stay an independent yardstick.
"""

from __future__ import annotations

from .ada_factor import fused_ada_factor
from .adagrad import apply_adagrad, apply_adagrad_v2
from .adam import adam_no_update_param, adam_weight_decay, apply_adam, apply_adam_with_amsgrad
from .adamax import apply_ada_max
from .ademamix import ademamix
from .adopt import adopt
from .ftrl import apply_ftrl, apply_ftrl_v2
from .lamb import lamb
from .lars import lars_update
from .lion import lion
from .lowbit import rowwise_adagrad  # noqa: F401 -- beside optkernels.sparse.rowwise_adagrad (not in __all__)
from .momentum import apply_momentum, sgd
from .proximal_adagrad import apply_proximal_adagrad
from .rmsprop import apply_centered_rms_prop, apply_rms_prop
from .schedule_free import schedule_free_adamw, schedule_free_sgd
from .sparse import (
    fused_sparse_adam,
    fused_sparse_ftrl,
    fused_sparse_lazy_adam,
    fused_sparse_proximal_adagrad,
    merge_duplicates,
    sparse_apply_adagrad,
    sparse_apply_adagrad_v2,
    sparse_apply_ftrl,
    sparse_apply_ftrl_v2,
    sparse_apply_proximal_adagrad,
)
from .torch_family import (
    newton_schulz,
    torch_adadelta,
    torch_adafactor,
    torch_asgd,
    torch_muon,
    torch_nadam,
    torch_radam,
    torch_rprop,
)

__all__ = [
    # dense
    "apply_adam",
    "apply_adam_with_amsgrad",
    "adam_no_update_param",
    "adam_weight_decay",
    "apply_ada_max",
    "apply_adagrad",
    "apply_adagrad_v2",
    "apply_momentum",
    "sgd",
    "apply_rms_prop",
    "apply_centered_rms_prop",
    "apply_ftrl",
    "apply_ftrl_v2",
    "apply_proximal_adagrad",
    "lars_update",
    "lamb",
    # sparse
    "merge_duplicates",
    "fused_sparse_adam",
    "fused_sparse_lazy_adam",
    "fused_sparse_ftrl",
    "sparse_apply_ftrl",
    "sparse_apply_ftrl_v2",
    "fused_sparse_proximal_adagrad",
    "sparse_apply_proximal_adagrad",
    "sparse_apply_adagrad",
    "sparse_apply_adagrad_v2",
    # AdaFactor (row/column reductions)
    "fused_ada_factor",
    # torch.optim's NAdam, RAdam, Adadelta, ASGD, Rprop, Adafactor, Muon
    "torch_nadam",
    "torch_radam",
    "torch_adadelta",
    "torch_asgd",
    "torch_rprop",
    "torch_adafactor",
    "torch_muon",
    "newton_schulz",
    # the modern rules (MODERN.md §8-11)
    "lion",
    "adopt",
    "ademamix",
    "schedule_free_adamw",
    "schedule_free_sgd",
]
