"""The step of an optimizer whose plain steps take a short path once a generic step has planned them
(SGD's :class:`.sgd._PlainStep`, Adam's :class:`._float_step.FloatStep` and
:class:`._half_step.HalfStep`): ``step`` goes to the short path straight where nothing watches the step (no
hooks, closure or profiler), and the generic step makes the next short path after it runs. Below the
mixin, the checks and the table launch that those short paths share."""

from __future__ import annotations

import operator
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from ..kernels._elementwise import PREFETCH_PART, _SerialBelow
from ..kernels._threading import parallel_allowed, parallel_launch
from ._base import unwrapped

__all__ = [
    "ShortPath",
    "ShortPathSteps",
    "gradients_checked",
    "launch_table",
    "lr_changed",
    "planned_group",
    "unchanged",
]


class ShortPath:
    """Base of the short paths (SGD's, Adam's float and half ones): the slots that :func:`unchanged` and
    :func:`lr_changed` read, the group and its plan, the plan's guard, the hyper-parameters the path was made
    for and its ``lr``; each path adds its own."""

    __slots__ = ("group", "plan", "guard", "hyper", "lr")


class ShortPathSteps:
    """Mixin before :class:`._base.KernelOptimizer`: subclasses implement :meth:`_short_path_of`."""

    _fast: Any = None  # the short path of plain steps, once a generic step made it possible
    _fast_refused: Any = None  # the plan whose guard refused the short path (not retried with that plan)

    def _short_path_of(self) -> Any:
        """The short path of the next steps (an object whose ``run(optimizer)`` steps and returns True, or
        returns False having written nothing), or None where the last step was not one it repeats."""
        raise NotImplementedError

    @unwrapped
    def step(self, closure: Any = None) -> Any:
        """One update of every parameter that has a gradient (see :meth:`KernelOptimizer.step`); a plain
        step without hooks, closure or profiler takes the short path straight from here."""
        fast = self._fast
        if fast is not None and closure is None and self._unobserved():  # type: ignore[attr-defined]
            if fast.run(self):
                return None
            self._fast = None
        return super().step(closure)  # type: ignore[misc]

    def _step(self, closure: Any = None) -> Any:
        fast = self._fast
        if fast is not None and closure is None and fast.run(self):
            return None
        self._fast = None
        loss = super()._step(closure)  # type: ignore[misc]
        self._fast = self._short_path_of()
        return loss


def planned_group(optimizer: Any, fits: Callable[[dict], bool]) -> tuple[dict, Any] | None:
    """``(group, plan)``: the optimizer's one group and the plan (a ``_base._Plan``) of its last step, where a short path may
    repeat that step (a whole, guarded plan without copies, made for this group's parameters and kernel and
    not refused by its guard; a float ``lr``; not differentiable; ``fits(group)``, asked before the group's
    kernel is); else None."""
    groups = optimizer.param_groups
    if len(groups) != 1:
        return None
    group = groups[0]
    plan = optimizer._plans.get(0)
    if (
        plan is None
        or plan is optimizer._fast_refused
        or type(group["lr"]) is not float
        or not fits(group)
        or group["differentiable"]
        or not plan.whole
        or plan.guard is None
        or plan.copies
        or plan.key[1] != optimizer._kernel(group)
        or plan.key[0] != tuple(map(id, group["params"]))
    ):
        return None
    return group, plan


_PLAIN = frozenset((bool, int, float, type(None)))


def _plain(values: tuple) -> bool:
    """Every value a bool, int, float or None, or a tuple of them (``betas``): compared by value, and no
    tensor whose value could change in place."""
    return all(type(v) in _PLAIN or (type(v) is tuple and all(type(x) in _PLAIN for x in v)) for v in values)


def unchanged(optimizer: Any, path: Any, hyper: tuple) -> bool:
    """Whether the optimizer still has the one group and plan that the short path ``path`` was made for,
    without AMP's ``found_inf``/``grad_scale``, and the hyper-parameters ``hyper`` it was made with: the
    same objects, or equal plain values (:func:`_plain`: a tensor compares equal to a float of its value,
    but torch's step computes with it otherwise), which the path then keeps."""
    attributes = optimizer.__dict__
    if (
        optimizer._plans.get(0) is not path.plan
        or len(optimizer.param_groups) != 1
        or optimizer.param_groups[0] is not path.group
        or "found_inf" in attributes
        or "grad_scale" in attributes
    ):
        return False
    if type(hyper) is not tuple:
        return False
    if all(map(operator.is_, hyper, path.hyper)):
        return True
    if hyper != path.hyper or not _plain(hyper):
        return False
    path.hyper = hyper
    return True


def lr_changed(path: Any, group: dict) -> bool | None:
    """The group's ``lr`` against the short path's ``path.lr`` (updated): None where the short path does not
    take it (not a float >= 0: the generic step's checks judge it), True where its value changed (the
    scalars are to be made again), else False."""
    lr = group["lr"]
    if lr is path.lr:
        return False
    if type(lr) is not float or not lr >= 0.0:
        return None
    changed = lr != path.lr
    path.lr = lr
    return changed


def gradients_checked(optimizer: Any, plan: Any, params: list, grads: Any, watched: bool) -> bool:
    """The guard's compiled check of ``params`` and their gradients (the state too where ``watched``: the
    guard watches the plan's state), the gradients' addresses written into ``grads``; where it refuses, a
    changed state drops the plan (the generic step plans anew) and anything else refuses the short path
    for this plan. False: nothing else written."""
    guard = plan.guard
    if guard.gradients_into(params, grads):
        return True
    if watched and not optimizer._state_intact(plan):  # the state changed (checked through Python)
        optimizer._plans.pop(0, None)
        return False
    if not (watched and guard.gradients_into(params, grads)):  # (watched anew)
        optimizer._fast_refused = plan
        return False
    return True


def launch_table(entry: Any, tensors: Any, threads: Any, scalars: tuple, large: Any = None) -> None:
    """Run a multi-tensor kernel's chunked ``entry`` over the launch table ``tensors`` with ``scalars``, as
    :meth:`~optkernels.kernels._elementwise.Elementwise.launch_many` runs it; ``threads``: what reads the
    calling thread's Numba thread count where the table is large enough for all of them, else None;
    ``large``: the kernel's prefetching entry (``many_chunked(..., prefetch=True)``), run instead where each
    thread's part holds :data:`~optkernels.kernels._elementwise.PREFETCH_PART` elements or more, or None."""
    launch = parallel_launch()
    if threads is not None and type(launch) is nullcontext:  # nothing to enter, nothing to set
        count = threads()
        table = tensors.balanced(count)
        if large is not None and tensors.total // count >= PREFETCH_PART:
            entry = large
        entry(parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars)
        return
    with launch, _SerialBelow(tensors.total) as count:
        table = tensors.balanced(count)
        if large is not None and tensors.total // count >= PREFETCH_PART:
            entry = large
        entry(parallel_allowed(), table.shape[0], table, tensors.addresses, tensors.like, *scalars)
