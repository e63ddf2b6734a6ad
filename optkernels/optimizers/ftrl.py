"""``FTRL``: follow-the-regularized-leader (MindSpore ``nn.FTRL``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.ftrl import (
    _ftrl,
    _ftrl_sqrt,
    _ftrl_v2,
    _ftrl_v2_sqrt,
    ftrl_hyper,
    ftrl_v2_hyper,
    ftrl_v2_variant,
    ftrl_variant,
)
from ..sparse import fused_sparse_ftrl, sparse_apply_ftrl, sparse_apply_ftrl_v2
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["FTRL"]


class FTRL(Optimizer):
    r"""FTRL-proximal (MindSpore ``nn.FTRL``; OPTIMIZERS §2.11), per parameter with ``apply_ftrl``::

        g ← w·(wd·loss_scale) + g (every parameter when ungrouped) → centralize → g ← g/loss_scale
        a' = accum + g²;  p = −lr_power;  σ = (a'^p − accum^p)/lr
        linear ← linear + g − σ·w          (the old w; g + 2·l2_shrinkage·w when l2_shrinkage > 0)
        w ← (sign(linear)·l1 − linear)/(a'^p/lr + 2·l2)  if |linear| > l1,  else 0;   accum ← a'

    Ungrouped, every parameter is decayed (MindSpore forces the decay flags on: no beta/gamma filter);
    grouped, the group rule applies. The learning rate must be one positive Python float: a dynamic or a
    group learning rate is a ValueError (it is an attribute of MindSpore's sparse op). Row-sparse gradients
    update only their rows (duplicates summed): ``target == 'CPU'`` → ``fused_sparse_ftrl``; otherwise (the
    default) ``sparse_apply_ftrl`` after the optimizer merges duplicates (when :attr:`unique`). A step returns
    True, as every optimizer here does (MindSpore's documentation says a tuple: its graph's success flags).

    ``l2_shrinkage`` is an addition of optkernels (MindSpore's ``nn.FTRL`` has none; TensorFlow's FTRL
    optimizer has ``l2_shrinkage_regularization_strength``): when > 0 the step is ``apply_ftrl_v2`` (dense)
    or ``sparse_apply_ftrl_v2`` (row-sparse, on either target), whose linear term takes the gradient
    ``g + 2·l2_shrinkage·w`` (accum the plain g); at its default 0.0 the step is ``apply_ftrl``'s, bit for
    bit.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`; no ``lr`` key).
        initial_accum: initial value of the accumulator, a float >= 0. Default 0.1.
        learning_rate: a float > 0 (an int or array is a TypeError, 0 a ValueError). Default 0.001.
        lr_power: float <= 0 (0: a fixed rate). Default -0.5.
        l1, l2: floats >= 0. Defaults 0.0.
        l2_shrinkage: float >= 0 (optkernels' addition, keyword-only). Default 0.0.
        use_locking: bool. Default False.
        loss_scale: float or int > 0. Default 1.0.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``moments`` (the accumulator, filled with ``initial_accum``), ``linear`` (zeros).

    Raises:
        TypeError: wrong types (learning_rate not a float, others as above); the base class's errors.
        ValueError: dynamic or group learning rate, lr <= 0, lr_power > 0, negative values; the base class's
            errors.
    """

    _decay_all_ungrouped = True
    _accepts_sparse = True
    _target_rules = "membership"

    def __init__(
        self,
        params: Any,
        initial_accum: float = 0.1,
        learning_rate: Any = 0.001,
        lr_power: float = -0.5,
        l1: float = 0.0,
        l2: float = 0.0,
        use_locking: bool = False,
        loss_scale: float = 1.0,
        weight_decay: Any = 0.0,
        comm: Any = None,
        *,
        l2_shrinkage: float = 0.0,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        if self.dynamic_lr or self.is_group_lr:
            raise ValueError(
                f"For '{owner}', a dynamic or group learning rate is not supported: "
                f"'learning_rate' must be one float"
            )
        self.initial_accum = check_range(
            "initial_accum", check_float("initial_accum", initial_accum, owner), owner, 0.0
        )
        self.lr_power = check_range("lr_power", check_float("lr_power", lr_power, owner), owner, None, 0.0)
        self.l1 = check_range("l1", check_float("l1", l1, owner), owner, 0.0)
        self.l2 = check_range("l2", check_float("l2", l2, owner), owner, 0.0)
        shrinkage = check_float("l2_shrinkage", l2_shrinkage, owner)
        self.l2_shrinkage = check_range("l2_shrinkage", shrinkage, owner, 0.0)
        self.use_locking = check_bool("use_locking", use_locking, owner)
        if isinstance(learning_rate, (bool, np.bool_)) or not isinstance(learning_rate, (float, np.floating)):
            raise TypeError(
                f"For '{owner}', 'learning_rate' must be a float, got {type(learning_rate).__name__}"
            )
        self.lr = check_range("learning_rate", float(learning_rate), owner, 0.0, low_open=True)
        self._add_slots({"moments": self.initial_accum, "linear": 0.0})

    def _kernel_scalars(self, ctx, lr, dtype):
        if self.l2_shrinkage > 0.0:
            hyper = ftrl_v2_hyper(scalar_batch(dtype), lr, self.l1, self.l2, self.l2_shrinkage, self.lr_power)
            return ftrl_v2_variant(hyper, _ftrl_v2_sqrt, _ftrl_v2)[1]
        return ftrl_variant(
            ftrl_hyper(scalar_batch(dtype), lr, self.l1, self.l2, self.lr_power), _ftrl_sqrt, _ftrl
        )[1]

    def _dense_kernel(self, plan):
        accum, linear = plan.flats
        if self.l2_shrinkage > 0.0:
            return (_ftrl_v2_sqrt if self.lr_power == -0.5 else _ftrl_v2), (plan.flat, accum, linear)
        return (_ftrl_sqrt if self.lr_power == -0.5 else _ftrl), (plan.flat, accum, linear)

    def _apply_sparse(self, plan, grad, ctx):
        hyper = dict(
            lr=ctx.lrs[plan.lr_index],
            l1=self.l1,
            l2=self.l2,
            lr_power=self.lr_power,
            use_locking=self.use_locking,
        )
        accum, linear = plan.slots["moments"], plan.slots["linear"]
        if self.l2_shrinkage > 0.0:
            grad = self._merge_if_unique(grad)
            sparse_apply_ftrl_v2(
                plan.param.data,
                accum,
                linear,
                grad.values,
                grad.indices,
                l2_shrinkage=self.l2_shrinkage,
                **hyper,
            )
        elif self._target == "CPU" and self._target_assigned:
            fused_sparse_ftrl(
                plan.param.data, accum, linear, grad.values, grad.indices, out_of_range="drop", **hyper
            )
        else:
            grad = self._merge_if_unique(grad)
            sparse_apply_ftrl(plan.param.data, accum, linear, grad.values, grad.indices, **hyper)
