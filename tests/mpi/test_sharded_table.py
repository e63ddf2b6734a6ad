"""ShardedTable: a step equals the single-process optimizer over the whole table fed reduce_gradients'
concatenation, bit for bit, for LazyAdam, Adam, FTRL, ProximalAdagrad and Adagrad; lookups; the whole
state gathered and loaded back; invalid input raises on every rank."""
import functools

import numpy as np
import pytest

from optkernels.distributed import ShardedTable, reduce_gradients
from optkernels.optimizers import FTRL, Adagrad, Adam, LazyAdam, Parameter, ProximalAdagrad
from optkernels.sparse import RowSparse

ROWS, DIM = 103, 4      # 103 rows: uneven shards on 2 and 3 ranks

OPTIMIZERS = {
    "LazyAdam": functools.partial(LazyAdam, learning_rate=0.01, weight_decay=1e-3),
    "Adam": functools.partial(Adam, learning_rate=0.01),
    "FTRL": functools.partial(FTRL, learning_rate=0.05, l1=0.001, l2=0.01),
    "ProximalAdagrad": functools.partial(ProximalAdagrad, learning_rate=0.05, l1=0.001, l2=0.01),
    "Adagrad": functools.partial(Adagrad, learning_rate=0.05),
}


def init(rows):
    """Row-seeded initial values: the same table whatever the number of ranks."""
    return np.stack([np.random.default_rng(int(r)).standard_normal(DIM) for r in rows]).astype(np.float32) \
        if len(rows) else np.zeros((0, DIM), np.float32)


def zipf_gradient(rank, step, n=40):
    rng = np.random.default_rng(1000 * step + rank)
    ids = np.minimum(rng.zipf(1.3, n) - 1, ROWS - 1)          # many repeats of the small ids
    return RowSparse(ids, rng.standard_normal((n, DIM)).astype(np.float32), (ROWS, DIM))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_steps_equal_the_single_process_optimizer(comm, name):
    build = OPTIMIZERS[name]
    table = ShardedTable(ROWS, DIM, comm, build, init=init)
    whole = Parameter(init(np.arange(ROWS)), "embedding.table")
    single = build([whole])
    for step in range(3):
        g = zipf_gradient(comm.Get_rank(), step)
        table.step(g)
        single.step([reduce_gradients([g], comm)[0]])
    np.testing.assert_array_equal(table.local, whole.data[comm.Get_rank()::comm.Get_size()])
    assert table.gather(root=None).tobytes() == whole.data.tobytes()
    state = table.consolidated_state_dict(root=None)
    full = single.state_dict()
    assert sorted(state) == sorted(full)
    for key in full:
        assert state[key].tobytes() == full[key].tobytes(), key
    # the slots on this rank hold only its rows
    for key, value in table.state_dict().items():
        if value.ndim == 2:
            assert value.shape == (len(range(comm.Get_rank(), ROWS, comm.Get_size())), DIM), key


def test_lookup_gathers_rows_in_the_asked_order(comm):
    table = ShardedTable(ROWS, DIM, comm, OPTIMIZERS["LazyAdam"], init=init)
    rng = np.random.default_rng(comm.Get_rank())
    ids = rng.integers(0, ROWS, 17 + comm.Get_rank())          # different ids and counts on each rank
    np.testing.assert_array_equal(table.lookup(ids), init(ids))
    assert table.lookup(np.zeros(0, np.int64)).shape == (0, DIM)


def test_resume_from_a_whole_state(comm):
    build = OPTIMIZERS["LazyAdam"]
    whole = Parameter(init(np.arange(ROWS)), "embedding.table")
    single = build([whole])
    grads = [[zipf_gradient(r, s) for r in range(comm.Get_size())] for s in range(4)]

    def concatenated(gs):
        return reduce_gradients([gs[comm.Get_rank()]], comm)[0]

    for s in range(2):
        single.step([concatenated(grads[s])])
    table = ShardedTable(ROWS, DIM, comm, build)
    table.load(whole.data)
    table.load_state_dict(single.state_dict())
    for s in range(2, 4):
        single.step([concatenated(grads[s])])
        table.step(grads[s][comm.Get_rank()])
    assert table.gather(root=None).tobytes() == whole.data.tobytes()
    gathered = table.gather(root=0)
    assert (gathered is None) == (comm.Get_rank() != 0)


def test_invalid_input_raises_on_every_rank(comm):
    table = ShardedTable(ROWS, DIM, comm, OPTIMIZERS["LazyAdam"], init=init)
    before = table.local.copy()
    bad = comm.Get_rank() == comm.Get_size() - 1
    ids = np.array([1, ROWS if bad else 2])
    g = RowSparse(np.array([0, 1]), np.ones((2, DIM), np.float32), (ROWS, DIM))
    if bad:
        g = RowSparse(np.array([0, ROWS + 5]) % (ROWS + 10), np.ones((2, DIM), np.float32), (ROWS + 10, DIM))
    with pytest.raises((IndexError, ValueError)):
        table.lookup(ids)
    with pytest.raises(ValueError):
        table.step(g)
    np.testing.assert_array_equal(table.local, before)
    with pytest.raises(TypeError, match="row-sparse"):
        ShardedTable(ROWS, DIM, comm, functools.partial(Adam, use_amsgrad=True))


# ------------------------------------------------------------------------------ agreement and checkpoints

@pytest.mark.parametrize("field, build", [
    ("optimizer", lambda r: functools.partial(LazyAdam, learning_rate=0.01 * (1 + r))),
    ("optimizer", lambda r: (lambda lr: lambda ps: LazyAdam(ps, learning_rate=lr))(0.01 * (1 + r))),
    ("optimizer", lambda r: LazyAdam if r == 0 else Adam),
])
def test_tables_whose_optimizers_differ_raise_on_every_rank(comm, field, build):
    """Not the class name: a partial's keywords, a lambda's captured values, the class itself."""
    odd = int(comm.Get_rank() == comm.Get_size() - 1)
    with pytest.raises(ValueError, match=f"tables .* differ across ranks: .*{field} \\(rank 0: "):
        ShardedTable(ROWS, DIM, comm, build(odd), init=init)


def test_tables_whose_geometry_differs_raise_on_every_rank(comm):
    odd = int(comm.Get_rank() == comm.Get_size() - 1)
    with pytest.raises(ValueError, match=r"differ across ranks: dim \(rank 0: 4, .*5\)"):
        ShardedTable(ROWS, DIM + odd, comm, OPTIMIZERS["LazyAdam"])


def unique_gradient(step):
    """A gradient over the whole table without repeated rows (so that its split over any number of ranks
    sums to the same bits)."""
    rng = np.random.default_rng(500 + step)
    ids = rng.permutation(ROWS)[:30]
    return RowSparse(ids, rng.standard_normal((30, DIM)).astype(np.float32), (ROWS, DIM))


def part(g, rank, size):
    return RowSparse(g.indices[rank::size], g.values[rank::size], g.dense_shape)


def test_checkpoints_reshard_bit_identically(comm, tmp_path):
    """2 ranks (2 steps) -> every rank of COMM_WORLD (2 more) -> 1 rank (1 more): each step from per-rank
    checkpoints, saved with np.savez; the table and its state equal one process's run, bit for bit."""
    build = functools.partial(LazyAdam, learning_rate=0.01, weight_decay=1e-3)
    whole = Parameter(init(np.arange(ROWS)), "embedding.table")
    single = build([whole])
    for s in range(5):
        single.step([unique_gradient(s)])

    def run(sub, steps, shards):
        table = ShardedTable(ROWS, DIM, sub, build, init=init, average=False)
        if shards is not None:
            table.load_state_dict(shards)
        for s in steps:
            table.step(part(unique_gradient(s), sub.Get_rank(), sub.Get_size()))
        path = tmp_path / f"shard-{comm.Get_rank()}.npz"
        np.savez(path, **table.state_dict())
        return table, dict(np.load(path))

    pair = comm.Split(0 if comm.Get_rank() < 2 else 1)
    mine = run(pair, [0, 1], None)[1] if comm.Get_rank() < 2 else None
    pair.Free()
    shards = [s for s in comm.allgather(mine) if s is not None]
    shards = comm.allgather(run(comm, [2, 3], shards)[1])
    table, _ = run(MPI_SELF(), [4], shards)
    assert table.local.tobytes() == whole.data.tobytes()
    state, full = table.consolidated_state_dict(), single.state_dict()
    assert all(state[k].tobytes() == full[k].tobytes() for k in full)


def MPI_SELF():
    from mpi4py import MPI

    return MPI.COMM_SELF


def test_a_shard_loaded_by_the_wrong_rank_raises(comm):
    table = ShardedTable(ROWS, DIM, comm, OPTIMIZERS["LazyAdam"], init=init)
    table.step(zipf_gradient(comm.Get_rank(), 0))
    shards = comm.allgather(table.state_dict())
    before = table.local.copy(), table.optimizer.state_dict()
    swapped = shards[(comm.Get_rank() + 1) % comm.Get_size()]
    with pytest.raises(ValueError, match="holds the shard of rank .* load every rank's checkpoint as a list"):
        table.load_state_dict(swapped)
    other = ShardedTable(ROWS, DIM, comm, functools.partial(LazyAdam, learning_rate=0.5), init=init)
    with pytest.raises(ValueError, match="fingerprint differs"):
        other.load_state_dict(shards)
    assert table.local.tobytes() == before[0].tobytes()
    assert all(v.tobytes() == before[1][k].tobytes() for k, v in table.optimizer.state_dict().items())
    table.load_state_dict(shards[comm.Get_rank()])            # its own shard loads
    other.load_state_dict(shards, strict=False)                # another lr on purpose
    assert other.local.tobytes() == table.local.tobytes()


def test_nonfinite_table_gradient_names_its_rank(comm):
    size = comm.Get_size()
    table = ShardedTable(ROWS, DIM, comm, OPTIMIZERS["LazyAdam"], init=init, nonfinite="skip")
    g = zipf_gradient(comm.Get_rank(), 0)
    if comm.Get_rank() == size - 1:
        g.values[0, 1] = np.nan
    before = table.local.copy()
    with pytest.warns(RuntimeWarning, match=rf"produced by rank\(s\) \[{size - 1}\].*skipped"):
        assert table.step(g) is False
    assert table.local.tobytes() == before.tobytes()
    table.nonfinite = "raise"
    with pytest.raises(FloatingPointError, match=rf"rank\(s\) \[{size - 1}\]"):
        table.step(g)
