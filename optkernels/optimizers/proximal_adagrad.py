"""``ProximalAdagrad`` (MindSpore ``nn.ProximalAdagrad``)."""

from __future__ import annotations

from typing import Any

from ..kernels.proximal_adagrad import _proximal_adagrad, proximal_hyper
from ..sparse import fused_sparse_proximal_adagrad, sparse_apply_proximal_adagrad
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["ProximalAdagrad"]


class ProximalAdagrad(Optimizer):
    r"""Proximal Adagrad (MindSpore ``nn.ProximalAdagrad``; OPTIMIZERS §2.10), per parameter with
    ``apply_proximal_adagrad``::

        g ← w·(wd·loss_scale) + g (decay flag) → centralize → g ← g/loss_scale
        accum ← accum + g²;   α = lr/sqrt(accum);   v = w − α·g
        w ← sign(v)·max(|v| − α·l1, 0)/(1 + α·l2)

    (The adaptive rate α, not the raw lr, multiplies l1 and l2, as the kernels do; MindSpore's docstring
    shows lr.) Row-sparse gradients update only their rows (duplicates summed): with ``target == 'CPU'``
    through ``fused_sparse_proximal_adagrad``, otherwise (the default) ``sparse_apply_proximal_adagrad``
    after the optimizer merges duplicates (when :attr:`unique`). ``target`` accepts 'CPU', 'GPU', 'Ascend'
    (type and membership checks only).

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        accum: initial value of the ``accum`` slot, a float >= 0. Default 0.1.
        learning_rate: default 0.001 (any form of :class:`Optimizer`).
        l1, l2: floats >= 0. Defaults 0.0.
        use_locking: bool. Default False.
        loss_scale: float or int > 0. Default 1.0.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``accum`` (filled with ``accum``).

    Raises:
        TypeError: ``accum``/``l1``/``l2`` not floats, ``use_locking`` not a bool; the base class's errors.
        ValueError: a negative value; the base class's errors.
    """

    _accepts_sparse = True
    _target_rules = "membership"

    def __init__(
        self,
        params: Any,
        accum: float = 0.1,
        learning_rate: Any = 0.001,
        l1: float = 0.0,
        l2: float = 0.0,
        use_locking: bool = False,
        loss_scale: float = 1.0,
        weight_decay: Any = 0.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.accum_init = check_range("accum", check_float("accum", accum, owner), owner, 0.0)
        self.l1 = check_range("l1", check_float("l1", l1, owner), owner, 0.0)
        self.l2 = check_range("l2", check_float("l2", l2, owner), owner, 0.0)
        self.use_locking = check_bool("use_locking", use_locking, owner)
        self._add_slots({"accum": self.accum_init})

    def _kernel_scalars(self, ctx, lr, dtype):
        return proximal_hyper(scalar_batch(dtype), lr, self.l1, self.l2)

    def _dense_kernel(self, plan):
        return _proximal_adagrad, (plan.flat, plan.flats[0])

    def _apply_sparse(self, plan, grad, ctx):
        lr, var, accum = ctx.lrs[plan.lr_index], plan.param.data, plan.slots["accum"]
        if self._target == "CPU" and self._target_assigned:
            fused_sparse_proximal_adagrad(
                var,
                accum,
                lr,
                self.l1,
                self.l2,
                grad.values,
                grad.indices,
                use_locking=self.use_locking,
                out_of_range="drop",
            )
        else:
            grad = self._merge_if_unique(grad)
            sparse_apply_proximal_adagrad(
                var, accum, lr, self.l1, self.l2, grad.values, grad.indices, use_locking=self.use_locking
            )
