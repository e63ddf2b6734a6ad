"""Where optkernels.torch puts large state tensors (``optkernels/torch/_memory.py``): on Linux, CPU state of
4 MiB or more is a NumPy allocation advised onto huge pages, the k-th state tensor of a parameter k KiB
after the parameter's offset within a 4 KiB page.
What a torch user sees must not change: the state's dtype, shape, strides, values and ``state_dict()`` are
torch.optim's, and the steps' bits are those of state allocated by ``torch.zeros_like``."""
import io
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.torch import _memory  # noqa: E402

LARGE = _memory.HUGE_PAGE_THRESHOLD // 4  # float32 elements of the smallest placed state tensor
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="placement is Linux-only")


def _numpy_param(shape, seed=0):
    """A float32 parameter over NumPy memory (its data 16 bytes into a page, where torch's large tensors
    start 64 bytes in: the offsets differ, as in the bench's DeepSpeed rows)."""
    rng = np.random.default_rng(seed)
    return torch.nn.Parameter(torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)))


def _steps(opt, params, steps, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        opt.step()


def _record_madvise(monkeypatch):
    calls = []
    advise = _memory._madvise_huge

    def recording(address, nbytes):
        calls.append((address, nbytes))
        advise(address, nbytes)

    monkeypatch.setattr(_memory, "_madvise_huge", recording)
    return calls


@linux_only
def test_large_state_has_torchs_layout_huge_pages_and_page_offsets_a_kib_apart(monkeypatch):
    calls = _record_madvise(monkeypatch)
    ours, theirs = _numpy_param(LARGE), _numpy_param(LARGE)
    opt, ref = okt.Adam([ours], amsgrad=True), torch.optim.Adam([theirs], amsgrad=True, foreach=False)
    _steps(opt, [ours], 1)
    _steps(ref, [theirs], 1)
    names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    assert list(opt.state[ours]) == list(ref.state[theirs])
    for k, name in enumerate(names, 1):
        t, r = opt.state[ours][name], ref.state[theirs][name]
        assert (t.dtype, t.shape, t.stride(), t.device, t.layout) == (r.dtype, r.shape, r.stride(), r.device,
                                                                      r.layout)
        assert not t.requires_grad and t._base is None and t.storage_offset() == 0
        assert t.untyped_storage().nbytes() == LARGE * 4
        # k KiB after the parameter's offset in its page (which keeps the offset within a cache line)
        assert t.data_ptr() % 4096 == (ours.data_ptr() % 4096 + 1024 * k) % 4096
        assert (t.data_ptr(), LARGE * 4) in calls  # advised (before it was zeroed), the tensor's bytes
    assert len(calls) == len(names)


@linux_only
@pytest.mark.parametrize("slot", [0, 1, 3, 4, 6])
def test_zeros_like_places_slot_k_a_kib_apart_wrapping_in_the_page(slot):
    p = _numpy_param(LARGE)
    t = _memory.zeros_like(p, slot=slot)
    assert t.data_ptr() % 4096 == (p.data_ptr() + 1024 * slot) % 4096
    assert not t.any() and t.shape == p.shape and t.dtype == p.dtype


@linux_only
@pytest.mark.parametrize("layout", ["channels_last", "transposed", "strided"])
def test_large_state_keeps_torchs_strides(layout):
    base = torch.randn(64, 16, 32, 33) if layout == "channels_last" else torch.randn(2048, 1030)
    p = {"channels_last": lambda: base.to(memory_format=torch.channels_last),
         "transposed": lambda: base.t(),
         "strided": lambda: base[:, ::2]}[layout]()
    z, r = _memory.zeros_like(p), torch.zeros_like(p, memory_format=torch.preserve_format)
    assert (z.shape, z.stride(), z.dtype) == (r.shape, r.stride(), r.dtype) and torch.equal(z, r)
    assert _memory.placed(p)


@linux_only
def test_placed_state_changes_no_bits(monkeypatch):
    """Adam (amsgrad, decoupled decay) over placed state against the same over torch.zeros_like state, and
    Adamax (no square root: torch's bits on any CPU) against torch.optim.Adamax, over 3 steps."""
    placed = [_numpy_param(LARGE), _numpy_param((LARGE // 512, 512), seed=2)]
    plain = [torch.nn.Parameter(p.detach().clone()) for p in placed]
    flags = dict(amsgrad=True, weight_decay=0.1, decoupled_weight_decay=True)
    a, b = okt.Adam(placed, **flags), okt.Adam(plain, **flags)
    _steps(a, placed, 3)
    with monkeypatch.context() as m:
        m.setattr(_memory, "placed", lambda p: False)
        _steps(b, plain, 3)
    assert all(b.state[p][name].untyped_storage().resizable() for p in plain for name in ("exp_avg", "exp_avg_sq"))
    for p, q in zip(placed, plain):
        assert torch.equal(p, q)
        for name, value in a.state[p].items():
            assert torch.equal(value, b.state[q][name]), name
    ours, theirs = _numpy_param(LARGE), _numpy_param(LARGE)
    opt, ref = okt.Adamax([ours], weight_decay=0.1), torch.optim.Adamax([theirs], weight_decay=0.1, foreach=False)
    _steps(opt, [ours], 3)
    _steps(ref, [theirs], 3)
    assert opt.state[ours]["exp_avg"].untyped_storage().resizable() is False  # placed
    assert torch.equal(ours, theirs)
    for name, value in ref.state[theirs].items():
        assert torch.equal(value, opt.state[ours][name]), name


@linux_only
def test_placed_state_dict_round_trip():
    """A placed state saved with torch.save loads into torch.optim.Adamax and back into ours: both continue
    to the bits of an uninterrupted run."""
    p = _numpy_param(LARGE)
    run = okt.Adamax([p])
    _steps(run, [p], 2)
    buffer = io.BytesIO()
    torch.save(run.state_dict(), buffer)
    copies = {}
    for name, cls in (("torch", lambda ps: torch.optim.Adamax(ps, foreach=False)), ("ours", okt.Adamax)):
        q = torch.nn.Parameter(p.detach().clone())
        opt = cls([q])
        buffer.seek(0)
        opt.load_state_dict(torch.load(buffer))
        _steps(opt, [q], 1, seed=5)
        copies[name] = (q, opt.state[q])
    _steps(run, [p], 1, seed=5)
    for q, state in copies.values():
        assert torch.equal(q, p)
        for name, value in run.state[p].items():
            assert torch.equal(state[name], value), name


def test_placed_only_where_safe(monkeypatch):
    """torch's own allocation below 4 MiB, for sparse and meta tensors, and off Linux."""
    small = torch.zeros(LARGE - 1)
    assert not _memory.placed(small) and _memory.zeros_like(small).untyped_storage().resizable()
    assert not _memory.placed(torch.zeros(LARGE, device="meta"))
    assert not _memory.placed(torch.zeros(LARGE).to_sparse())
    monkeypatch.setattr(_memory.sys, "platform", "darwin")
    large = torch.zeros(LARGE)
    assert not _memory.placed(large) and _memory.zeros_like(large).untyped_storage().resizable()


@linux_only
def test_rowwise_adagrad_moves_a_large_table_onto_huge_pages_changing_no_bits(monkeypatch):
    """RowWiseAdagrad advises a placed table's own storage (huge pages, then the collapse) once, as it makes
    the state; the steps' bits are those of an unadvised table. A small table is not advised."""
    calls = []
    advise = _memory._madvise_huge

    def recording(address, nbytes, advice=_memory._MADV_HUGEPAGE):
        calls.append((address, nbytes, advice))
        return advise(address, nbytes, advice)

    monkeypatch.setattr(_memory, "_madvise_huge", recording)
    rng = np.random.default_rng(4)
    table = torch.from_numpy(rng.standard_normal((LARGE // 64, 64), dtype=np.float32))
    advised, plain = torch.nn.Parameter(table.clone()), torch.nn.Parameter(table.clone())
    a, b = okt.RowWiseAdagrad([advised], lr=0.1), okt.RowWiseAdagrad([plain], lr=0.1)
    for _ in range(2):
        idx = torch.from_numpy(rng.integers(0, LARGE // 64, 300))
        values = torch.from_numpy(rng.standard_normal((300, 64), dtype=np.float32))
        advised.grad = torch.sparse_coo_tensor(idx[None], values, advised.shape)
        plain.grad = torch.sparse_coo_tensor(idx[None], values.clone(), plain.shape)
        a.step()
        with monkeypatch.context() as m:
            m.setattr(_memory, "placed", lambda p: False)
            b.step()
    assert [c[1:] for c in calls] == [(LARGE * 4, 14), (LARGE * 4, 25)]
    assert all(c[0] == advised.data_ptr() for c in calls)
    assert torch.equal(advised, plain) and not torch.equal(advised, table)
    assert torch.equal(a.state[advised]["sum"], b.state[plain]["sum"])
    calls.clear()
    assert not _memory.advise_table(torch.zeros(LARGE - 1)) and not calls
    storage = torch.zeros(4 * LARGE)
    _memory.advise_table(storage[LARGE : 2 * LARGE])  # a view: its own bytes, not its storage's
    assert [c[:2] for c in calls] == [(storage.data_ptr() + LARGE * 4, LARGE * 4)] * 2
