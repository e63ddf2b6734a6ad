"""``LazyAdam``: Adam whose row-sparse updates touch only the indexed rows (MindSpore ``nn.LazyAdam``)."""

from __future__ import annotations

from typing import Any

from ._validators import check_float, check_range
from .adam import Adam

__all__ = ["LazyAdam"]


class LazyAdam(Adam):
    r"""Lazy Adam (MindSpore ``nn.LazyAdam``, deprecated there in favour of ``Adam(use_lazy=True)``, which
    this equals; OPTIMIZERS §2.6).

    Dense gradients get the full :class:`Adam` update. Row-sparse gradients update only the rows in their
    indices (duplicates summed first)::

        rows r:  m[r] ← β1·m[r] + (1−β1)·g_r;  v[r] ← β2·v[r] + (1−β2)·g_r²;
                 w[r] ← w[r] − lr_t·m[r]/(sqrt(v[r]) + eps)
        other rows: unchanged; the beta powers still advance every step (they are global).

    Args: as :class:`Adam` without ``use_amsgrad``/kwargs, except that ``weight_decay`` must be a ``float``
    >= 0 (an int such as 0, or a callable, is a TypeError: MindSpore's check is stricter than its docs).

    Raises:
        TypeError: ``weight_decay`` not a float; as :class:`Adam`.
        ValueError: ``weight_decay`` < 0; as :class:`Adam`.
    """

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        use_locking: bool = False,
        use_nesterov: bool = False,
        weight_decay: float = 0.0,
        loss_scale: float = 1.0,
        comm: Any = None,
    ):
        super().__init__(
            params,
            learning_rate,
            beta1,
            beta2,
            eps,
            use_locking,
            use_nesterov,
            weight_decay,
            loss_scale,
            use_lazy=True,
            comm=comm,
        )
        check_range("weight_decay", check_float("weight_decay", weight_decay, self._owner), self._owner, 0.0)
