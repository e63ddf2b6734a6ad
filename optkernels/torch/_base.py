"""The ``torch.optim.Optimizer`` subclass under every optkernels.torch optimizer with torch's math.

A subclass says, per parameter group, which element-wise kernel updates its parameters (:meth:`_kernel`:
the element function and the names of the state tensors it takes between the parameter and the gradient),
the kernel's scalars for a step (:meth:`_scalars`), and torch's gradient pre-step (:meth:`_prestep`:
``maximize`` and coupled weight decay, ``g' = (α·w + g)·β``). This class does the rest:

* validation, all of it before any tensor is written: parameters must be leaf float32/float64 tensors (or
  float16/bfloat16 CPU tensors) on one device per group; each step every gradient must match its
  parameter (dtype, shape, device; dense, or sparse COO for an optimizer that takes sparse gradients; a
  strided one is copied for the step);
* state tensors with torch's names, created on a parameter's first step (so ``state_dict()`` loads into
  ``torch.optim`` and back); step counters are float32 0-d tensors, as torch keeps them;
* a **plan** per group, built when the set of parameters with gradients changes: CPU parameters of one
  dtype are updated by ONE multi-tensor launch (their data addresses in a table, set once: the tensors are
  updated in place and never reallocated; the gradients' addresses refilled each step), the pre-step
  folded into the same loop; CUDA parameters and float16/bfloat16 CPU parameters get one launch per
  tensor, the pre-step into a buffer allocated once per parameter (float32 for a half parameter: a half
  update is float32 math with each updated tensor rounded once, the contract of optkernels' half
  kernels). The group's step counters are views into one float32 tensor, so counting a step is one
  operation, not one per parameter.

Nothing is allocated per step in proportion to the model.
"""
from __future__ import annotations

import operator
from itertools import chain
from typing import Any, Callable, Optional

import numpy as np
import torch

from torch.optim.optimizer import _global_optimizer_post_hooks as _global_post_hooks
from torch.optim.optimizer import _global_optimizer_pre_hooks as _global_pre_hooks

from ..kernels._multi_tensor import TensorList
from ..kernels.axpy import _axpy_scal
from . import _views

__all__ = ["KernelOptimizer"]


_profiler_enabled = torch._C._autograd._profiler_enabled
_STRIDED = torch.strided
_ONLY_STRIDED = {torch.strided}
_NONE_TYPE = type(None)
_GRAD = operator.attrgetter("grad")
_LAYOUT = operator.attrgetter("layout")
_DTYPE = operator.attrgetter("dtype")
_NUMEL = torch.Tensor.numel
_DATA_PTR = torch.Tensor.data_ptr
_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_FLOAT32 = np.dtype(np.float32)


def _contiguous(g: torch.Tensor) -> torch.Tensor:
    """``g``, or a contiguous copy of it (a gradient assigned as a strided view), kept for the step."""
    return g if g.is_contiguous() else g.contiguous()


class _Plan:
    """One group's parameters with gradients, their state arrays and launch tables."""

    def __init__(self, key: tuple, params: list, ptrs: list[int]):
        self.key = key
        self.params = params
        self.ptrs = ptrs
        self.steps: Optional[torch.Tensor] = None      # float32 [T]; state['step'] are its 0-d views
        self.steps_np: Optional[np.ndarray] = None
        self.cpu: list = []        # (dtype, positions array, TensorList, parameters)
        self.single: list = []     # (k, 'cpu'/'cuda', [views of param and slots], n, buffer view or None)
        self.kept: list = []       # the state tensors whose addresses the tables hold (kept alive)
        self.private_steps: Any = None   # int64 step numbers of a state without 'step' (SGD)


class KernelOptimizer(torch.optim.Optimizer):
    """torch.optim.Optimizer over optkernels' kernels (see the module docstring). Subclasses set
    ``sparse_grads`` ('no', 'yes' or 'only') and implement the hooks below."""

    sparse_grads = "no"
    counts_steps = True       # the state has torch's 'step' counter

    def __init__(self, params: Any, defaults: dict):
        self._plans: dict[int, _Plan] = {}
        self._pre_buffers: dict[int, torch.Tensor] = {}
        self._meta: dict[int, tuple] = {}      # group index -> (parameter ids, dtypes, sizes)
        super().__init__(params, defaults)

    # ------------------------------------------------------------------ hooks for subclasses

    def _check_hyper(self, group: dict) -> None:
        """Raise torch's ValueError for out-of-range hyper-parameters of ``group``."""

    def _kernel(self, group: dict) -> tuple[Any, tuple[str, ...]]:
        """``(element function, names of the state tensors between the parameter and the gradient)``."""
        raise NotImplementedError

    def _new_state(self, name: str, p: torch.Tensor, group: dict) -> torch.Tensor:
        """A new state tensor ``name`` for ``p`` (default: zeros like ``p``)."""
        return torch.zeros_like(p, memory_format=torch.preserve_format)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        """The kernel's scalars for a step numbered ``step`` (from 1), converted to ``dtype``."""
        raise NotImplementedError

    def _prestep(self, group: dict) -> Optional[tuple[float, float]]:
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
        """torch's ``add_param_group``, then optkernels' checks (float32/float64 leaf tensors, or
        float16/bfloat16 ones on the CPU; one device per group; contiguous); a group failing them is not
        added."""
        super().add_param_group(param_group)
        try:
            self._check_params(self.param_groups[-1])
            self._check_hyper(self.param_groups[-1])
        except Exception:
            self.param_groups.pop()
            raise
        self._plans.clear()

    def __setstate__(self, state: dict) -> None:
        """After unpickling or ``copy.deepcopy`` (torch pickles ``defaults``, ``state`` and ``param_groups``
        only): launch plans are rebuilt from the new tensors on the next step."""
        super().__setstate__(state)
        self._plans, self._pre_buffers, self._meta = {}, {}, {}

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict`` (state tensors cast to their parameters' dtype and device)."""
        super().load_state_dict(state_dict)
        self._plans.clear()

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
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

    step.hooked = True  # type: ignore[attr-defined]  # torch.optim.Optimizer.__init__ then leaves it unwrapped

    def _hooked_step(self, closure: Optional[Callable[[], Any]]) -> Any:
        args: tuple = (self, closure)
        kwargs: dict[str, Any] = {}
        if _global_pre_hooks or self._optimizer_step_pre_hooks:
            for pre_hook in chain(_global_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
                result = pre_hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(f"{self.step} must return None or a tuple of (new_args, "
                                           f"new_kwargs), "
                                           f"but got {result}.")
                    args, kwargs = result
        out = self._step(*args[1:], **kwargs)
        if _global_post_hooks or self._optimizer_step_post_hooks:
            for post_hook in chain(self._optimizer_step_post_hooks.values(), _global_post_hooks.values()):
                post_hook(self, args, kwargs)
        return out

    def _step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = []
        for index, group in enumerate(self.param_groups):
            self._check_hyper(group)
            dense, grads, sparse, ptrs = self._collect(index, group["params"])
            if dense and self.sparse_grads == "only":
                self._check_dense(dense[0], grads[0])
            work.append((index, group, dense, grads, sparse, ptrs))
        for index, group, dense, grads, sparse, ptrs in work:
            if dense:
                self._dense_step(index, group, dense, grads, ptrs)
            for p in sparse:
                self._sparse_step(group, p, p.grad, self._state_of(p, group, sparse=True))
        return loss

    # ------------------------------------------------------------------ checks

    def _collect(self, index: int, params: list) -> tuple[list, list, list, Optional[list]]:
        """``(parameters with a dense gradient, their gradients, parameters with a sparse gradient, the
        gradients' data addresses or None)``, the gradients checked. The common case (every parameter of the
        group has a dense, contiguous gradient) is checked with C-level maps over the group, not a Python
        loop: a step over a model of many small tensors should cost about what its kernel costs."""
        grads = list(map(_GRAD, params))
        ids = tuple(map(id, params))
        meta = self._meta.get(index)
        if meta is None or meta[0] != ids:
            meta = self._meta[index] = (ids, list(map(_DTYPE, params)), list(map(_NUMEL, params)))
        try:
            # raises for a missing gradient (TypeError) and for one without strided storage (sparse)
            ptrs = list(map(_DATA_PTR, grads))
        except (TypeError, RuntimeError):
            ptrs = None
        # torch's grad setter and autograd keep a gradient's shape, dtype and device those of its parameter;
        # a later ``grad.data = ...`` can change its dtype and size: what memory safety needs is checked here
        # (the rest, with its message, in _check_dense)
        if (ptrs is not None and list(map(_DTYPE, grads)) == meta[1] and list(map(_NUMEL, grads)) == meta[2]
                and all(map(_IS_CONTIGUOUS, grads))):
            return params, grads, [], ptrs
        dense, grads, sparse = [], [], []
        for p in params:
            g = p.grad
            if g is None:
                continue
            if g.layout is not _STRIDED:
                self._check_sparse(p, g)
                sparse.append(p)
                continue
            if g.dtype is not p.dtype or g.numel() != p.numel():
                self._check_dense(p, g)
            dense.append(p)
            grads.append(g)
        return dense, grads, sparse, None

    def _check_params(self, group: dict) -> None:
        kinds = set()
        for k, p in enumerate(group["params"]):
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if p.dtype not in _views.STORAGE_DTYPES:
                raise TypeError(f"{type(self).__name__}: params[{k}] has dtype {p.dtype}; optkernels updates "
                                "float32, float64, float16 and bfloat16 tensors (no complex or integer "
                                "types)")
            if p.is_sparse:
                raise TypeError(f"{type(self).__name__}: params[{k}] is a sparse tensor; parameters must be "
                                "dense")
            if not p.is_contiguous():
                raise ValueError(f"{type(self).__name__}: params[{k}] is not contiguous (call "
                                 "p.data = p.data.contiguous() first)")
            kinds.add(p.device)
        if len(kinds) > 1:
            raise ValueError(f"{type(self).__name__}: a parameter group mixes devices "
                             f"({', '.join(sorted(map(str, kinds)))}); put each device's parameters in its "
                             "own group")
        for k, p in enumerate(group["params"]):
            if _views.device_kind(p) == "cuda" and p.dtype in _views.HALF_DTYPES:
                raise TypeError(f"{type(self).__name__}: params[{k}] is a {p.dtype} CUDA tensor; optkernels "
                                "updates float16/bfloat16 tensors on the CPU only")

    def _check_dense(self, p: torch.Tensor, g: torch.Tensor) -> None:
        if self.sparse_grads == "only":
            raise RuntimeError(f"{type(self).__name__} does not support dense gradients, please consider "
                               "Adam instead")
        if g.dtype != p.dtype or g.shape != p.shape or g.device != p.device:
            raise ValueError(f"{type(self).__name__}: a gradient ({g.dtype}, {tuple(g.shape)}, {g.device}) "
                             f"does not match its parameter ({p.dtype}, {tuple(p.shape)}, {p.device})")
        if g.numel() != p.numel():
            raise ValueError(f"{type(self).__name__}: a gradient of {g.numel()} elements for a parameter of "
                             f"{p.numel()}")

    def _check_sparse(self, p: torch.Tensor, g: torch.Tensor) -> None:
        if not g.is_sparse:
            raise ValueError(f"{type(self).__name__}: gradients must be dense (strided) or sparse COO "
                             f"tensors, "
                             f"got layout {g.layout}")
        if self.sparse_grads == "no":
            raise RuntimeError(f"{type(self).__name__} does not support sparse gradients"
                               + (", please consider SparseAdam instead"
                                  if type(self).__name__.startswith("Adam") else ""))
        if g.dtype != p.dtype or g.shape != p.shape or g.device != p.device:
            raise ValueError(f"{type(self).__name__}: a sparse gradient ({g.dtype}, {tuple(g.shape)}, "
                             f"{g.device}) does not match its parameter")
        if g.sparse_dim() != 1 or p.dim() < 1:
            raise ValueError(f"{type(self).__name__}: sparse gradients must be row-sparse (sparse_dim 1, as "
                             f"nn.Embedding(sparse=True) gives), got sparse_dim {g.sparse_dim()}")

    # ------------------------------------------------------------------ state

    def _state_of(self, p: torch.Tensor, group: dict, sparse: bool = False) -> dict:
        """``self.state[p]``, with any missing state tensor created (torch's names and initial values)."""
        state = self.state[p]
        if self.counts_steps and "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
        for name in self._kernel(group)[1]:
            if state.get(name) is None:
                state[name] = self._new_state(name, p, group)
        return state

    def _pre_buffer(self, p: torch.Tensor) -> torch.Tensor:
        """The per-parameter buffer of the pre-stepped gradient (per-tensor launches), allocated once: of
        the parameter's dtype, float32 for a half parameter (the pre-stepped gradient is not rounded)."""
        dtype = torch.float32 if p.dtype in _views.HALF_DTYPES else p.dtype
        buf = self._pre_buffers.get(id(p))
        if buf is None or buf.shape != p.shape or buf.dtype != dtype or buf.device != p.device:
            buf = self._pre_buffers[id(p)] = torch.empty(p.shape, dtype=dtype, device=p.device)
        return buf

    # ------------------------------------------------------------------ dense step

    def _dense_step(self, index: int, group: dict, params: list, grads: list, ptrs: Optional[list]) -> None:
        """One step of the group's parameters with dense gradients (``ptrs``: the gradients' addresses, when
        all are contiguous and known)."""
        meta = self._meta.get(index)
        ids = meta[0] if meta is not None and params is group["params"] else tuple(map(id, params))
        key = (ids, self._kernel(group))
        plan = self._plans.get(index)
        if plan is None or plan.key != key or plan.ptrs != list(map(_DATA_PTR, params)):
            self._meta.pop(index, None)        # a parameter's data was replaced: re-read sizes and dtypes
            plan = self._plans[index] = self._build(group, params, key)
        if plan.steps_np is not None:
            plan.steps_np += 1
            steps = plan.steps_np
        else:
            steps = self._private_steps(plan)
        first = int(steps[0])
        uniform = bool((steps == first).all())
        self._before_update(group, plan, first)
        prestep = self._prestep(group)
        kernel = key[1][0]
        whole = len(plan.cpu) == 1 and not plan.single     # one launch table covering params in order
        for dtype, positions, tensors, _members in plan.cpu:
            if whole and ptrs is not None:
                local_grads = grads
                tensors.addresses[-1, :] = ptrs
            else:
                local_grads = grads if whole else [grads[k] for k in positions.tolist()]
                if not all(map(_IS_CONTIGUOUS, local_grads)):
                    local_grads = [_contiguous(g) for g in local_grads]
                tensors.addresses[-1, :] = list(map(_DATA_PTR, local_grads))
            pre = {}
            if prestep is not None:
                pre = dict(prologue=_axpy_scal,
                           prologue_scalars=(dtype.type(prestep[0]), dtype.type(prestep[1]), True, True))
            if uniform:
                kernel.launch_many("cpu", tensors, *self._scalars(group, first, dtype), **pre)
                continue
            local = steps[positions]
            for value in np.unique(local).tolist():
                others = tuple(np.flatnonzero(local != value).tolist())
                kernel.launch_many("cpu", tensors, *self._scalars(group, int(value), dtype),
                                   chunks=tensors.chunks_without(others), **pre)
            del local_grads
        for k, kind, arrays, n, buffer in plan.single:
            dtype = _views.FLOAT_DTYPES.get(params[k].dtype, _FLOAT32)
            grad = _views.view(_contiguous(grads[k]), kind, flat=True)
            if prestep is not None:
                _axpy_scal.launch(kind, n, buffer, arrays[0], grad, dtype.type(prestep[0]),
                                  dtype.type(prestep[1]), True, True)
                grad = buffer
            kernel.launch(kind, n, *arrays, grad, *self._scalars(group, int(steps[k]), dtype))

    def _private_steps(self, plan: _Plan) -> np.ndarray:
        """Step numbers of an optimizer whose state has no 'step' (SGD): override."""
        raise NotImplementedError

    def _build(self, group: dict, params: list, key: tuple) -> _Plan:
        plan = _Plan(key, params, [p.data_ptr() for p in params])
        names = key[1][1]
        states = [self._state_of(p, group) for p in params]
        plan.kept = [s[n] for s in states for n in names]
        if self.counts_steps:
            plan.steps = torch.tensor([float(s["step"]) for s in states], dtype=torch.float32)
            plan.steps_np = plan.steps.numpy()
            for k, s in enumerate(states):
                s["step"] = plan.steps[k]
        self._prepare_plan(plan, states)
        by_dtype: dict = {}
        for k, p in enumerate(params):
            kind = _views.device_kind(p)
            if kind == "cuda" or p.dtype in _views.HALF_DTYPES:
                arrays = [_views.view(t, kind, flat=True) for t in [p] + [states[k][n] for n in names]]
                buffer = (_views.view(self._pre_buffer(p), kind, flat=True)
                          if self._prestep(group) is not None else None)
                plan.single.append((k, kind, arrays, p.numel(), buffer))
            else:
                by_dtype.setdefault(p.dtype, []).append(k)
        for torch_dtype, members in by_dtype.items():
            dtype = _views.FLOAT_DTYPES[torch_dtype]
            tensors = TensorList([params[k].numel() for k in members], dtype, len(names) + 2)
            tensors.addresses[0, :] = [params[k].data_ptr() for k in members]
            for row, name in enumerate(names, start=1):
                slot = [states[k][name] for k in members]
                if any(not s.is_contiguous() or s.dtype != torch_dtype or s.device.type != "cpu"
                       for s in slot):
                    raise ValueError(f"{type(self).__name__}: state '{name}' must be contiguous CPU tensors "
                                     "of "
                                     "the parameter's dtype")
                tensors.addresses[row, :] = [s.data_ptr() for s in slot]
            plan.cpu.append((dtype, np.asarray(members, np.int64), tensors, [params[k] for k in members]))
        return plan

    def _prepare_plan(self, plan: _Plan, states: list) -> None:
        """Subclass hook, after the state exists and before the tables are built."""
