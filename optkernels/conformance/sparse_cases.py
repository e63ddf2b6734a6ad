"""Random valid inputs for the row-sparse ops (:mod:`optkernels.sparse`): a table state plus a row-sparse
gradient with many duplicated, unsorted indices.

Duplicated rows are summed in the arrays' dtype before the update, so a float32 result's rounding is
relative to each row's sum of ``|gradient|`` as well as to its old state: :func:`grad_terms` gives that
magnitude to the tolerance rule (see :mod:`.tolerance`).
"""

from __future__ import annotations

import numpy as np

from .opcase import OpCase, adam_scalars, moments, nesterov_attr, normal, uniform


def _row_sparse(rng, shape, dtype) -> dict:
    """grad and indices: about two occurrences per row, unsorted, some rows absent; int64 indices with
    float64 arrays, int32 with the others (both index dtypes are covered, and each float dtype's row code
    is compiled for one of them: a cold ``verify`` compiles half the sparse row workers)."""
    rows = shape[0]
    count = int(rng.integers(0, 2 * rows + 1))
    indices = rng.integers(0, rows, count).astype(np.int64 if np.dtype(dtype) == np.float64 else np.int32)
    return dict(grad=normal(rng, (count,) + tuple(shape[1:]), dtype), indices=indices)


def _adam(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        **moments(rng, shape, dtype),
        **adam_scalars(rng),
        **_row_sparse(rng, shape, dtype),
    )


def _ftrl(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        linear=normal(rng, shape, dtype),
        **_row_sparse(rng, shape, dtype),
    )


def ftrl_attrs(rng):
    return dict(
        lr=float(rng.uniform(0.01, 0.5)),
        l1=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        l2=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        lr_power=float(rng.choice([-0.5, rng.uniform(-1.0, 0.0), 0.0])),
    )


def ftrl_v2_attrs(rng):
    return dict(ftrl_attrs(rng), l2_shrinkage=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])))


def _ftrl_v2_terms(inputs: dict, attrs: dict | None = None) -> dict:
    """grad_terms of FTRL, with linear's also relative to |var| (the 2·l2_shrinkage·var term, l2_shrinkage
    <= 0.5 in these cases)."""
    out = grad_terms("accum", "linear", "var")(inputs, attrs)
    out["linear"] = out["linear"] + np.abs(np.asarray(inputs["var"], np.float64))
    return out


def _proximal(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        lr=rng.uniform(1e-3, 0.1),
        l1=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        l2=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        **_row_sparse(rng, shape, dtype),
    )


def _adagrad(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        **_row_sparse(rng, shape, dtype),
    )


def abs_grad_sum(inputs: dict) -> np.ndarray:
    """Per element of var: the sum of ``|gradient|`` over the occurrences of its row (0 for other rows)."""
    out = np.zeros(inputs["var"].shape, np.float64)
    np.add.at(out, np.asarray(inputs["indices"], np.int64), np.abs(np.asarray(inputs["grad"], np.float64)))
    return out


def grad_terms(*states: str):
    """terms(): each named state's result is also relative to its rows' summed ``|gradient|`` (squared for
    accumulators of g²)."""

    def terms(inputs: dict, attrs: dict | None = None) -> dict:
        g = abs_grad_sum(inputs)
        out = {}
        for name in states:
            old = np.abs(np.asarray(inputs[name], np.float64))
            out[name] = old + (g * g if name in ("v", "accum") else g)
        return out

    return terms


SPARSE_CASES = [
    OpCase(
        "fused_sparse_adam",
        ("var", "m", "v"),
        _adam,
        nesterov_attr,
        ulps=16.0,
        terms=grad_terms("m", "v"),
        module="sparse",
    ),
    OpCase(
        "fused_sparse_lazy_adam",
        ("var", "m", "v"),
        _adam,
        nesterov_attr,
        ulps=16.0,
        terms=grad_terms("m", "v"),
        module="sparse",
    ),
    OpCase(
        "fused_sparse_ftrl",
        ("var", "accum", "linear"),
        _ftrl,
        ftrl_attrs,
        ulps=16.0,
        terms=grad_terms("accum", "linear", "var"),
        module="sparse",
    ),
    OpCase(
        "sparse_apply_ftrl",
        ("var", "accum", "linear"),
        _ftrl,
        ftrl_attrs,
        ulps=16.0,
        terms=grad_terms("accum", "linear", "var"),
        module="sparse",
    ),
    OpCase(
        "sparse_apply_ftrl_v2",
        ("var", "accum", "linear"),
        _ftrl,
        ftrl_v2_attrs,
        ulps=16.0,
        terms=_ftrl_v2_terms,
        module="sparse",
    ),
    OpCase(
        "fused_sparse_proximal_adagrad",
        ("var", "accum"),
        _proximal,
        ulps=16.0,
        terms=grad_terms("accum", "var"),
        module="sparse",
    ),
    OpCase(
        "sparse_apply_proximal_adagrad",
        ("var", "accum"),
        _proximal,
        ulps=16.0,
        terms=grad_terms("accum", "var"),
        module="sparse",
    ),
    OpCase(
        "sparse_apply_adagrad",
        ("var", "accum"),
        _adagrad,
        lambda rng: dict(lr=float(rng.uniform(1e-3, 0.1)), update_slots=bool(rng.integers(2))),
        ulps=16.0,
        terms=grad_terms("accum", "var"),
        module="sparse",
    ),
    OpCase(
        "sparse_apply_adagrad_v2",
        ("var", "accum"),
        _adagrad,
        lambda rng: dict(
            lr=float(rng.uniform(1e-3, 0.1)),
            epsilon=float(10.0 ** rng.uniform(-8, -3)),
            update_slots=bool(rng.integers(2)),
        ),
        ulps=16.0,
        terms=grad_terms("accum", "var"),
        module="sparse",
    ),
]
