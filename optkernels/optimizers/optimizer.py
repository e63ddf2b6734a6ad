"""``Optimizer``: the base of every optimizer (MindSpore ``nn.Optimizer``), OPTIMIZERS §1.

It owns what all optimizers share, written once: parameter groups, learning rates and the global step,
weight decay (and its default filter), gradient centralization, loss-scale division, the slots (state
arrays) and their ``state_dict``, and the step pipeline around a subclass's kernel::

    validate every gradient (nothing is written if one is wrong)
    per-step scalars, once per step: lr (and wd) at the current global step, then the step counters
    per parameter:  decay_weight → centralize → unscale → (merge sparse duplicates) → kernel

Subclasses supply the kernel (``_dense_kernel``: an element-wise kernel and the arrays it updates, or their
own ``_apply_dense``; ``_apply_sparse``), the per-step scalars of their kernel (``_kernel_scalars``,
computed once per distinct (learning rate, dtype) per step) and their per-step state
(``_prepare_step``/``_commit_step``, e.g. Adam's beta powers).

CPU parameters whose update is one element-wise kernel are updated group by group, one multi-tensor launch
per group and step (:mod:`._launch_groups`; the same bits as one launch per parameter), so that a step over
a model of many small tensors costs about what one launch over their total size costs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import Batch, _array_facts, _c_strides, _flatten, compute_dtype, plain_array
from ..sparse import RowSparse
from . import _gradient_steps as steps
from . import _groups, _launch_groups, _low_precision, _parallel
from ._groups import check_parameters, default_decay_filter
from ._learning_rate import LearningRate
from ._state import StateDictMixin
from ._validators import check_torch_keywords
from .parameter import Parameter

__all__ = ["Optimizer", "default_decay_filter"]

_TARGETS = ("CPU", "GPU", "Ascend")
_NDARRAY = {np.ndarray}
_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")
_STRIDES = operator.attrgetter("strides")


def scalar_batch(dtype: np.dtype) -> Batch:
    """A :class:`Batch` without arrays, so that a kernel module's own scalar helpers (``_bias_corrected_lr``,
    ``ftrl_hyper``...) convert and range-check an optimizer's per-step scalars once per step, exactly as the
    public kernel function would on every call."""
    return Batch("cpu", np.dtype(dtype), (), [])


def _dtype_of(grad: Any) -> Any:
    values = grad.values if isinstance(grad, RowSparse) else grad
    return getattr(values, "dtype", None)


#: Host slots of one optimizer at least this large together share one allocation per dtype (NumPy advises
#: allocations of 4 MiB and more onto transparent huge pages, which many small arrays would not get).
SLAB_BYTES = 4 << 20
_SLAB_ALIGN = 64  # bytes: every view in a slab starts on a cache line


def _slab_views(plans: list[_Plan], value: float) -> dict[int, np.ndarray]:
    """Plan index -> an array of the plan's shape and dtype filled with ``value``: views of one allocation
    per dtype whose members total :data:`SLAB_BYTES` or more (each view on its own cache lines); plans of
    smaller totals are left out (the caller allocates them one by one)."""
    by_dtype: dict[np.dtype, list[_Plan]] = {}
    for plan in plans:
        by_dtype.setdefault(np.dtype(plan.dtype), []).append(plan)
    views: dict[int, np.ndarray] = {}
    for dtype, members in by_dtype.items():
        per_line = max(1, _SLAB_ALIGN // dtype.itemsize)
        padded = [-(-plan.size // per_line) * per_line for plan in members]
        if sum(padded) * dtype.itemsize < SLAB_BYTES:
            continue
        slab = np.full(sum(padded) + per_line, value, dtype=dtype)
        offset = (-slab.ctypes.data % _SLAB_ALIGN) // dtype.itemsize
        for plan, length in zip(members, padded):
            views[plan.index] = slab[offset : offset + plan.size].reshape(plan.shape)
            offset += length
    return views


class _Plan:
    """What one parameter's update needs, fixed at construction (so a step re-derives nothing)."""

    __slots__ = (
        "index",
        "param",
        "name",
        "shape",
        "dtype",
        "device",
        "size",
        "flat",
        "slots",
        "flats",
        "lr_index",
        "wd_index",
        "decay",
        "gc",
        "prepares",
        "key",
        "scratch",
        "cdtype",
        "grad_dtype",
        "user",
        "owned",
    )

    def __init__(self, index: int, param: Parameter, lr_index: int, wd_index: int, decay: bool, gc: bool):
        self.index = index
        self.param = param
        self.name = param.name
        self.shape = param.shape
        self.dtype = param.dtype
        self.device = "cuda" if param.is_cuda else "cpu"
        self.size = param.size
        self.flat = _flatten(param.data, self.device)
        self.slots: dict[str, Any] = {}
        self.flats: list[Any] = []
        self.lr_index = lr_index
        self.wd_index = wd_index
        self.decay = decay
        self.gc = gc
        self.prepares = False
        self.cdtype = compute_dtype(self.dtype)  # scalars' dtype: float32 for float16/bfloat16 storage
        self.key = (lr_index, self.cdtype)
        self.scratch = None
        self.grad_dtype = self.dtype  # the gradient's dtype (the user's parameter's)
        self.user = param  # the user's parameter (``param`` is its master, if any)
        self.owned = True  # False: another rank of a parallel optimizer updates it (no slots here)


class StepContext:
    """The per-step values shared by every parameter of one step.

    Attributes:
        global_step: the step counter before this step's increment (0 on the first step).
        lrs: the value of each learning rate (by its index) at ``global_step``.
        wds: the value of each weight decay (by its index) at ``global_step``, as given by the user.
        scalars: ``(lr index, dtype) -> the subclass's kernel scalars``.
        extra: per-step values of the subclass (e.g. the new beta powers).
    """

    __slots__ = ("global_step", "lrs", "wds", "scalars", "decays", "reciprocals", "extra")

    def __init__(self, global_step: int, lrs: list, wds: list):
        self.global_step = global_step
        self.lrs = lrs
        self.wds = wds
        self.scalars: dict = {}
        self.decays: dict = {}
        self.reciprocals: dict = {}
        self.extra: dict = {}


class Optimizer(_low_precision.LowPrecisionMixin, StateDictMixin):
    r"""Base class of the optimizers (MindSpore ``nn.Optimizer``); not usable by itself.

    **Parameters and groups.** ``parameters`` is a list of :class:`Parameter`, or a list of group dicts with
    the keys ``params`` (required), ``lr``, ``weight_decay``, ``grad_centralization`` and, in a dict of its
    own, ``order_params`` (the order of all parameters in the optimizer). A group without ``lr`` or
    ``weight_decay`` uses the constructor's value. Unknown keys raise KeyError, the same parameter in two
    groups RuntimeError (ungrouped: two parameters with one name raise ValueError); an ``order_params`` dict
    with other keys raises ValueError (MindSpore's code; its documentation says they are ignored).

    **Learning rate** (``learning_rate`` or a group's ``lr``): a number, a 0-d array (fixed), a 1-D array or
    an iterable (step ``t`` uses element ``t``; past the end the rate is 0.0, as MindSpore's CPU/GPU Gather
    returns), or a ``LearningRateSchedule`` (``lr = schedule(t)``). ``t`` is :attr:`global_step` before its
    increment, so the first step uses ``t = 0``.

    **Global step.** Counts steps only when a learning rate or the weight decay is dynamic (MindSpore's
    ``get_lr``: it is incremented after the rates are read); otherwise it stays 0 (Lamb increments it
    always). Unlike MindSpore, :meth:`get_lr` does not increment it: the increment happens in the step.

    **Weight decay** (coupled L2, for optimizers that call MindSpore's ``decay_weight``)::

        g ← w·(wd·loss_scale) + g        for parameters whose decay flag is set, if wd > 0 or dynamic

    Ungrouped, a parameter's flag is :func:`default_decay_filter` (no 'beta'/'gamma' in its name); grouped,
    it is ``group weight_decay > 0`` (no name filter). ``weight_decay`` may be a number >= 0 or a callable
    of the global step (dynamic decay, MindSpore's weight-decay Cell; also multiplied by loss_scale),
    evaluated at the step's ``t``.

    **Gradient centralization** (grouped parameters with ``grad_centralization=True`` only; after weight
    decay): ``g ← g − mean(g, axes 1..rank−1)`` for gradients of rank >= 2 with ``shape[1] % 16 == 0``,
    others unchanged, silently (MindSpore's actual rule; its documentation announces an error).

    **Loss scale**: gradients arrive multiplied by ``loss_scale`` and are multiplied by ``1/loss_scale``
    (rounded to the gradient's dtype) after centralization; the decay above is pre-multiplied by
    ``loss_scale`` so that the net effect is ``g/loss_scale + wd·w``.

    **Calling**: ``opt(gradients)`` or ``opt.step(gradients)`` with one gradient per parameter, in the
    optimizer's parameter order (:attr:`parameters`), each an array of its parameter's shape, dtype and
    device, or a row-sparse gradient (``optkernels.sparse.RowSparse``) where the optimizer supports it.
    Every gradient is checked before anything is written. Returns True. Gradients are never modified.
    NumPy parameters are updated together, one multi-tensor launch per group of parameters with the same
    kernel, dtype, learning rate and gradient pre-step (the same bits as one launch per parameter), so a
    gradient must not share memory with another parameter or its slots (its value would depend on the
    order of the updates, as with any fused optimizer); parameters that share memory with each other are
    detected and updated one by one, in order.

    **Low precision**: float16/bfloat16 parameters are accepted (float32 math, each updated array rounded
    once), and every optimizer takes four more keywords, ``master_weights=False``,
    ``stochastic_rounding=False``, ``seed=0`` and ``kahan_summation=False`` (float32 master copies and slots;
    stochastic write-back; Kahan-compensated bfloat16 write-back; see :mod:`._low_precision`).

    **State**: slots (per-parameter arrays of the parameter's dtype, on its device), named as MindSpore's
    (``moment1.<param name>``...), per-step scalars (``beta1_power``...), and ``global_step``; see
    :meth:`state_dict`.

    Args:
        learning_rate: the default learning rate (forms above).
        parameters: a list of Parameters or of group dicts (above).
        weight_decay: a float or int >= 0, or a callable of the global step. Default 0.0.
        loss_scale: a float or int > 0. Default 1.0.
        comm: None (one process), or an MPI communicator (mpi4py): the parallel optimizer of
            :mod:`optkernels.distributed` (ZeRO-1: each rank keeps slots for and updates only its share of
            the parameters, then :meth:`broadcast_params`); needs ``import optkernels.distributed`` first.

    Raises:
        ValueError: ``parameters`` is None or empty; a negative learning rate or weight decay; a
            non-positive loss_scale; learning-rate tables of different lengths; order_params errors.
        TypeError: ``parameters`` not iterable or mixing Parameters and dicts; wrong types of the others.
        KeyError: an unknown group key, or a group without 'params'.
        RuntimeError: a parameter in two groups.
    """

    # What the MindSpore optimizer does around its kernel (subclasses override).
    _coupled_decay = True  # calls decay_weight: g ← w·wd·loss_scale + g
    _centralizes = True  # applies gradient centralization to flagged grouped parameters
    _scales_gradients = True  # multiplies gradients by 1/loss_scale
    _decay_all_ungrouped = False  # FTRL: every ungrouped parameter is decayed (no beta/gamma filter)
    _always_counts_steps = False  # Lamb: the global step advances every step
    _accepts_sparse = False  # row-sparse gradients reach _apply_sparse
    _target_rules: str | None = None  # None: the target cannot be set; 'platform' or 'membership' (§1.7)
    _multi_tensor = True  # CPU parameters in multi-tensor launches (False: one launch per parameter)
    _distinct_gradients = False  # the kernel refuses a gradient sharing memory with its parameter or slots

    def __new__(cls, *args: Any, **kwargs: Any) -> Optimizer:
        check_torch_keywords(cls, kwargs)  # ``lr=``: say the name is ``learning_rate`` here
        return super().__new__(cls)

    def __init__(
        self,
        learning_rate: Any,
        parameters: Any,
        weight_decay: Any = 0.0,
        loss_scale: Any = 1.0,
        comm: Any = None,
    ):
        self._init_low_precision()
        owner = self._owner = type(self).__name__
        items = check_parameters(owner, parameters)
        if isinstance(loss_scale, (int, np.integer)) and not isinstance(loss_scale, (bool, np.bool_)):
            loss_scale = float(loss_scale)
        if isinstance(loss_scale, (bool, np.bool_)) or not isinstance(loss_scale, (float, np.floating)):
            raise TypeError(
                f"For '{owner}', 'loss_scale' must be a float or an int, got {type(loss_scale).__name__}"
            )
        if not (math.isfinite(loss_scale) and loss_scale > 0):
            raise ValueError(f"For '{owner}', 'loss_scale' must be a finite number > 0, got {loss_scale}")
        self._loss_scale = float(loss_scale)
        layout = _groups.parse(owner, items, learning_rate, weight_decay, decay_all=self._decay_all_ungrouped)
        self._lrs: list[LearningRate] = layout.lrs
        self._wds: list[Any] = layout.wds
        self.is_group = layout.is_group
        self.is_group_lr = layout.is_group_lr
        self.is_group_params_ordered = layout.ordered
        self._params = tuple(layout.params)
        self.decay_flags = tuple(layout.flags)
        self.grad_centralization = any(layout.gcs)
        self._gc_flags = tuple(layout.gcs)
        self.dynamic_lr = any(self._lrs[i].dynamic for i in set(layout.lr_index))
        self.dynamic_weight_decay = any(callable(self._wds[i]) for i in set(layout.wd_index))
        self._global_step = 0
        self._context_target = "GPU" if any(p.is_cuda for p in self._params) else "CPU"
        self._target = self._context_target
        self._target_assigned = False
        self._unique = not any(getattr(p, "unique", False) for p in self._params)
        self._plans = [
            self._make_plan(k, p, layout.lr_index[k], layout.wd_index[k], layout.flags[k], layout.gcs[k])
            for k, p in enumerate(self._params)
        ]
        # With a communicator, the installed parallel hook decides which parameters this rank owns.
        self._parallel = None if comm is None else _parallel.attach(self, comm)
        self._local_plans = [plan for plan in self._plans if plan.owned]
        self._slot_names: list[str] = []
        self._slot_tuples: dict[str, tuple[Parameter, ...]] = {}
        self._scalar_keys = sorted({plan.key for plan in self._plans}, key=lambda k: (k[0], k[1].str))
        self._dtypes = sorted({plan.cdtype for plan in self._plans}, key=lambda d: d.str)
        self._decay_keys = self._distinct_decay_keys()
        # Every parameter on the CPU: the shapes, dtypes and C strides a plain gradient list has.
        self._plain_layout = (
            None
            if any(plan.device == "cuda" for plan in self._plans)
            else (
                [plan.shape for plan in self._plans],
                [plan.grad_dtype for plan in self._plans],
                [_c_strides(plan.shape, plan.grad_dtype.itemsize) for plan in self._plans],
            )
        )
        self._launches: _launch_groups.LaunchPlan | None = None  # built on the first step

    # ------------------------------------------------------------------------------------ construction

    def _make_plan(
        self, index: int, param: Parameter, lr_index: int, wd_index: int, flag: bool, gc: bool
    ) -> _Plan:
        wd = self._wds[wd_index]
        decay = self._coupled_decay and flag and (callable(wd) or wd > 0.0)
        plan = _Plan(
            index,
            self._master_of(param),
            lr_index,
            wd_index,
            decay,
            gc and self._centralizes and steps.centralizes(param.shape),
        )
        plan.grad_dtype, plan.user = param.dtype, param
        plan.dtype = self._slot_dtype(param, plan.param)
        plan.prepares = plan.decay or plan.gc or (self._scales_gradients and self._loss_scale != 1.0)
        return plan

    def _add_slots(self, specs: dict[str, float], *, host: bool = False) -> None:
        """Create the slots ``name -> initial value`` for every parameter: arrays of the parameter's shape
        and dtype, on its device (in host memory when ``host``), exposed as MindSpore does as attributes
        (``opt.moment1``: a tuple of Parameters named ``moment1.<param name>``)."""
        for slot, init in specs.items():
            tuple_ = []
            on_host = [plan for plan in self._local_plans if host or plan.device == "cpu"]
            shared = _slab_views(on_host, init)
            for plan in self._local_plans:
                array = shared[plan.index] if plan.index in shared else self._new_array(plan, init, host)
                device = "cpu" if isinstance(array, np.ndarray) else "cuda"
                plan.slots[slot] = array
                plan.flats.append(_flatten(array, device))
                tuple_.append(Parameter(array, f"{slot}.{plan.name}", requires_grad=False))
            self._slot_names.append(slot)
            self._slot_tuples[slot] = tuple(tuple_)
            setattr(self, slot, tuple(tuple_))

    def _hand_over_decay_and_scale(self) -> None:
        """LARS takes over this optimizer's weight decay and loss-scale division (§2.13): decay flags all
        False, no dynamic decay, gradients no longer divided by loss_scale."""
        self.decay_flags = tuple(False for _ in self._plans)
        self.dynamic_weight_decay = False
        self._scales_gradients = False
        for plan in self._plans:
            plan.decay = False
            plan.prepares = plan.gc
        self._decay_keys = self._distinct_decay_keys()
        self._launches = None

    def _distinct_decay_keys(self) -> list[tuple[int, np.dtype]]:
        """The (weight decay index, dtype) pairs of the decayed parameters, each once."""
        return list(dict.fromkeys((plan.wd_index, plan.cdtype) for plan in self._plans if plan.decay))

    # ------------------------------------------------------------------------------------ public API

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        """The optimized parameters, in the optimizer's order (the order gradients are given in)."""
        return self._params

    @property
    def loss_scale(self) -> float:
        """The loss scale gradients are divided by (1.0: none)."""
        return self._loss_scale

    @property
    def need_scale(self) -> bool:
        """True if gradients are divided by the loss scale (``loss_scale != 1``)."""
        return self._scales_gradients and self._loss_scale != 1.0

    @property
    def global_step(self) -> int:
        """The step counter, an int (MindSpore: an int32 Parameter of shape [1]); see the class docstring for
        when it advances."""
        return self._global_step

    @property
    def learning_rate(self) -> Any:
        """MindSpore's ``learning_rate`` attribute: the lr object (Parameter holding the value or table, or
        the schedule); with group learning rates a tuple with one per parameter, in order."""
        if self.is_group_lr:
            return tuple(self._lrs[plan.lr_index].obj for plan in self._plans)
        return self._lrs[0].obj

    @property
    def weight_decay(self) -> Any:
        """The weight decay as given (a float or a callable); grouped: a tuple with one per parameter."""
        if self.is_group:
            return tuple(self._wds[plan.wd_index] for plan in self._plans)
        return self._wds[0]

    @property
    def target(self) -> str:
        """Where MindSpore runs sparse updates: 'CPU' (the fused host kernels) or 'GPU'/'Ascend'.

        Default: 'GPU' if any parameter is a CUDA array, else 'CPU' (MindSpore's context target). Here every
        kernel runs where the arrays live whatever the target; what it changes, for the optimizers that allow
        setting it, is which sparse kernel a row-sparse gradient goes to: 'CPU' → ``fused_sparse_*`` (they
        merge duplicate indices themselves and drop out-of-range ones); otherwise → ``sparse_apply_*`` (FTRL,
        ProximalAdagrad) or Adam's device composite (the same math as the fused kernel), after the optimizer
        merges duplicates when :attr:`unique` is True (out-of-range indices raise IndexError).
        The setter raises NotImplementedError for optimizers that do not support it (MindSpore's base).
        """
        return self._target

    @target.setter
    def target(self, value: str) -> None:
        if self._target_rules is None:
            raise NotImplementedError(f"'{self._owner}' does not support setting 'target'")
        if not isinstance(value, str):
            raise TypeError(f"For '{self._owner}', 'target' must be a str, got {type(value).__name__}")
        if value not in _TARGETS:
            raise ValueError(f"For '{self._owner}', 'target' must be one of {list(_TARGETS)}, got {value!r}")
        if self._target_rules == "platform":
            context = self._context_target
            if (context == "CPU" and value != "CPU") or (context == "GPU" and value == "Ascend"):
                raise ValueError(
                    f"For '{self._owner}', 'target' cannot be {value!r} when the parameters "
                    "live on "
                    f"the {context} (MindSpore's context rule)"
                )
        self._target = value
        self._target_assigned = True

    @property
    def unique(self) -> bool:
        """Whether row-sparse gradients are de-duplicated (duplicate indices summed) before a non-fused sparse
        kernel (§1.8). Default True; False if any parameter has ``unique = True``. Settable (a bool), as in
        MindSpore's code, though its documentation calls it read-only."""
        return self._unique

    @unique.setter
    def unique(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"For '{self._owner}', 'unique' must be a bool, got {type(value).__name__}")
        self._unique = bool(value)

    def _lr_values(self) -> list[float]:
        step = self._global_step
        return [lr.value(step) for lr in self._lrs]

    def get_lr(self) -> Any:
        """The learning rate(s) the next step uses: the values at the current :attr:`global_step`.

        Returns a float, or with group learning rates a tuple of floats with one per parameter (in order).
        Unlike MindSpore's ``get_lr`` (called inside ``construct``), this does not increment the global step.
        """
        values = self._lr_values()
        if self.is_group_lr:
            return tuple(values[plan.lr_index] for plan in self._plans)
        return values[0]

    def get_weight_decay(self) -> Any:
        """The weight decay(s) the next step uses, evaluated at the current global step and multiplied by
        ``loss_scale`` as MindSpore stores them (the factor applied to ``w`` in ``decay_weight``).

        Returns a float, or when grouped a tuple with one per parameter (in order).
        """
        values = self._wd_values(self._global_step)
        scale = self._loss_scale if self._scales_gradients else 1.0
        if self.is_group:
            return tuple(values[plan.wd_index] * scale for plan in self._plans)
        return values[0] * scale

    def get_lr_parameter(self, param: Parameter | list) -> Any:
        """The learning-rate object of ``param`` (or of each of a list): the :class:`Parameter` holding a
        fixed rate (change its data in place to change the rate) or a table, or the ``LearningRateSchedule``.

        Returns one object for a Parameter, a list for a list.

        Raises:
            TypeError: ``param`` is neither a Parameter nor a list, or the list holds something else.
            ValueError: a parameter is not optimized by this optimizer.
        """
        if isinstance(param, Parameter):
            wanted = [param]
        elif isinstance(param, list):
            wanted = param
        else:
            raise TypeError(
                "For 'get_lr_parameter', 'param' must be a Parameter or a list of Parameter, "
                "got "
                f"{type(param).__name__}"
            )
        ids = {id(p): k for k, p in enumerate(self._params)}
        out = []
        for p in wanted:
            if not isinstance(p, Parameter):
                raise TypeError(
                    f"For 'get_lr_parameter', every item must be a Parameter, got {type(p).__name__}"
                )
            if id(p) not in ids:
                raise ValueError(f"For 'get_lr_parameter', the parameter {p.name} is not in the optimizer")
            out.append(self._lrs[self._plans[ids[id(p)]].lr_index].obj)
        return out if isinstance(param, list) else out[0]

    # MindSpore's public pipeline methods, for code that writes its own optimizer on this base (each returns a
    # new tuple of gradients; the caller's arrays are not modified).

    def decay_weight(self, gradients: Sequence[Any]) -> tuple:
        """MindSpore's ``decay_weight``: ``g + w·(wd·loss_scale)`` for every parameter whose decay flag is set
        (row-sparse: on the indexed rows), with the decay(s) at the current global step; see the class
        docstring."""
        grads = self._check_gradients(gradients)
        values = self.get_weight_decay()
        out = []
        for plan, grad in zip(self._plans, grads):
            wd = values[plan.index] if self.is_group else values
            if self.decay_flags[plan.index] and (callable(self._wds[plan.wd_index]) or wd > 0):
                wd = plan.dtype.type(wd)
                decay = steps.decay_sparse if isinstance(grad, RowSparse) else steps.decay
                grad = decay(grad, plan.param.data, wd)
            out.append(grad)
        return tuple(out)

    def gradients_centralization(self, gradients: Sequence[Any]) -> tuple:
        """MindSpore's ``gradients_centralization``: grouped parameters with ``grad_centralization=True``
        and a gradient of rank >= 2 with ``shape[1] % 16 == 0`` are centralized; the others pass unchanged."""
        grads = self._check_gradients(gradients)
        return tuple(
            (steps.centralize_sparse(g) if isinstance(g, RowSparse) else steps.centralize(g))
            if self._gc_flags[plan.index] and steps.centralizes(plan.shape)
            else g
            for plan, g in zip(self._plans, grads)
        )

    def scale_grad(self, gradients: Sequence[Any]) -> tuple:
        """MindSpore's ``scale_grad``: every gradient times ``1/loss_scale`` (rounded to its dtype) when
        ``loss_scale != 1``, else the gradients unchanged."""
        grads = self._check_gradients(gradients)
        if self._loss_scale == 1.0:
            return tuple(grads)
        return tuple(
            (steps.unscale_sparse if isinstance(g, RowSparse) else steps.unscale)(
                g, plan.dtype.type(1.0 / self._loss_scale), False
            )
            for plan, g in zip(self._plans, grads)
        )

    def flatten_gradients(self, gradients: Sequence[Any]) -> Sequence[Any]:
        """MindSpore's contiguous-memory chunking of gradients: nothing to do here; returns ``gradients``."""
        return gradients

    def broadcast_params(self, optim_result: Any) -> Any:
        """MindSpore's parallel-optimizer broadcast (§1.10): each parameter sent from the rank that owns it
        to every other rank (called by :meth:`step`); a single process has nothing to broadcast. Returns
        ``optim_result``."""
        if self._parallel is not None:
            self._parallel.broadcast_params(self)
        return optim_result

    def __call__(self, gradients: Sequence[Any]) -> bool:
        """One step (MindSpore's ``construct``): see :meth:`step`."""
        return self.step(gradients)

    def step(self, gradients: Sequence[Any]) -> bool:
        """Update every parameter in place from its gradient; returns True (False: a parallel optimizer
        skipped the step on every rank on non-finite gradients, see :mod:`optkernels.distributed`).

        Args:
            gradients: a tuple or list with one gradient per parameter, in :attr:`parameters` order.

        Raises:
            TypeError: not a tuple/list; a gradient of the wrong type, dtype or device, or row-sparse where
                the optimizer does not support it.
            ValueError: the wrong number of gradients, or a gradient of the wrong shape; a schedule or dynamic
                weight decay returned an invalid value.
            (All raised before any array or counter is changed.)
        """
        if self._parallel is None:
            grads, plain = self._validated(gradients)
        else:  # validated on every rank, then agreed (optkernels.distributed): all raise, skip or go on
            agreed = self._parallel.agreed_step(self, gradients)
            if agreed is None:
                return False
            grads, plain = agreed
        ctx = self._begin_step()
        launches = self._launches
        if launches is None:
            launches = self._launches = _launch_groups.build(self)
        self._widen_compensated()
        with self._rounding_context():
            launches.run(self, grads, plain, ctx)
            self.broadcast_params(True)  # a master weight is broadcast from its owner before the rounding
            self._write_masters()
        self._finish_step(ctx)
        return True

    # ------------------------------------------------------------------------------------ the step pipeline

    def _step_one(self, plan: _Plan, grad: Any, ctx: StepContext) -> None:
        """One parameter's update by itself: prepare its gradient, then its own kernel launch."""
        sparse = isinstance(grad, RowSparse)
        if plan.prepares:
            grad = self._prepare_gradient(plan, grad, ctx, sparse)
        if sparse:
            self._apply_sparse(plan, grad, ctx)
        else:
            flat = grad.reshape(-1) if plan.device == "cpu" else _flatten(grad, "cuda")
            self._apply_dense(plan, flat, ctx.scalars[plan.key], ctx)

    def _validated(self, gradients: Any) -> tuple[list, bool]:
        """The gradients and whether they are plain (:meth:`_checked_gradients`), after every check a step
        makes before it writes anything."""
        grads, plain = self._checked_gradients(gradients)
        if self._distinct_gradients:
            self._check_distinct_gradients(grads)
        return grads, plain

    def _check_gradients(self, gradients: Any) -> list:
        return self._checked_gradients(gradients)[0]

    def _checked_gradients(self, gradients: Any) -> tuple[list, bool]:
        """The gradients as a list, after every check; and whether they are "plain": every one a
        C-contiguous NumPy array (of its CPU parameter's shape and dtype). The common all-NumPy case is
        checked with a few C-level passes; anything else goes through the per-gradient checks."""
        if not isinstance(gradients, (tuple, list)):
            raise TypeError(
                f"For '{self._owner}', 'gradients' must be a tuple or list with one gradient per "
                f"parameter, got {type(gradients).__name__}"
            )
        if len(gradients) != len(self._plans):
            raise ValueError(
                f"For '{self._owner}', got {len(gradients)} gradients for {len(self._plans)} parameters"
            )
        layout = self._plain_layout
        if layout is not None and set(map(type, gradients)) == _NDARRAY:
            shapes, dtypes, strides = layout
            if list(map(_SHAPE, gradients)) == shapes and list(map(_DTYPE, gradients)) == dtypes:
                plain = list(map(_STRIDES, gradients)) == strides or all(
                    g.flags.c_contiguous for g in gradients
                )
                return list(gradients), plain
        gradients = [
            plain_array(f"the gradient of {plan.name}", g) if isinstance(g, np.ndarray) else g
            for plan, g in zip(self._plans, gradients)
        ]  # np.matrix: a plain view; masked: refused
        self._check_each_gradient(gradients)
        return gradients, False

    def _check_each_gradient(self, gradients: Sequence[Any]) -> None:
        for plan, grad in zip(self._plans, gradients):
            if plan.device == "cpu" and isinstance(grad, np.ndarray):
                if grad.shape != plan.shape:
                    raise ValueError(
                        f"For '{self._owner}', the gradient of {plan.name} has shape "
                        f"{grad.shape} "
                        f"but the parameter has shape {plan.shape}"
                    )
                if grad.dtype != plan.grad_dtype and grad.dtype != plan.dtype:  # a master takes float32
                    raise TypeError(
                        f"For '{self._owner}', the gradient of {plan.name} has dtype "
                        f"{grad.dtype} "
                        f"but the parameter has dtype {plan.grad_dtype}"
                    )
            elif isinstance(grad, RowSparse):
                self._check_sparse_gradient(plan, grad)
            elif plan.device == "cuda" and _cuda.is_device_array(grad):
                self._check_cuda_gradient(plan, grad)
            else:
                where = "a NumPy array" if plan.device == "cpu" else "a CUDA array"
                raise TypeError(
                    f"For '{self._owner}', the gradient of {plan.name} must be {where} (like its "
                    f"parameter), got {type(grad).__name__}"
                )

    def _state_arrays(self, plan: _Plan) -> list[tuple[str, Any]]:
        """(what, array) of every array one parameter's update writes: the parameter, then its slots."""
        slots = [(f"its slot {name}", array) for name, array in plan.slots.items()]
        return [("the parameter", plan.param.data)] + slots

    def _check_distinct_gradients(self, gradients: Sequence[Any]) -> None:
        """For optimizers whose kernel refuses a gradient that shares memory with the arrays it updates:
        that check for every parameter, before the step writes anything (the kernel would raise only when
        the parameter's turn came, after the earlier parameters had been updated)."""
        for plan, grad in zip(self._plans, gradients):
            if isinstance(grad, RowSparse):
                continue
            lo, hi = _array_facts("gradient", grad)[5]
            for what, array in self._state_arrays(plan):
                if array is None:
                    continue
                lo2, hi2 = _array_facts(what, array)[5]
                if lo < hi and lo2 < hi2 and lo2 < hi and lo < hi2:
                    raise ValueError(
                        f"For '{self._owner}', the gradient of {plan.name} shares memory with "
                        f"{what}, which the step updates; pass a distinct array"
                    )

    def _check_cuda_gradient(self, plan: _Plan, grad: Any) -> None:
        face = _cuda.interface(grad)
        shape, dtype = tuple(face["shape"]), np.dtype(face["typestr"])
        if dtype.kind == "V" and isinstance(getattr(grad, "dtype", None), np.dtype):
            dtype = grad.dtype  # bfloat16
        if shape != plan.shape:
            raise ValueError(
                f"For '{self._owner}', the gradient of {plan.name} has shape {shape} but the "
                f"parameter has shape {plan.shape}"
            )
        if dtype != plan.grad_dtype and dtype != plan.dtype:
            raise TypeError(
                f"For '{self._owner}', the gradient of {plan.name} has dtype {dtype} but the "
                f"parameter has dtype {plan.grad_dtype}"
            )
        strides = face.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize):
            raise ValueError(f"For '{self._owner}', the gradient of {plan.name} must be C-contiguous")

    def _check_sparse_gradient(self, plan: _Plan, grad: Any) -> None:
        if not self._accepts_sparse:
            raise TypeError(
                f"For '{self._owner}', the gradient of {plan.name} is row-sparse, which "
                f"{self._sparse_refusal()}; pass a dense gradient"
            )
        if tuple(grad.dense_shape) != plan.shape:
            raise ValueError(
                f"For '{self._owner}', the row-sparse gradient of {plan.name} has dense_shape "
                f"{tuple(grad.dense_shape)} but the parameter has shape {plan.shape}"
            )
        if grad.device != plan.device:
            raise TypeError(
                f"For '{self._owner}', the row-sparse gradient of {plan.name} is on the "
                f"{grad.device} but the parameter is on the {plan.device}"
            )
        if plan.device == "cuda" and plan.decay:
            raise TypeError(
                f"For '{self._owner}', weight decay of a row-sparse gradient of a CUDA parameter "
                f"({plan.name}) is not supported; use a dense gradient"
            )
        values = grad.values
        if isinstance(values, np.ndarray):
            dtype = values.dtype
        else:
            dtype = (
                values.dtype
                if isinstance(getattr(values, "dtype", None), np.dtype)
                else np.dtype(_cuda.interface(values)["typestr"])
            )
        if dtype != plan.grad_dtype and dtype != plan.dtype:
            raise TypeError(
                f"For '{self._owner}', the row-sparse gradient of {plan.name} has values of "
                "dtype "
                f"{dtype} but the parameter has dtype {plan.grad_dtype}"
            )

    def _sparse_refusal(self) -> str:
        """Why this optimizer refuses row-sparse gradients (for the TypeError)."""
        return f"'{self._owner}' does not support (MindSpore registers only dense gradients for it)"

    def _wd_values(self, step: int) -> list[float]:
        out = []
        for wd in self._wds:
            if callable(wd):
                value = float(wd(step))
                if not (math.isfinite(value) and value >= 0.0):
                    raise ValueError(
                        f"For '{self._owner}', the dynamic weight decay returned {value} at "
                        "step "
                        f"{step}; it must be finite and >= 0"
                    )
                out.append(value)
            else:
                out.append(wd)
        return out

    def _begin_step(self) -> StepContext:
        """Every per-step value, computed once, then the counters committed (nothing is written before)."""
        step = self._global_step
        ctx = StepContext(step, self._lr_values(), self._wd_values(step))
        self._prepare_step(ctx)
        for key in self._scalar_keys:
            ctx.scalars[key] = self._kernel_scalars(ctx, ctx.lrs[key[0]], key[1])
        if self._coupled_decay:
            scale = self._loss_scale if self._scales_gradients else 1.0
            for wd_index, dtype in self._decay_keys:
                ctx.decays[(wd_index, dtype)] = dtype.type(ctx.wds[wd_index] * scale)
        if self.need_scale:
            ctx.reciprocals = {dtype: dtype.type(1.0 / self._loss_scale) for dtype in self._dtypes}
        if self.dynamic_lr or self.dynamic_weight_decay or self._always_counts_steps:
            self._global_step = step + 1
        self._commit_step(ctx)
        return ctx

    def _prepare_gradient(self, plan: _Plan, grad: Any, ctx: StepContext, sparse: bool) -> Any:
        """decay_weight → centralization → unscale, for one parameter (§1.5).

        A dense gradient without centralization takes one fused pass into a buffer kept per parameter (same
        bits as the separate steps); otherwise each step makes a new array. The caller's gradient is never
        modified."""
        wd = ctx.decays[(plan.wd_index, plan.cdtype)] if plan.decay else None
        recip = ctx.reciprocals[plan.cdtype] if ctx.reciprocals else None
        if _dtype_of(grad) != plan.dtype and (sparse or plan.gc):
            grad = _low_precision.widened_gradient(grad, plan.dtype)  # a float32 master's own dtype
        if not (sparse or plan.gc):
            if plan.scratch is None:
                plan.scratch = self._new_array(plan, 0.0)
            return steps.decay_unscale_into(plan.scratch, grad, plan.param.data, wd, recip, plan.device)
        owned = False
        if wd is not None:
            weight = plan.param.data
            grad = steps.decay_sparse(grad, weight, wd) if sparse else steps.decay(grad, weight, wd)
            owned = True
        if plan.gc:
            grad = steps.centralize_sparse(grad) if sparse else steps.centralize(grad)
            owned = True
        if recip is not None:
            grad = steps.unscale_sparse(grad, recip, owned) if sparse else steps.unscale(grad, recip, owned)
        return grad

    @staticmethod
    def _new_array(plan: _Plan, value: float, host: bool = False) -> Any:
        """An array of the parameter's shape and dtype filled with ``value``, on its device (or the host)."""
        array = np.full(plan.shape, value, dtype=plan.dtype)
        if plan.device == "cuda" and not host:
            return _cuda.to_device(array)
        return array

    # ------------------------------------------------------------------------------------ subclass hooks

    def _prepare_step(self, ctx: StepContext) -> None:
        """Compute this step's new per-step state into ``ctx.extra`` (e.g. beta powers); write nothing."""

    def _commit_step(self, ctx: StepContext) -> None:
        """Store the per-step state computed by :meth:`_prepare_step`."""

    def _finish_step(self, ctx: StepContext) -> None:
        """Called after every parameter was updated."""

    def _kernel_scalars(self, ctx: StepContext, lr: float, dtype: np.dtype) -> tuple:
        """The kernel's per-step scalars for one learning rate and dtype (validated; computed once a step)."""
        return (dtype.type(lr),)

    def _dense_kernel(self, plan: _Plan) -> tuple[Any, tuple] | None:
        """The dense update of ``plan`` as one element-wise kernel: ``(kernel, arrays)`` when the update is
        ``kernel(i, *arrays, gradient, *self._dense_scalars(plan, scalars, ctx))`` over the flat arrays
        (the parameter and its slots, in the kernel's order); None when it is something else (then
        :meth:`_apply_dense` is overridden). CPU parameters with a kernel are updated by multi-tensor
        launches (:mod:`._launch_groups`), CUDA ones by :meth:`_apply_dense`, both from this description."""
        return None

    def _dense_scalars(self, plan: _Plan, scalars: tuple, ctx: StepContext) -> tuple:
        """The kernel's scalars for ``plan`` this step, from the step's ``scalars`` of its (lr, dtype) key
        (default: those). Equal for every parameter with the same :meth:`_scalar_group`."""
        return scalars

    def _scalar_group(self, plan: _Plan) -> Any:
        """A key shared by the parameters that always get the same :meth:`_dense_scalars` (default: the
        learning rate's index and the dtype)."""
        return plan.key

    def _apply_dense(self, plan: _Plan, grad: Any, scalars: tuple, ctx: StepContext) -> None:
        """One parameter's dense update (``grad`` flat): by default the :meth:`_dense_kernel` launch."""
        spec = self._dense_kernel(plan)
        if spec is None:
            raise NotImplementedError(f"'{self._owner}' is abstract: use one of the optimizers")
        kernel, arrays = spec
        kernel.launch(plan.device, plan.size, *arrays, grad, *self._dense_scalars(plan, scalars, ctx))

    def _apply_sparse(self, plan: _Plan, grad: Any, ctx: StepContext) -> None:
        raise TypeError(f"For '{self._owner}', row-sparse gradients are not supported")

    def _merge_if_unique(self, grad: Any) -> Any:
        """MindSpore's Unique + UnsortedSegmentSum before a non-fused sparse kernel (when :attr:`unique`)."""
        return grad.merged() if self._unique else grad

    def __repr__(self) -> str:
        return f"{self._owner}({len(self._params)} parameters, learning_rate={self.get_lr()!r})"
