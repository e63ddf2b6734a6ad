"""``AdamOffload``: Adam whose moments live in host memory (MindSpore ``nn.AdamOffload``)."""

from __future__ import annotations

from typing import Any

from .adam import Adam

__all__ = ["AdamOffload"]


class AdamOffload(Adam):
    r"""Adam with the moments in host memory and the math on the host (MindSpore ``nn.AdamOffload``,
    deprecated there in favour of ``Adam(use_offload=True)``, which this equals; OPTIMIZERS §2.5)::

        g ← w·(wd·loss_scale) + g (decay flag)  →  g ← g/loss_scale       (no centralization)
        beta1_power ← beta1_power·beta1;  beta2_power ← beta2_power·beta2
        delta = adam_no_update_param(moment1, moment2, beta1_power, beta2_power, lr, beta1, beta2, eps, g)
                (host: m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  delta = −lr_t·m/(sqrt(v) + eps))
        w ← w + delta

    The parameters may be NumPy arrays or CUDA arrays. For a CUDA parameter the step runs in chunks
    (``optimizers._offload``): each chunk of the gradient comes to a pinned host buffer, the chunk's step is
    computed on the host into another and goes back to the device, where a kernel adds it in place; the copies
    run on CUDA streams, double-buffered, so the host computes the next chunk meanwhile. The bits are those of
    the unchunked host step. With NumPy parameters this is :class:`Adam` up to the moment form
    (``β·m + (1−β)·g`` here, the delta form ``m + (g−m)·(1−β)`` there: the last bits may differ). Dense
    gradients only; ``target`` cannot be set.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-3. beta1, beta2: floats in (0, 1) (0.9, 0.999). eps: float > 0 (1e-8).
        use_locking, use_nesterov: bools (False). weight_decay: >= 0 or a callable (0.0).
        loss_scale: > 0 (1.0).
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots (NumPy arrays, whatever the parameter's device): ``moment1``, ``moment2``; scalars
    ``beta1_power``, ``beta2_power``.

    Raises:
        TypeError, ValueError: as :class:`Adam`.
    """

    _target_rules = None

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        use_locking: bool = False,
        use_nesterov: bool = False,
        weight_decay: Any = 0.0,
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
            use_offload=True,
            comm=comm,
        )

    def _sparse_refusal(self) -> str:
        return f"'{self._owner}' does not support (dense gradients only)"
