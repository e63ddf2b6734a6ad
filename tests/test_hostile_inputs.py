"""Hostile values for every argument of every op (issue #13): each call either works or raises TypeError,
ValueError or IndexError naming the argument -- never a Numba typing or lowering error, an OverflowError
or anything else --, a call that raises leaves every array exactly as it was, and no call writes outside
its arrays (every valid array of a call sits between guard bytes).

For each op of the conformance table (dense and sparse), a valid call is drawn, then each positional input
and each attribute in turn is replaced by every value of a fixed list (wrong types, dtypes, shapes and
layouts, read-only, object, masked and 0-d arrays, huge ints, NaN and infinities...). Bounded: one small
shape, float32, about 4,000 calls in all.
"""
from __future__ import annotations

import numba.core.errors
import numpy as np
import pytest

from optkernels.conformance.cases import CASES_BY_NAME, draw, draw_attrs

ALLOWED = (TypeError, ValueError, IndexError)
GUARD = 256  # bytes of guard pattern on each side of every valid array of a call


class Guarded:
    """Copies of arrays, each in the middle of its own guard-filled buffer (see test_memory_safety.py)."""

    def __init__(self):
        self.buffers = []

    def carve(self, a: np.ndarray) -> np.ndarray:
        buf = np.full(a.nbytes + 2 * GUARD, 0xA5, np.uint8)
        view = buf[GUARD:GUARD + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        self.buffers.append(buf)
        return view

    def broken(self, what: str) -> str | None:
        if any(np.any(b[:GUARD] != 0xA5) or np.any(b[-GUARD:] != 0xA5) for b in self.buffers):
            return f"{what}: bytes written outside an array"
        return None


def _guarded(inputs: dict, guard: Guarded) -> dict:
    return {k: guard.carve(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _non_contiguous(a: np.ndarray) -> np.ndarray:
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    view = big[..., ::2]
    view[...] = a
    return view


def _read_only(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


def hostile_arrays(a: np.ndarray) -> dict:
    """Replacements for an array argument (``a``: its valid value)."""
    out = {
        "list": a.tolist(), "tuple": tuple(a.reshape(-1).tolist()), "str": "var", "None": None,
        "float": 0.5, "complex64": a.astype(np.complex64), "bool": a > 0, "int32": a.astype(np.int32),
        "int64": a.astype(np.int64), "uint8": a.astype(np.uint8), "float16": a.astype(np.float16),
        "float64": a.astype(np.float64), "object": a.astype(object), "big-endian": a.astype(">f4"),
        "0-d": np.array(a.reshape(-1)[0] if a.size else 0, a.dtype),
        "masked": np.ma.masked_array(a.copy(), mask=np.zeros(a.shape, bool)),
        "read-only": _read_only(a), "structured": np.zeros(a.shape, [("x", a.dtype)]),
    }
    if a.ndim >= 1 and a.shape[-1] > 1:
        out["non-contiguous"] = _non_contiguous(a)
        out["fortran"] = np.asfortranarray(a) if a.ndim >= 2 else a[::-1].copy()[::-1]
        out["shorter"] = a[..., :-1].copy()
    if a.ndim >= 1:
        out["extra axis"] = a[None].copy()
    if a.ndim == 2:
        out["matrix"] = a.copy().view(np.matrix)
    return out


HOSTILE_SCALARS = {
    "str": "0.1", "None": None, "complex": 1j, "bool": True, "np.bool_": np.bool_(True), "huge int": 10 ** 400,
    "huge negative int": -(10 ** 400), "nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
    "negative": -0.5, "-0.0": -0.0, "2x1 array": np.array([[0.1], [0.2]]), "2-vector": np.array([0.1, 0.2]),
    "empty array": np.zeros(0), "object array": np.array([0.1], dtype=object), "list": [0.1],
    "tuple": (0.1,), "masked": np.ma.masked_array([0.1]), "complex array": np.array([1j]),
    "bool array": np.array([True]), "str array": np.array(["a"]), "uint64 max": np.uint64(2 ** 64 - 1),
    "float16": np.float16(0.25), "longdouble": np.longdouble(0.25), "matrix": np.matrix([[0.1]]),
    "dict": {}, "type": float,
}


def _arrays_of(values) -> list[np.ndarray]:
    return [v for v in values if isinstance(v, np.ndarray)]


def _check_call(case, inputs: dict, attrs: dict, arg: str, label: str) -> str | None:
    """None if the call behaves; else what went wrong."""
    arrays = _arrays_of(list(inputs.values()) + list(attrs.values()))
    before = [np.array(a, copy=True) for a in arrays]
    try:
        case.kernel(*case.args(inputs), **attrs)
    except numba.core.errors.NumbaError as error:  # a typing/lowering error reached the user: a missing check
        return f"{case.name}({arg}={label}): Numba error {type(error).__name__}: {error}"
    except ALLOWED as error:
        # A scalar's error names it; an array's names it or, for a mismatch between arrays (shape, dtype,
        # device, overlap), the array it is compared with.
        names = [arg] if arg not in _array_args(case) else list(inputs)
        if not any(n in str(error) for n in names):
            return f"{case.name}({arg}={label}): the error names no argument: {type(error).__name__}: {error}"
        for a, b in zip(arrays, before):
            if a.tobytes() != b.tobytes():
                return f"{case.name}({arg}={label}) raised after writing"
    except Exception as error:  # any other exception type is the failure reported
        return f"{case.name}({arg}={label}): {type(error).__name__}: {error}"
    return None


def _array_args(case) -> set:
    valid = draw(case, np.random.default_rng(1), (3, 4), np.float32)
    return {k for k, v in valid.items() if isinstance(v, np.ndarray)}


@pytest.mark.parametrize("name", sorted(CASES_BY_NAME))
def test_hostile_values_raise_only_documented_errors(name):
    case = CASES_BY_NAME[name]
    shape = (3, 4)
    attrs_seed = np.random.default_rng(0)
    problems = []
    for arg in case.positional:
        valid = draw(case, np.random.default_rng(1), shape, np.float32)
        values = hostile_arrays(valid[arg]) if isinstance(valid[arg], np.ndarray) else HOSTILE_SCALARS
        for label, bad in values.items():
            if label == "read-only" and arg not in case.states:
                continue  # valid, and a Numba compile of its own per kernel: tests/test_kernel_errors.py
            guard = Guarded()
            inputs = _guarded(draw(case, np.random.default_rng(1), shape, np.float32), guard)
            attrs = draw_attrs(case, np.random.default_rng(0), np.float32)
            inputs[arg] = bad
            problems.append(_check_call(case, inputs, attrs, arg, label))
            problems.append(guard.broken(f"{case.name}({arg}={label})"))
    for attr in draw_attrs(case, attrs_seed, np.float32):
        for label, bad in HOSTILE_SCALARS.items():
            guard = Guarded()
            inputs = _guarded(draw(case, np.random.default_rng(1), shape, np.float32), guard)
            attrs = draw_attrs(case, np.random.default_rng(0), np.float32)
            attrs[attr] = bad
            problems.append(_check_call(case, inputs, attrs, attr, label))
            problems.append(guard.broken(f"{case.name}({attr}={label})"))
    problems = [p for p in problems if p]
    assert not problems, f"{len(problems)} bad outcomes:\n" + "\n".join(problems)


@pytest.mark.parametrize("value", [-0.0, -1e-50, -1e-46])
@pytest.mark.parametrize("with_norm", [False, True])
def test_ada_factor_refuses_negative_zero_clip_threshold(value, with_norm):
    """clip_threshold = -0.0 (or a tiny negative that rounds to it in float32) passes '>= 0' but made the
    kernel disagree with the reference: ValueError naming it, nothing written."""
    from optkernels.kernels import fused_ada_factor, fused_ada_factor_with_global_norm

    case = CASES_BY_NAME["fused_ada_factor"]
    inputs = draw(case, np.random.default_rng(2), (3, 4), np.float32)
    inputs["clip_threshold"] = value
    args = case.args(inputs)
    before = [np.array(a, copy=True) for a in args if isinstance(a, np.ndarray)]
    with pytest.raises(ValueError, match="clip_threshold"):
        if with_norm:
            fused_ada_factor_with_global_norm(*args[:12], 1.0)
        else:
            fused_ada_factor(*args[:12])
    for a, b in zip([a for a in args if isinstance(a, np.ndarray)], before):
        np.testing.assert_array_equal(a, b)


def test_ada_factor_optimizer_refuses_negative_zero_clip_threshold():
    from optkernels.optimizers import AdaFactor, Parameter

    with pytest.raises(ValueError, match="clip_threshold"):
        AdaFactor([Parameter(np.zeros((2, 3), np.float32), "w")], clip_threshold=-0.0)


# ------------------------------------------------------------------------ optimizers and other entry points

def _optimizer_builders():
    from optim_table import OPTIMIZERS
    from optkernels.optimizers import LARS, AdaFactor, Momentum

    out = {info.id: (lambda ps, info=info: info.cls(ps, learning_rate=info.learning_rate, **info.kwargs))
           for info in OPTIMIZERS}
    out["LARS"] = lambda ps: LARS(Momentum(ps, learning_rate=0.1, momentum=0.9))
    out["AdaFactor"] = lambda ps: AdaFactor(ps, beta1=0.9)
    return out


@pytest.mark.parametrize("name", list(_optimizer_builders()))
def test_optimizer_steps_with_a_hostile_last_gradient(name):
    """Every hostile value as the LAST gradient of a step: a documented error (naming the parameter) with
    every parameter, slot and counter unchanged, or a step that works (matrix, non-contiguous)."""
    from optkernels.optimizers import Parameter

    build = _optimizer_builders()[name]
    rng = np.random.default_rng(7)
    shapes = [(4, 5), (3, 4)]
    params = [Parameter(rng.standard_normal(s).astype(np.float32), f"w{k}") for k, s in enumerate(shapes)]
    opt = build(params)
    good = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    opt(tuple(good))
    problems = []
    for label, bad in hostile_arrays(good[-1]).items():
        before = {k: np.array(v, copy=True) for k, v in opt.state_dict().items()}
        before.update({p.name: p.data.copy() for p in params})
        step = opt.global_step
        try:
            opt((good[0], bad))
        except numba.core.errors.NumbaError as error:
            problems.append(f"{label}: Numba error {type(error).__name__}: {error}")
        except ALLOWED as error:
            after = {k: np.array(v, copy=True) for k, v in opt.state_dict().items()}
            after.update({p.name: p.data.copy() for p in params})
            if "w1" not in str(error) and "gradient" not in str(error):
                problems.append(f"{label}: the error names neither the parameter nor the gradients: {error}")
            if opt.global_step != step or any(before[k].tobytes() != after[k].tobytes() for k in before):
                problems.append(f"{label}: raised after writing")
        except Exception as error:
            problems.append(f"{label}: {type(error).__name__}: {error}")
    assert not problems, "\n".join(problems)


def _entry_point_calls():
    """(what, call) pairs: the public functions outside the op table that take arrays or numbers."""
    from optkernels.optimizers import (
        CosineDecayLR,
        DynamicLossScaler,
        ExponentialDecayLR,
        InverseDecayLR,
        NaturalExpDecayLR,
        Parameter,
        PolynomialDecayLR,
        WarmUpLR,
        all_finite,
    )
    from optkernels.sparse import RowSparse, merge_duplicates

    idx, vals = np.array([0, 2, 2]), np.ones((3, 4), np.float32)
    calls = []
    for label, h in hostile_arrays(idx).items():
        calls.append((f"merge_duplicates(indices={label})", lambda h=h: merge_duplicates(h, vals, 5)))
        calls.append((f"RowSparse(indices={label})", lambda h=h: RowSparse(h, vals, (5, 4))))
    for label, h in hostile_arrays(vals).items():
        calls.append((f"merge_duplicates(values={label})", lambda h=h: merge_duplicates(idx, h, 5)))
        calls.append((f"RowSparse(values={label})", lambda h=h: RowSparse(idx, h, (5, 4))))
        calls.append((f"all_finite({label})", lambda h=h: all_finite([vals, h])))
        calls.append((f"DynamicLossScaler.unscale({label})",
                      lambda h=h: DynamicLossScaler(1024.0, 2, 10).unscale(h)))
        calls.append((f"Parameter({label})", lambda h=h: Parameter(h, "w")))
    schedules = [ExponentialDecayLR(0.1, 0.9, 4), NaturalExpDecayLR(0.1, 0.9, 4), InverseDecayLR(0.1, 0.9, 4),
                 CosineDecayLR(0.0, 0.1, 4), PolynomialDecayLR(0.1, 0.01, 4, 1.0), WarmUpLR(0.1, 4)]
    for label, h in HOSTILE_SCALARS.items():
        calls.append((f"merge_duplicates(num_rows={label})", lambda h=h: merge_duplicates(idx, vals, h)))
        calls.append((f"RowSparse(dense_shape={label})", lambda h=h: RowSparse(idx, vals, h)))
        calls.append((f"Parameter({label})", lambda h=h: Parameter(h, "w")))
        for s in schedules:
            calls.append((f"{type(s).__name__}(global_step={label})", lambda h=h, s=s: s(h)))
    return calls


def test_other_entry_points_raise_only_documented_errors():
    problems = []
    for what, call in _entry_point_calls():
        try:
            call()
        except ALLOWED:
            pass
        except Exception as error:  # Numba errors, OverflowError...
            problems.append(f"{what}: {type(error).__name__}: {error}")
    assert not problems, "\n".join(problems)


def test_masked_arrays_are_refused_by_every_kind_of_entry_point():
    """The mask would be silently ignored: TypeError instead (kernels: tests/test_memory_safety.py)."""
    from optkernels.optimizers import ExponentialDecayLR, Parameter, all_finite
    from optkernels.sparse import RowSparse, merge_duplicates

    masked = np.ma.masked_array(np.array([1.0, np.inf], np.float32), mask=[False, True])
    index = np.ma.masked_array(np.array([0, 1]), mask=[False, True])
    for call in (lambda: all_finite(masked), lambda: Parameter(masked, "w"),
                 lambda: merge_duplicates(index, np.ones((2, 3)), 4),
                 lambda: merge_duplicates(np.array([0, 1]), masked[:, None], 4),
                 lambda: RowSparse(index, np.ones((2, 3)), (4, 3)),
                 lambda: ExponentialDecayLR(0.1, 0.9, 4)(np.ma.masked_array(np.array([3])))):
        with pytest.raises(TypeError, match="mask"):
            call()


def test_masked_learning_rate_tables_are_refused():
    from optkernels.optimizers import Adam, Parameter

    table = np.ma.masked_array([0.1, -5.0], mask=[False, True])  # the masked -5 would pass unseen
    with pytest.raises(TypeError, match="mask"):
        Adam([Parameter(np.zeros(3, np.float32), "w")], learning_rate=table)
