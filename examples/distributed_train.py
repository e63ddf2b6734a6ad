"""A data-parallel training script over MPI: ``mpiexec -n 2 python examples/distributed_train.py``.

A dense head trained by the parallel Adam (ZeRO-1) and an embedding table sharded over the ranks
(``ShardedTable`` with LazyAdam), on Zipf-distributed ids whose label depends on the id only.
"""
import numpy as np
from mpi4py import MPI
import optkernels.distributed as dist
from optkernels.optimizers import Adam, LazyAdam, Parameter
from optkernels.sparse import RowSparse

comm, rows, dim = MPI.COMM_WORLD, 10_000, 16
rng = np.random.default_rng(comm.Get_rank())                # each rank draws its own batches
w = Parameter(np.full(dim, 0.1, np.float32), "head.weight")
opt = Adam([w], learning_rate=0.05, comm=comm)              # ZeRO-1: each rank keeps its share of the slots
table = dist.ShardedTable(rows, dim, comm, lambda ps: LazyAdam(ps, 0.05),   # rows r % size == rank here
                          init=lambda r: np.cos(np.outer(r, np.arange(dim))))
for step in range(201):
    ids = np.minimum(rng.zipf(1.2, 256), rows) - 1         # Zipf ids: a few rows are hot
    x = table.lookup(ids)                                   # each row fetched from its owner
    y = (ids % 3 == 0).astype(np.float32)                   # the label depends on the id only
    p = 1 / (1 + np.exp(-(x @ w.data)))
    err = (p - y)[:, None] / len(ids)                       # d(mean log-loss)/d(logit)
    opt(dist.reduce_gradients([(err * x).sum(0)], comm))   # averaged over ranks, the same bits everywhere
    table.step(RowSparse(ids, err * w.data, (rows, dim)))   # rows routed to their owners, then LazyAdam
    loss = comm.allreduce(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))) / comm.Get_size()
    if comm.Get_rank() == 0 and step % 100 == 0:
        print(f"step {step} loss {loss:.4f}")
