"""A data-parallel training script over MPI: run it with ``mpiexec -n 2 python examples/distributed_train.py``.

A dense head trained by the parallel Adam (ZeRO-1) and an embedding table sharded over the ranks
(``ShardedTable`` with LazyAdam), on Zipf-distributed ids whose label depends on the id only.
"""
import numpy as np
from mpi4py import MPI
import optkernels.distributed as dist
from optkernels.optimizers import Adam, LazyAdam, Parameter
from optkernels.sparse import RowSparse
