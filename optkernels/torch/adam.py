"""torch's Adam, AdamW and Adamax over :mod:`optkernels.kernels.torch_rules`' element functions, which compute
torch's single-tensor steps (``foreach=False``) with torch's CPU rounding: ``maximize``, the coupled
``weight_decay`` and AdamW's decoupled decay ``w ← w·(1 − lr·wd)`` are part of the one pass over each
tensor, the host scalars (bias corrections, step size) are computed as torch computes them. Adam/AdamW with
``fused=True`` compute torch's fused CPU step instead (:mod:`optkernels.kernels.torch_fused_adam`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels.torch_fused_adam import fused_adam_group_scalars, fused_adam_step_scalars
from ..kernels.torch_rules import (
    HALF_STEP_BLOCK,
    NO_TAIL,
    PartTablesBuffer,
    _torch_adam,
    _torch_adam_amsgrad,
    _torch_adamax,
    adam_denominator_table,
    adam_group_scalars,
    adam_half_block_scalars,
    adam_half_step_block,
    adam_half_step_scalars,
    adam_step_scalars,
    adamax_scalars,
)
from ._base import KernelOptimizer
from ._float_step import FloatStep
from ._fused_adam import FUSED, FUSED_AMSGRAD, fused_reason, layout_reason
from ._half_step import HalfStep
from ._short_path import ShortPathSteps

#: Blocks of step scalars an :class:`Adam` keeps (:meth:`Adam._half_step_scalars`: a few groups' betas).
_HALF_BLOCKS = 8

__all__ = ["Adam", "AdamW", "Adamax"]


def _check_adam_hyper(lr: Any, eps: float, betas: tuple, weight_decay: float) -> None:
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= float(lr):
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def host_lr(lr: Any) -> Any:
    """The learning rate as torch's single-tensor step computes with it: a Python float, or for a Tensor lr
    a NumPy scalar of its dtype (torch's host arithmetic on it, ``lr / bias_correction``, ``1 − lr·wd``,
    then runs in that dtype, a Python float operand rounded to it first, as NumPy does). A 1-element Tensor of
    any shape is squeezed to 0-d first, as torch's steps do."""
    if isinstance(lr, torch.Tensor):
        return squeezed(lr).detach().cpu().numpy()[()]
    return float(lr)


def squeezed(value: Any) -> Any:
    """``value``, a 1-element Tensor of any shape made 0-d (as torch's steps take a tensor lr: its arithmetic
    and the state made from it are then 0-d as torch's); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.dim():
        return value.reshape(())
    return value


def tensor_betas(group: dict, zero_d: bool = True) -> str | None:
    """A reason for torch's own step where ``group``'s ``betas`` hold a tensor (of 1 or more dimensions only
    for ``zero_d=False``), else None: torch's step then computes its bias corrections and moment weights in
    the tensor's dtype (``1 − β1^t``, ``1 − β1``, ... as tensor arithmetic), which the kernels' scalars do not
    reproduce, or refuses it (a tensor of 1 or more dimensions, in some classes): its step is the judge."""
    for b in group.get("betas", ()):
        if isinstance(b, torch.Tensor) and (zero_d or b.dim()):
            return "Tensor betas" if zero_d else "Tensor betas of 1 or more dimensions"
    return None


def _unsupported(**flags: Any) -> None:
    for name, value in flags.items():
        if value:
            raise ValueError(
                f"optkernels.torch does not implement torch's {name}=True (its kernels run "
                "on the CPU and CUDA as they are); leave it at its default"
            )


_FLOAT32 = np.dtype(np.float32)


class Adam(ShortPathSteps, KernelOptimizer):
    r"""torch.optim.Adam, computed by optkernels' Adam kernels (same arguments, defaults, state and
    ``state_dict``)::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        m ← m + (g − m)(1 − β1);  v ← v + (g² − v)(1 − β2)
        v̂max ← max(v̂max, v) (amsgrad, used below instead of v)
        w ← w − lr/(1 − β1^t)·m/(√v/√(1 − β2^t) + ε)

    With ``fused=True``, torch's fused CPU step (float32 for float16/bfloat16 parameters, each stored tensor
    rounded once)::

        g ← g/grad_scale (AMP);  g ← −g (maximize);  g ← fma(w, wd, g) (Adam) or w ← w·(1 − lr·wd) (AdamW)
        m ← fma(1 − β1, g − m, m);  v ← fma((1 − β2)·g, g, v·β2) (torch's scalar tail: fma(v, β2, (1 − β2)·g·g))
        w ← w + (−lr/(1 − β1^t))·m/(√v/√(1 − β2^t) + ε)

    Args:
        params: an iterable of tensors or of parameter-group dicts (torch's convention).
        lr: learning rate (default 1e-3).
        betas: ``(β1, β2)`` (default (0.9, 0.999)).
        eps: added to the denominator (1e-8).
        weight_decay: L2 penalty added to the gradient (0).
        amsgrad: use AMSGrad's maximum of v (False).
        maximize: maximize the objective (False).
        foreach, fused, capturable, differentiable: torch's implementation switches. ``foreach`` chooses
            nothing (torch's foreach and for-loop steps give the same bits). ``fused=True`` computes torch's
            fused CPU step (``torch.optim.Adam(fused=True)``'s bits on CPU tensors: float32 math for
            float16/bfloat16 parameters, each stored tensor rounded once, torch's fused multiply-adds; see
            :mod:`optkernels.kernels.torch_fused_adam`) and takes ``torch.amp.GradScaler``'s
            ``grad_scale``/``found_inf`` as torch's fused Adam does; torch's own fused step updates
            parameters it serves otherwise (not on the CPU, torch CPU kernels other than AVX-512 ones, a
            gradient laid out unlike its parameter), said once in a warning. ``capturable`` and
            ``differentiable`` parameters are updated by torch's own implementation.
        decoupled_weight_decay: AdamW's decay instead of L2 (torch 2.7+).

    State tensors (``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``) have torch's dtype, shape, strides and
    values. One of 4 MiB or more on a Linux CPU is allocated by optkernels rather than by
    ``torch.zeros_like``: on transparent huge pages, the k-th one k KiB after its parameter's offset
    within a 4 KiB page (a memory-bound step runs faster), its storage not resizable
    (``docs/guide/torch_compat.rst``).

    Raises:
        ValueError: torch's messages for out-of-range hyper-parameters; a non-leaf tensor.
        TypeError: parameters that are not float32/float64 tensors (or float16/bfloat16 CPU tensors).
        RuntimeError (at ``step``): a sparse gradient ("Adam does not support sparse gradients").
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: Any = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Any = None,
        decoupled_weight_decay: bool = False,
    ):
        _check_adam_hyper(lr, eps, betas, weight_decay)
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", False)

    #: :func:`~optkernels.kernels.torch_rules.adam_half_step_block`'s blocks of :meth:`_half_step_scalars`,
    #: by the group's dtype, float betas and block (at most :data:`_HALF_BLOCKS`; made on first use).
    _half_blocks: dict | None = None

    def _short_path_of(self) -> HalfStep | FloatStep | None:
        return HalfStep.of(self) or FloatStep.of(self)

    def _group_reason(self, group: dict) -> str | None:
        """As the base class's; also Tensor ``betas`` (:func:`tensor_betas`)."""
        return tensor_betas(group) or super()._group_reason(group)

    def _torch_reason(self, group: dict, p: torch.Tensor) -> str | None:
        """As the base class's; also, for ``fused=True``, what :func:`._fused_adam.fused_reason` refuses
        (non-CPU tensors, torch's non-AVX-512 kernels)."""
        reason = super()._torch_reason(group, p)
        if reason is None and group.get("fused"):
            reason = fused_reason(p)
        return reason

    def _layout_reason(self, group: dict, p: torch.Tensor, g: torch.Tensor) -> str | None:
        """For ``fused=True``: :func:`._fused_adam.layout_reason` (torch's fused kernel walks the memory of
        the parameter, state and gradient in order)."""
        return layout_reason(p, g) if group.get("fused") else None

    def _check_hyper(self, group: dict) -> None:
        _check_adam_hyper(group["lr"], group["eps"], group["betas"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        if group["amsgrad"]:
            names: tuple = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
            return (FUSED_AMSGRAD if group.get("fused") else _torch_adam_amsgrad), names
        return (FUSED if group.get("fused") else _torch_adam), ("exp_avg", "exp_avg_sq")

    def _prestep(self, group: dict) -> Any:
        return None  # maximize and both decays are in the element function (torch's rounding)

    def _unscales_in_kernel(self, group: dict) -> bool:
        return bool(group.get("fused"))  # torch's fused step divides in float32 for a half gradient

    def _scale(self) -> float | None:
        """AMP's scale of the step being made, where the fused kernels divide by it, else None."""
        return None if self._scale_now is None else float(self._scale_now)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        if group.get("fused"):
            return (
                *fused_adam_step_scalars(self._group_scalars(group, dtype), step, self._scale()),
                *NO_TAIL,
            )
        return adam_step_scalars(self._group_scalars(group, dtype), step)

    def _half_scalars(self, group: dict, step: int) -> tuple:
        if group.get("fused"):
            return fused_adam_step_scalars(self._group_scalars(group, _FLOAT32), step, self._scale(), False)
        return adam_half_step_scalars(self._group_scalars(group, _FLOAT32), step)[:-3]

    def _step_scalars(self, group: dict, per_group: tuple, step: int) -> tuple:
        """The float kernel's scalars (without tails) of step ``step`` from ``per_group``
        (:meth:`_group_scalars`), without AMP's scale: the short path's."""
        if group.get("fused"):
            return fused_adam_step_scalars(per_group, step)
        return adam_step_scalars(per_group, step)

    def _half_step_scalars(self, group: dict, per_group: tuple, step: int) -> tuple:
        """:meth:`_half_scalars` from ``per_group`` (:meth:`_group_scalars` in float32), without AMP's
        scale: the short path's."""
        if group.get("fused"):
            return fused_adam_step_scalars(per_group, step, None, False)
        convert, beta1, beta2, single = per_group[:4]
        if type(beta1) is not float or type(beta2) is not float:  # (a tensor may change in place)
            return adam_half_step_scalars(per_group, step)[:-3]
        blocks = self._half_blocks
        if blocks is None:
            blocks = self._half_blocks = {}
        key = (convert, beta1, beta2, single, step // HALF_STEP_BLOCK)
        block = blocks.get(key)
        if block is None:
            try:
                block = adam_half_step_block(per_group, step)
            except (ArithmeticError, TypeError):  # (betas outside torch's ranges) raised at its own step
                return adam_half_step_scalars(per_group, step)[:-3]
            if len(blocks) >= _HALF_BLOCKS:
                blocks.clear()
            blocks[key] = block
        return adam_half_block_scalars(per_group, block, step)

    def _tabled_half_scalars(
        self, group: dict, shared: tuple, own: PartTablesBuffer | None = None, parts: int | None = None
    ) -> tuple | None:
        """:meth:`_half_step_scalars`' ``shared`` with its ``mkl`` scalar (the last; a bfloat16 sqrt does not
        use it) replaced by tables of the step's denominators: the scalars of a large all-bfloat16 launch
        (see :data:`._half_step.DENOMINATOR_TABLE_FROM`), the same bits. The tables are ``own``'s
        (:meth:`~optkernels.kernels.torch_rules.PartTablesBuffer.take`, a row for each of the launch's
        ``parts``: each part fills its own; the caller releases them after its launches) where given and
        free, else
        :func:`~optkernels.kernels.torch_rules.adam_denominator_table`'s one table, filled here. None for
        ``fused=True`` (torch's fused step computes no such denominator)."""
        if group.get("fused"):
            return None
        table: Any = own.take(parts) if own is not None else None
        if table is None:
            table = adam_denominator_table(*shared[-5:-2])  # (bias_correction2**0.5, its multiplier, eps)
        return (*shared[:-1], table)

    def _group_scalars(self, group: dict, dtype: np.dtype) -> tuple:
        """:func:`adam_group_scalars` of ``group``'s hyper-parameters in ``dtype`` (remembered); for
        ``fused=True``, :func:`~optkernels.kernels.torch_fused_adam.fused_adam_group_scalars` (torch's fused
        step takes ``lr`` as a float64, a Tensor's value too)."""
        beta1, beta2 = group["betas"]
        eps, wd, maximize = group["eps"], group["weight_decay"], group["maximize"]
        decoupled = bool(group.get("decoupled_weight_decay"))
        if group.get("fused"):
            flr = float(group["lr"])
            return self._remembered(
                ("fused", dtype, flr, beta1, beta2, eps, wd, decoupled, maximize),
                lambda: fused_adam_group_scalars(
                    dtype, flr, float(beta1), float(beta2), eps, wd, decoupled, maximize
                ),
            )
        lr = host_lr(group["lr"])
        mkl = self._sqrt_kernel(dtype)
        return self._remembered(
            (dtype, type(lr), lr, beta1, beta2, eps, wd, decoupled, maximize, mkl),
            lambda: adam_group_scalars(
                dtype, lr, float(beta1), float(beta2), eps, wd, decoupled, maximize, mkl
            ),
        )


class AdamW(Adam):
    r"""torch.optim.AdamW: ``w ← w·(1 − lr·wd)``, then Adam without L2 (defaults as torch: weight_decay
    1e-2). Arguments as :class:`Adam`."""

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: Any = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Any = None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True


class Adamax(KernelOptimizer):
    r"""torch.optim.Adamax, computed by :mod:`optkernels.kernels.torch_rules`' Adamax kernel::

        g ← −g (maximize);  g ← g + wd·w (weight_decay)
        m ← m + (g − m)(1 − β1);  u ← max(β2·u, |g| + ε)
        w ← w − lr/(1 − β1^t)·m/u

    Args: as torch (lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach, maximize,
    differentiable, capturable). State: ``step``, ``exp_avg``, ``exp_inf``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 2e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: Any = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        _check_adam_hyper(lr, eps, betas, weight_decay)
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _group_reason(self, group: dict) -> str | None:
        """As the base class's; also Tensor ``betas`` (:func:`tensor_betas`)."""
        return tensor_betas(group) or super()._group_reason(group)

    def _check_hyper(self, group: dict) -> None:
        _check_adam_hyper(group["lr"], group["eps"], group["betas"], group["weight_decay"])

    def _kernel(self, group: dict) -> tuple:
        return _torch_adamax, ("exp_avg", "exp_inf")

    def _prestep(self, group: dict) -> Any:
        return None  # maximize and weight decay are in the element function (torch's rounding)

    def _scalars(self, group: dict, step: int, dtype: np.dtype) -> tuple:
        beta1, beta2 = group["betas"]
        return adamax_scalars(
            dtype,
            step,
            host_lr(group["lr"]),
            float(beta1),
            float(beta2),
            group["eps"],
            group["weight_decay"],
            group["maximize"],
        )
