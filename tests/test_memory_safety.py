"""No input makes a kernel write outside its arrays (issue #13): every array of a call is carved out of the
middle of a larger buffer filled with a guard pattern, passed as ``np.matrix`` (whose ``reshape(-1)`` stays
2-D: the kernels once trusted it as flat and wrote 6.9 KB past a 168-byte matrix) or as a plain array, and
the guard bytes must be intact afterwards; the results must be the bits of the same call on plain arrays.

NumPy subclasses with plain data (``np.matrix``, ``np.memmap``) are accepted as views of their memory;
``np.ma.MaskedArray`` is refused with a TypeError naming the argument (a kernel cannot honour a mask).
"""
from __future__ import annotations

import numpy as np
import pytest

from optkernels.conformance.cases import CASES_BY_NAME, draw, draw_attrs

GUARD = 4096  # bytes on each side of every array
PATTERN = 0xA5


class Guarded:
    """Copies of arrays, each in the middle of its own guard-filled buffer."""

    def __init__(self):
        self.buffers = []

    def carve(self, array: np.ndarray, matrix: bool) -> np.ndarray:
        buf = np.full(array.nbytes + 2 * GUARD, PATTERN, np.uint8)
        view = buf[GUARD:GUARD + array.nbytes].view(array.dtype).reshape(array.shape)
        view[...] = array
        self.buffers.append(buf)
        return view.view(np.matrix) if matrix and view.ndim == 2 else view

    def assert_intact(self, what: str) -> None:
        for buf in self.buffers:
            for side in (buf[:GUARD], buf[-GUARD:]):
                assert np.all(side == PATTERN), f"{what}: bytes written outside an array"


def _guarded_inputs(inputs: dict, guard: Guarded, matrix: bool) -> dict:
    return {k: guard.carve(v, matrix) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _call(case, inputs, attrs):
    result = case.kernel(*case.args(inputs), **attrs)
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("matrix", [True, False], ids=["matrix", "plain-views"])
@pytest.mark.parametrize("name", sorted(CASES_BY_NAME))
def test_no_write_outside_the_arrays(name, matrix):
    """Every op of the conformance table, float32, 6x7 arrays (the issue's shape) inside guard bytes: the
    guards are intact, the results are the plain call's bits, and a later plain call still works."""
    case = CASES_BY_NAME[name]
    rng = np.random.default_rng(13)
    dtype = np.float32
    inputs = draw(case, rng, (6, 7), dtype)
    attrs = draw_attrs(case, rng, dtype)
    plain = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    guard = Guarded()
    hostile = _guarded_inputs(inputs, guard, matrix)
    out_kw = {}
    if case.output != "states":  # the ops returning a new array take an out= array too
        like = plain["gradient"] if "gradient" in plain else plain["weight"]
        out_kw = {"out": guard.carve(np.zeros_like(like), matrix)}
    got = _call(case, hostile, {**attrs, **out_kw})
    want = _call(case, plain, attrs)
    guard.assert_intact(name)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    for s in case.states:
        np.testing.assert_array_equal(np.asarray(hostile[s]), plain[s])
        if matrix and np.ndim(inputs[s]) == 2:
            assert type(hostile[s]) is np.matrix  # updated in place, still the caller's object
    fresh = draw(case, np.random.default_rng(14), (6, 7), dtype)
    _call(case, fresh, attrs)  # a valid call afterwards works


@pytest.mark.parametrize("name", ["apply_adam", "apply_momentum", "fused_sparse_adam", "fused_ada_factor"])
def test_masked_arrays_are_refused_before_any_write(name):
    """A masked state array or gradient: TypeError naming it, nothing written."""
    case = CASES_BY_NAME[name]
    rng = np.random.default_rng(3)
    inputs = draw(case, rng, (4, 5), np.float64)
    attrs = draw_attrs(case, rng, np.float64)
    grad_name = next(k for k in ("gradient", "grad") if k in inputs)
    for target in (case.states[0], grad_name):
        trial = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        trial[target] = np.ma.masked_array(trial[target], mask=np.zeros(trial[target].shape, bool))
        before = {k: np.copy(v) for k, v in trial.items() if isinstance(v, np.ndarray)}
        with pytest.raises(TypeError, match=target):
            _call(case, trial, attrs)
        for k, v in before.items():
            np.testing.assert_array_equal(np.asarray(trial[k]), v)


def test_memmap_state_is_updated_in_place(tmp_path):
    """np.memmap (a subclass with plain data) is accepted and updated in its file's memory."""
    from optkernels.kernels import apply_momentum

    var = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="w+", shape=(3, 4))
    var[...] = 1.0
    accum = np.zeros((3, 4), np.float32)
    grad = np.full((3, 4), 2.0, np.float32)
    result = apply_momentum(var, accum, np.float32(0.5), grad, np.float32(0.9))
    assert result[0] is var
    np.testing.assert_array_equal(np.asarray(var), np.zeros((3, 4), np.float32))  # 1 - 0.5*2
    var.flush()
    assert np.fromfile(tmp_path / "w.bin", np.float32).tolist() == [0.0] * 12


def test_huge_python_int_scalar_is_a_value_error_naming_it():
    from optkernels.kernels import apply_adam
    from optkernels.sparse import sparse_apply_proximal_adagrad

    var, m, v, g = (np.zeros(3, np.float32) for _ in range(4))
    with pytest.raises(ValueError, match="lr"):
        apply_adam(var, m, v, 0.9, 0.999, 10 ** 400, 0.9, 0.999, 1e-8, g)
    with pytest.raises(ValueError, match="lr"):
        sparse_apply_proximal_adagrad(np.zeros((2, 3)), np.ones((2, 3)), 10 ** 400, 0.0, 0.0, np.ones((1, 3)),
                                      np.array([0]))
    assert not var.any() and not m.any()


# ------------------------------------------------------------------------------------------ optimizers

def _optimizer_cases():
    from optim_table import OPTIMIZERS
    from optkernels.optimizers import LARS, AdaFactor, Momentum

    cases = [(info.id, lambda ps, info=info: info.cls(ps, learning_rate=info.learning_rate, **info.kwargs))
             for info in OPTIMIZERS]
    cases.append(("LARS", lambda ps: LARS(Momentum(ps, learning_rate=0.1, momentum=0.9))))
    cases.append(("AdaFactor", lambda ps: AdaFactor(ps)))
    return cases


@pytest.mark.parametrize("build", [b for _, b in _optimizer_cases()], ids=[i for i, _ in _optimizer_cases()])
def test_optimizers_take_matrix_parameters_and_gradients(build):
    """np.matrix parameters and gradients (in guard buffers) give the plain arrays' bits, nothing written
    outside them; the Parameter keeps a plain view of the matrix's memory."""
    from optkernels.optimizers import Parameter

    rng = np.random.default_rng(5)
    shapes = [(6, 7), (7,), (3, 16)]
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(2)]
    guard = Guarded()
    hostile = [guard.carve(w, True) for w in init]
    plain_params = [Parameter(w.copy(), f"p{k}") for k, w in enumerate(init)]
    hostile_params = [Parameter(w, f"p{k}") for k, w in enumerate(hostile)]
    plain_opt, hostile_opt = build(plain_params), build(hostile_params)
    for step in grads:
        plain_opt(tuple(step))
        hostile_opt(tuple(guard.carve(g, True) for g in step))
    guard.assert_intact("optimizer step")
    for p, h, w in zip(plain_params, hostile_params, hostile):
        assert type(h.data) is np.ndarray
        np.testing.assert_array_equal(np.asarray(w), p.data)
        np.testing.assert_array_equal(h.data, p.data)
