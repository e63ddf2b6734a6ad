"""One table of the sparse ops drives the generic sparse tests (reference, dense equivalence, errors, CUDA).

Each :class:`SparseOpInfo` row says how to draw valid state, scalar inputs and attributes for one op in
``optkernels.sparse`` (and ``optkernels.reference``, same name and signature), which inputs are state, and
which dense kernel computes the same per-element math.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import optkernels.reference as R
import optkernels.sparse as S
from optable import cast_scalars

# The random generators the conformance cases (python -m optkernels verify) also draw from.
from optkernels.conformance.cases import adam_scalars, moments, normal, uniform
from optkernels.conformance.sparse_cases import ftrl_attrs, ftrl_v2_attrs


def adam_states(rng, shape, dtype):
    return dict(var=normal(rng, shape, dtype), **moments(rng, shape, dtype))


def ftrl_states(rng, shape, dtype):
    return dict(var=normal(rng, shape, dtype), accum=uniform(rng, shape, dtype, 0.1, 1.0),
                linear=normal(rng, shape, dtype))


def accum_states(rng, shape, dtype):
    return dict(var=normal(rng, shape, dtype), accum=uniform(rng, shape, dtype, 0.1, 1.0))


def proximal_scalars(rng):
    return dict(lr=rng.uniform(1e-3, 0.1), l1=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
                l2=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])))


def ftrl_terms(state: dict, g: np.ndarray, attrs: dict) -> dict:
    """Magnitudes FTRL's results are made of (sigma·var cancels), per element, for the tolerance; ``g`` is the
    sum of |gradient| over the duplicates of each row (the float32 sum's error is relative to it)."""
    f = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    p = -attrs["lr_power"]
    accum_new = f["accum"] + g ** 2
    y_new, y_old = accum_new ** p, f["accum"] ** p
    linear = np.abs(f["linear"]) + g + (y_new + y_old) / attrs["lr"] * np.abs(f["var"])
    var = (attrs["l1"] + linear) / (y_new / attrs["lr"] + 2 * attrs["l2"])
    return {"linear": linear, "accum": accum_new, "var": var}


@dataclass
class SparseOpInfo:
    """How to exercise one sparse kernel.

    Attributes:
        name: the kernel's (and the reference's) name in optkernels.sparse / optkernels.reference.
        states: names of the arrays updated in place, in input order (var first).
        make_states: ``make_states(rng, shape, dtype) -> {name: array}``.
        scalars: ``scalars(rng) -> {name: float}`` of the positional scalar inputs.
        attrs: ``attrs(rng) -> {name: value}`` of valid keyword-only attributes.
        lazy: only the indexed rows change.
        dense: the dense kernel with the same per-element math (None: sparse Adam, whose math differs).
        dense_args: ``dense_args(states, scalars, attrs, grad) -> (args, kwargs)`` for the dense kernel.
        bad_scalars: (input name, value) pairs that must raise ValueError.
        bad_attrs: (attribute, value, exception type) triples that must raise.
        ulps: float32 tolerance (see optable.assert_close), per duplicate of a row.
        terms: optional ``terms(state, abs_grad_sum, attrs) -> {result: magnitudes}`` for the tolerance.
    """

    name: str
    states: tuple[str, ...]
    make_states: Callable
    scalars: Callable = lambda rng: {}
    attrs: Callable = lambda rng: {}
    lazy: bool = True
    dense: str | None = None
    dense_args: Callable | None = None
    bad_scalars: list = field(default_factory=list)
    bad_attrs: list = field(default_factory=list)
    ulps: float = 8.0
    terms: Callable | None = None

    @property
    def kernel(self) -> Callable:
        return getattr(S, self.name)

    @property
    def reference(self) -> Callable:
        return getattr(R, self.name)

    @property
    def positional(self) -> list[str]:
        params = inspect.signature(self.kernel).parameters.values()
        return [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]

    def args(self, inputs: dict) -> list:
        """Positional arguments from a dict holding the states, scalars, ``grad`` and ``indices``."""
        return [inputs[name] for name in self.positional]


def _dense_ftrl(states, scalars, attrs, grad):
    return ([states["var"], states["accum"], states["linear"], grad, attrs["lr"], attrs["l1"], attrs["l2"],
             attrs["lr_power"]], {})


def _dense_ftrl_v2(states, scalars, attrs, grad):
    return ([states["var"], states["accum"], states["linear"], grad, attrs["lr"], attrs["l1"], attrs["l2"],
             attrs["l2_shrinkage"], attrs["lr_power"]], {})


def ftrl_v2_terms(state: dict, g: np.ndarray, attrs: dict) -> dict:
    """:func:`ftrl_terms` with linear's also relative to 2·l2_shrinkage·|var|."""
    out = ftrl_terms(state, g, attrs)
    out["linear"] = out["linear"] + 2 * attrs["l2_shrinkage"] * np.abs(np.asarray(state["var"], np.float64))
    return out


def _dense_proximal(states, scalars, attrs, grad):
    return [states["var"], states["accum"], scalars["lr"], scalars["l1"], scalars["l2"], grad], {}


def _dense_adagrad(states, scalars, attrs, grad):
    return [states["var"], states["accum"], attrs["lr"], grad], {"update_slots": attrs["update_slots"]}


def _dense_adagrad_v2(states, scalars, attrs, grad):
    return ([states["var"], states["accum"], attrs["lr"], grad],
            {"epsilon": attrs["epsilon"], "update_slots": attrs["update_slots"]})


def _nesterov(rng):
    return dict(use_nesterov=bool(rng.integers(2)))


_ADAM_BAD = [("beta1", 1.0), ("beta1", 0.0), ("beta2", 1.5), ("epsilon", -1e-8), ("lr", -0.1),
             ("beta1_power", 1.0), ("beta1_power", 1.0 - 1e-8), ("beta2_power", -0.5)]
_FTRL_BAD = [("lr", 1, TypeError), ("lr", 0.0, ValueError), ("l1", -0.1, ValueError),
             ("l2", -0.1, ValueError), ("lr_power", 0.5, ValueError), ("lr_power", "-0.5", TypeError),
             ("l1", float("nan"), ValueError), ("use_locking", 1, TypeError)]

SPARSE_OPS = [
    SparseOpInfo("fused_sparse_adam", ("var", "m", "v"), adam_states, adam_scalars, _nesterov, lazy=False,
                 bad_scalars=_ADAM_BAD,
                 bad_attrs=[("use_nesterov", 1, TypeError), ("use_locking", "no", TypeError)]),
    SparseOpInfo("fused_sparse_lazy_adam", ("var", "m", "v"), adam_states, adam_scalars, _nesterov,
                 bad_scalars=_ADAM_BAD, bad_attrs=[("use_nesterov", None, TypeError)]),
    SparseOpInfo("fused_sparse_ftrl", ("var", "accum", "linear"), ftrl_states, attrs=ftrl_attrs,
                 dense="apply_ftrl", dense_args=_dense_ftrl, bad_attrs=_FTRL_BAD, terms=ftrl_terms),
    SparseOpInfo("sparse_apply_ftrl", ("var", "accum", "linear"), ftrl_states, attrs=ftrl_attrs,
                 dense="apply_ftrl", dense_args=_dense_ftrl, bad_attrs=_FTRL_BAD, terms=ftrl_terms),
    SparseOpInfo("sparse_apply_ftrl_v2", ("var", "accum", "linear"), ftrl_states, attrs=ftrl_v2_attrs,
                 dense="apply_ftrl_v2", dense_args=_dense_ftrl_v2,
                 bad_attrs=_FTRL_BAD + [("l2_shrinkage", -0.1, ValueError), ("l2_shrinkage", 1, TypeError),
                                        ("l2_shrinkage", float("inf"), ValueError)],
                 terms=ftrl_v2_terms),
    SparseOpInfo("fused_sparse_proximal_adagrad", ("var", "accum"), accum_states, proximal_scalars,
                 dense="apply_proximal_adagrad", dense_args=_dense_proximal,
                 bad_scalars=[("lr", -0.1), ("l1", -0.1), ("l2", -1.0)],
                 bad_attrs=[("use_locking", 0, TypeError)]),
    SparseOpInfo("sparse_apply_proximal_adagrad", ("var", "accum"), accum_states, proximal_scalars,
                 dense="apply_proximal_adagrad", dense_args=_dense_proximal,
                 bad_scalars=[("lr", -0.1), ("l1", -0.1), ("l2", -1.0)]),
    SparseOpInfo("sparse_apply_adagrad", ("var", "accum"), accum_states,
                 attrs=lambda rng: dict(lr=float(rng.uniform(1e-3, 0.1)), update_slots=bool(rng.integers(2))),
                 dense="apply_adagrad", dense_args=_dense_adagrad,
                 bad_attrs=[("lr", 1, TypeError), ("lr", -0.1, ValueError), ("update_slots", 1, TypeError),
                            ("lr", float("inf"), ValueError)]),
    SparseOpInfo("sparse_apply_adagrad_v2", ("var", "accum"), accum_states,
                 attrs=lambda rng: dict(lr=float(rng.uniform(1e-3, 0.1)),
                                        epsilon=float(10.0 ** rng.uniform(-8, -3)),
                                        update_slots=bool(rng.integers(2))),
                 dense="apply_adagrad_v2", dense_args=_dense_adagrad_v2,
                 bad_attrs=[("epsilon", 1, TypeError), ("epsilon", -1e-6, ValueError),
                            ("lr", "0.1", TypeError), ("update_slots", "yes", TypeError)]),
]

SPARSE_OPS_BY_NAME = {op.name: op for op in SPARSE_OPS}


def draw_inputs(op: SparseOpInfo, rng, shape, dtype, indices, grad=None) -> tuple[dict, dict]:
    """(inputs, attrs) of a valid call: states and float scalars in ``dtype``, ``grad`` (drawn when None)
    and ``indices`` as given. Float attributes are rounded to ``dtype`` but stay Python floats."""
    inputs = dict(op.make_states(rng, shape, dtype))
    inputs.update(cast_scalars(op.scalars(rng), dtype))
    if grad is None:
        grad = np.asarray(rng.standard_normal((len(indices),) + tuple(shape[1:])), dtype=dtype)
    inputs["grad"] = grad
    inputs["indices"] = indices
    attrs = {k: float(np.dtype(dtype).type(v)) if isinstance(v, float) else v
             for k, v in op.attrs(rng).items()}
    return inputs, attrs


def run_kernel(op: SparseOpInfo, inputs: dict, attrs: dict) -> dict[str, np.ndarray]:
    """Run the kernel in place; check that it returns the state arrays themselves; return them by name."""
    result = op.kernel(*op.args(inputs), **attrs)
    assert isinstance(result, tuple) and len(result) == len(op.states)
    for name, returned in zip(op.states, result):
        assert returned is inputs[name], f"{op.name} must return the updated {name} itself"
    return {name: inputs[name] for name in op.states}


def run_reference(op: SparseOpInfo, inputs: dict, attrs: dict) -> dict[str, np.ndarray]:
    """The float64 reference on copies of ``inputs`` (MindSpore's out-of-range drop; the kernels raise by
    default, so callers pass only in-range indices unless they test 'drop')."""
    attrs = {k: v for k, v in attrs.items() if k != "out_of_range"}
    args = [np.copy(a) if isinstance(a, np.ndarray) else a for a in op.args(inputs)]
    return dict(zip(op.states, op.reference(*args, **attrs)))


def abs_grad_sum(inputs: dict) -> np.ndarray:
    """Per element of var: the sum of |gradient| over the occurrences of its row (0 for other rows)."""
    var = inputs["var"]
    out = np.zeros(var.shape, np.float64)
    np.add.at(out, np.asarray(inputs["indices"], np.int64), np.abs(np.asarray(inputs["grad"], np.float64)))
    return out


def max_duplicates(indices: Any) -> int:
    indices = np.asarray(indices)
    return int(np.bincount(indices - indices.min()).max()) if indices.size else 0
