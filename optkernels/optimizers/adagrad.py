"""``Adagrad`` (MindSpore ``nn.Adagrad``)."""

from __future__ import annotations

from typing import Any

from ..kernels._checks import check_range
from ..kernels.adagrad import _adagrad
from ..sparse import sparse_apply_adagrad
from ._validators import check_bool, check_float
from ._validators import check_range as check_arg_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    r"""Adagrad (MindSpore ``nn.Adagrad``; OPTIMIZERS §2.8), per parameter with ``apply_adagrad``::

        g ← w·(wd·loss_scale) + g (decay flag) → centralize → g ← g/loss_scale
        accum ← accum + g²           (only if update_slots)
        w ← w − lr·g/sqrt(accum)

    No hidden ``1e-6`` under the root (MindSpore's CPU kernel adds one; its docs do not). Row-sparse
    gradients (an optkernels extension: MindSpore's nn.Adagrad is dense only) go to ``sparse_apply_adagrad``
    after the optimizer merges duplicate indices (when :attr:`unique`): only the indexed rows change.

    Note the positional order: ``accum`` comes before ``learning_rate``.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        accum: initial value of the ``accum`` slot, a float >= 0. Default 0.1.
        learning_rate: default 0.001 (any form of :class:`Optimizer`).
        update_slots: bool. Default True.
        loss_scale: float or int > 0. Default 1.0.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``accum`` (filled with ``accum``).

    Raises:
        TypeError: ``accum`` not a float, ``update_slots`` not a bool; the base class's errors.
        ValueError: ``accum`` < 0; the base class's errors.
    """

    _accepts_sparse = True

    def __init__(
        self,
        params: Any,
        accum: float = 0.1,
        learning_rate: Any = 0.001,
        update_slots: bool = True,
        loss_scale: float = 1.0,
        weight_decay: Any = 0.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.accum_init = check_arg_range("accum", check_float("accum", accum, owner), owner, 0.0)
        self.update_slots = check_bool("update_slots", update_slots, owner)
        self._add_slots({"accum": self.accum_init})

    def _kernel_scalars(self, ctx, lr, dtype):
        lr_ = scalar_batch(dtype).scalar("lr", lr)
        check_range("lr", lr_, 0.0)
        return lr_, dtype.type(0.0), self.update_slots

    def _dense_kernel(self, plan):
        return _adagrad, (plan.flat, plan.flats[0])

    def _apply_sparse(self, plan, grad, ctx):
        grad = self._merge_if_unique(grad)
        sparse_apply_adagrad(
            plan.param.data,
            plan.slots["accum"],
            grad.values,
            grad.indices,
            lr=ctx.lrs[plan.lr_index],
            update_slots=self.update_slots,
        )
