"""A kernel for the adapter that takes another element function for float16/bfloat16 CPU tensors.

The float rules of :mod:`optkernels.kernels.torch_family` round as torch rounds float32 and float64; torch
rounds every operation of a half tensor's step to its dtype, which :mod:`optkernels.kernels.torch_half_rules`
reproduces. :class:`HalfRule` is one kernel of the adapter with the scalars of the float rule followed by
:func:`~optkernels.kernels.torch_rules.torch_tail`'s three (:data:`~optkernels.kernels.torch_rules.NO_TAIL`
except for a half launch, which the adapter gives their values): half CPU launches run the half function with
all of them, the rest the float rule without the last three.
"""

from __future__ import annotations

from typing import Any

from ..kernels._elementwise import Elementwise, _half_kinds
from ..kernels.torch_rules import TAKES_TAIL

__all__ = ["HalfRule"]


class HalfRule:
    """``rule`` for float32/float64 tensors (and CUDA), ``half`` for float16/bfloat16 CPU tensors.

    Parameters
    ----------
    rule : kernel
        An :class:`~optkernels.kernels._elementwise.Elementwise` or a kernel with its ``launch`` and
        ``launch_many`` (:class:`~._torch_sqrt.TorchSqrtKernel`).
    half : Elementwise
        The same rule with torch's half rounding, taking ``rule``'s scalars then ``(size, chunk, width)``.
    """

    def __init__(self, rule: Any, half: Elementwise):
        self.rule, self.half = rule, half
        self.__name__ = rule.__name__
        TAKES_TAIL.add(self)

    def launch(self, device: str, n: int, *args: Any) -> None:
        """One tensor: ``half`` for a float16/bfloat16 CPU tensor, else ``rule`` (without the tail's
        three scalars)."""
        if device == "cpu" and _half_kinds(args) is not None:
            self.half.launch(device, n, *args)
        else:
            self.rule.launch(device, n, *args[:-3])

    def launch_many(self, device: str, tensors: Any, *scalars: Any, **options: Any) -> None:
        """A multi-tensor table (float32/float64): ``rule`` without the tail's three scalars."""
        self.rule.launch_many(device, tensors, *scalars[:-3], **options)
