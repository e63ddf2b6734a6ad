"""The table of torch's bfloat16 Adam denominators (kernels/_denominator_table.py,
``torch_rules.adam_denominator_table``): the all-bfloat16 Adam loop given one writes the bits it writes
computing them, for every bfloat16 ``v`` (NaN, infinities, negatives, subnormals), at multiplying and dividing
steps and in torch's scalar tails, whether one table is given or each part of the launch fills its own
(``PartTables``); a table's negative half does not depend on the step; and optkernels.torch.Adam/AdamW step
large bfloat16 tensors with them, with torch.optim's bits."""

import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import torch_rules as T
from optkernels.kernels._denominator_table import HEADER_WORDS, DenominatorTable, PartTables
from optkernels.kernels._elementwise import HalfLauncher

BF16 = ml_dtypes.bfloat16
PATTERNS = np.arange(65536, dtype=np.uint16)
# (β2, step): a step whose quotient is a multiplication (float32 multiplier), one that divides (float64 1/c)
MULTIPLIES, DIVIDES = (0.999, 3), (0.99999, 54601)


def _scalars(beta2, step, eps=1e-8, wd=0.0, decoupled=False, maximize=False):
    group = T.adam_group_scalars(np.dtype(np.float32), 1e-3, 0.9, beta2, eps, wd, decoupled, maximize, 2)
    return T.adam_half_step_scalars(group, step)[:-3]


def _arrays(n, seed):
    """param, exp_avg, exp_avg_sq, grad bits: every v pattern (three times over, shuffled once), the others
    random patterns half of the time and small normal values otherwise."""
    rng = np.random.default_rng(seed)
    small = (rng.standard_normal((3, n)).astype(np.float32) * 0.1).astype(BF16).view(np.uint16)
    wild = rng.integers(0, 65536, (3, n)).astype(np.uint16)
    p, m, g = np.where(rng.random((3, n)) < 0.5, wild, small)
    v = np.resize(np.concatenate([PATTERNS, PATTERNS[::-1], rng.permutation(PATTERNS)]), n)
    return [p, m, v, g]


def _step(kernel, arrays, scalars, tails, parts=None):
    """One launch of ``kernel`` (all-bfloat16) on copies of ``arrays``: the four arrays after it; ``parts``:
    its loop run in that many parts on this thread (else a launch's own parts)."""
    out = [a.copy() for a in arrays]
    example = tuple(a.view(BF16) for a in out) + (*scalars, *tails)
    launcher = HalfLauncher(kernel, example)
    if parts is None:
        launcher(out[0].size, *out, *scalars, *tails)
    else:
        launcher._driver(False, parts, out[0].size, parts, *out, *scalars, *tails)
    return out


def _entries(tables, row):
    """The table of row ``row`` of ``tables`` (a PartTables): its 65536 entries."""
    return tables.buffer[row, HEADER_WORDS + 1 : HEADER_WORDS + 1 + 65536]


@pytest.mark.parametrize("beta2, step", [MULTIPLIES, DIVIDES], ids=["multiplies", "divides"])
@pytest.mark.parametrize("kernel", [T._torch_adam, T._torch_adam_amsgrad], ids=["adam", "amsgrad"])
def test_a_table_gives_the_computed_bits(beta2, step, kernel):
    scalars = _scalars(beta2, step, wd=0.01)
    assert type(scalars[-4]) is (np.float32 if (beta2, step) == MULTIPLIES else float)  # the quotient's kind
    n = 3 * 65536 + 77
    arrays = _arrays(n, step)
    if kernel is T._torch_adam_amsgrad:
        arrays.insert(3, np.random.default_rng(1).integers(0, 65536, n).astype(np.uint16))
    tails = T.torch_tail_scalars(n, 3, 32)  # torch's scalar tails in three threads' chunks
    table = T.adam_denominator_table(*scalars[-5:-2])
    computed = _step(kernel, arrays, scalars, tails)
    tabled = _step(kernel, arrays, (*scalars[:-1], table), tails)
    for a, b in zip(computed, tabled):
        assert np.array_equal(a, b)
    assert not np.array_equal(computed[0], arrays[0]) and not np.array_equal(computed[2], arrays[2])
    tables = PartTables(2, T._bf16_roots()[0])  # three parts: rows 0, 1, then 0 refilled
    for parts in (3, None):
        in_parts = _step(kernel, arrays, (*scalars[:-1], tables), tails, parts)
        for a, b in zip(computed, in_parts):
            assert np.array_equal(a, b), parts
    assert np.array_equal(_entries(tables, 0), table.buffer[1:])


def test_table_entries():
    """Entry k is the denominator of the bfloat16 with bits k: √v / c + eps, each rounded to bfloat16."""
    bc2_sqrt, inv, eps = _scalars(*MULTIPLIES, eps=1e-3)[-5:-2]
    table = T.adam_denominator_table(bc2_sqrt, inv, eps)
    entries = table.buffer[1:]
    four = int(np.array([4.0], BF16).view(np.uint16)[0])
    quotient = np.float32(np.float32(2.0) / bc2_sqrt).astype(BF16).astype(np.float32)  # √4 = 2, exact
    expected = quotient + np.float32(eps).astype(BF16).astype(np.float32)
    assert entries[four] == np.array([expected], np.float32).astype(BF16).view(np.uint16)[0]
    assert bc2_sqrt == np.float32(0.054744873)  # √(1 − 0.999³)
    assert entries[0x8000] == np.array([eps], np.float32).astype(BF16).view(np.uint16)[0]  # √−0 / c + eps
    assert entries[0xBF80] == 0xFFC0  # √−1: the default NaN, carried
    assert entries[0x7F80] == 0x7F80  # √∞ / c + eps = ∞


def test_the_negative_half_does_not_depend_on_the_step():
    first = T.adam_denominator_table(*_scalars(0.999, 5)[-5:-2]).buffer[1:]
    second = T.adam_denominator_table(*_scalars(0.95, 40)[-5:-2]).buffer[1:]
    assert np.array_equal(first[32768:], second[32768:])
    assert not np.array_equal(first[:32768], second[:32768])
    T._NEGATIVE_HALVES.clear()  # the negative half computed, not copied
    fresh = T.adam_denominator_table(*_scalars(0.9, 7)[-5:-2]).buffer[1:]
    assert np.array_equal(fresh[32768:], first[32768:])


def test_a_table_buffer_is_checked():
    with pytest.raises(ValueError, match="65537"):
        DenominatorTable(np.zeros(65536, np.uint16))


def test_large_bfloat16_steps_take_the_table_and_torchs_bits(monkeypatch):
    torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch")
    import optkernels.torch as okt
    from optkernels.torch import _half_step

    monkeypatch.setattr(_half_step, "DENOMINATOR_TABLE_FROM", 1000)  # per thread: 60000 elements take it
    used = []
    take = T.PartTablesBuffer.take
    monkeypatch.setattr(T.PartTablesBuffer, "take", lambda own, parts=None: used.append(own) or take(own, parts))
    gen = torch.Generator().manual_seed(5)
    for cls, kwargs in (("Adam", dict(amsgrad=True, weight_decay=0.1)), ("AdamW", {})):
        base = [(torch.randn(n, generator=gen) * 0.1).bfloat16() for n in (60000, 1000)]
        base[0].view(torch.int16)[::97] = torch.arange(0, 65536, 97 * 1, dtype=torch.int32)[
            : base[0][::97].numel()
        ].to(torch.int16)  # every 97th element a spread of bit patterns (NaN, inf, subnormals)
        pairs = []
        for lib, extra in ((torch.optim, dict(foreach=False)), (okt, {})):
            ps = [torch.nn.Parameter(b.clone()) for b in base]
            pairs.append((ps, getattr(lib, cls)(ps, lr=0.01, **kwargs, **extra)))
        (tp, topt), (op, oopt) = pairs
        before = len(used)
        for k in range(5):
            for p, q in zip(tp, op):
                g = (torch.randn(p.shape, generator=gen) * (1.0 if k % 2 else 1e-19)).bfloat16()
                p.grad, q.grad = g.clone(), g.clone()
            topt.step()
            oopt.step()
            for p, q in zip(tp, op):
                assert torch.equal(p.view(torch.int16), q.view(torch.int16)), (cls, k)
                for name in topt.state[p]:
                    if name != "step":
                        assert torch.equal(
                            topt.state[p][name].view(torch.int16), oopt.state[q][name].view(torch.int16)
                        ), (cls, k, name)
        assert len(used) - before == 4  # the short path's four steps (the first is the generic step)


def test_refilled_part_tables_hold_the_fresh_tables_entries():
    """Part tables refilled by launches of other constants, a repeated step, another eps (−0.0 against 0.0:
    the entry of −0 differs) and back: each time each part's row holds the entries of a table made anew."""
    tables = T.part_tables()
    rows = min(2, tables.rows)
    n = 4 * 64 + 5
    arrays = _arrays(n, 8)
    tails = T.torch_tail_scalars(n, 1, 32)
    cases = [(0.999, 3, 1e-8), (0.999, 4, 1e-8), (0.999, 4, 1e-8), (*DIVIDES, 1e-8), (0.999, 5, 0.0)]
    cases += [(0.999, 5, -0.0), (0.999, 6, -0.0), (0.95, 2, 1e-3), (0.999, 3, 1e-8)]
    for beta2, step, eps in cases:
        scalars = _scalars(beta2, step, eps=eps)
        out = _step(T._torch_adam, arrays, (*scalars[:-1], tables), tails, rows)
        assert all(np.array_equal(a, b) for a, b in zip(out, _step(T._torch_adam, arrays, scalars, tails)))
        T._DENOMINATOR_TABLES.clear()
        T._NEGATIVE_HALVES.clear()
        fresh = T.adam_denominator_table(*scalars[-5:-2]).buffer[1:]
        for row in range(rows):
            assert np.array_equal(_entries(tables, row), fresh), (beta2, step, eps, row)
    negative_zero = int(np.array([-0.0], BF16).view(np.uint16)[0])
    assert _entries(tables, 0)[negative_zero] == np.array([1e-8], np.float32).astype(BF16).view(np.uint16)[0]
    T._DENOMINATOR_TABLES.clear()
    zero, minus_zero = (T.adam_denominator_table(*_scalars(0.999, 5, eps=e)[-5:-2]) for e in (0.0, -0.0))
    assert zero.buffer[1 + negative_zero] == 0 and minus_zero.buffer[1 + negative_zero] == negative_zero


def test_held_part_tables_are_not_taken_again():
    """While one thread holds an owner's part tables (its launch fills and reads them), another thread's
    take gets None; once released, they are taken again."""
    import threading

    own = T.PartTablesBuffer()
    tables = own.take()
    assert type(tables) is PartTables and tables.rows >= 1
    got = []
    other = threading.Thread(target=lambda: got.append(own.take()))
    other.start()
    other.join(timeout=60)
    assert got == [None]
    own.release()
    assert own.take() is tables
    own.release()


def test_part_tables_are_checked():
    with pytest.raises(ValueError, match="65536"):
        PartTables(2, np.zeros(100, np.uint16))
    with pytest.raises(ValueError, match="rows"):
        PartTables(0, T._bf16_roots()[0])


def test_optimizers_stepping_in_several_threads_give_the_serial_bits(monkeypatch):
    """Several optimizers (their own tables), several threads, at once: each tensor's bits after five steps
    are the bits that the same steps give alone."""
    torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch")
    import threading

    import optkernels.torch as okt
    from optkernels.torch import _half_step

    monkeypatch.setattr(_half_step, "DENOMINATOR_TABLE_FROM", 1000)  # per thread: 30000 elements take it
    betas = [(0.9, 0.999), (0.8, 0.99), (0.9, 0.95), (0.5, 0.9)]

    def run(k, out):
        gen = torch.Generator().manual_seed(k)
        p = torch.nn.Parameter((torch.randn(30000, generator=gen) * 0.1).bfloat16())
        opt = okt.Adam([p], lr=0.01, betas=betas[k], eps=1e-8 if k % 2 else 1e-3)
        for _ in range(6):
            p.grad = torch.randn(p.shape, generator=gen).bfloat16()
            opt.step()
        out[k] = p.detach().view(torch.int16).clone()

    alone: dict = {}
    for k in range(len(betas)):
        run(k, alone)
    together: dict = {}
    threads = [threading.Thread(target=run, args=(k, together)) for k in range(len(betas))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert set(together) == set(alone)
    for k in alone:
        assert torch.equal(alone[k], together[k]), k


def test_tables_built_from_several_threads_at_first_use_are_the_serial_ones(monkeypatch):
    """Several threads' first tables at once (the roots and launcher made on first use, the kept tables
    evicted by others): each gets the entries one thread alone computes."""
    import threading

    cases = [(0.999, step) for step in (2, 3, 5, 8)] + [DIVIDES, (0.99, 7)]
    fresh = {"_BF16_ROOTS": dict, "_DENOMINATOR_TABLES": dict, "_NEGATIVE_HALVES": dict}
    for name, empty in fresh.items():
        monkeypatch.setattr(T, name, empty())
    barrier, got, errors = threading.Barrier(len(cases)), {}, []

    def build(case):
        try:
            scalars = _scalars(*case)
            barrier.wait()
            got[case] = T.adam_denominator_table(*scalars[-5:-2]).buffer[1:].copy()
        except Exception as error:  # reported below, with the case
            errors.append((case, error))

    threads = [threading.Thread(target=build, args=(case,)) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for case in cases:
        for name, empty in fresh.items():
            monkeypatch.setattr(T, name, empty())
        alone = T.adam_denominator_table(*_scalars(*case)[-5:-2]).buffer[1:]
        assert np.array_equal(got[case], alone), case


def test_launches_by_key_give_the_dispatchers_bits():
    """HalfLauncher.by_key: calls whose scalars change types (a multiplying and a dividing quotient, the
    computed and the tabled denominator) each under their own key, first through the dispatcher and then
    through the overload's entry point, serially and not, and run_entry through entry_of's entry point:
    the bits of plain launches."""
    n = 3 * 65536 + 77
    arrays = _arrays(n, 21)
    tails = T.torch_tail_scalars(n, 2, 32)
    cases = []
    for beta2, step in (MULTIPLIES, DIVIDES):
        scalars = _scalars(beta2, step, wd=0.01)
        cases += [scalars, (*scalars[:-1], T.adam_denominator_table(*scalars[-5:-2]))]
    example = tuple(a.view(BF16) for a in arrays) + (*cases[0], *tails)
    launcher = HalfLauncher(T._torch_adam, example)
    for round_ in range(3):
        for k, scalars in enumerate(cases):
            expected = _step(T._torch_adam, arrays, scalars, tails)
            out = [a.copy() for a in arrays]
            key = (type(scalars[-4]), type(scalars[-1]))
            assert launcher.by_key(key, n, *out, *scalars, *tails, serial=bool(round_ % 2))
            for a, b in zip(expected, out):
                assert np.array_equal(a, b), (round_, k)
    assert len(launcher._entries) == 4
    assert all(callable(entry) for entry in launcher._entries.values())  # each resolved to an entry point
    for k, scalars in enumerate(cases):  # run_entry through entry_of's entry point: the same bits
        entry = launcher.entry_of((type(scalars[-4]), type(scalars[-1])))
        assert callable(entry), k
        out = [a.copy() for a in arrays]
        launcher.run_entry(entry, n, (*out, *scalars, *tails))
        for a, b in zip(_step(T._torch_adam, arrays, scalars, tails), out):
            assert np.array_equal(a, b), k
    assert launcher.entry_of("never launched") is None


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.parametrize("held", [False, True], ids=["free", "held-by-another-thread"])
def test_a_forked_child_steps_with_torchs_bits(held, monkeypatch):
    """A child forked after the parent's short path stepped with its part tables (free, or held by another
    of the parent's threads at the fork, a lock the child never sees released): the child's next steps give
    the bits of the same steps in the parent."""
    torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch")
    import os
    import threading

    import optkernels.torch as okt
    from optkernels.torch import _half_step

    monkeypatch.setattr(_half_step, "DENOMINATOR_TABLE_FROM", 1000)
    gen = torch.Generator().manual_seed(11)
    p = torch.nn.Parameter((torch.randn(40000, generator=gen) * 0.1).bfloat16())
    opt = okt.Adam([p], lr=0.01)
    grads = [torch.randn(p.shape, generator=gen).bfloat16() for _ in range(6)]

    def steps(gs):
        for g in gs:
            p.grad = g.clone()
            opt.step()
        return p.detach().view(torch.int16).numpy().tobytes()

    steps(grads[:3])
    own = opt._fast.table
    assert own is not None and own.tables is not None  # the short path stepped with its tables
    taken, go = threading.Event(), threading.Event()
    holder = threading.Thread(target=lambda: (own.take(), taken.set(), go.wait(60), own.release()))
    if held:
        holder.start()
        taken.wait(60)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its bits through the pipe, then out without the parent's exit handlers
        try:
            torch.set_num_threads(1)  # (torch's own OpenMP pool does not survive the fork either)
            os.write(write, steps(grads[3:]))
        finally:
            os._exit(0)
    os.close(write)
    if held:
        go.set()
        holder.join(60)
    child = b""
    while chunk := os.read(read, 1 << 16):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (the same tails as the child's steps)
    try:
        assert child == steps(grads[3:])
    finally:
        torch.set_num_threads(threads)


def test_tables_only_where_they_pay():
    """The short path steps with tables only on processors whose table reads beat the computation: not on
    AMD's Zen cores (LLVM's ``znver*`` names), on Intel's; the threshold follows this host's answer."""
    from optkernels.kernels._denominator_table import tables_pay

    pytest.importorskip("torch", reason="optkernels.torch's short path needs torch")
    from optkernels.torch import _half_step

    assert not tables_pay("znver4") and not tables_pay("znver3")
    assert tables_pay("sapphirerapids") and tables_pay("icelake-server") and tables_pay("skylake-avx512")
    assert (_half_step.DENOMINATOR_TABLE_FROM == 1 << 15) == tables_pay()


def test_part_tables_hold_a_row_per_part_of_the_launch(monkeypatch):
    """The short path's tables have a row for each part of its launch (the thread count it runs with), not
    one per thread Numba could start; more threads later replace them by larger ones; torch's bits either
    way."""
    torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch")
    import numba

    import optkernels.torch as okt
    from optkernels.torch import _half_step

    monkeypatch.setattr(_half_step, "DENOMINATOR_TABLE_FROM", 1000)
    gen = torch.Generator().manual_seed(3)
    start = (torch.randn(30000, generator=gen) * 0.1).bfloat16()
    grads = [torch.randn(30000, generator=gen).bfloat16() for _ in range(6)]
    ours, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    mine, ref = okt.Adam([ours], lr=0.01), torch.optim.Adam([theirs], lr=0.01, foreach=False)
    threads = numba.get_num_threads()
    rows = []
    try:
        for k, grad in enumerate(grads):
            numba.set_num_threads(1 if k < 3 else min(2, numba.config.NUMBA_NUM_THREADS))
            ours.grad, theirs.grad = grad.clone(), grad.clone()
            mine.step()
            ref.step()
            path = mine._fast
            rows.append(None if path is None or path.table.tables is None else path.table.tables.rows)
    finally:
        numba.set_num_threads(threads)
    assert rows[1] == rows[2] == 1  # the short path's steps (the first is the generic step)
    assert rows[-1] == min(2, numba.config.NUMBA_NUM_THREADS)
    assert torch.equal(ours.detach().view(torch.int16), theirs.detach().view(torch.int16))
