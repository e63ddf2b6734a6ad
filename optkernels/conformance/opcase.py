"""The pieces every conformance case list builds on: :class:`OpCase` (how to exercise one op) and the
random draws of valid inputs shared by the dense cases (:mod:`.cases`) and the row-sparse ones
(:mod:`.sparse_cases`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["OpCase", "adam_scalars", "moments", "nesterov_attr", "normal", "uniform"]


def normal(rng, shape, dtype, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale, dtype=dtype)


def uniform(rng, shape, dtype, low, high):
    return np.asarray(rng.uniform(low, high, shape), dtype=dtype)


@dataclass(frozen=True)
class OpCase:
    """How to exercise one op.

    Attributes:
        name: the kernel's name, which is also its reference's name in :mod:`optkernels.reference`.
        states: names of the inputs updated in place, in input order.
        make: ``make(rng, shape, dtype) -> dict`` of every positional input (arrays of ``dtype``, scalars as
            Python numbers).
        attrs: ``attrs(rng) -> dict`` of valid keyword-only attributes.
        output: 'states' (the op returns its state tuple), or the name of the new array it returns
            ('delta', 'new_gradient'), which the reference returns first.
        ulps: float32 tolerance in float32 epsilons of the result's scale (see tolerance.compare).
        terms: optional ``terms(inputs, attrs) -> {result name: array}``: magnitudes of the terms a result is
            made of, where they can cancel and no state's old value bounds them.
        module: where the kernel lives: 'kernels' or 'sparse'.
    """

    name: str
    states: tuple[str, ...]
    make: Callable[..., dict]
    attrs: Callable[..., dict] = lambda rng: {}
    output: str = "states"
    ulps: float = 8.0
    terms: Callable[[dict, dict], dict] | None = None
    module: str = "kernels"

    @property
    def kernel(self) -> Callable:
        return getattr(importlib.import_module(f"optkernels.{self.module}"), self.name)

    @property
    def reference(self) -> Callable:
        return getattr(importlib.import_module("optkernels.reference"), self.name)

    @property
    def positional(self) -> list[str]:
        params = inspect.signature(self.kernel).parameters.values()
        return [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]

    def args(self, inputs: dict) -> list:
        """The positional arguments of a call, from named inputs."""
        return [inputs[name] for name in self.positional]


def adam_scalars(rng):
    beta1, beta2 = rng.uniform(0.5, 0.99), rng.uniform(0.9, 0.9999)
    t = int(rng.integers(1, 50))
    return dict(
        beta1_power=beta1**t,
        beta2_power=beta2**t,
        lr=rng.uniform(1e-4, 0.1),
        beta1=beta1,
        beta2=beta2,
        epsilon=float(10.0 ** rng.uniform(-8, -3)),
    )


def moments(rng, shape, dtype):
    return dict(m=normal(rng, shape, dtype, 0.1), v=uniform(rng, shape, dtype, 0.0, 0.5))


def nesterov_attr(rng):
    return dict(use_nesterov=bool(rng.integers(2)))
