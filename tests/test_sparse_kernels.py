"""Every sparse kernel against the float64 reference (heavy duplication, several steps), against the dense
kernel with the same math, lazy rows untouched, empty index lists, and the published examples."""
from __future__ import annotations

import inspect

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import optkernels.kernels as K
import optkernels.reference as R
import optkernels.sparse as S
from optable import assert_close
from optkernels.conformance import examples
from sparse_optable import (
    SPARSE_OPS,
    SPARSE_OPS_BY_NAME,
    abs_grad_sum,
    draw_inputs,
    max_duplicates,
    run_kernel,
    run_reference,
)

ids = [op.name for op in SPARSE_OPS]


@st.composite
def sparse_cases(draw):
    """A table shape, a dtype, an index dtype, a number of steps and, per step, an index list with many
    repeats (a few hot rows drawn again and again), unsorted."""
    n_rows = draw(st.integers(1, 9))
    tail = draw(st.sampled_from([(), (3,), (2, 3)]))
    hot = draw(st.lists(st.integers(0, n_rows - 1), min_size=1, max_size=3))
    row = st.one_of(st.sampled_from(hot), st.integers(0, n_rows - 1))
    steps = draw(st.lists(st.lists(row, min_size=0, max_size=30), min_size=1, max_size=3))
    return dict(shape=(n_rows,) + tail, dtype=draw(st.sampled_from([np.float32, np.float64])),
                index_dtype=draw(st.sampled_from([np.int32, np.int64])), steps=steps,
                seed=draw(st.integers(0, 2 ** 32 - 1)))


def check_against_reference(op, inputs, attrs, dtype, what):
    """One step: the kernel (in place) equals the float64 reference on the same inputs, up to rounding.

    float32 tolerance: the op's ulps per repeat of a row (the gradient rows are summed in float32), relative
    to the state's old magnitude and to the magnitudes of the summed gradient (sum of |g| and its square),
    or the op's own term magnitudes (FTRL)."""
    expected = run_reference(op, inputs, attrs)
    g = abs_grad_sum(inputs)
    before = {name: np.abs(np.asarray(inputs[name], np.float64)) + g + g * g for name in op.states}
    if op.terms is not None:
        state = {name: inputs[name] for name in op.states}
        before.update({k: np.maximum(before[k], v) for k, v in op.terms(state, g, attrs).items()})
    old = {name: inputs[name].copy() for name in op.states}
    actual = run_kernel(op, inputs, attrs)
    ulps = op.ulps * (1 + max_duplicates(inputs["indices"]))
    for name in op.states:
        assert actual[name].dtype == dtype
        assert_close(actual[name], expected[name], dtype, ulps, f"{what} {op.name}.{name}", before[name])
    if op.lazy:
        untouched = np.setdiff1d(np.arange(inputs["var"].shape[0]), inputs["indices"])
        for name in op.states:
            assert actual[name][untouched].tobytes() == old[name][untouched].tobytes(), \
                f"{op.name} changed {name} in rows without gradient"


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
@given(case=sparse_cases())
def test_kernel_matches_reference_over_steps(op, case):
    rng = np.random.default_rng(case["seed"])
    dtype = case["dtype"]
    first = np.array(case["steps"][0], case["index_dtype"])
    inputs, attrs = draw_inputs(op, rng, case["shape"], dtype, first)
    for step, rows in enumerate(case["steps"]):
        if step:  # state carried over from the previous step; a new gradient
            inputs["indices"] = np.array(rows, case["index_dtype"])
            inputs["grad"] = rng.standard_normal((len(rows),) + case["shape"][1:]).astype(dtype)
        check_against_reference(op, inputs, attrs, dtype, f"step {step}")


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heavy_duplication_on_a_wide_table(op, dtype):
    """200 indices on 12 rows of 40 elements, mostly one hot row: one update per distinct row."""
    rng = np.random.default_rng(7)
    indices = np.where(rng.uniform(size=200) < 0.6, 3, rng.integers(0, 12, 200)).astype(np.int64)
    inputs, attrs = draw_inputs(op, rng, (12, 5, 8), dtype, indices)
    check_against_reference(op, inputs, attrs, dtype, "wide")


def _merged_rows(inputs):
    rows, summed = S.merge_duplicates(inputs["indices"], inputs["grad"], inputs["var"].shape[0])
    return rows, summed


ADAM_SCALARS = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")
EXACT = not numba.config.USING_SVML  # with SVML, a vectorised pow may round differently from the scalar one


@pytest.mark.parametrize("op", [op for op in SPARSE_OPS if op.dense], ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(4))
def test_equals_dense_kernel_on_the_merged_rows(op, dtype, seed):
    """The sparse op's indexed rows are the dense kernel's result on those rows with the merged gradient
    (the same compiled math: the same bits); its other rows do not change."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, 10, 40).astype(np.int32)
    inputs, attrs = draw_inputs(op, rng, (10, 3, 4), dtype, indices)
    rows, summed = _merged_rows(inputs)
    dense_states = {name: np.ascontiguousarray(inputs[name][rows]) for name in op.states}
    scalars = {k: inputs[k] for k in op.positional if k not in op.states and k not in ("grad", "indices")}
    args, kwargs = op.dense_args(dense_states, scalars, attrs, summed)
    getattr(K, op.dense)(*args, **kwargs)
    old = {name: inputs[name].copy() for name in op.states}
    run_kernel(op, inputs, attrs)
    others = np.setdiff1d(np.arange(10), rows)
    for name in op.states:
        if EXACT:
            assert inputs[name][rows].tobytes() == dense_states[name].tobytes(), f"{op.name}.{name}"
        else:
            assert_close(inputs[name][rows], dense_states[name], dtype, 2.0, f"{op.name}.{name}")
        assert inputs[name][others].tobytes() == old[name][others].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
def test_fused_sparse_adam_is_dense_adam_on_the_densified_merged_gradient(dtype, nesterov):
    """Non-lazy: every row moves, as dense Adam with a gradient that is zero outside the indexed rows (the
    same math up to rounding: delta-form moments there, MindSpore's two-step form here)."""
    op = SPARSE_OPS_BY_NAME["fused_sparse_adam"]
    rng = np.random.default_rng(3)
    indices = rng.integers(0, 20, 50).astype(np.int64)
    inputs, attrs = draw_inputs(op, rng, (30, 6), dtype, indices)
    rows, summed = _merged_rows(inputs)
    dense = np.zeros_like(inputs["var"])
    dense[rows] = summed
    states = {name: inputs[name].copy() for name in op.states}
    K.apply_adam(states["var"], states["m"], states["v"], *[inputs[k] for k in ADAM_SCALARS], dense,
                 use_nesterov=nesterov)
    old = {name: inputs[name].copy() for name in op.states}
    run_kernel(op, inputs, dict(use_nesterov=nesterov))
    for name in op.states:
        assert_close(inputs[name], states[name], dtype, 4.0, f"fused_sparse_adam.{name} vs apply_adam",
                     old[name])
    untouched = np.setdiff1d(np.arange(30), rows)
    assert not np.array_equal(inputs["var"][untouched], old["var"][untouched]), "rows without gradient move"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_sparse_lazy_adam_is_dense_adam_on_the_merged_rows(dtype):
    op = SPARSE_OPS_BY_NAME["fused_sparse_lazy_adam"]
    rng = np.random.default_rng(4)
    indices = rng.integers(0, 20, 50).astype(np.int32)
    inputs, attrs = draw_inputs(op, rng, (25, 6), dtype, indices)
    rows, summed = _merged_rows(inputs)
    states = {name: np.ascontiguousarray(inputs[name][rows]) for name in op.states}
    K.apply_adam(states["var"], states["m"], states["v"], *[inputs[k] for k in ADAM_SCALARS], summed)
    old = {name: inputs[name].copy() for name in op.states}
    run_kernel(op, inputs, {})
    for name in op.states:
        assert_close(inputs[name][rows], states[name], dtype, 4.0, f"lazy adam {name}", old[name][rows])
        others = np.setdiff1d(np.arange(25), rows)
        assert inputs[name][others].tobytes() == old[name][others].tobytes()


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_empty_index_list(op, index_dtype):
    """No indices: lazy ops change nothing; the non-lazy FusedSparseAdam still decays the moments and moves
    var."""
    rng = np.random.default_rng(5)
    inputs, attrs = draw_inputs(op, rng, (6, 4), np.float32, np.zeros(0, index_dtype))
    old = {name: inputs[name].copy() for name in op.states}
    expected = run_reference(op, inputs, attrs)
    run_kernel(op, inputs, attrs)
    for name in op.states:
        if op.lazy:
            assert inputs[name].tobytes() == old[name].tobytes()
        else:
            assert_close(inputs[name], expected[name], np.float32, 8.0, name, old[name])
            assert not np.array_equal(inputs[name], old[name]), f"{name} must change without indices"


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
def test_one_dimensional_var(op):
    """var of shape (N,): each row is one element."""
    rng = np.random.default_rng(6)
    inputs, attrs = draw_inputs(op, rng, (9,), np.float64, np.array([4, 0, 4, 8, 4], np.int64))
    check_against_reference(op, inputs, attrs, np.float64, "1-D")


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
def test_out_of_range_drop_matches_the_reference(op):
    """out_of_range='drop' skips bad indices (negative ones too) exactly as MindSpore's fused ops (and the
    reference) do."""
    rng = np.random.default_rng(8)
    indices = np.array([2, -1, 7, 2, 5, 100, -7, 0], np.int32)
    inputs, attrs = draw_inputs(op, rng, (6, 3), np.float64, indices)
    expected = run_reference(op, inputs, attrs)
    actual = run_kernel(op, inputs, dict(attrs, out_of_range="drop"))
    for name in op.states:
        assert_close(actual[name], expected[name], np.float64, 8.0, f"{op.name}.{name}")


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
def test_row_sparse_gradient_is_accepted(op):
    """grad may be a RowSparse with indices=None: the same bits as (values, indices)."""
    rng = np.random.default_rng(9)
    indices = np.array([3, 1, 3, 3, 0], np.int64)
    inputs, attrs = draw_inputs(op, rng, (5, 2, 2), np.float32, indices)
    twin = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    twin["grad"] = S.RowSparse(inputs["indices"], inputs["grad"], inputs["var"].shape)
    twin["indices"] = None
    a = run_kernel(op, inputs, attrs)
    b = run_kernel(op, twin, attrs)
    for name in op.states:
        assert a[name].tobytes() == b[name].tobytes()


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
def test_scalars_accept_numbers_and_small_arrays(op):
    """A Python number, a NumPy scalar, a 0-d and a shape-(1,) array give the same bits."""
    results = []
    for form in (float, np.float64, lambda x: np.array(x), lambda x: np.array([x], np.float32)):
        rng = np.random.default_rng(10)
        inputs, attrs = draw_inputs(op, rng, (4, 3), np.float32, np.array([1, 2, 1], np.int32))
        for name in op.scalars(np.random.default_rng(0)):
            inputs[name] = form(inputs[name])
        results.append(run_kernel(op, inputs, attrs))
    for other in results[1:]:
        for name in op.states:
            assert results[0][name].tobytes() == other[name].tobytes()


def test_fused_sparse_adam_seed_example():
    """KERNELS.md §3: rows 0 and 1 -> 0.9997121, row 2 -> 0.99971527 (float32, bit for bit); lazy: row 2
    stays 1."""
    f = np.float32
    grad = np.array([[[0.1, 0.1]], [[0.1, 0.1]]], f)
    indices = np.array([0, 1], np.int32)
    scalars = [f(0.9), f(0.999), f(0.001), f(0.9), f(0.999), f(1e-8)]
    var, m, v = (np.ones((3, 1, 2), f) for _ in range(3))
    S.fused_sparse_adam(var, m, v, *scalars, grad, indices)
    assert np.array_equal(var[:2], np.full((2, 1, 2), f(0.9997121)))
    assert np.array_equal(var[2], np.full((1, 2), f(0.99971527)))
    var, m, v = (np.ones((3, 1, 2), f) for _ in range(3))
    S.fused_sparse_lazy_adam(var, m, v, *scalars, grad, indices)
    assert np.array_equal(var[:2], np.full((2, 1, 2), f(0.9997121)))
    assert np.array_equal(var[2], np.ones((1, 2), f)) and np.array_equal(m[2], np.ones((1, 2), f))


SPARSE_EXAMPLES = examples.load("sparse")


def _call_example(entry, **extra):
    fn = getattr(S, examples.OP_NAMES[entry["op"]][1])
    inputs = examples.build_inputs(entry)
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    attrs = {k: v for k, v in entry["attrs"].items() if k in keywords}
    fn(*[inputs[name] for name in positional], **attrs, **extra)
    return inputs


@pytest.mark.parametrize("entry", SPARSE_EXAMPLES, ids=[e["op"] for e in SPARSE_EXAMPLES])
def test_kernel_reproduces_published_example(entry):
    # SparseApplyFtrl's example has an out-of-range index and shows no change: MindSpore's drop behaviour.
    extra = {"out_of_range": "drop"} if entry["op"] == "SparseApplyFtrl" else {}
    inputs = _call_example(entry, **extra)
    for name, expected in entry["expected"].items():
        problem = examples.mismatch(inputs[name], expected, entry["compare"], f"{entry['op']}.{name}")
        assert problem is None, problem


def test_published_out_of_range_example_raises_by_default():
    entry = next(e for e in SPARSE_EXAMPLES if e["op"] == "SparseApplyFtrl")
    inputs = examples.build_inputs(entry)
    before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
    with pytest.raises(IndexError, match=r"indices\[0\] = 1"):
        S.sparse_apply_ftrl(inputs["var"], inputs["accum"], inputs["linear"], inputs["grad"],
                            inputs["indices"], **entry["attrs"])
    for k, v in before.items():
        assert np.array_equal(inputs[k], v)


def test_public_api():
    assert set(S.__all__) == {"RowSparse", "merge_duplicates", "fused_sparse_adam", "fused_sparse_lazy_adam",
                              "fused_sparse_ftrl", "sparse_apply_ftrl", "sparse_apply_ftrl_v2",
                              "fused_sparse_proximal_adagrad",
                              "sparse_apply_proximal_adagrad", "sparse_apply_adagrad",
                              "sparse_apply_adagrad_v2", "rowwise_adagrad"}
    assert S.__doc__
    for name in S.__all__:
        obj = getattr(S, name)
        doc = inspect.getdoc(obj)
        assert doc and ("Returns" in doc or name == "RowSparse"), name
        if name not in ("RowSparse", "merge_duplicates"):
            kernel = inspect.signature(obj)
            reference = inspect.signature(getattr(R, name))
            positional = [p for p in kernel.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
            assert [p.name for p in positional] == [p.name for p in reference.parameters.values()
                                                    if p.kind is p.POSITIONAL_OR_KEYWORD], name
            for p in reference.parameters.values():
                if p.kind is p.KEYWORD_ONLY:
                    assert kernel.parameters[p.name].default == p.default, (name, p.name)
            assert kernel.parameters["out_of_range"].default == "raise"


@pytest.mark.parametrize("op", SPARSE_OPS, ids=ids)
def test_non_contiguous_grad_and_indices(op):
    """Strided (read-only) gradient and index arrays give the same bits as contiguous copies."""
    rng = np.random.default_rng(12)
    wide_indices = np.array([2, 9, 0, 9, 2, 9, 5, 9], np.int64)
    inputs, attrs = draw_inputs(op, rng, (6, 4), np.float32, wide_indices[::2].copy())
    wide_grad = np.zeros((4, 8), np.float32)
    wide_grad[:, ::2] = inputs["grad"]
    twin = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    twin["grad"], twin["indices"] = wide_grad[:, ::2], wide_indices[::2]
    assert not twin["grad"].flags.c_contiguous and not twin["indices"].flags.c_contiguous
    a = run_kernel(op, inputs, attrs)
    b = run_kernel(op, twin, attrs)
    for name in op.states:
        assert a[name].tobytes() == b[name].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_adagrad_v2_epsilon_is_outside_the_root(dtype):
    """As documented (MindSpore's docs, TensorFlow): lr·g/(√accum + ε), not MindSpore CPU's lr·g/√(accum + ε).
    accum 4, ε 5, g 1, lr 1, no slot update: 1/7 (the CPU kernel's form would give 1/3)."""
    var, accum = np.zeros((2, 1), dtype), np.full((2, 1), 4.0, dtype)
    S.sparse_apply_adagrad_v2(var, accum, np.ones((1, 1), dtype), np.array([1]), lr=1.0, epsilon=5.0,
                              update_slots=False)
    assert var[1, 0] == -dtype(1.0) / dtype(7.0) and var[0, 0] == 0
    (ref_var, _) = R.sparse_apply_adagrad_v2(np.zeros((2, 1)), np.full((2, 1), 4.0), np.ones((1, 1)), [1],
                                            lr=1.0, epsilon=5.0, update_slots=False)
    assert ref_var[1, 0] == -1.0 / 7.0


def test_lazy_adam_plain_call_agrees_with_the_checked_path():
    """fused_sparse_lazy_adam's common call (plain arrays, Python or NumPy floats: checked in a few reads)
    gives the bits of the checked path (0-d array scalars, a RowSparse gradient), drops and raises alike, and
    a beta1_power whose float32 is within FLT_EPSILON of 1 still meets the checked path's error."""
    rng = np.random.default_rng(5)
    table = [rng.standard_normal((7, 3)).astype(np.float32) for _ in range(3)]
    table[2] = np.abs(table[2])
    idx, g = np.array([4, 1, 4, 9, 0], np.int32), rng.standard_normal((5, 3)).astype(np.float32)
    scalars = (0.9**2, 0.999**2, 1e-2, 0.9, 0.999, 1e-8)
    keep = idx < 7  # dropped by the other calls
    calls = [
        lambda s: S.fused_sparse_lazy_adam(*s, *scalars, g, idx, out_of_range="drop"),
        lambda s: S.fused_sparse_lazy_adam(*s, *map(np.float32, scalars), g, idx, out_of_range="drop"),
        lambda s: S.fused_sparse_lazy_adam(*s, *map(np.asarray, scalars), g, idx, out_of_range="drop"),
        lambda s: S.fused_sparse_lazy_adam(*s, *scalars, S.RowSparse(idx[keep], g[keep], (7, 3))),
    ]
    runs = []
    for call in calls:
        state = [a.copy() for a in table]
        call(state)
        runs.append(state)
    assert all(np.array_equal(x, y) for run in runs[1:] for x, y in zip(run, runs[0]))
    assert not np.array_equal(runs[0][0][4], table[0][4]) and np.array_equal(runs[0][0][2], table[0][2])
    for bad, error, match in [((1 - 2**-23,) + scalars[1:], ValueError, "beta1_power"),
                              (scalars, IndexError, "9")]:
        state = [a.copy() for a in table]
        with pytest.raises(error, match=match):
            S.fused_sparse_lazy_adam(*state, *bad, g, idx)
        assert all(np.array_equal(x, y) for x, y in zip(state, table))
