"""torch's CPU reductions of Adafactor's step reproduced by ``kernels/torch_reductions.py``: the full and
last-dimension 2-norms, the column norms and the row means, bit for bit against torch on shapes that take
every branch (vector bodies and tails, one element, a size-1 row or column, batches); and the drop-in's
multi-tensor step, with those kernels and with torch's own reductions (where the probe says they differ).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import optkernels.torch as ot
from optkernels.kernels import torch_many as M
from optkernels.kernels.torch_family import lerp_scalars
from optkernels.torch import _reductions

DTYPES = {"f32": (torch.float32, np.float32), "f64": (torch.float64, np.float64)}

#: the orders were read from and confirmed on torch's x86-64 builds (AVX2/AVX-512 kernels)
x86 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="the reproduced reduction orders are those of torch's x86-64 AVX2/AVX-512 CPU kernels",
)
MATRICES = [(1, 1), (1, 9), (9, 1), (7, 5), (2, 6, 1), (2, 1, 6), (3, 4, 5), (300, 12), (17, 70), (70, 17)]


def _tasks(tensors):
    return np.array([[t, 0, x.numel(), x.numel()] for t, x in enumerate(tensors)], np.int64)


def _addresses(*columns):
    return np.array([[t.data_ptr() for t in column] for column in columns], np.int64)


@x86
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_full_norms_are_torchs(dtype):
    tdtype, ndtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1)
    sizes = [*range(1, 21), 63, 100, 1001, 40003]
    tensors = [torch.randn(n, generator=gen, dtype=tdtype) * 10.0 ** (n % 7 - 3) for n in sizes]
    tensors.append(torch.randn(6, 7, generator=gen, dtype=tdtype))  # a matrix: the norm of its elements
    ours = M.tensor_norms(_tasks(tensors), _addresses(tensors)[0], np.empty(0, ndtype))
    theirs = [torch.linalg.vector_norm(t).item() for t in tensors]
    assert ours.tolist() == theirs


@x86
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_factored_moments_are_torchs(dtype):
    # R ← lerp(R, ‖g‖²_rows/m, w), C ← lerp(C, ‖g‖²_cols/n, w), mean(R) over the rows, as torch's Adafactor
    tdtype, ndtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(s, generator=gen, dtype=tdtype) for s in MATRICES]
    rows = [torch.rand(list(g.shape[:-1]) + [1], generator=gen, dtype=tdtype) for g in grads]
    cols = [torch.rand(list(g.shape[:-2]) + [1, g.shape[-1]], generator=gen, dtype=tdtype) for g in grads]
    weight = 0.75  # the other branch of torch's lerp than the probe's
    expected = []
    for g, r, c in zip(grads, rows, cols):
        r2 = r.lerp(torch.norm(g, dim=-1, keepdim=True).square_().div_(g.size(-1)), weight)
        c2 = c.lerp(torch.norm(g, dim=-2, keepdim=True).square_().div_(g.size(-2)), weight)
        expected.append((r2, c2, r2.mean(dim=-2, keepdim=True).reshape(-1).numpy()))
    batches = [g.numel() // (g.shape[-2] * g.shape[-1]) for g in grads]
    firsts = np.cumsum([0] + batches)
    dims = np.array([batches, [g.shape[-2] for g in grads], [g.shape[-1] for g in grads], firsts[:-1]])
    w, one_minus_w, small = lerp_scalars(weight, np.dtype(ndtype))
    means = np.empty(firsts[-1], ndtype)
    M.factored_moments(
        _tasks(grads),
        _addresses(grads, rows, cols),
        dims.astype(np.int64),
        np.array([[g.shape[-1] for g in grads], [g.shape[-2] for g in grads]], ndtype),
        np.array([[w] * len(grads), [one_minus_w] * len(grads)], ndtype),
        np.full(len(grads), small, np.bool_),
        means,
        np.empty(0, ndtype),
    )
    for k, (r2, c2, m2) in enumerate(expected):
        shape = MATRICES[k]
        assert torch.equal(rows[k], r2) and torch.equal(cols[k], c2), shape
        assert np.array_equal(means[firsts[k] : firsts[k + 1]], m2), shape


@x86
def test_the_probe_finds_torchs_orders_here():
    assert _reductions.matches_torch(torch.float32) and _reductions.matches_torch(torch.float64)


@pytest.mark.parametrize("own", [True, False], ids=["own-reductions", "torch-reductions"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_many_tensor_step_equals_torch(monkeypatch, own, dtype):
    # the multi-tensor step over odd shapes (0-d, 1-D, size-1 rows and columns, batches, a 33,000-row
    # matrix whose row mean torch sums on its threads), with the kernels' reductions or with torch's
    tdtype = DTYPES[dtype][0]
    if own:
        if not _reductions.matches_torch(tdtype):
            pytest.skip("this torch adds in another order: the step takes torch's reductions")

        def refuse(*args, **kwargs):
            raise AssertionError("a torch reduction was called")

        monkeypatch.setattr(ot.adafactor, "_norm", refuse)
        monkeypatch.setattr(torch, "_foreach_norm", refuse)
    else:
        monkeypatch.setattr(_reductions, "matches_torch", lambda dtype, matrices=True: False)
    gen = torch.Generator().manual_seed(3)
    shapes = [(), (1,), (13,), *MATRICES, (33000, 1)]
    ours = [torch.randn(s, generator=gen, dtype=tdtype) for s in shapes]
    theirs = [p.clone() for p in ours]
    opt_ours = ot.Adafactor(ours, lr=0.02, weight_decay=0.1)
    opt_theirs = torch.optim.Adafactor(theirs, lr=0.02, weight_decay=0.1, foreach=False)
    for step in range(3):
        for p, q in zip(ours, theirs):
            p.grad = torch.randn(p.shape, generator=gen, dtype=tdtype)
            q.grad = p.grad.clone()
        opt_ours.step()
        opt_theirs.step()  # its single-tensor loop calls neither of the refused functions
        for p, q in zip(ours, theirs):
            assert torch.equal(p, q), (step, tuple(p.shape))
            a, b = opt_ours.state[p], opt_theirs.state[q]
            assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a), (step, tuple(p.shape))


def test_reductions_over_a_million_elements_run_on_threads_with_torchs_bits():
    # from REDUCE_SERIAL_BELOW elements the reductions' phases run on Numba's threads: the same bits
    shapes = [(1030, 1030), (1030,), (3, 40, 7)]
    assert sum(np.prod(s) for s in shapes) >= M.REDUCE_SERIAL_BELOW
    gen = torch.Generator().manual_seed(7)
    ours = [torch.randn(s, generator=gen) for s in shapes]
    theirs = [p.clone() for p in ours]
    opt_ours, opt_theirs = ot.Adafactor(ours), torch.optim.Adafactor(theirs, foreach=False)
    for _ in range(2):
        _step_both(opt_ours, opt_theirs, ours, theirs, gen)
        for p, q in zip(ours, theirs):
            assert torch.equal(p, q), tuple(p.shape)
            assert all(torch.equal(opt_ours.state[p][k], opt_theirs.state[q][k]) for k in opt_theirs.state[q])


def test_a_copied_optimizer_writes_its_own_scratch():
    # the updates live in a scratch array per layout, addressed when the step runs: a deep copy of the
    # optimizer (its layouts included) steps through its own copy and equals the original's next step
    import copy

    gen = torch.Generator().manual_seed(8)
    params = [torch.randn(s, generator=gen) for s in [(6, 5), (4,)]]
    opt = ot.Adafactor(params)
    grads = [torch.randn(p.shape, generator=gen) for p in params]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    twin = copy.deepcopy(opt)
    for o in (opt, twin):
        for p, g in zip(o.param_groups[0]["params"], grads):
            p.grad = g.clone()
        o.step()
    assert all(torch.equal(p, q) for p, q in zip(params, twin.param_groups[0]["params"]))
    (layout,), (twin_layout,) = opt._layouts.values(), twin._layouts.values()
    assert not np.intersect1d(layout.update_addresses, twin_layout.update_addresses).size


def test_a_step_over_vectors_alone_probes_no_matrix_kernel(monkeypatch):
    """Compile only what a call needs: Adafactor over 1-D parameters checks the norms, never the factored
    moments' kernel (whose first compile costs seconds), and still gives torch's bits."""

    def refuse(dtype):
        raise AssertionError("the factored moments were probed for a step without matrices")

    monkeypatch.setattr(_reductions, "_factored_match", refuse)
    gen = torch.Generator().manual_seed(3)
    ours = [torch.randn(n, generator=gen) for n in (7, 1000)]
    theirs = [p.clone() for p in ours]
    mine, its = ot.Adafactor(ours, foreach=False), torch.optim.Adafactor(theirs, foreach=False)
    for _ in range(3):
        _step_both(mine, its, ours, theirs, gen)
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs))


def _step_both(mine, its, ours, theirs, gen):
    """One step of both optimizers on the same fresh gradients."""
    for p, q in zip(ours, theirs):
        p.grad = torch.randn(p.shape, generator=gen)
        q.grad = p.grad.clone()
    mine.step()
    its.step()
