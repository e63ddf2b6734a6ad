"""``AdaFactor``: factored second moments, relative step sizes (MindSpore ``nn.AdaFactor``)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels.ada_factor import fused_ada_factor
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer

__all__ = ["AdaFactor"]

_SLOTS = ("exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq")


class AdaFactor(Optimizer):
    r"""AdaFactor (Shazeer & Stern 2018) as MindSpore has it (``nn.AdaFactor``; OPTIMIZERS §2.14), per
    parameter with the :func:`~optkernels.kernels.fused_ada_factor` kernel (KERNELS §17).

    Per step (``t`` = the step counter after its increment, 1 on the first step; ``c = decay_rate``)::

        rho   = min(1e-6·t if warmup_init else 1e-2, 1/sqrt(t))    if relative_step
              = the learning rate at the global step               otherwise
        beta2t = 1 − t^(−c)                                        (0 on the first step)

    then, per parameter ``X`` with gradient ``G`` (``RMS(x) = sqrt(mean(x²))`` over the whole tensor)::

        U0 = G² + eps[0]
        rank >= 2 (factored, per trailing 2-D slice):
            exp_avg_sq_row ← beta2t·exp_avg_sq_row + (1 − beta2t)·mean(U0, axis=−1)
            exp_avg_sq_col ← beta2t·exp_avg_sq_col + (1 − beta2t)·mean(U0, axis=−2)
            U = G / sqrt(outer(exp_avg_sq_row / mean(exp_avg_sq_row), exp_avg_sq_col))
        rank < 2:
            exp_avg_sq ← beta2t·exp_avg_sq + (1 − beta2t)·U0;   U = G / sqrt(exp_avg_sq)
        U ← U / max(1, RMS(U)/clip_threshold)
        alpha = rho·max(eps[1], RMS(X)) if scale_parameter else rho
        U ← alpha·U
        if beta1 > 0:  exp_avg ← beta1·exp_avg + (1 − beta1)·U;  U ← exp_avg
        X ← X − weight_decay·alpha·X  (if weight_decay > 0)
        X ← X − U

    (The kernel's docstring gives the exact arithmetic and MindSpore's 1e-30 clamps.)

    As in MindSpore: the decay is decoupled and applies to **every** parameter with the constructor's value
    (no beta/gamma filter; a group's ``weight_decay`` is ignored); ``loss_scale`` is accepted, validated and
    **never applied** (MindSpore's AdaFactor does not divide gradients by it); no gradient centralization;
    dense gradients only. The global step advances every step (MindSpore increments it in ``construct``).
    If ``learning_rate`` is not a plain number (an array, a list or a schedule) the step uses that rate and
    ``scale_parameter`` is forced to False, with a warning (MindSpore logs one). ``target`` may be set
    (Adam's platform rules); it changes nothing numerically.

    Defaults are MindSpore's code, which differs from its 1.x documentation (and TinyMS's): the code has
    ``beta1=0.9`` (the docs say None), so the first moment is kept unless ``beta1=None`` or ``0.0`` is passed.

    Differences from MindSpore:

    * A parameter group with its own ``lr`` raises ValueError at construction (MindSpore's construct cannot
      apply a per-group rate: it accepts the groups and fails or ignores them when the graph runs).
    * ``beta1`` must be at most 1 (MindSpore checks only >= 0; a larger value makes the moment diverge).
    * The per-step scalars ``t``, ``beta2t`` and ``rho`` are computed in float64 and rounded to each
      parameter's dtype by the kernel (MindSpore computes them in float32: the same for float32 parameters
      up to the last bit of ``t^(−c)``).
    * The 1.x composite wrote the parameter-scaled rate back into the learning rate; that bug is not copied.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`; groups may not set ``lr``).
        learning_rate: None (default; required with ``relative_step=True``) or, with
            ``relative_step=False``, any learning-rate form of :class:`Optimizer`.
        eps: ``(eps1, eps2)``, a list or tuple of two floats >= 0. Default ``(1e-30, 1e-3)``.
        clip_threshold: float >= 0 (``d``). Default 1.0.
        decay_rate: float in (0, 1) (``c``). Default 0.8.
        beta1: None, or an int or float in [0, 1]; None or 0 keep no first moment. Default 0.9.
        weight_decay: float in [0, 1) (an int is a TypeError, as in MindSpore's code; its documentation
            accepts an int). Default 0.0.
        scale_parameter: bool. Default True.
        relative_step: bool. Default True.
        warmup_init: truthy to use the warm-up rate ``1e-6·t`` (needs ``relative_step``); not type-checked,
            as in MindSpore. Default False.
        compression: bool; stores ``exp_avg_sq`` of rank < 2 parameters as float16. Default False.
        loss_scale: float or int > 0, accepted and never applied. Default 1.0.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots (zeros; tuples with one entry per parameter, in order, None where MindSpore keeps a shape-(1,)
    dummy): ``exp_avg`` (parameter shape, only when ``beta1 > 0``), ``exp_avg_sq_row`` (shape
    ``S[:-1]``) and ``exp_avg_sq_col`` (shape ``S[:-2] + S[-1:]``) for parameters of rank >= 2,
    ``exp_avg_sq`` (parameter shape; float16 with ``compression``) for the others. All arrays of the
    parameter's dtype and device except the compressed ``exp_avg_sq``. :meth:`state_dict` holds the
    existing slots (``"exp_avg_sq_row.<name>"``...), ``"step"`` (0-d float32, as MindSpore's counter) and
    ``"global_step"``.

    Raises:
        ValueError: ``learning_rate`` given with ``relative_step``; ``warmup_init`` without
            ``relative_step``; no ``learning_rate`` without ``relative_step``; ``eps`` not of length 2; a
            value out of range; a group with ``lr``; the base class's value errors.
        TypeError: ``eps`` not a list/tuple; a non-float ``eps`` item, ``clip_threshold``, ``decay_rate`` or
            ``weight_decay``; a non-bool ``scale_parameter``, ``relative_step`` or ``compression``; ``beta1``
            neither None nor a number; the base class's type errors.
    """

    _coupled_decay = False
    _centralizes = False
    _scales_gradients = False
    _always_counts_steps = True
    _distinct_gradients = True
    _target_rules = "platform"

    def __init__(
        self,
        params: Any,
        learning_rate: Any = None,
        eps: Any = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = 0.8,
        beta1: Any = 0.9,
        weight_decay: float = 0.0,
        scale_parameter: bool = True,
        relative_step: bool = True,
        warmup_init: Any = False,
        compression: bool = False,
        loss_scale: Any = 1.0,
        comm: Any = None,
    ):
        owner = type(self).__name__
        if learning_rate is not None and relative_step:
            raise ValueError(
                f"For '{owner}', cannot combine a manual 'learning_rate' with 'relative_step=True'"
            )
        if warmup_init and not relative_step:
            raise ValueError(f"For '{owner}', 'warmup_init' requires 'relative_step=True'")
        if learning_rate is None and not relative_step:
            raise ValueError(
                f"For '{owner}', 'learning_rate' is None with 'relative_step=False': give a "
                f"learning rate or use the relative step"
            )
        plain_rate = learning_rate is None or (
            isinstance(learning_rate, (int, float, np.integer, np.floating))
            and not isinstance(learning_rate, (bool, np.bool_))
        )
        super().__init__(
            0.0 if learning_rate is None else learning_rate, params, weight_decay, loss_scale, comm=comm
        )
        if self.is_group_lr:
            raise ValueError(
                f"For '{owner}', a parameter group may not set 'lr': AdaFactor applies one "
                f"learning rate to every parameter"
            )
        self.eps = self._check_eps(eps)
        clip_threshold = check_float("clip_threshold", clip_threshold, owner)
        self.clip_threshold = check_range("clip_threshold", clip_threshold, owner, 0.0)
        if clip_threshold == 0 and math.copysign(1.0, clip_threshold) < 0:
            raise ValueError(f"For '{owner}', 'clip_threshold' must be in [0, inf], got -0.0")
        decay_rate = check_float("decay_rate", decay_rate, owner)
        self.decay_rate = check_range(
            "decay_rate", decay_rate, owner, 0.0, 1.0, low_open=True, high_open=True
        )
        weight_decay = check_float("weight_decay", weight_decay, owner)
        self.weight_decay_value = check_range("weight_decay", weight_decay, owner, 0.0, 1.0, high_open=True)
        self.scale_parameter = check_bool("scale_parameter", scale_parameter, owner)
        self.relative_step = check_bool("relative_step", relative_step, owner)
        self.compression = check_bool("compression", compression, owner)
        self.beta1 = self._check_beta1(beta1)
        self.warmup_init = bool(warmup_init)
        self.scale_lr = plain_rate
        if not plain_rate and self.scale_parameter:
            warnings.warn(
                f"For '{owner}', a learning-rate table or schedule is used as given: "
                f"'scale_parameter' is set to False",
                UserWarning,
                stacklevel=2,
            )
            self.scale_parameter = False
        self._step = 0
        self.init_ada_factor_state(self.beta1)

    def init_ada_factor_state(self, beta1: float | None) -> None:
        r"""Create the moment states (all zeros) for ``beta1``, as MindSpore's method of that name does.

        The first moment ``exp_avg`` (the parameter's shape) exists only when ``beta1 > 0``; a parameter
        of rank >= 2 gets the factored second moments ``exp_avg_sq_row`` (shape ``S[:-1]``) and
        ``exp_avg_sq_col`` (shape ``S[:-2] + S[-1:]``), any other the full ``exp_avg_sq`` (the
        parameter's shape, float16 when the optimizer was built with ``compression=True``). Slots that
        MindSpore fills with a shape-(1,) dummy are None here. The constructor calls this method; calling
        it again replaces every moment with zeros and sets :attr:`beta1` and :attr:`use_first_moment`
        (the step counters are kept, as in MindSpore).

        Parameters
        ----------
        beta1 : float, int or None
            The first-moment decay in [0, 1]; None or 0 keep no first moment.

        Raises
        ------
        TypeError
            ``beta1`` is neither None nor an int or float.
        ValueError
            ``beta1`` is outside [0, 1].
        """
        self.beta1 = self._check_beta1(beta1)
        self.use_first_moment = self.beta1 > 0.0
        self._slots: dict[str, list[Any]] = {name: [] for name in _SLOTS}
        for plan in self._plans:
            self._add_parameter_slots(plan)
        for name in _SLOTS:
            setattr(self, name, tuple(self._slots[name]))

    def _check_beta1(self, beta1: Any) -> float:
        owner = self._owner
        if beta1 is None:
            beta1 = 0.0
        return check_range("beta1", check_float("beta1", beta1, owner, allow_int=True), owner, 0.0, 1.0)

    def _check_eps(self, eps: Any) -> tuple[float, float]:
        owner = self._owner
        if not isinstance(eps, (list, tuple)):
            raise TypeError(
                f"For '{owner}', 'eps' must be a list or tuple (eps1, eps2), got {type(eps).__name__}"
            )
        if len(eps) != 2:
            raise ValueError(f"For '{owner}', 'eps' must have 2 values (eps1, eps2), got {len(eps)}")
        eps1, eps2 = (
            check_range(f"eps[{k}]", check_float(f"eps[{k}]", e, owner), owner, 0.0)
            for k, e in enumerate(eps)
        )
        return eps1, eps2

    def _state_arrays(self, plan: Any) -> list[tuple[str, Any]]:
        return [("the parameter", plan.param.data)] + [
            (f"its slot {name}", self._slots[name][plan.index]) for name in _SLOTS
        ]

    def _add_parameter_slots(self, plan: Any) -> None:
        shape, dtype = plan.shape, plan.dtype

        def zeros(shp: tuple, dt: Any) -> Any:
            array = np.zeros(shp, dtype=dt)
            return _cuda.to_device(array) if plan.device == "cuda" else array

        if not plan.owned:  # another rank of a parallel optimizer keeps this parameter's slots
            for name in _SLOTS:
                self._slots[name].append(None)
            return
        factored = len(shape) >= 2
        self._slots["exp_avg"].append(zeros(shape, dtype) if self.use_first_moment else None)
        self._slots["exp_avg_sq_row"].append(zeros(shape[:-1], dtype) if factored else None)
        self._slots["exp_avg_sq_col"].append(zeros(shape[:-2] + shape[-1:], dtype) if factored else None)
        self._slots["exp_avg_sq"].append(
            None if factored else zeros(shape, np.float16 if self.compression else dtype)
        )

    @property
    def step_count(self) -> int:
        """MindSpore's ``step`` counter: the number of steps taken (``t`` of the last step)."""
        return self._step

    # ------------------------------------------------------------------------------------ the step

    def _prepare_step(self, ctx: Any) -> None:
        t = float(self._step + 1)
        ctx.extra["t"] = t
        ctx.extra["beta2t"] = 1.0 - t ** (-self.decay_rate)
        if self.scale_lr and self.relative_step:
            min_step = 1e-6 * t if self.warmup_init else 1e-2
            ctx.extra["rho"] = min(min_step, 1.0 / math.sqrt(t))

    def _commit_step(self, ctx: Any) -> None:
        self._step = int(ctx.extra["t"])

    def _kernel_scalars(self, ctx: Any, lr: float, dtype: np.dtype) -> tuple:
        return (ctx.extra.get("rho", lr),)

    def _apply_dense(self, plan: Any, grad: Any, scalars: tuple, ctx: Any) -> None:
        k = plan.index
        slots = [self._slots[name][k] for name in _SLOTS]
        fused_ada_factor(
            self.eps,
            self.clip_threshold,
            self.beta1,
            ctx.extra["beta2t"],
            self.weight_decay_value,
            scalars[0],
            grad.reshape(plan.shape),
            plan.param.data,
            *slots,
            enable_scale_parameter=self.scale_parameter,
            enable_first_moment=self.use_first_moment,
            enable_weight_decay=self.weight_decay_value > 0.0,
        )

    # ------------------------------------------------------------------------------------ state

    def _scalar_state(self) -> dict[str, np.ndarray]:
        return {"step": np.array(self._step, dtype=np.float32)}

    def _load_scalar_state(self, state: dict[str, np.ndarray]) -> None:
        self._step = int(state["step"])

    def load_state_dict(self, state: Any) -> None:
        """Restore a state saved by :meth:`state_dict` (see :meth:`Optimizer.load_state_dict`); ``"step"``
        must also be a whole number >= 0 (ValueError, raised before anything is written)."""
        if hasattr(state, "keys") and "step" in state.keys():
            step = np.asarray(state["step"])
            if step.shape == () and step.dtype.kind == "f" and not (step >= 0 and step == np.floor(step)):
                raise ValueError(
                    f"For '{self._owner}', the state entry 'step' must be a whole number >= 0, got {step}"
                )
        super().load_state_dict(state)

    def _state_layout(self) -> dict[str, tuple]:
        layout: dict[str, tuple] = {"global_step": ((), np.dtype(np.int64), None)}
        for name in _SLOTS:
            for plan, array in zip(self._plans, self._slots[name]):
                if array is not None:
                    layout[f"{name}.{plan.name}"] = (tuple(array.shape), np.dtype(array.dtype), array)
        for key, value in self._scalar_state().items():
            layout[key] = (value.shape, value.dtype, None)
        for key, (array, value) in self._low_precision_state().items():  # master weights
            layout[key] = (
                (tuple(array.shape), np.dtype(array.dtype), array)
                if array is not None
                else (value.shape, value.dtype, None)
            )
        return layout

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as a flat ``{str: NumPy array}`` dict of copies: ``"global_step"``, ``"step"`` and
        ``"<slot>.<parameter name>"`` for each existing slot (see the class docstring)."""
        out = {"global_step": np.array(self._global_step, dtype=np.int64)}
        for key, (_, _, array) in self._state_layout().items():
            if array is not None:
                out[key] = array.copy() if isinstance(array, np.ndarray) else _cuda.to_host(array)
        out.update({k: np.array(v) for k, v in self._scalar_state().items()})
        out.update(
            {k: value.copy() for k, (array, value) in self._low_precision_state().items() if array is None}
        )
        return out
