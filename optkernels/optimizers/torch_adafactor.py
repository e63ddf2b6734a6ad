"""``TorchAdafactor``: torch.optim.Adafactor's rule (torch's own variant) over NumPy or CUDA parameters."""

from __future__ import annotations

from typing import Any

from ..kernels.torch_adafactor import torch_adafactor
from ._validators import check_bool, check_float, check_range
from .ada_factor import _SLOTS, AdaFactor
from .optimizer import Optimizer

__all__ = ["TorchAdafactor"]


class TorchAdafactor(AdaFactor):
    r"""torch.optim.Adafactor's rule (MODERN.md §7), one :func:`~optkernels.kernels.torch_adafactor` call per
    parameter::

        t = global step after its increment;  w_t = t^τ;  ρ = min(lr, 1/√t);  α = max(ε2, ‖w‖/√N)·ρ
        w ← w·(1 − lr·wd)
        vector:  V = exp_avg_sq ← lerp(exp_avg_sq, g², w_t)
        matrix:  R ← lerp(R, mean_cols(g²), w_t);  C ← lerp(C, mean_rows(g²), w_t);  V = R·C/max(mean(R), ε1)
        U = g/√max(V, ε1²);  w ← w − α/max(1, ‖U‖/(√N·d))·U

    The reductions are float64 sums here (torch takes its norms in the tensor's dtype): equal to torch within
    rounding, not bit for bit (``optkernels.torch.Adafactor`` is). ``eps1=None`` is each parameter dtype's
    machine epsilon (torch takes the first parameter's for its whole group).

    Parameters
    ----------
    params : list
        Parameters or group dicts (see :class:`Optimizer`; groups may not set ``lr``).
    learning_rate : float, array or schedule
        Caps the relative step and scales the decay. Default 1e-2.
    beta2_decay : float
        τ <= 0. Default -0.8.
    eps : tuple
        ``(ε1 or None, ε2)``, both >= 0. Default (None, 1e-3).
    d : float
        Clipping threshold >= 1. Default 1.0.
    weight_decay : float
        Decoupled decay >= 0 (every parameter). Default 0.0.
    maximize : bool
        Maximize the objective. Default False.

    Notes
    -----
    Slots (MindSpore :class:`AdaFactor`'s names): ``exp_avg_sq`` (a parameter of at most 1 dimension: torch's
    ``variance``), ``exp_avg_sq_row`` and ``exp_avg_sq_col`` (torch's ``row_var``/``col_var`` without their
    size-1 axis); scalar ``step``.
    """

    _coupled_decay = False

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-2,
        beta2_decay: float = -0.8,
        eps: Any = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        maximize: bool = False,
    ):
        Optimizer.__init__(self, learning_rate, params, 0.0)
        owner = self._owner
        if self.is_group_lr:
            raise ValueError(f"For '{owner}', a parameter group may not set 'lr'")
        self.beta2_decay = check_range(
            "beta2_decay", check_float("beta2_decay", beta2_decay, owner), owner, None, 0.0
        )
        if not isinstance(eps, (tuple, list)) or len(eps) != 2:
            raise TypeError(f"For '{owner}', 'eps' must be a pair (eps1 or None, eps2), got {eps!r}")
        self.eps1 = (
            None
            if eps[0] is None
            else check_range("eps[0]", check_float("eps[0]", eps[0], owner, allow_int=True), owner, 0.0)
        )
        self.eps2 = check_range("eps[1]", check_float("eps[1]", eps[1], owner, allow_int=True), owner, 0.0)
        self.d = check_range("d", check_float("d", d, owner, allow_int=True), owner, 1.0)
        self.weight_decay_value = check_range(
            "weight_decay", check_float("weight_decay", weight_decay, owner, allow_int=True), owner, 0.0
        )
        self.maximize = check_bool("maximize", maximize, owner)
        self.use_first_moment, self.compression = False, False
        self._step = 0
        self._slots = {name: [] for name in _SLOTS}
        for plan in self._plans:
            self._add_parameter_slots(plan)
        for name in _SLOTS:
            setattr(self, name, tuple(self._slots[name]))
        self._updates: dict = {}

    def _prepare_step(self, ctx: Any) -> None:
        ctx.extra["t"] = float(self._step + 1)

    def _kernel_scalars(self, ctx: Any, lr: float, dtype: Any) -> tuple:
        return (lr,)

    def _apply_dense(self, plan: Any, grad: Any, scalars: tuple, ctx: Any) -> None:
        k, shape = plan.index, plan.shape
        update = self._updates.get(k)
        if update is None:
            update = self._updates[k] = self._new_array(plan, 0.0)
        moments = (
            dict(
                row_var=self._slots["exp_avg_sq_row"][k].reshape(shape[:-1] + (1,)),
                col_var=self._slots["exp_avg_sq_col"][k].reshape(shape[:-2] + (1, shape[-1])),
            )
            if len(shape) >= 2
            else dict(variance=self._slots["exp_avg_sq"][k])
        )
        torch_adafactor(
            plan.param.data,
            grad.reshape(shape),
            int(ctx.extra["t"]),
            lr=float(scalars[0]),
            beta2_decay=self.beta2_decay,
            eps1=self.eps1,
            eps2=self.eps2,
            d=self.d,
            weight_decay=self.weight_decay_value,
            maximize=self.maximize,
            update=update,
            **moments,
        )
