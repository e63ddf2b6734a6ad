"""ShardedTable with RowWiseAdagrad: one float32 ``sum`` per row, sharded with the rows; a step equals the
single-process RowWiseAdagrad over the whole table fed reduce_gradients' concatenation, bit for bit, in
every weight-decay mode; the state gathered, and resharded from every rank's checkpoint."""
import functools

import numpy as np
import pytest

from optkernels.distributed import ShardedTable, reduce_gradients
from optkernels.optimizers import RowWiseAdagrad
from optkernels.sparse import RowSparse

ROWS, DIM = 103, 4      # uneven shards on 2 and 3 ranks
KEY = "sum.embedding.table"


def init(rows):
    return np.stack([np.random.default_rng(int(r)).standard_normal(DIM) for r in rows]).astype(np.float32) \
        if len(rows) else np.zeros((0, DIM), np.float32)


def zipf_gradient(rank, step, n=40):
    rng = np.random.default_rng(1000 * step + rank)
    ids = np.minimum(rng.zipf(1.3, n) - 1, ROWS - 1)
    return RowSparse(ids, rng.standard_normal((n, DIM)).astype(np.float32), (ROWS, DIM))


@pytest.mark.parametrize("mode,wd,max_norm", [("none", 0.0, 0.0), ("l2", 0.01, 0.0), ("decoupled", 0.01, 2.0)])
def test_steps_equal_the_single_process_optimizer(comm, mode, wd, max_norm):
    build = functools.partial(RowWiseAdagrad, lr=0.1, weight_decay=wd, weight_decay_mode=mode, max_norm=max_norm)
    table = ShardedTable(ROWS, DIM, comm, build, init=init)
    whole = init(np.arange(ROWS))
    single = build([whole])
    for step in range(3):
        g = zipf_gradient(comm.Get_rank(), step)
        table.step(g)
        single.step([reduce_gradients([g], comm)[0]])
    assert table.gather(root=None).tobytes() == whole.tobytes()
    state = table.consolidated_state_dict(root=None)
    assert state[KEY].dtype == np.float32 and state[KEY].shape == (ROWS,)
    assert state[KEY].tobytes() == single.state[0]["sum"].tobytes()
    assert table.state_dict()[KEY].shape == (len(range(comm.Get_rank(), ROWS, comm.Get_size())),)


def test_reshard_from_every_ranks_checkpoint_continues_identically(comm):
    build = functools.partial(RowWiseAdagrad, lr=0.05)
    table = ShardedTable(ROWS, DIM, comm, build, init=init)
    for step in range(2):
        table.step(zipf_gradient(comm.Get_rank(), step))
    shards = comm.allgather(table.state_dict())
    # a run on a communicator of another size (every rank alone) resumes from all the shards
    alone = ShardedTable(ROWS, DIM, comm.Split(comm.Get_rank()), build)
    alone.load_state_dict(shards)
    assert alone.local.tobytes() == table.gather(root=None).tobytes()
    assert alone.state_dict()[KEY].tobytes() == table.consolidated_state_dict(root=None)[KEY].tobytes()
    grads = [zipf_gradient(r, 5) for r in range(comm.Get_size())]
    table.step(grads[comm.Get_rank()])
    merged = RowSparse(np.concatenate([g.indices for g in grads]),
                       np.concatenate([g.values for g in grads]) / np.float32(comm.Get_size()), (ROWS, DIM))
    alone.step(merged)
    assert alone.local.tobytes() == table.gather(root=None).tobytes()


def test_a_bad_sum_on_one_rank_fails_on_every_rank_unwritten(comm):
    table = ShardedTable(ROWS, DIM, comm, RowWiseAdagrad, init=init)
    table.step(zipf_gradient(comm.Get_rank(), 0))
    before = table.state_dict()[KEY].copy()
    rows = ROWS - 1 if comm.Get_rank() == 0 else ROWS
    with pytest.raises(ValueError, match="rank 0" if comm.Get_size() > 1 else KEY):
        table.load_state_dict({KEY: np.zeros(rows, np.float32), "global_step": np.array(1)})
    assert table.state_dict()[KEY].tobytes() == before.tobytes()
