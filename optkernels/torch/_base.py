"""The ``torch.optim.Optimizer`` subclass under every optkernels.torch optimizer with torch's math.

A subclass says, per parameter group, which element-wise kernel updates its parameters (:meth:`_kernel`:
the element function and the names of the state tensors it takes between the parameter and the gradient),
the kernel's scalars for a step (:meth:`_scalars`), and torch's gradient pre-step (:meth:`_prestep`:
``maximize`` and coupled weight decay, ``g' = (α·w + g)·β``). This class does the rest:

* arguments judged by the ``torch.optim`` class of the same name (torch's errors, defaults and initial
  state: :mod:`._delegate`);
* each step, every check before any tensor is written, all groups first: what the kernels serve (float32,
  float64 and CPU float16/bfloat16 tensors on the CPU or CUDA, dense in memory or copied, gradients and
  state tensors of the parameter's shape, dtype, device and layout) goes to them; the rest (differentiable,
  capturable, complex, other devices, a parameter listed twice, tensors of another shape or dtype, Tensor
  betas of Adam's family) to torch's own single-tensor step, said once in a warning (and by :meth:`backend_for`),
  after a rehearsal on copies where torch might raise, so a step that raises has changed nothing;
* ``grad_scale``/``found_inf`` (``torch.amp.GradScaler``) honoured where torch's class honours them;
* state tensors with torch's names, created on a parameter's first step (so ``state_dict()`` loads into
  ``torch.optim`` and back); step counters are float32 0-d tensors (float64 where that is the default
  dtype), as torch keeps them;
* a **plan** per group, built when the set of parameters, their memory or their shapes change: CPU
  parameters of one dtype are updated by ONE multi-tensor launch (their data addresses in a table; the
  gradients' addresses refilled each step), the pre-step folded into the same loop; CUDA parameters and
  float16/bfloat16 CPU parameters get one launch per tensor, the pre-step into a buffer allocated once per
  parameter (float32 for a half parameter). The group's step counters are views into one float32 tensor.
  A plan of one launch table, or of float16/bfloat16 CPU parameters only, is checked at the next step by
  one compiled read of the tensors' own fields (:class:`._fields.Guard`: the same parameters, memory, sizes,
  strides, dtypes, devices, and gradients laid out as their parameters); anything else takes the Python
  checks above. The state a plan was built from is checked each step in one compiled call as well
  (:class:`._fields.StateWatch`: no dict of it modified, every state tensor's memory and fields as they
  were), through Python where that cannot be read.

Nothing is allocated per step in proportion to the model.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import warnings
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import _global_optimizer_post_hooks as _global_post_hooks
from torch.optim.optimizer import _global_optimizer_pre_hooks as _global_pre_hooks

from ..kernels._elementwise import Elementwise, HalfLauncher
from ..kernels._multi_tensor import TensorList
from ..kernels._torch_tail import NO_TAIL, strided_tail_scalars
from ..kernels.axpy import _axpy_scal
from ..kernels.torch_rules import TAKES_TAIL, torch_tail_scalars
from . import _delegate, _fields, _memory, _views
from ._sqrt import for_device, sqrt_kernel

__all__ = ["KernelOptimizer"]


_profiler_enabled = torch._C._autograd._profiler_enabled
_STRIDED = torch.strided
_GRAD = operator.attrgetter("grad")
_DTYPE = operator.attrgetter("dtype")
_SHAPE = operator.attrgetter("shape")
_DEVICE = operator.attrgetter("device")
_STRIDE = torch.Tensor.stride
_DATA_PTR = torch.Tensor.data_ptr
_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_NUMEL = torch.Tensor.numel
_IS_CPU = operator.attrgetter("is_cpu")
_FLOAT32 = np.dtype(np.float32)
_HALF_NUMPY = frozenset(_views.HALF_DTYPES.values())
_MEMO_SIZE = 64
_WATCHES = 8  # a plan's state watches at most (each made after its state was modified yet intact)
_UNSPLIT = (
    "float16/bfloat16 gradients laid out unlike their parameter, split by torch's threads within rows "
    "(torch's own step keeps its rounding there)"
)
_MISFIT = "gradient or state tensors of another shape, dtype, device or layout than their parameter"


def _dense(t: torch.Tensor) -> bool:
    """True when ``t``'s elements fill ``numel`` consecutive slots from ``t.data_ptr()`` (contiguous, or a
    permutation of a contiguous tensor, such as a transpose): the kernels update such memory in place."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of a dense tensor's memory (in memory order, not index order)."""
    t = t.detach()
    return t.reshape(-1) if t.is_contiguous() else t.as_strided((t.numel(),), (1,))


def _layout(p: torch.Tensor) -> tuple:
    """The strides of ``torch.empty_like(p)``: ``p``'s own for a dense ``p``, contiguous ones otherwise (the
    strides torch gives the state and gradient tensors of ``p``)."""
    if _dense(p):
        return p.stride()
    return torch.empty(p.shape, device="meta").stride()


class _Plan:
    """One group's parameters with gradients, their state arrays and launch tables."""

    def __init__(self, key: tuple, params: list, ptrs: list[int]):
        self.key = key
        self.params = params
        self.ptrs = ptrs
        self.shapes = list(map(_SHAPE, params))
        self.numels = list(map(_NUMEL, params))
        self.strides = list(map(_STRIDE, params))
        self.dtypes = list(map(_DTYPE, params))
        self.devices = list(map(_DEVICE, params))
        # the common case, checked with fewer and cheaper maps: all contiguous, all on the CPU
        self.contiguous = all(map(_IS_CONTIGUOUS, params))
        self.on_cpu = all(map(_IS_CPU, params))
        self.whole = False  # the group's parameters with gradients, none copied, none elsewhere
        self.steps: torch.Tensor | None = None  # [T] of torch's step dtype; state['step'] are its views
        self.steps_np: np.ndarray | None = None
        self.step_now: int | None = None  # the steps' common value, where they are equal (then kept here)
        self.cpu: list = []  # (dtype, positions array, TensorList, parameters)
        self.single: list = []  # (k, 'cpu'/'cuda', [views of param and slots], n, buffer view or None)
        self.kept: list = []  # the state tensors whose addresses the tables hold (kept alive)
        self.entries: list = []  # the state entries (dicts) they were read from, one per parameter
        self.names: tuple = ()  # the state names read from each entry
        self.kept_at: list = []  # the kept tensors' data addresses when the tables were made
        self.private_steps: Any = None  # int64 step numbers of a state without 'step' (SGD)
        self.copies: list = []  # (parameter, contiguous working copy) of parameters not dense in memory
        self.half: dict = {}  # k -> [half Elementwise or None, uint16 views of the arrays, *HalfLaunchers]
        self.guard: _fields.Guard | None = None  # the fast check of a whole plan's tensors (see _sort)
        self.watch: _fields.StateWatch | None = None  # the fast check of the state (see _state_intact)
        self.watches = 0  # how many watches were made (a state modified every step is not watched)

    def same_memory(self, params: list) -> bool:
        """The parameters still have the memory, sizes, strides and dtypes the tables hold (a device cannot
        change without the address changing; a new shape of the same size shows in the gradients' shapes,
        checked by :meth:`fits_grads`)."""
        if list(map(_DATA_PTR, params)) != self.ptrs or list(map(_NUMEL, params)) != self.numels:
            return False
        if self.contiguous:
            strided = all(map(_IS_CONTIGUOUS, params))
        else:
            strided = list(map(_STRIDE, params)) == self.strides
        return strided and list(map(_DTYPE, params)) == self.dtypes

    def fits_grads(self, grads: list) -> bool:
        """Every gradient has its parameter's shape, strides, dtype and device."""
        if list(map(_SHAPE, grads)) != self.shapes or list(map(_DTYPE, grads)) != self.dtypes:
            return False
        if self.contiguous and self.on_cpu:
            return all(map(_IS_CONTIGUOUS, grads)) and all(map(_IS_CPU, grads))
        return list(map(_STRIDE, grads)) == self.strides and list(map(_DEVICE, grads)) == self.devices


class _Work:
    """One group's step, as sorted before anything is written."""

    __slots__ = ("index", "group", "dense", "grads", "ptrs", "sparse", "by_torch", "plan")

    def __init__(self, index: int, group: dict):
        self.index, self.group = index, group
        self.dense: list = []  # parameters the kernels update from a dense gradient
        self.grads: list = []  # their gradients (as found: laid out at run time; none where ptrs came from a guard)
        self.ptrs: np.ndarray | None = None  # the gradients' addresses (fast path: laid out already)
        self.sparse: list = []  # parameters the kernels update from a sparse gradient
        self.by_torch: list = []  # parameters torch's own step updates
        self.plan: _Plan | None = None


def unwrapped(step: Callable) -> Callable:
    """Mark an optimizer's ``step`` as running its own hooks and profiler range, so that
    ``torch.optim.Optimizer.__init__`` leaves it unwrapped (torch's ``hooked`` flag)."""
    vars(step)["hooked"] = True
    return step


class KernelOptimizer(torch.optim.Optimizer):
    """torch.optim.Optimizer over optkernels' kernels (see the module docstring). Subclasses set
    ``sparse_grads`` ('no', 'yes' or 'only') and implement the hooks below.

    Args:
        params: an iterable of tensors, of ``(name, tensor)`` pairs or of parameter-group dicts (torch's
            convention).
        defaults: the hyper-parameters, as the ``torch.optim`` class of the same name takes them.

    Raises:
        What the ``torch.optim`` class of the same name raises for these arguments (its types and messages).
    """

    sparse_grads = "no"
    counts_steps = True  # the state has torch's 'step' counter
    sparse_by_torch = False  # torch's class takes sparse gradients the kernels do not (SGD)
    optional_state: tuple = ()  # state names torch creates when missing (SGD's momentum_buffer)
    tensor_steps = True  # torch keeps 'step' as a tensor (SparseAdam: a Python int)
    numbered_steps = True  # the scalars depend on the step number (False: one launch for all, step 1)

    def __init__(self, params: Any, defaults: dict):
        self._plans: dict[int, _Plan] = {}
        self._pre_buffers: dict[int, torch.Tensor] = {}
        self._said: set = set()
        self._memo: dict = {}
        self._sqrt_kernels: dict = {}
        self._scale_now: torch.Tensor | None = None  # AMP's grad_scale, where a kernel divides by it
        self._runner: _delegate.TorchRunner | None = None
        params = _delegate.materialize(params)
        torch_cls = _delegate.torch_class(type(self))
        if torch_cls is not None:
            self._runner = _delegate.TorchRunner(torch_cls, params, defaults)
            defaults = {**defaults, **self._runner.defaults}
            if self._runner.amp_scaling:
                self._step_supports_amp_scaling = True
        super().__init__(params, defaults)
        if self._runner is not None:
            self.state.update(self._runner.initial_state)
            self._runner.initial_state = {}

    # ------------------------------------------------------------------ hooks for subclasses

    def _check_hyper(self, group: dict) -> None:
        """Raise torch's ValueError for out-of-range hyper-parameters of ``group``."""

    def _kernel(self, group: dict) -> tuple[Any, tuple[str, ...]]:
        """``(element function, names of the state tensors between the parameter and the gradient)``."""
        raise NotImplementedError

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        """A new state tensor ``name`` for ``p`` (default: :func:`._memory.zeros_like`: zeros like ``p``, large
        CPU ones on huge pages, the k-th of :meth:`_state_names` at k·1 KiB from ``p``'s offset within a
        page)."""
        names = self._state_names(group)
        return _memory.zeros_like(p, slot=names.index(name) + 1 if name in names else 1)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        """The kernel's scalars for a step numbered ``step`` (from 1), converted to ``dtype``."""
        raise NotImplementedError

    def _half_scalars(self, group: dict, step: int) -> tuple:
        """The scalars of a float16/bfloat16 CPU launch (:meth:`_launch_half`) for step ``step``, without
        torch's tails: :meth:`_scalars` in float32, unless a kernel takes others there."""
        return self._scalars(group, step, _FLOAT32)[:-3]

    def _remembered(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, remembered under ``key`` (the values ``make`` computes from, such as a group's
        hyper-parameters and a dtype) for the next call with an equal key: scalars are then not recomputed
        every step. A key holding a tensor (whose value can change in place) is not remembered."""
        memo = self._memo
        try:
            return memo[key]
        except KeyError:
            value = make()
            if not any(isinstance(k, torch.Tensor) for k in key):
                if len(memo) >= _MEMO_SIZE:  # a schedule changing lr every step: keep it small
                    memo.clear()
                memo[key] = value
            return value
        except TypeError:  # an unhashable value
            return make()

    def _sqrt_kernel(self, dtype: np.dtype) -> int:
        """:func:`~optkernels.torch._sqrt.sqrt_kernel` of ``dtype``, its environment variable read once per
        optimizer and dtype (at the first step of parameters of that dtype), not at every step."""
        kernel = self._sqrt_kernels.get(dtype)
        if kernel is None:
            kernel = self._sqrt_kernels[dtype] = sqrt_kernel(dtype)
        return kernel

    def _prestep(self, group: dict) -> tuple[float, float] | None:
        """``(α, β)`` of the gradient pre-step ``g' = (α·w + g)·β``, or None for none (torch: ``maximize``
        negates g, then ``weight_decay`` adds ``wd·w``: α = ±wd, β = ±1)."""
        wd = float(group.get("weight_decay", 0.0))
        maximize = bool(group.get("maximize", False))
        if wd == 0.0 and not maximize:
            return None
        return (-wd, -1.0) if maximize else (wd, 1.0)

    def _before_update(self, group: dict, plan: _Plan, step: int) -> None:
        """Runs before the group's kernel launches (AdamW's decoupled decay)."""

    def _sparse_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor, state: dict) -> None:
        """One parameter's update from a sparse COO gradient (optimizers with ``sparse_grads``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ torch.optim.Optimizer API

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, then the hyper-parameters checked; a group failing them is not
        added."""
        super().add_param_group(param_group)
        try:
            self._check_hyper(self.param_groups[-1])
        except Exception:
            self.param_groups.pop()
            raise
        self._plans.clear()

    def __setstate__(self, state: dict) -> None:
        """After unpickling or ``copy.deepcopy`` (torch pickles ``defaults``, ``state`` and ``param_groups``
        only): launch plans are rebuilt from the new tensors on the next step."""
        super().__setstate__(state)
        torch_cls = _delegate.torch_class(type(self))
        if torch_cls is not None:  # a state saved before torch added a switch: torch's value for it
            _delegate.fill_older_groups(torch_cls, self.param_groups)
        self._plans, self._pre_buffers, self._said, self._runner = {}, {}, set(), None
        self._memo, self._sqrt_kernels, self._scale_now = {}, {}, None
        if self.counts_steps and self.tensor_steps:
            for group in self.param_groups:  # an older state's number: a tensor, as torch makes it
                for p in group["params"]:
                    s = self.state.get(p, {})
                    step = s.get("step")
                    if step is not None and not isinstance(step, torch.Tensor):
                        s["step"] = torch.tensor(float(step), dtype=_step_dtype(group))

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict`` (state tensors cast to their parameters' dtype and device; their
        shapes are checked at the next step, as torch's step checks them)."""
        super().load_state_dict(state_dict)
        self._plans.clear()

    def backend_for(self, param: torch.Tensor) -> str:
        """'optkernels' when the next step updates ``param`` with optkernels' kernels, 'torch' when with
        ``torch.optim``'s own implementation (configurations the kernels do not serve: see the module
        docstring).

        Raises:
            ValueError: ``param`` is not in this optimizer's parameter groups.
        """
        for group in self.param_groups:
            listed = sum(q is param for q in group["params"])
            if not listed:
                continue
            if listed > 1 or self._torch_reason(group, param) is not None:
                return "torch"
            g = param.grad
            if (
                g is not None
                and g.layout is not _STRIDED
                and self.sparse_grads == "no"
                and self.sparse_by_torch
            ):
                return "torch"
            if g is not None and g.layout is not _STRIDED and not param.is_contiguous():
                return "torch"
            fits = self._state_fits(param, group) and (
                g is None
                or g.layout is not _STRIDED
                or (
                    self._grad_fits(param, g)
                    and self._layout_reason(group, param, g) is None
                    and self._half_tails(group, param, g) is not None
                )
            )
            return "optkernels" if fits else "torch"
        raise ValueError("backend_for: the tensor is not a parameter of this optimizer")

    @unwrapped
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()``'s loss (or None).

        Every check runs before any tensor is written: a failed step leaves parameters and state as they
        were. (No ``torch.no_grad()`` is needed: the kernels write through views, outside autograd.)

        Step pre- and post-hooks (``register_step_pre_hook``, ``register_step_post_hook`` and the global ones)
        run as torch runs them; the profiler's ``Optimizer.step#<class>.step`` range is recorded only while
        torch's profiler is on (torch's own wrapper enters it on every step, which costs more than the
        Python side of a 100-tensor step)."""
        if _profiler_enabled():
            with torch.autograd.profiler.record_function(f"Optimizer.step#{type(self).__name__}.step"):
                return self._hooked_step(closure)
        return self._hooked_step(closure)

    def _state_intact(self, plan: _Plan) -> bool:
        """Whether the state tensors ``plan``'s launch tables hold are still this optimizer's state: each
        parameter's entry and each named tensor in it the same objects, at the same data addresses (a
        tensor replaced by hand, or its memory swapped by ``.data =`` or ``set_``, would leave the tables
        writing a stale, possibly freed, buffer).

        Checked in one compiled call while the plan's watch (:class:`._fields.StateWatch`, made at the
        first check that finds the state intact through Python) finds no dict modified and every tensor's
        fields unchanged; else through Python, then watched anew where intact."""
        if not plan.kept:
            return True
        watch = plan.watch
        if watch is not None and self.state is watch.state and watch.intact():
            return True
        if not self._state_same(plan):
            return False
        self._watch_state(plan)
        return True

    def _watch_state(self, plan: _Plan) -> None:
        """A new watch of ``plan``'s state (intact: checked by the caller), also given to its guard; none
        where the fields or dict versions are not readable here, the state holds other types, or the plan's
        state was found modified (and still intact) more than :data:`_WATCHES` times."""
        watch = None
        at, version_at = _fields.layout(), _fields.dict_version_at()
        if plan.watches < _WATCHES and at is not None and version_at is not None:
            plan.watches += 1
            try:
                watch = _fields.StateWatch(self.state, plan.entries, plan.kept, at, version_at)
            except ValueError:  # other types, or tensors of more than 5 dimensions: not watched
                plan.watches = _WATCHES
            if watch is not None and not watch.intact():  # fields the check cannot read as they were
                watch, plan.watches = None, _WATCHES
        plan.watch = watch
        if plan.guard is not None:
            plan.guard.watch(watch)

    def _state_same(self, plan: _Plan) -> bool:
        """:meth:`_state_intact` through Python: the entries, named tensors and data addresses compared."""
        kept = plan.kept
        state = self.state
        entries = plan.entries
        if not all(map(operator.is_, map(state.get, plan.params), entries)):
            return False
        now = [entry.get(name) for entry in entries for name in plan.names]
        return all(map(operator.is_, now, kept)) and list(map(_DATA_PTR, kept)) == plan.kept_at

    def _unobserved(self) -> bool:
        """Whether nothing watches this step: no step pre- or post-hook (global or this optimizer's) and
        torch's profiler off. A subclass's short path may then skip :meth:`step`'s layers."""
        return not (
            _global_pre_hooks
            or _global_post_hooks
            or self._optimizer_step_pre_hooks
            or self._optimizer_step_post_hooks
            or _profiler_enabled()
        )

    def _hooked_step(self, closure: Callable[[], Any] | None) -> Any:
        args: tuple = (self, closure)
        kwargs: dict[str, Any] = {}
        if _global_pre_hooks or self._optimizer_step_pre_hooks:
            for pre_hook in chain(_global_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
                result = pre_hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            f"{self.step} must return None or a tuple of (new_args, "
                            f"new_kwargs), "
                            f"but got {result}."
                        )
                    args, kwargs = result
        out = self._step(*args[1:], **kwargs)
        if _global_post_hooks or self._optimizer_step_post_hooks:
            for post_hook in chain(self._optimizer_step_post_hooks.values(), _global_post_hooks.values()):
                post_hook(self, args, kwargs)
        return out

    def _step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        works = []
        for index, group in enumerate(self.param_groups):
            self._check_hyper(group)
            works.append(self._sort(index, group))
        by_torch = [(w.group, w.by_torch) for w in works if w.by_torch]
        runner = self._torch() if by_torch else None  # raises for a class without a torch.optim twin
        # nothing is written above this line
        if not self._unscale(works):
            return loss
        if runner is not None:
            touched = [p for w in works for p in self._touch_state(w)]
            try:
                runner.step(by_torch, self.state, self.defaults)
            except Exception:  # torch refused them: no entry left that torch would not have left
                for p in touched:
                    if not self.state.get(p, True):
                        del self.state[p]
                raise
        for w in works:
            if w.dense:
                self._dense_step(w)
            for p in w.sparse:
                self._sparse_step(w.group, p, p.grad, self._state_of(p, w.group, sparse=True))
        scale, self._scale_now = self._scale_now, None
        if scale is not None:  # the gradients the kernels divided (see _unscales_in_kernel), left unscaled
            for w in works:
                if self._unscales_in_kernel(w.group):
                    for p in w.dense:
                        p.grad.div_(scale.to(p.grad.device))
        return loss

    def _touch_state(self, work: _Work) -> list:
        """New parameters' state entries made in parameter order, whichever backend fills them, so that
        ``state_dict()`` lists them in torch's order; returns their parameters."""
        made = []
        if self.counts_steps or self._state_names(work.group):
            state = self.state
            for p in work.group["params"]:
                if p.grad is not None and p not in state:
                    state[p] = {}
                    made.append(p)
        return made

    def _unscale(self, works: list) -> bool:
        """``torch.amp.GradScaler``'s protocol of torch's fused optimizers: False when ``found_inf`` (set by
        the scaler) is non-zero (the step is skipped), else the gradients divided by ``grad_scale`` (in
        place, as torch's fused kernels leave them; by the kernel itself where :meth:`_unscales_in_kernel`)
        and True."""
        attributes = self.__dict__  # set on the instance by the scaler (a miss of getattr costs an exception)
        found_inf = attributes.get("found_inf")
        if found_inf is not None and bool(found_inf.ne(0).any()):
            return False
        scale = attributes.get("grad_scale")
        self._scale_now = None
        if scale is not None:
            for w in works:
                own = self._unscales_in_kernel(w.group)
                if own and w.dense:  # the kernel divides them; they are divided in place after it
                    self._scale_now = scale
                for p in chain(() if own else w.dense, w.by_torch):
                    if p.grad.layout is _STRIDED:
                        p.grad.div_(scale.to(p.grad.device))
        return True

    def _unscales_in_kernel(self, group: dict) -> bool:
        """Whether ``group``'s kernel divides the dense gradients by ``grad_scale`` itself, from the scale
        of the step being made (:attr:`_scale_now`, a 0-d tensor, else None), without storing the quotient:
        the gradients are divided in place after the kernel (torch's fused steps leave them unscaled).
        Default False."""
        return False

    # ------------------------------------------------------------------ sorting and checks

    def _sort(self, index: int, group: dict) -> _Work:
        """The group's parameters with gradients sorted between the kernels and torch's own step, every
        check done (raises before anything is written). The common case (a plan covering the group, every
        gradient laid out as its parameter) is checked with C-level maps, not a Python loop."""
        work = _Work(index, group)
        params = group["params"]
        plan = self._plans.get(index)
        if plan is not None and not self._state_intact(plan):
            del self._plans[index]  # a state tensor replaced, or its memory swapped: plan anew
            plan = None
        if (
            plan is not None
            and plan.whole
            and plan.key[1] == self._kernel(group)
            and self._group_reason(group) is None
            and not any(isinstance(b, torch.Tensor) for b in group.get("betas", ()))
        ):  # tensor betas: each parameter's step is decided again (_torch_reason reads its dtype)
            guard = plan.guard
            found = guard.addresses(params) if guard is not None else None
            if guard is not None and found is not None:  # every field as the plan was built for, read
                # in one compiled loop (the gradients' addresses are all the launch table needs of them)
                work.dense, work.ptrs, work.plan = params, found[guard.n :], plan
                return work
            members, grads = params, list(map(_GRAD, params))
            try:
                # raises for a missing gradient (TypeError) and for one without strided storage (sparse);
                # read straight into an int64 array: the launch table's row is then one copy
                ptrs = np.fromiter(map(_DATA_PTR, grads), np.int64, len(grads))
            except TypeError:  # parameters without gradients (frozen) are left out
                members = [p for p, g in zip(params, grads) if g is not None]
                grads = [g for g in grads if g is not None]
                try:
                    ptrs = np.fromiter(map(_DATA_PTR, grads), np.int64, len(grads))
                except RuntimeError:
                    ptrs = None
            except RuntimeError:
                ptrs = None
            if (
                ptrs is not None
                and plan.key[0] == tuple(map(id, members))
                and plan.same_memory(members)
                and plan.fits_grads(grads)
            ):
                work.dense, work.grads, work.ptrs, work.plan = members, grads, ptrs, plan
                return work
        ids = list(map(id, params))
        twice = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
        for p in params:
            g = p.grad
            if g is None:
                continue
            reason = (
                "a parameter listed more than once in its group"
                if id(p) in twice
                else self._torch_reason(group, p)
            )
            if reason is None and g.layout is not _STRIDED:
                if self.sparse_grads == "no" and self.sparse_by_torch:
                    reason = "sparse gradients"
                else:
                    self._check_sparse(p, g)
                    if not p.is_contiguous():
                        reason = "sparse gradients of non-contiguous parameters"
                    elif self._state_fits(p, group):
                        work.sparse.append(p)
                        continue
                    else:
                        reason = self._rehearse(group, p)
            elif reason is None:
                if self.sparse_grads == "only":
                    raise RuntimeError(
                        f"{type(self).__name__} does not support dense gradients, please "
                        "consider Adam instead"
                    )
                if self._grad_fits(p, g) and self._state_fits(p, group):
                    laid = self._layout_reason(group, p, g)
                    if laid is not None:
                        self._say(laid)
                        work.by_torch.append(p)
                        continue
                    if self._half_tails(group, p, g) is None:
                        self._say(_UNSPLIT)
                        work.by_torch.append(p)
                        continue
                    work.dense.append(p)
                    work.grads.append(g)
                    continue
                reason = self._rehearse(group, p)
            self._say(reason)
            work.by_torch.append(p)
        if work.by_torch:
            kept = self._plans.get(index)
            if kept is not None and not set(kept.key[0]).isdisjoint(map(id, work.by_torch)):
                # torch's step counts these parameters' steps now: the plan's count would go stale
                del self._plans[index]
        # a subclass whose own _dense_step launches per tensor (and keeps its own state) takes no plan
        if work.dense and type(self)._dense_step is KernelOptimizer._dense_step:
            work.plan = self._plan(index, group, work.dense)
            work.plan.whole = not (work.plan.copies or work.by_torch or work.sparse)
            if (
                work.plan.whole
                and work.plan.guard is None
                and (
                    (len(work.plan.cpu) == 1 and not work.plan.single)
                    or (not work.plan.cpu and all(entry[1] == "cpu" for entry in work.plan.single))
                )
            ):
                work.plan.guard = _guard(work.dense, work.grads)
                if work.plan.guard is not None and work.plan.watch is not None:
                    work.plan.guard.watch(work.plan.watch)
        return work

    def _group_reason(self, group: dict) -> str | None:
        """The part of :meth:`_torch_reason` that reads the group's settings alone: asked at every step, also
        where the group's plan is reused (a setting may change between steps), or None."""
        if group.get("differentiable"):
            return "differentiable=True"
        if group.get("capturable"):
            return "capturable=True"
        return None

    def _torch_reason(self, group: dict, p: torch.Tensor) -> str | None:
        """Why torch's own step updates ``p`` (a configuration the kernels do not serve), or None."""
        reason = self._group_reason(group)
        if reason is not None:
            return reason
        if p.dtype not in _views.STORAGE_DTYPES:
            return f"{p.dtype} parameters"
        if p.layout is not _STRIDED:
            return f"{p.layout} parameters"
        try:
            kind = _views.device_kind(p)
        except TypeError:
            return f"parameters on the {p.device.type} device"
        if kind == "cuda" and p.dtype in _views.HALF_DTYPES:
            return f"{p.dtype} CUDA parameters"
        return None

    def _layout_reason(self, group: dict, p: torch.Tensor, g: torch.Tensor) -> str | None:
        """Why torch's own step updates ``p`` with its dense gradient ``g`` (of ``p``'s shape, dtype and
        device) as they are laid out in memory, or None (default: None, the kernels take any layout)."""
        return None

    def _rehearse(self, group: dict, p: torch.Tensor) -> str:
        """torch's step of ``p`` rehearsed on copies (raises what torch raises: nothing is written yet);
        the reason torch's own step then updates ``p``. Where torch raises for a parameter without state,
        the state entry torch's step would have left (created lazily before it raised) is installed."""
        runner, state = self._torch(), self.state.get(p)
        try:
            runner.rehearse(group, p, state or {}, self.defaults)
        except Exception:
            if not state and runner.refused_state is not None:  # the state torch's refused step creates
                self.state[p] = runner.refused_state
            raise
        return _MISFIT

    def _say(self, reason: str) -> None:
        if reason not in self._said:
            self._said.add(reason)
            name = type(self).__name__
            warnings.warn(
                f"{name}: {reason}: those parameters are updated by torch.optim.{name}'s own "
                "implementation (optimizer.backend_for(p) tells which)",
                stacklevel=5,
            )

    def _torch(self) -> _delegate.TorchRunner:
        if self._runner is None:
            torch_cls = _delegate.torch_class(type(self))
            if torch_cls is None:
                raise TypeError(
                    f"{type(self).__name__}: a configuration optkernels' kernels do not serve, "
                    "and no torch.optim class of that name to run it"
                )
            self._runner = _delegate.TorchRunner(torch_cls, None, self.defaults)
        return self._runner

    @staticmethod
    def _grad_fits(p: torch.Tensor, g: torch.Tensor) -> bool:
        """``g`` has ``p``'s shape, dtype and device (its layout is fixed at the step)."""
        return g.dtype is p.dtype and g.shape == p.shape and g.device == p.device

    def _state_fits(self, p: torch.Tensor, group: dict) -> bool:
        """``p``'s state is empty (created at the step) or holds every tensor the kernel takes, each of
        ``p``'s shape, dtype, device and layout, and a one-element step counter."""
        state = self.state.get(p)
        if not state:
            return True
        if self.counts_steps:
            step = state.get("step")
            if isinstance(step, torch.Tensor):
                if step.numel() != 1 or step.is_complex():
                    return False
            elif not isinstance(step, (int, float)) or isinstance(step, bool):
                return False
        layout = None
        for name in self._kernel(group)[1]:
            t = state.get(name)
            if t is None and name in self.optional_state:
                continue
            if not isinstance(t, torch.Tensor) or t.layout is not _STRIDED:
                return False
            if t.shape != p.shape or t.dtype is not p.dtype or t.device != p.device:
                return False
            layout = _layout(p) if layout is None else layout
            if t.stride() != layout:
                return False
        return True

    def _check_sparse(self, p: torch.Tensor, g: torch.Tensor) -> None:
        """torch's errors for a sparse gradient this optimizer does not take."""
        if not g.is_sparse:
            raise ValueError(
                f"{type(self).__name__}: gradients must be dense (strided) or sparse COO "
                f"tensors, got layout {g.layout}"
            )
        if self.sparse_grads == "no":
            raise RuntimeError(
                f"{type(self).__name__} does not support sparse gradients"
                + (", please consider SparseAdam instead" if type(self).__name__ in ("Adam", "AdamW") else "")
            )
        if g.dtype != p.dtype or g.shape != p.shape or g.device != p.device:
            raise ValueError(
                f"{type(self).__name__}: a sparse gradient ({g.dtype}, {tuple(g.shape)}, "
                f"{g.device}) does not match its parameter"
            )

    # ------------------------------------------------------------------ state

    def _state_of(self, p: torch.Tensor, group: dict, sparse: bool = False) -> dict:
        """``self.state[p]``, with any missing state tensor created (torch's names and initial values)."""
        state = self.state[p]
        if self.counts_steps and "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=_step_dtype(group))
        for name in self._state_names(group):
            if state.get(name) is None:
                state[name] = self._new_state(name, p, group)
        return state

    def _state_names(self, group: dict) -> tuple[str, ...]:
        """The kernel's state names in the order torch's class creates them (``state_dict()``'s order)."""
        return self._kernel(group)[1]

    def _pre_buffer(self, p: torch.Tensor) -> torch.Tensor:
        """The per-parameter buffer of the pre-stepped gradient (per-tensor launches), allocated once: of
        the parameter's dtype, float32 for a half parameter (the pre-stepped gradient is not rounded)."""
        dtype = torch.float32 if p.dtype in _views.HALF_DTYPES else p.dtype
        buf = self._pre_buffers.get(id(p))
        if buf is None or buf.shape != p.shape or buf.dtype != dtype or buf.device != p.device:
            buf = self._pre_buffers[id(p)] = torch.empty(p.shape, dtype=dtype, device=p.device)
        return buf

    # ------------------------------------------------------------------ dense step

    def _plan(self, index: int, group: dict, params: list) -> _Plan:
        """The group's plan for ``params`` (all checked), rebuilt when they or their memory changed."""
        key = (tuple(map(id, params)), self._kernel(group))
        plan = self._plans.get(index)
        if (
            plan is None
            or plan.key != key
            or not plan.same_memory(params)
            or list(map(_SHAPE, params)) != plan.shapes
        ):
            plan = self._plans[index] = self._build(group, params, key)
        return plan

    def _dense_step(self, work: _Work) -> None:
        """One step of a group's parameters with dense gradients."""
        group, plan, params, grads, ptrs = work.group, work.plan, work.dense, work.grads, work.ptrs
        assert plan is not None  # set for every group with dense work when it was sorted
        given = grads  # as found (their layouts decide torch's half tails), or none (from a guard)
        if ptrs is None:
            grads = [_laid_out(p, g) for p, g in zip(params, grads)]
        for p, copy in plan.copies:
            copy.copy_(p.detach())
        steps: Any = None
        if plan.step_now is not None:  # a plan's parameters step together: equal steps stay equal
            plan.step_now += 1
            first, uniform = plan.step_now, True
            if plan.steps_np is not None:
                plan.steps_np.fill(first)  # the state's 'step' tensors are views of it
        elif plan.steps_np is not None:
            steps = plan.steps_np
            steps += 1
            first, uniform = int(steps[0]), False
        elif not self.numbered_steps:
            steps, first, uniform = self._private_steps(plan), 1, True
        else:
            steps = self._private_steps(plan)
            first = int(steps[0])
            uniform = bool((steps == first).all())
        self._before_update(group, plan, first)
        prestep = self._prestep(group)
        kernel = plan.key[1][0]
        whole = len(plan.cpu) == 1 and not plan.single  # one launch table covering params in order
        for dtype, positions, tensors, _members in plan.cpu:
            if whole and ptrs is not None:
                tensors.addresses[-1, :] = ptrs
            else:
                local_grads = grads if whole else [grads[k] for k in positions.tolist()]
                tensors.addresses[-1, :] = list(map(_DATA_PTR, local_grads))
            pre = {}
            if prestep is not None:
                pre = dict(
                    prologue=_axpy_scal,
                    prologue_scalars=(dtype.type(prestep[0]), dtype.type(prestep[1]), True, True),
                )
            if uniform:
                kernel.launch_many("cpu", tensors, *self._scalars(group, first, dtype), **pre)
                continue
            local = steps[positions]
            for value in np.unique(local).tolist():
                others = tuple(np.flatnonzero(local != value).tolist())
                kernel.launch_many(
                    "cpu",
                    tensors,
                    *self._scalars(group, int(value), dtype),
                    chunks=tensors.chunks_without(others),
                    **pre,
                )
        half_scalars: dict = {}  # step -> the half launches' scalars, computed once per step value
        for entry in plan.single:
            k, kind, arrays, n, buffer = entry
            step = first if uniform else int(steps[k])
            # from a guard (see _sort): the gradients' addresses only, each laid out as its parameter
            raw = grads[k] if grads else params[k].grad
            address = int(ptrs[k]) if ptrs is not None else raw.data_ptr()
            if (
                kind == "cpu"
                and prestep is None
                and self._launch_half(
                    plan,
                    entry,
                    group,
                    raw,
                    address,
                    step,
                    _kernel_tail(kernel, params[k], given, k),
                    half_scalars,
                )
            ):
                continue
            dtype = _views.FLOAT_DTYPES.get(params[k].dtype, _FLOAT32)
            grad = _views.view(_flat(raw), kind, flat=True)
            if prestep is not None:
                _axpy_scal.launch(
                    kind,
                    n,
                    buffer,
                    arrays[0],
                    grad,
                    dtype.type(prestep[0]),
                    dtype.type(prestep[1]),
                    True,
                    True,
                )
                grad = buffer
            scalars = for_device(self._scalars(group, step, dtype), kind)
            if kernel in TAKES_TAIL and params[k].dtype in _views.HALF_DTYPES:
                scalars = scalars[:-3] + _kernel_tail(kernel, params[k], given, k)
            kernel.launch(kind, n, *arrays, grad, *scalars)
        for p, copy in plan.copies:
            p.detach().copy_(copy)

    def _launch_half(
        self,
        plan: _Plan,
        entry: tuple,
        group: dict,
        grad: torch.Tensor,
        address: int,
        step: int,
        tail: tuple,
        memo: dict,
    ) -> bool:
        """The step numbered ``step`` of ``plan``'s single ``entry`` where it is a float16/bfloat16 CPU
        parameter whose kernel takes torch's tail scalars (and no pre-step buffer): the same launch as
        ``kernel.launch`` makes, through a :class:`HalfLauncher` kept in the plan, with the parameter's and
        state's ``uint16`` views made once, and the gradient's (``grad``, whose data ``address`` is given)
        kept while its address stays. False (nothing done) for any other entry, or where the launcher
        cannot serve the step (then ``kernel.launch`` does). ``tail``: torch's tails (:func:`_grad_tail`);
        ``memo``: the group's scalars by step number, filled in during one step of the group (the tensors of
        a group at one step share them)."""
        k, _, arrays, n, _ = entry
        kept = plan.half.get(k)
        if kept is None:
            kernel = plan.key[1][0]
            ew = _half_kernel(kernel) if kernel in TAKES_TAIL and arrays[0].dtype in _HALF_NUMPY else None
            kept = plan.half[k] = [ew, [a.view(np.uint16) for a in arrays] if ew is not None else None, None]
        ew, bits, seen = kept[0], kept[1], kept[2]
        if ew is None:
            return False
        shared = memo.get(step)
        if shared is None:
            shared = memo[step] = self._half_scalars(group, step)
        scalars = shared + tail
        if seen is None or seen[0] != address:  # the gradient's bits, kept while its memory stays
            seen = (address, _bits_at(address, n)) if _dense(grad) else (None, _bits(grad))
            if seen[0] is not None:
                kept[2] = seen
        args = (*bits, seen[1], *scalars)
        launcher = kept[-1]  # the last one made: the one that fits, unless a flag changed since
        if not (isinstance(launcher, HalfLauncher) and launcher.fits(args)):
            launcher = next((f for f in kept[3:] if f.fits(args)), None)
            if launcher is None:
                launcher = HalfLauncher(ew, (*arrays, _views.view(_flat(grad), "cpu", flat=True), *scalars))
                kept.append(launcher)
        return launcher(n, *args)

    def _half_tails(self, group: dict, p: torch.Tensor, g: torch.Tensor) -> tuple | None:
        """:func:`_grad_tail` of a float16/bfloat16 CPU parameter ``p`` with its dense gradient ``g``
        where the group's kernel reproduces torch's tails (else ``NO_TAIL``); None where the kernels cannot
        describe them (torch's step then updates ``p``)."""
        kernel = self._kernel(group)[0]
        if p.dtype not in _views.HALF_DTYPES or not p.is_cpu or kernel not in TAKES_TAIL:
            return NO_TAIL
        own = getattr(kernel, "tails", None)
        if own is not None:  # a kernel with its own tails (torch's fused Adam: by the size alone)
            return own(p.numel(), p.element_size())
        return _strided_tail(tuple(p.shape), g.stride(), p.stride(), _dense(p), torch.get_num_threads())

    def _private_steps(self, plan: _Plan) -> np.ndarray:
        """Step numbers of an optimizer whose state has no 'step' (SGD): override."""
        raise NotImplementedError

    def _build(self, group: dict, params: list, key: tuple) -> _Plan:
        plan = _Plan(key, params, list(map(_DATA_PTR, params)))
        names = key[1][1]
        if names or self.counts_steps:
            states = [self._state_of(p, group) for p in params]
        else:
            states = [{} for _ in params]  # torch keeps no state for these (SGD without momentum)
        plan.kept = [s[n] for s in states for n in names]
        plan.entries, plan.names, plan.kept_at = states, names, list(map(_DATA_PTR, plan.kept))
        if self.counts_steps:
            plan.steps = torch.tensor([float(s["step"]) for s in states], dtype=_step_dtype(group))
            plan.steps_np = plan.steps.numpy()
            for k, s in enumerate(states):
                s["step"] = plan.steps[k]
            if len(states) and bool((plan.steps_np == plan.steps_np[0]).all()):
                plan.step_now = int(plan.steps_np[0])
        self._prepare_plan(plan, states)
        memory = []
        for p in params:
            if _dense(p):
                memory.append(p.detach())
            else:
                copy = torch.empty_like(p.detach(), memory_format=torch.contiguous_format)
                plan.copies.append((p, copy))
                memory.append(copy)
        by_dtype: dict = {}
        for k, p in enumerate(params):
            kind = _views.device_kind(p)
            if kind == "cuda" or p.dtype in _views.HALF_DTYPES:
                arrays = [
                    _views.view(_flat(t), kind, flat=True)
                    for t in [memory[k]] + [states[k][n] for n in names]
                ]
                buffer = (
                    _views.view(self._pre_buffer(p), kind, flat=True)
                    if self._prestep(group) is not None
                    else None
                )
                plan.single.append((k, kind, arrays, p.numel(), buffer))
            else:
                by_dtype.setdefault(p.dtype, []).append(k)
        for torch_dtype, members in by_dtype.items():
            dtype = _views.FLOAT_DTYPES[torch_dtype]
            tensors = TensorList([params[k].numel() for k in members], dtype, len(names) + 2)
            tensors.addresses[0, :] = [memory[k].data_ptr() for k in members]
            for row, name in enumerate(names, start=1):
                tensors.addresses[row, :] = [states[k][name].data_ptr() for k in members]
            plan.cpu.append((dtype, np.asarray(members, np.int64), tensors, [params[k] for k in members]))
        return plan

    def _prepare_plan(self, plan: _Plan, states: list) -> None:
        """Subclass hook, after the state exists and before the tables are built."""


def _step_dtype(group: dict) -> torch.dtype:
    """torch's dtype of a 'step' counter: float32, float64 where that is the default dtype (not for
    ``fused=True``)."""
    if torch.get_default_dtype() is torch.float64 and not group.get("fused"):
        return torch.float64
    return torch.float32


def _guard(params: list, grads: list) -> _fields.Guard | None:
    """The fast check of a whole plan's parameters and gradients (gradients laid out as their parameters'
    state), or None where the tensors' fields are not readable here, or a parameter has more than 5
    dimensions or is of a tensor subclass (the Python checks then run every step)."""
    at = _fields.layout()
    if at is None:
        return None
    try:
        return _fields.Guard(params, grads, at, [_layout(p) for p in params])
    except ValueError:
        return None


@functools.cache
def _half_width() -> int:
    """Elements per vector of torch's CPU float16/bfloat16 loops: 32 with AVX-512, else 16 (AVX2) (torch
    settles its CPU capability once per process)."""
    return 32 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 16


@functools.lru_cache(maxsize=256)
def _tail_scalars_of(n: int, threads: int) -> tuple:
    return torch_tail_scalars(n, threads, _half_width())


def _tail_scalars(n: int) -> tuple:
    """:func:`torch_tail_scalars` of a half tensor of ``n`` elements stepped by torch now (its thread count
    and vector width)."""
    return _tail_scalars_of(n, torch.get_num_threads())


def _kernel_tail(kernel: Any, p: torch.Tensor, given: list, k: int) -> tuple:
    """The tail scalars of ``kernel``'s launch over the ``k``-th parameter ``p``: the kernel's own
    (``kernel.tails(numel, itemsize)``) where it has them, else :func:`_grad_tail`'s."""
    own = getattr(kernel, "tails", None)
    if own is not None:
        return own(p.numel(), p.element_size())
    return _grad_tail(p, given, k)


def _grad_tail(p: torch.Tensor, given: list, k: int) -> tuple:
    """torch's half tails (:func:`torch_tail_scalars`' three) of ``grad.add(param, alpha=)`` for the
    ``k``-th parameter ``p`` stepped with the gradient ``given[k]`` (laid out as ``p``'s state where
    ``given`` is empty: the gradients came from a guard), in the order the kernel walks ``p``'s memory."""
    n = p.numel()
    if not given:
        return _tail_scalars(n)
    g = given[k]
    tail = _strided_tail(tuple(p.shape), g.stride(), p.stride(), _dense(p), torch.get_num_threads())
    if tail is None:  # sorted out to torch's step by _sort (KernelOptimizer._half_tails)
        raise RuntimeError("optkernels.torch: a half gradient's layout changed during the step")
    return tail


@functools.lru_cache(maxsize=256)
def _strided_tail(shape: tuple, grad_strides: tuple, param_strides: tuple, dense: bool, threads: int) -> Any:
    """:func:`strided_tail_scalars` of a parameter of ``shape`` and ``param_strides`` updated in place
    (``dense``) or through a contiguous working copy, with a gradient of ``grad_strides``."""
    kernel = param_strides if dense else torch.empty(shape, device="meta").stride()
    return strided_tail_scalars(shape, grad_strides, param_strides, kernel, threads, _half_width())


def _half_kernel(kernel: Any) -> Any:
    """The :class:`Elementwise` that ``kernel`` runs for a float16/bfloat16 CPU tensor (its ``half`` rule
    where it has one, see ``_half_rule.HalfRule``), or None where that is not a plain element function."""
    ew = getattr(kernel, "half", kernel)
    return ew if isinstance(ew, Elementwise) and ew.constant_flags else None


def _bits(t: torch.Tensor) -> np.ndarray:
    """The flat ``uint16`` array over a float16/bfloat16 tensor's memory (dense, as :func:`_flat` takes)."""
    if t.is_contiguous():
        bits = t.detach().view(torch.uint16).numpy()
        return bits if bits.ndim == 1 else bits.reshape(-1)
    return _views.view(_flat(t), "cpu", flat=True).view(np.uint16)


def _bits_at(address: int, n: int) -> np.ndarray:
    """The ``uint16`` array of the ``n`` elements at ``address``: the memory of a dense float16/bfloat16
    tensor (as :func:`_bits` of it), without a reference to the tensor, so that it can be kept between steps
    and used again while a tensor of the same size lives at the same address."""
    return np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(address)) if n else _NO_BITS


_NO_BITS = np.empty(0, np.uint16)


def _laid_out(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``g`` (of ``p``'s shape, dtype and device), or a copy of it laid out as ``p``'s state (a gradient
    assigned as a strided view), kept for the step."""
    layout = _layout(p)
    if g.stride() == layout:
        return g
    return torch.empty_strided(p.shape, layout, dtype=g.dtype, device=g.device).copy_(g)


def _contiguous(g: torch.Tensor) -> torch.Tensor:
    """``g``, or a contiguous copy of it (a gradient assigned as a strided view), kept for the step (the
    subclasses that launch per tensor from their own ``_dense_step``)."""
    return g if g.is_contiguous() else g.contiguous()
