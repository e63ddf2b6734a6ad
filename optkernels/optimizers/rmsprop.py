"""``RMSProp``, plain or centered (MindSpore ``nn.RMSProp``)."""

from __future__ import annotations

from typing import Any

from ..kernels.rms_prop import _centered_rms_prop, _hyper, _rms_prop
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer, scalar_batch

__all__ = ["RMSProp"]


class RMSProp(Optimizer):
    r"""RMSProp (MindSpore ``nn.RMSProp``; OPTIMIZERS §2.9), per parameter with ``apply_rms_prop`` or
    ``apply_centered_rms_prop``::

        g ← w·(wd·loss_scale) + g (decay flag) → centralize → g ← g/loss_scale
        mean_square ← mean_square + (g² − mean_square)·(1 − decay)
        plain:     moment ← momentum·moment + lr·g/sqrt(mean_square + epsilon)
        centered:  mean_grad ← mean_grad + (g − mean_grad)·(1 − decay)
                   moment ← momentum·moment + lr·g/sqrt(mean_square − mean_grad² + epsilon)
                   (moment and w are left alone where that radicand is <= 0)
        w ← w − moment

    ``mean_square`` starts at ONES (MindSpore's), ``moment`` and ``mean_grad`` at zeros; epsilon is inside
    the square root. Dense gradients only.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 0.1 (any form of :class:`Optimizer`).
        decay: float in [0, 1] (MindSpore checks only >= 0; the kernels need <= 1). Default 0.9.
        momentum: float >= 0 (an int such as 0 is a TypeError). Default 0.0.
        epsilon: float > 0. Default 1e-10.
        use_locking: bool. Default False.
        centered: bool. Default False.
        loss_scale: float or int > 0. Default 1.0.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``mean_square`` (ones), ``moment`` (zeros), ``mean_grad`` (zeros, centered only).

    Raises:
        TypeError: ``decay``/``momentum``/``epsilon`` not floats, flags not bools; the base class's errors.
        ValueError: out-of-range values; the base class's errors.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 0.1,
        decay: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-10,
        use_locking: bool = False,
        centered: bool = False,
        loss_scale: float = 1.0,
        weight_decay: Any = 0.0,
        comm: Any = None,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.decay = check_range("decay", check_float("decay", decay, owner), owner, 0.0, 1.0)
        self.momentum = check_range("momentum", check_float("momentum", momentum, owner), owner, 0.0)
        self.epsilon = check_range(
            "epsilon", check_float("epsilon", epsilon, owner), owner, 0.0, low_open=True
        )
        self.use_locking = check_bool("use_locking", use_locking, owner)
        self.centered = check_bool("centered", centered, owner)
        slots = {"mean_square": 1.0, "moment": 0.0}
        if self.centered:
            slots["mean_grad"] = 0.0
        self._add_slots(slots)

    def _kernel_scalars(self, ctx, lr, dtype):
        return _hyper(scalar_batch(dtype), lr, self.decay, self.momentum, self.epsilon)

    def _dense_kernel(self, plan):
        if self.centered:
            ms, mom, mg = plan.flats
            return _centered_rms_prop, (plan.flat, mg, ms, mom)
        ms, mom = plan.flats
        return _rms_prop, (plan.flat, ms, mom)
