"""One rank of the ``distributed`` benchmark group, run as
``mpiexec -n R python bench/distributed_worker.py``; rank 0 prints one JSON line of measurements (see
bench/distributed.py, which launches it)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optkernels.distributed as dist
from optkernels.optimizers import Adam, LazyAdam, Parameter
from optkernels.sparse import RowSparse


def slot_bytes(opt):
    """The bytes of the optimizer's slots on this rank (without copying them, as state_dict would)."""
    return sum(a.nbytes for plan in opt._local_plans for a in plan.slots.values())


def timed(comm, fn, repeats):
    """Median seconds of ``fn`` over ``repeats`` calls, each started together (a barrier) and timed to the
    slowest rank."""
    fn()
    samples = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        samples.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    return statistics.median(samples)


def adam_case(comm, n, tensors, repeats):
    rng = np.random.default_rng(0)
    sizes = [n // tensors] * tensors
    params = [Parameter(rng.standard_normal(s, dtype=np.float32), f"layer{k}.weight")
              for k, s in enumerate(sizes)]
    opt = Adam(params, learning_rate=1e-3, comm=comm)
    local = [np.random.default_rng(1 + comm.Get_rank()).standard_normal(s, dtype=np.float32) for s in sizes]
    grads = dist.reduce_gradients(local, comm)
    state = slot_bytes(opt)
    owned = sum(p.data.nbytes for p, o in zip(params, opt._parallel.owners) if o == comm.Get_rank())
    return {
        "step_s": timed(comm, lambda: opt(grads), repeats),
        "reduce_s": timed(comm, lambda: dist.reduce_gradients(local, comm), repeats),
        "state_bytes": comm.allreduce(state, op=MPI.MAX),
        "owned_param_bytes": comm.allreduce(owned, op=MPI.MAX),
    }


def table_case(comm, rows, dim, batch, repeats):
    rank, size = comm.Get_rank(), comm.Get_size()
    table = dist.ShardedTable(rows, dim, comm, lambda ps: LazyAdam(ps, 1e-3))
    rng = np.random.default_rng(10 + rank)
    ids = ((rng.zipf(1.15, batch) - 1) % rows).astype(np.int64)
    grad = RowSparse(ids, rng.standard_normal((batch, dim), dtype=np.float32), (rows, dim))
    off_rank = int(np.count_nonzero(ids % size != rank))
    state = slot_bytes(table.optimizer) + table.local.nbytes
    return {
        "step_s": timed(comm, lambda: table.step(grad), repeats),
        "lookup_s": timed(comm, lambda: table.lookup(ids), repeats),
        "state_bytes": comm.allreduce(state, op=MPI.MAX),
        "rows_sent_off_rank": comm.allreduce(off_rank, op=MPI.MAX),
        "distinct_rows": int(np.unique(ids).size),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--adam", type=int, default=10_000_000)
    parser.add_argument("--tensors", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    out = {"ranks": comm.Get_size(),
           "adam": adam_case(comm, args.adam, args.tensors, args.repeats),
           "table": table_case(comm, args.rows, args.dim, args.batch, args.repeats)}
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
