"""The kernels of ``Adam``/``AdamW(fused=True)`` on CPU tensors: torch's fused CPU step
(:mod:`optkernels.kernels.torch_fused_adam`), float32/float64 parameters in one multi-tensor launch and
float16/bfloat16 ones per tensor, as the adapter of :mod:`._half_rule` runs them, with the tails of torch's
fused loops (by the tensor's size alone) instead of those of its for-loop step.

torch's fused CPU kernels are compiled per CPU capability; the bits reproduced are those of its AVX-512
kernels, so :func:`fused_reason` sends the parameters of a fused group to torch's own fused step where
torch runs other kernels (or where the parameters are not on the CPU).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..kernels.torch_fused_adam import (
    _fused_adam,
    _fused_adam_amsgrad,
    _fused_adam_half,
    _fused_adam_half_amsgrad,
    fused_tails,
)
from ._base import _dense
from ._half_rule import HalfRule

__all__ = ["FUSED", "FUSED_AMSGRAD", "FusedRule", "fused_reason", "layout_reason"]


class FusedRule(HalfRule):
    """:class:`._half_rule.HalfRule` of a fused element function pair, whose half tails are
    :func:`~optkernels.kernels.torch_fused_adam.fused_tails` of the tensor (:meth:`tails`), and whose float
    rule's chunked multi-tensor entry serves the short path (``chunked_many``, ``many_chunked``)."""

    @property
    def chunked_many(self) -> bool:
        """The float rule's ``chunked_many``."""
        return bool(self.rule.chunked_many)

    @property
    def prefetch_large(self) -> bool:
        """The float rule's ``prefetch_large``."""
        return bool(self.rule.prefetch_large)

    def many_chunked(self, *args: Any, **options: Any) -> Any:
        """The float rule's chunked multi-tensor entry."""
        return self.rule.many_chunked(*args, **options)

    @staticmethod
    def tails(n: int, itemsize: int) -> tuple:
        """The last three scalars of a half launch over ``n`` elements of ``itemsize`` bytes."""
        return fused_tails(n, itemsize)


FUSED = FusedRule(_fused_adam, _fused_adam_half)
FUSED_AMSGRAD = FusedRule(_fused_adam_amsgrad, _fused_adam_half_amsgrad)
for _rule in (_fused_adam, _fused_adam_amsgrad):  # a root and two divisions: arithmetic-bound loops
    _rule.wide_vectors = True


@functools.cache
def _capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


def fused_reason(p: torch.Tensor) -> str | None:
    """Why torch's own fused step updates ``p`` of a ``fused=True`` group, or None (a CPU tensor, torch's
    CPU kernels the AVX-512 ones)."""
    if p.device.type != "cpu":
        return f"fused=True on {p.device.type} parameters"
    if not _capability().startswith("AVX512"):
        return (
            f"fused=True where torch's CPU kernels are {_capability()} ones (optkernels reproduces AVX512's)"
        )
    return None


#: The reason of :func:`layout_reason`.
LAID_OUT = (
    "fused=True with a parameter not dense in memory, or a gradient laid out unlike its parameter (torch's "
    "fused kernel pairs their memory in order)"
)


def layout_reason(p: torch.Tensor, g: torch.Tensor) -> str | None:
    """Why torch's own fused step updates ``p`` with its gradient ``g``, or None: torch's fused CPU kernel
    walks ``numel`` elements of memory from each tensor's data pointer, which is the element-wise step only
    where ``p`` is dense in memory and ``g`` has its strides (what the kernels compute otherwise is the step
    torch's for-loop computes, not its fused kernel's)."""
    if p.is_contiguous() and g.is_contiguous():
        return None
    if g.stride() == p.stride() and _dense(p):
        return None
    return LAID_OUT
