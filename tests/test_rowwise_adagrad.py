"""FBGEMM's exact row-wise Adagrad (LOWBIT.md §8): the spec's worked example 10.2, the kernel against the
float64 reference bit for bit (dense and row-sparse gradients, every weight-decay mode, max_norm), errors."""
import numba
import numpy as np
import pytest

from optkernels.reference import lowbit as ref
from optkernels.sparse import RowSparse, rowwise_adagrad

W0 = [[0.5, -0.25, 1.0, 0.0], [-1.0, 0.75, 0.25, -0.5], [2.0, -1.5, 0.5, 0.125], [0.0, 0.0, 0.0, 0.0]]
STEPS = [([2, 0, 2], [[0.5, -0.25, 0.0, 1.0], [0.25, 0.25, -0.5, 0.0], [0.25, 0.25, 0.5, -0.5]]),
         ([1, 2], [[1.0, 0.0, -1.0, 0.5], [-0.5, 0.5, 0.25, 0.0]])]
TABLE = {  # mode, wd -> per step: (h, {row: values}), LOWBIT.md §10.2 (float64, 10 digits)
    ("none", 0.0): [
        ([0.09375, 0, 0.265625, 0], {0: [0.4183503446, -0.3316496554, 1.163299311, 0],
                                     2: [1.854478628, -1.5, 0.4029857519, 0.02798575187]}),
        ([0.09375, 0.5625, 0.40625, 0], {1: [-1.133333332, 0.75, 0.3833333316, -0.5666666658],
                                         2: [1.932925081, -1.578446453, 0.3637625255, 0.02798575187]})],
    ("l2", 0.01): [
        ([0.0915953125, 0, 0.2748503906, 0], {0: [0.4157434753, -0.3317783916, 1.161904694, 0],
                                              2: [1.853126807, -1.497138834, 0.4036740745, 0.02938936599]}),
        ([0.0915953125, 0.555046875, 0.4077503021, 0],
         {1: [-1.132883286, 0.7489933084, 0.3838899772, -0.5664416428],
          2: [1.928526735, -1.573096254, 0.363890905, 0.02934334107]})],
    ("decoupled", 0.01): [
        ([0.09375, 0, 0.265625, 0], {0: [0.4178503446, -0.3313996554, 1.162299311, 0],
                                     2: [1.852478628, -1.4985, 0.4024857519, 0.02786075187]}),
        ([0.09375, 0.5625, 0.40625, 0], {1: [-1.132333332, 0.74925, 0.3830833316, -0.5661666658],
                                         2: [1.929072602, -1.575447953, 0.3628600397, 0.02783289112]})],
}


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize("mode,wd", list(TABLE))
def test_worked_example_10_2_float64(impl, mode, wd):
    w, h = np.array(W0), np.zeros(4)
    for (idx, rows), (want_h, want_rows) in zip(STEPS, TABLE[(mode, wd)]):
        before = w.copy()
        kw = dict(lr=0.1, eps=1e-8, weight_decay=wd, weight_decay_mode=mode)
        if impl == "kernel":
            rowwise_adagrad(w, h, np.array(rows), np.array(idx), **kw)
        else:
            w, h = ref.rowwise_adagrad(w, h, np.array(rows), np.array(idx), **kw)
        np.testing.assert_allclose(h, want_h, rtol=1e-9, atol=0)
        for r in range(4):
            expected = want_rows.get(r, before[r])
            np.testing.assert_allclose(w[r], expected, rtol=2e-9, atol=1e-10)


def test_worked_example_10_2_float32_bits():
    w, h = np.array(W0, np.float32), np.zeros(4, np.float32)
    for idx, rows in STEPS:
        rowwise_adagrad(w, h, np.array(rows, np.float32), np.array(idx, np.int32), lr=0.1)
    assert np.array_equal(w[1], np.float32([-1.13333333, 0.75, 0.383333325, -0.566666663]))
    assert np.array_equal(w[2], np.float32([1.93292511, -1.57844651, 0.363762528, 0.0279857442]))
    w, h = np.array(W0, np.float32), np.zeros(4, np.float32)
    idx, rows = STEPS[0]
    rowwise_adagrad(w, h, np.array(rows, np.float32), np.array(idx), lr=0.1, weight_decay=0.01,
                    weight_decay_mode="l2")
    assert h[0] == np.float32(0.0915953144)


def test_torch_drop_in_short_step_follows_replaced_tensors_and_hyper_parameters(monkeypatch):
    """The short table step keeps NumPy views of the table and its state between steps: a parameter given
    new memory (``p.data =``), the same memory seen with another shape, a replaced ``sum`` state, a new
    ``lr``, a non-contiguous gradient (the full step's) and gradients rewritten in the same memory (fewer
    values the last steps) each give the full step's bits, and the replaced table's old memory is left
    alone."""
    torch = pytest.importorskip("torch")
    import optkernels.torch as OT
    from optkernels.torch._base import KernelOptimizer

    rng = np.random.default_rng(4)

    def floats(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    table = floats(50, 8)
    short, full = torch.nn.Parameter(table.clone()), torch.nn.Parameter(table.clone())
    opt_short = OT.RowWiseAdagrad([short], lr=0.1, weight_decay=0.01, weight_decay_mode="decoupled")
    opt_full = OT.RowWiseAdagrad([full], lr=0.1, weight_decay=0.01, weight_decay_mode="decoupled")
    opt_full.register_step_pre_hook(lambda *args: None)  # the full step, always
    full_steps = []
    step = KernelOptimizer._step
    monkeypatch.setattr(KernelOptimizer, "_step", lambda self, *a: full_steps.append(self) or step(self, *a))

    def both_step(width=8, transposed=False):
        idx = torch.from_numpy(rng.integers(0, 50, 30))
        values = floats(width, 30).t() if transposed else floats(30, width)
        assert values.is_contiguous() is not transposed
        short.grad = torch.sparse_coo_tensor(idx[None], values, (50, width), check_invariants=True)
        full.grad = torch.sparse_coo_tensor(idx[None], values.clone(), (50, width), check_invariants=True)
        opt_short.step()
        opt_full.step()
        assert torch.equal(short, full)
        assert torch.equal(opt_short.state[short]["sum"], opt_full.state[full]["sum"])

    both_step()
    both_step()
    old = short.data
    kept = old.clone()
    new = floats(50, 8)
    short.data, full.data = new.clone(), new.clone()
    both_step()
    assert torch.equal(old, kept) and not torch.equal(short, new)  # the new memory was updated
    opt_short.state[short]["sum"] = torch.full((50,), 0.5)
    opt_full.state[full]["sum"] = torch.full((50,), 0.5)
    both_step()
    opt_short.param_groups[0]["lr"] = opt_full.param_groups[0]["lr"] = 0.03
    both_step()
    same_memory = short.data.view(100, 4)[:50]
    assert same_memory.data_ptr() == short.data_ptr()
    short.data, full.data = same_memory, full.data.view(100, 4)[:50]
    both_step(width=4)
    both_step(width=4, transposed=True)
    values, rows = floats(30, 4), torch.zeros((1, 30), dtype=torch.int64)
    for nnz in (30, 30, 30, 20, 20):  # the gradient in the same memory each step, rewritten
        values.copy_(floats(30, 4))
        rows.copy_(torch.from_numpy(rng.integers(0, 50, (1, 30))))
        short.grad = torch.sparse_coo_tensor(rows[:, :nnz], values[:nnz], (50, 4))
        full.grad = torch.sparse_coo_tensor(rows[:, :nnz].clone(), values[:nnz].clone(), (50, 4))
        assert short.grad._values().data_ptr() == values.data_ptr()
        opt_short.step()
        opt_full.step()
        assert torch.equal(short, full)
        assert torch.equal(opt_short.state[short]["sum"], opt_full.state[full]["sum"])
    assert full_steps.count(opt_full) == 12 and full_steps.count(opt_short) == 2  # the first, the transposed


@pytest.mark.parametrize("mode", ["none", "l2", "decoupled"])
@pytest.mark.parametrize("max_norm", [0.0, 0.9])
@pytest.mark.parametrize("sparse", [False, True])
def test_kernel_matches_reference_float64(mode, max_norm, sparse):
    rng = np.random.default_rng(5)
    w, h = rng.standard_normal((12, 3, 2)) * 0.5, rng.uniform(0, 1, 12)
    rw, rh = w.copy(), h.copy()
    for _ in range(5):
        if sparse:
            idx = rng.integers(0, 12, 9)
            g = rng.standard_normal((9, 3, 2))
        else:
            idx, g = None, rng.standard_normal((12, 3, 2))
        kw = dict(lr=0.05, eps=1e-8, weight_decay=0.02, weight_decay_mode=mode, max_norm=max_norm)
        rowwise_adagrad(w, h, g, idx, **kw)
        rw, rh = ref.rowwise_adagrad(rw, rh, g, idx, **kw)
        assert np.array_equal(w, rw) and np.array_equal(h, rh)
    if max_norm:
        assert (np.sqrt((w.reshape(12, -1) ** 2).sum(1)) <= max_norm * (1 + 1e-12)).all()


def test_row_sparse_object_and_duplicates_are_merged_first():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    h = np.zeros(5, np.float32)
    idx = np.array([3, 1, 3, 3], np.int64)
    g = rng.standard_normal((4, 4)).astype(np.float32)
    a, ha = w.copy(), h.copy()
    rowwise_adagrad(a, ha, RowSparse(idx, g, (5, 4)))
    merged = np.stack([g[1], (g[0] + g[2]) + g[3]])
    b, hb = w.copy(), h.copy()
    rowwise_adagrad(b, hb, merged, np.array([1, 3]))
    assert np.array_equal(a, b) and np.array_equal(ha, hb)
    assert np.array_equal(a[[0, 2, 4]], w[[0, 2, 4]]) and (ha[[0, 2, 4]] == 0).all()


@pytest.mark.parametrize("call,error,match", [
    (lambda w, h: rowwise_adagrad(w, h, np.ones((1, 4)), np.array([7])), IndexError, "7"),
    (lambda w, h: rowwise_adagrad(w, h, np.ones((5, 4)), weight_decay_mode="L2"), ValueError,
     "weight_decay_mode"),
    (lambda w, h: rowwise_adagrad(w, np.zeros(4), np.ones((5, 4))), ValueError, "momentum"),
    (lambda w, h: rowwise_adagrad(w, h.astype(np.float32), np.ones((5, 4))), TypeError, "momentum"),
    (lambda w, h: rowwise_adagrad(w, h, np.ones((5, 4)), lr=-1.0), ValueError, "lr"),
    (lambda w, h: rowwise_adagrad(w, h, np.ones((2, 3)), np.array([0, 1])), ValueError, "grad"),
])
def test_errors_write_nothing(call, error, match):
    w, h = np.ones((5, 4)), np.ones(5)
    with pytest.raises(error, match=match):
        call(w, h)
    assert (w == 1).all() and (h == 1).all()


# ------------------------------------------------------------------------ the optimizer classes

def _embedding_batches(steps, rows=10, dim=4, seed=7):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, rows, 12) for _ in range(steps)], rng


@pytest.mark.parametrize("mode", ["none", "l2", "decoupled"])
def test_numpy_class_equals_the_kernel_and_round_trips(mode):
    from optkernels.optimizers import RowWiseAdagrad

    rng = np.random.default_rng(8)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    dense = rng.standard_normal((3, 2)).astype(np.float32)
    kw = dict(lr=0.05, weight_decay=0.01, weight_decay_mode=mode, max_norm=2.0)
    opt = RowWiseAdagrad([table.copy(), dense.copy()], **kw)
    w, h = table.copy(), np.zeros(10, np.float32)
    d, hd = dense.copy(), np.zeros(3, np.float32)
    for step in range(4):
        idx = rng.integers(0, 10, 6)
        values = rng.standard_normal((6, 4)).astype(np.float32)
        gd = rng.standard_normal((3, 2)).astype(np.float32)
        opt.step([RowSparse(idx, values, (10, 4)), gd])
        rowwise_adagrad(w, h, values, idx, **kw)
        rowwise_adagrad(d, hd, gd, **kw)
        if step == 1:
            other = RowWiseAdagrad([opt._arrays[0].copy(), opt._arrays[1].copy()], **kw)
            other.load_state_dict(opt.state_dict())
            opt = other
    assert np.array_equal(opt._arrays[0], w) and np.array_equal(opt.state[0]["sum"], h)
    assert np.array_equal(opt._arrays[1], d) and np.array_equal(opt.state[1]["sum"], hd)


def test_numpy_class_errors():
    from optkernels.optimizers import RowWiseAdagrad

    with pytest.raises(ValueError, match="weight_decay_mode"):
        RowWiseAdagrad([np.zeros((2, 2), np.float32)], weight_decay_mode="decouple")
    with pytest.raises(ValueError, match="lr"):
        RowWiseAdagrad([np.zeros((2, 2), np.float32)], lr=-0.1)


@pytest.mark.parametrize("mode", ["none", "decoupled"])
def test_torch_drop_in_takes_sparse_embedding_gradients(mode):
    torch = pytest.importorskip("torch")
    import optkernels.torch as OT
    from optkernels.optimizers import RowWiseAdagrad

    batches, rng = _embedding_batches(5)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    table = emb.weight.detach().numpy().copy()
    opt = OT.RowWiseAdagrad(emb.parameters(), lr=0.1, weight_decay=0.01, weight_decay_mode=mode)
    twin = RowWiseAdagrad([table], lr=0.1, weight_decay=0.01, weight_decay_mode=mode)
    for idx in batches:
        opt.zero_grad()
        target = torch.from_numpy(rng.standard_normal((12, 4)).astype(np.float32))
        loss = ((emb(torch.from_numpy(idx)) - target) ** 2).sum()
        loss.backward()
        grad = emb.weight.grad
        assert grad.is_sparse
        values = grad._values().numpy().copy()
        opt.step()
        twin.step([RowSparse(grad._indices()[0].numpy().copy(), values, (10, 4))])
        assert np.array_equal(emb.weight.detach().numpy(), table)
    state = opt.state[emb.weight]
    assert set(state) == {"sum"} and state["sum"].dtype == torch.float32 and state["sum"].shape == (10,)
    assert np.array_equal(state["sum"].numpy(), twin.state[0]["sum"])
    untouched = sorted(set(range(10)) - set(np.concatenate(batches).tolist()))
    assert all(state["sum"][r] == 0 for r in untouched)


def test_torch_drop_in_refuses_what_its_rows_cannot_take():
    """A sparse gradient of sparse_dim 2 has no row-wise meaning, and a loaded ``sum`` of another length
    does not fit: each is refused before anything is written."""
    torch = pytest.importorskip("torch")
    import optkernels.torch as OT

    p = torch.ones(4, 3, requires_grad=True)
    opt = OT.RowWiseAdagrad([p], lr=0.1)
    p.grad = torch.ones(4, 3).to_sparse(2)
    with pytest.raises(ValueError, match="sparse_dim 2"):
        opt.step()
    assert torch.equal(p, torch.ones(4, 3)) and not opt.state
    p.grad = torch.ones(4, 3).to_sparse(1)
    opt.step()
    assert opt.backend_for(p) == "optkernels"
    assert torch.equal(opt.state[p]["sum"], torch.ones(4)) and torch.all(p < 1)
    opt.state[p]["sum"] = torch.zeros(5)
    before = p.detach().clone()
    with pytest.raises(TypeError, match="RowWiseAdagrad"):
        opt.step()
    assert torch.equal(p, before)


def test_torch_drop_in_short_table_step_equals_the_full_step(monkeypatch):
    """The table step's short path (one CPU table, sparse gradient, state made, no hooks) gives the full
    step's bits, is taken only then (a step hook sends the step down the full path), and refuses an
    out-of-range index before anything is written."""
    torch = pytest.importorskip("torch")
    import optkernels.torch as OT
    from optkernels.torch._base import KernelOptimizer

    rng = np.random.default_rng(3)
    table = torch.from_numpy(rng.standard_normal((50, 8)).astype(np.float32))
    short, full = torch.nn.Parameter(table.clone()), torch.nn.Parameter(table.clone())
    opt_short = OT.RowWiseAdagrad([short], lr=0.1, weight_decay=0.01, weight_decay_mode="l2")
    opt_full = OT.RowWiseAdagrad([full], lr=0.1, weight_decay=0.01, weight_decay_mode="l2")
    hook_calls = []
    opt_full.register_step_pre_hook(lambda *args: hook_calls.append(1))
    full_steps = []
    step = KernelOptimizer._step
    monkeypatch.setattr(KernelOptimizer, "_step", lambda self, *a: full_steps.append(self) or step(self, *a))
    for _ in range(3):
        idx = torch.from_numpy(rng.integers(0, 50, 40))
        values = torch.from_numpy(rng.standard_normal((40, 8)).astype(np.float32))
        short.grad = torch.sparse_coo_tensor(idx[None], values, (50, 8), check_invariants=True)
        full.grad = torch.sparse_coo_tensor(idx[None], values.clone(), (50, 8), check_invariants=True)
        opt_short.step()
        opt_full.step()
    assert torch.equal(short, full) and torch.equal(opt_short.state[short]["sum"], opt_full.state[full]["sum"])
    assert len(hook_calls) == 3 and full_steps.count(opt_full) == 3 and full_steps.count(opt_short) == 1
    before, sums = short.detach().clone(), opt_short.state[short]["sum"].clone()
    short.grad = torch.sparse_coo_tensor(torch.tensor([[3, 50]]), torch.ones(2, 8), (50, 8), check_invariants=False)
    with pytest.raises(IndexError):
        opt_short.step()
    assert torch.equal(short, before) and torch.equal(opt_short.state[short]["sum"], sums)


@pytest.mark.parametrize("mode,max_norm", [("none", 0.0), ("l2", 0.0), ("decoupled", 0.4)])
def test_many_distinct_rows_match_the_reference(mode, max_norm):
    """Enough distinct rows that the CPU row loop updates them in blocks (and blocks' tails): the same bits
    as the reference in float64; in float32 (mode none: a zero gradient row changes nothing), the same bits
    as the dense kernel fed merge_duplicates' rows."""
    from optkernels.sparse import merge_duplicates

    rng = np.random.default_rng(9)
    rows = 3000
    idx = np.concatenate([rng.integers(0, rows, 3000), (rng.zipf(1.2, 1000) - 1) % rows])
    g = rng.standard_normal((len(idx), 3))
    w, h = rng.standard_normal((rows, 3)), rng.uniform(0, 1, rows)
    kw = dict(lr=0.05, weight_decay=0.02, weight_decay_mode=mode, max_norm=max_norm)
    rw, rh = ref.rowwise_adagrad(w.copy(), h.copy(), g, idx, **kw)
    rowwise_adagrad(w, h, g, idx, **kw)
    assert np.array_equal(w, rw) and np.array_equal(h, rh)
    if mode == "none":
        w32, h32, g32 = w.astype(np.float32), h.astype(np.float32), g.astype(np.float32)
        unique, summed = merge_duplicates(idx, g32, rows)
        dense = np.zeros_like(w32)
        dense[unique] = summed
        a, ha, b, hb = w32.copy(), h32.copy(), w32.copy(), h32.copy()
        rowwise_adagrad(a, ha, g32, idx, **kw)
        rowwise_adagrad(b, hb, dense, **kw)
        assert np.array_equal(a, b) and np.array_equal(ha, hb)


@pytest.mark.parametrize("width", [8, 37, 64])
def test_wide_rows_block_sums_match_the_scalar_sums(width):
    """Rows of 8 columns or more, whose blocks of 8 rows sum their squares one row per vector lane (8
    columns at a time, then the row's tail): the same bits as the reference in float64 and, in float32, as
    the dense kernel (one scalar sum per row) fed merge_duplicates' rows; large and tiny values too."""
    from optkernels.sparse import merge_duplicates

    rng = np.random.default_rng(width)
    rows = 500
    idx = np.concatenate([rng.integers(0, rows, 700), (rng.zipf(1.1, 300) - 1) % rows])
    g = rng.standard_normal((len(idx), width)) * 10.0 ** rng.integers(-6, 7, (len(idx), 1))
    w, h = rng.standard_normal((rows, width)), rng.uniform(0, 1, rows)
    kw = dict(lr=0.05, weight_decay=0.02, weight_decay_mode="l2")
    rw, rh = ref.rowwise_adagrad(w.copy(), h.copy(), g, idx, **kw)
    a, ha = w.copy(), h.copy()
    rowwise_adagrad(a, ha, g, idx, **kw)
    assert np.array_equal(a, rw) and np.array_equal(ha, rh) and not np.array_equal(a, w)
    w32, h32, g32 = w.astype(np.float32), h.astype(np.float32), g.astype(np.float32)
    unique, summed = merge_duplicates(idx, g32, rows)
    dense = np.zeros_like(w32)
    dense[unique] = summed
    a, ha, b, hb = w32.copy(), h32.copy(), w32.copy(), h32.copy()
    rowwise_adagrad(a, ha, g32, idx, lr=0.05)
    rowwise_adagrad(b, hb, dense, lr=0.05)
    assert np.array_equal(a, b) and np.array_equal(ha, hb) and len(unique) > 8


def test_plain_numpy_call_agrees_with_the_checked_path():
    """A plain NumPy call (2-D table, int64 indices: checked in a few attribute reads) gives the bits of the
    fully checked path (int32 indices, a 3-D table), drops and raises alike, and what it cannot take (shared
    memory, NaN hyper-parameters) still meets the checked path's errors."""
    rng = np.random.default_rng(10)
    w, h = rng.standard_normal((6, 4)).astype(np.float32), rng.uniform(0, 1, 6).astype(np.float32)
    idx, g = np.array([5, 1, 99, 5, 0]), rng.standard_normal((5, 4)).astype(np.float32)
    kw = dict(lr=0.1, weight_decay=0.01, weight_decay_mode="l2", out_of_range="drop")
    a, ha = w.copy(), h.copy()
    rowwise_adagrad(a, ha, g, idx, **kw)
    b, hb = w.reshape(6, 2, 2).copy(), h.copy()
    rowwise_adagrad(b, hb, g.reshape(5, 2, 2), idx.astype(np.int32), **kw)
    assert np.array_equal(a, b.reshape(6, 4)) and np.array_equal(ha, hb) and not np.array_equal(a, w)
    for call, error, match in [
        (lambda: rowwise_adagrad(a, ha, g, idx), IndexError, "99"),
        (lambda: rowwise_adagrad(a, ha, a[:2], np.array([0, 1])), ValueError, "share memory"),
        (lambda: rowwise_adagrad(a, ha, g, idx % 6, eps=float("nan")), ValueError, "eps"),
    ]:
        before, h_before = a.copy(), ha.copy()
        with pytest.raises(error, match=match):
            call()
        assert np.array_equal(a, before) and np.array_equal(ha, h_before)


def test_plain_call_takes_adjacent_arrays_and_refuses_overlapping_ones():
    """The plain call's span test: table, momentum and gradient back to back in one buffer give the bits of
    separate arrays; a momentum or gradient overlapping another array by one element, or a table not
    aligned to its items, leaves the plain path (the checked path refuses such a gradient, nothing
    written)."""
    import sys

    module = sys.modules["optkernels.sparse.rowwise_adagrad"]

    def plain(var, momentum, grad, indices, *hyper):
        table = module.plain_table(var, momentum, *hyper)
        return table is not None and module.plain_gradient(table, grad, indices)

    rng = np.random.default_rng(12)
    w, h = rng.standard_normal((6, 4)).astype(np.float32), rng.uniform(0, 1, 6).astype(np.float32)
    idx, g = np.array([5, 1, 5, 0]), rng.standard_normal((4, 4)).astype(np.float32)
    a, ha = w.copy(), h.copy()
    rowwise_adagrad(a, ha, g, idx, lr=0.1)
    buf = np.concatenate([w.ravel(), h, g.ravel()])
    bw, bh, bg = buf[:24].reshape(6, 4), buf[24:30], buf[30:].reshape(4, 4)
    rowwise_adagrad(bw, bh, bg, idx, lr=0.1)
    assert np.array_equal(bw, a) and np.array_equal(bh, ha) and np.array_equal(bg, g)
    assert plain(bw, bh, bg, idx, 0.1, 1e-8, 0.0, "none", 0.0)
    odd = np.zeros(24 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(6, 4)  # not aligned: not this path
    assert not odd.flags.aligned and not plain(odd, bh, bg, idx, 0.1, 1e-8, 0.0, "none", 0.0)
    for momentum, grad in [(buf[23:29], bg), (bh, buf[29:45].reshape(4, 4)), (bh, buf[20:36].reshape(4, 4))]:
        assert not plain(bw, momentum, grad, idx, 0.1, 1e-8, 0.0, "none", 0.0)
    before = buf.copy()
    with pytest.raises(ValueError, match="share memory"):
        rowwise_adagrad(bw, bh, buf[20:36].reshape(4, 4), idx, lr=0.1)
    assert np.array_equal(buf, before)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="this machine gives Numba only one thread")
@pytest.mark.parametrize("threads", [1, 2])
def test_large_batch_gives_the_reference_bits_on_any_thread_count(threads):
    """20,000 skewed and uniform indices on 1 and 2 threads: row-wise Adagrad gives the reference's bits,
    and sparse Adagrad (a per-element row update) the bits of its call on merge_duplicates' rows (summed in
    the same order)."""
    from optkernels.sparse import merge_duplicates, sparse_apply_adagrad

    rng = np.random.default_rng(11)
    rows = 3000
    idx = np.concatenate([(rng.zipf(1.1, 12000) - 1) % rows, rng.integers(0, rows, 8000)])
    g = rng.standard_normal((len(idx), 5))
    w, h = rng.standard_normal((rows, 5)), rng.uniform(0, 1, rows)
    kw = dict(lr=0.05, weight_decay=0.02, weight_decay_mode="l2")
    rw, rh = ref.rowwise_adagrad(w.copy(), h.copy(), g, idx, **kw)
    unique, summed = merge_duplicates(idx, g, rows)
    var, acc = w.copy(), h[:, None] * np.ones(5)
    merged_var, merged_acc = var.copy(), acc.copy()
    sparse_apply_adagrad(merged_var, merged_acc, summed, unique, lr=0.1)
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        rowwise_adagrad(w, h, g, idx, **kw)
        sparse_apply_adagrad(var, acc, g, idx, lr=0.1)
    finally:
        numba.set_num_threads(previous)
    assert np.array_equal(w, rw) and np.array_equal(h, rh)
    assert np.array_equal(var, merged_var) and np.array_equal(acc, merged_acc)


def test_torch_drop_in_follows_a_tensor_lr_changed_in_place():
    """A tensor ``lr`` that a scheduler changes in place (``fill_``, as torch's schedulers do) is read at
    every step, by the short table step too: the bits of steps with the float values."""
    torch = pytest.importorskip("torch")
    import optkernels.torch as OT

    rng = np.random.default_rng(5)
    table = torch.from_numpy(rng.standard_normal((40, 8)).astype(np.float32))
    tensor_lr, float_lr = torch.nn.Parameter(table.clone()), torch.nn.Parameter(table.clone())
    lr = torch.tensor(0.1)
    opt_tensor = OT.RowWiseAdagrad([tensor_lr], lr=lr)
    opt_float = OT.RowWiseAdagrad([float_lr], lr=0.1)
    for value in (0.1, 0.1, 0.02, 0.02, 0.5):
        lr.fill_(value)
        opt_float.param_groups[0]["lr"] = value
        idx = torch.from_numpy(rng.integers(0, 40, 25))
        values = torch.from_numpy(rng.standard_normal((25, 8)).astype(np.float32))
        tensor_lr.grad = torch.sparse_coo_tensor(idx[None], values, (40, 8))
        float_lr.grad = torch.sparse_coo_tensor(idx[None], values.clone(), (40, 8))
        opt_tensor.step()
        opt_float.step()
        assert torch.equal(tensor_lr, float_lr), value


@pytest.mark.parametrize("kept", [True, "few bytes", False])
def test_kept_launches_give_the_bits_of_the_checked_path(kept, monkeypatch):
    """The plain call runs a launch kept per thread, table and gradient length (its arguments packed once,
    each call writing the gradient's and indices' addresses and new scalars): steps with new gradient
    arrays, changed hyper-parameters, raise and drop, an out-of-range index (IndexError, nothing written)
    and more tables (or bytes) than are kept give the bits of the checked path (int32 indices), as do
    launches made afresh each call (a workspace too large to keep)."""
    import sys

    module = sys.modules["optkernels.sparse.rowwise_adagrad"]
    if not kept:
        monkeypatch.setattr(module, "kept_launch_fits", lambda *args: False)
    if kept == "few bytes":  # room for three launches: all forgotten at every fourth
        table = module.plain_table(np.zeros((30, 6)), np.zeros(30), 0.1, 1e-8, 0.0, "none", 0.0)
        monkeypatch.setattr(module, "KEPT_BYTES", 3 * module.kept_launch(table, 40, False).nbytes)
    monkeypatch.setattr(module, "_kept", __import__("threading").local())
    rng = np.random.default_rng(13)
    rows, count = 30, 40
    tables = [(rng.standard_normal((rows, 6)), rng.uniform(0, 1, rows)) for _ in range(module.KEPT_LAUNCHES + 2)]
    checked = [(w.copy(), h.copy()) for w, h in tables]
    steps = [dict(lr=0.1), dict(lr=0.1), dict(lr=0.05, weight_decay=0.01, weight_decay_mode="l2"),
             dict(lr=0.05, out_of_range="drop"), dict(lr=0.2, max_norm=1.5), dict(lr=0.2, max_norm=1.5)]
    for step, kw in enumerate(steps):
        for k, ((w, h), (cw, ch)) in enumerate(zip(tables, checked)):
            idx = rng.integers(0, rows + (3 if "out_of_range" in kw else 0), count)
            g = rng.standard_normal((count, 6))
            rowwise_adagrad(w, h, g, idx, **kw)
            rowwise_adagrad(cw, ch, g, idx.astype(np.int32), **kw)
            assert np.array_equal(w, cw) and np.array_equal(h, ch), (step, k)
        w, h = tables[step % len(tables)]
        bad = rng.integers(0, rows, count)
        bad[count - 3] = rows
        before, h_before = w.copy(), h.copy()
        with pytest.raises(IndexError, match=str(rows)):
            rowwise_adagrad(w, h, rng.standard_normal((count, 6)), bad, lr=0.1)
        assert np.array_equal(w, before) and np.array_equal(h, h_before)
    launches = getattr(module._kept, "launches", {})
    assert (0 < len(launches) <= module.KEPT_LAUNCHES) if kept else not launches
    assert sum(launch.nbytes for launch in launches.values()) <= module.KEPT_BYTES

