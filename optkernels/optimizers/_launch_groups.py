"""One multi-tensor launch per group of parameters per step, instead of one launch per parameter.

Built once per optimizer (on its first step) by :func:`build`, from what the optimizer says about each
parameter (:meth:`Optimizer._dense_kernel`: the element-wise kernel of its dense update and the arrays it
updates; :meth:`Optimizer._scalar_group`: which parameters always get the same per-step scalars):

* a **kernel group** gathers the CPU parameters with the same kernel, dtype and scalar group; each step it
  updates all of them with one :meth:`Elementwise.launch_many <optkernels.kernels._elementwise.Elementwise
  .launch_many>` whose address table holds, fixed, the parameters and slots (the optimizer keeps them alive
  and never reallocates them: ``set_data`` and ``load_state_dict`` copy into them) and, refilled per step,
  the gradients' addresses (the caller holds the gradients during the step).
* the members' gradient pre-steps (MindSpore's ``decay_weight`` then ``scale_grad``, without
  centralization) run inside that same launch: its prologue (``axpy_scal``) writes
  ``(w·wd + g)·(1/loss_scale)`` chunk by chunk into a per-thread buffer that the kernel then reads, so the
  pre-step costs no extra pass over memory and no buffer per parameter. Members with different pre-steps
  (decayed or not, another weight decay) are in different groups.
* centralized gradients are prepared per parameter with NumPy (a new array, kept alive for the step).

What stays per parameter, through the optimizer's own ``_apply_dense``/``_apply_sparse``: CUDA parameters,
NumPy parameters not aligned to their dtype (a view at an odd offset of a byte buffer; such gradients are
copied),
optimizers whose update is not a single element-wise kernel (Lamb, AdaFactor, THOR, AdamOffload), row-sparse
gradients (in a step where a member's gradient is row-sparse its chunks are left out of the group's launch),
and every parameter of an optimizer whose CPU parameters share memory (the update order between two
parameters would then matter; per-parameter launches keep it) or whose ``_multi_tensor`` is False.

Every element is computed by the same call of the same element function with the same scalars as one
launch per parameter would make, so the results are the same bits, whatever the number of threads.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..kernels._multi_tensor import TensorList
from ..kernels._pointers import data_addresses
from ..kernels.axpy import _axpy_scal

__all__ = ["LaunchPlan", "build"]

_PLACEHOLDER = np.empty(0, np.int8)  # stands in for a gradient that is not a dense NumPy array


class KernelGroup:
    """CPU parameters updated by one multi-tensor launch of ``kernel`` (same dtype, same scalars, same
    gradient pre-step: ``prestep`` is False, or True for the decay/unscale prologue)."""

    __slots__ = ("kernel", "prestep", "plans", "first", "positions", "local", "tensors")

    def __init__(self, kernel: Any, prestep: bool, members: list) -> None:
        self.kernel = kernel
        self.prestep = prestep
        self.plans = [plan for plan, _ in members]
        self.first = self.plans[0]
        self.positions = np.array([plan.index for plan in self.plans], np.int64)
        self.local = {plan.index: k for k, plan in enumerate(self.plans)}
        n_arrays = len(members[0][1]) + 1
        self.tensors = TensorList([plan.size for plan in self.plans], self.first.dtype, n_arrays)
        for row in range(n_arrays - 1):
            self.tensors.set_row(row, [arrays[row] for _, arrays in members])


class LaunchPlan:
    """The groups of one optimizer, and the per-step driver (:meth:`run`).

    Attributes:
        kernel_groups: the :class:`KernelGroup` list.
        centralized: members of kernel groups whose gradient is centralized (prepared per parameter).
        sequential: indices of the parameters updated one by one.
    """

    def __init__(self, n_plans: int, kernel_groups: list, centralized: list, sequential: list):
        self.kernel_groups = kernel_groups
        self.centralized = centralized
        self.sequential = sequential
        self.grouped = {plan.index for group in kernel_groups for plan in group.plans}
        self.align_masks = np.zeros(n_plans, np.int64)  # address & mask != 0: not aligned to the dtype
        for group in kernel_groups:
            self.align_masks[group.positions] = group.first.dtype.itemsize - 1

    def run(self, opt: Any, grads: list, plain: bool, ctx: Any) -> None:
        """One step: the parameters updated one by one, then one launch per group.

        ``plain``: every gradient is a C-contiguous NumPy array of its (CPU) parameter's shape and dtype,
        as checked by the caller."""
        plans = opt._plans
        for k in self.sequential:
            opt._step_one(plans[k], grads[k], ctx)
        if not self.kernel_groups:
            return
        kept = []  # arrays whose addresses are used in this step's launches
        excluded: tuple[int, ...] = ()
        if plain:
            dense = grads
        else:
            dense = list(grads)
            for k, g in enumerate(grads):
                if isinstance(g, np.ndarray):
                    if not g.flags.c_contiguous:
                        dense[k] = np.ascontiguousarray(g)
                else:
                    dense[k] = _PLACEHOLDER
                    if k in self.grouped:  # row-sparse: this step it goes the sequential way
                        opt._step_one(plans[k], g, ctx)
                        excluded += (k,)
        addresses = data_addresses(dense)
        if (addresses & self.align_masks).any():
            dense = list(dense)
            for k in np.flatnonzero(addresses & self.align_masks).tolist():
                if k in self.grouped and k not in excluded:
                    dense[k] = np.array(dense[k])  # an aligned copy (NumPy allocates so)
                    addresses[k] = data_addresses((dense[k],))[0]
        for plan in self.centralized:
            k = plan.index
            if k not in excluded:
                g = np.ascontiguousarray(opt._prepare_gradient(plan, dense[k], ctx, False))
                kept.append(g)
                addresses[k] = data_addresses((g,))[0]
        for group in self.kernel_groups:
            first = group.first
            np.take(addresses, group.positions, out=group.tensors.addresses[-1])
            scalars = opt._dense_scalars(first, ctx.scalars[first.key], ctx)
            chunks = _chunks(group, excluded)
            if group.prestep:
                wd = ctx.decays[(first.wd_index, first.cdtype)] if first.decay else None
                recip = ctx.reciprocals[first.cdtype] if ctx.reciprocals else None
                zero = first.dtype.type(0)
                pre = (
                    zero if wd is None else wd,
                    zero if recip is None else recip,
                    wd is not None,
                    recip is not None,
                )
                group.kernel.launch_many(
                    "cpu", group.tensors, *scalars, chunks=chunks, prologue=_axpy_scal, prologue_scalars=pre
                )
            else:
                group.kernel.launch_many("cpu", group.tensors, *scalars, chunks=chunks)
        del kept


def _chunks(group: Any, excluded: tuple) -> np.ndarray | None:
    """The group's chunk table without the members in ``excluded`` (indices of the optimizer's plans);
    None for the whole group (``launch_many`` then balances its chunks over the launch's threads)."""
    if not excluded:
        return None
    local = tuple(group.local[k] for k in excluded if k in group.local)
    return group.tensors.chunks_without(local)


def _memory_overlaps(plans: list) -> bool:
    """Whether two CPU parameters share memory (then the order of their updates matters)."""
    spans = sorted(
        (p.param.data.ctypes.data, p.param.data.ctypes.data + p.param.data.nbytes)
        for p in plans
        if p.device == "cpu" and p.size
    )
    return any(start < previous_end for (_, previous_end), (start, _) in zip(spans, spans[1:]))


_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def build(opt: Any) -> LaunchPlan:
    """The groups of ``opt`` (see the module docstring): of the parameters this process updates (all of
    them, or this rank's share in a parallel optimizer)."""
    plans, n_plans = opt._local_plans, len(opt._plans)
    if not opt._multi_tensor or _memory_overlaps(plans):
        return LaunchPlan(n_plans, [], [], [plan.index for plan in plans])
    by_key: dict[tuple, tuple] = {}
    sequential, centralized = [], []
    for plan in plans:
        # float16/bfloat16 arrays (or a gradient of another dtype than a float32 master's) take the
        # per-parameter path, whose drivers widen them chunk by chunk.
        spec = (
            opt._dense_kernel(plan)
            if (
                plan.device == "cpu"
                and plan.param.data.flags.aligned
                and plan.dtype == plan.grad_dtype
                and plan.dtype not in _HALF
            )
            else None
        )
        if spec is None:
            sequential.append(plan.index)
            continue
        kernel, arrays = spec
        if plan.gc:
            centralized.append(plan)
        # The decay/unscale prologue's scalars depend on the dtype and the weight decay (the same
        # loss scale for all).
        prestep = (plan.wd_index if plan.decay else None,) if plan.prepares and not plan.gc else None
        key = (id(kernel), plan.dtype.str, opt._scalar_group(plan), prestep)
        by_key.setdefault(key, (kernel, prestep is not None, []))[2].append((plan, tuple(arrays)))
    groups = [KernelGroup(kernel, prestep, members) for kernel, prestep, members in by_key.values()]
    return LaunchPlan(n_plans, groups, centralized, sequential)
