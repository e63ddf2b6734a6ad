"""``optkernels.distributed``: data-parallel training over MPI (mpi4py), on top of the optimizers.

* :func:`reduce_gradients`: MindSpore's DistributedGradReducer, fused and deterministic (the same bits on
  every rank, whatever the arrival order); :func:`all_finite`: a global overflow flag.
* the parallel optimizer (ZeRO-1): every optimizer class takes ``comm=``; importing this package installs
  it (:mod:`.parallel`); ``opt.consolidated_state_dict(root)`` gathers a whole state.
* :class:`ShardedTable`: an embedding table split by rows across ranks, with its optimizer's slots.

mpi4py is imported on first use (``pip install 'optkernels[mpi]'``), not by ``import optkernels`` nor by
this package's import.

Failures and disagreements: every collective call first compares, across ranks, whether each rank's
checks passed, which call it is in, its step counters and its configuration (:mod:`._agree`); an error on
one rank is raised on every rank, naming it. An uncaught exception aborts every rank (opt out:
``OPTKERNELS_MPI_ABORT=0`` or :func:`abort_on_uncaught`); non-finite gradients: :func:`set_nonfinite`.
"""

from ._agree import abort_on_uncaught
from .parallel import ParallelOptimizer, assign_owners, set_nonfinite
from .reduce import all_finite, reduce_gradients
from .table import ShardedTable

__all__ = [
    "ParallelOptimizer",
    "ShardedTable",
    "all_finite",
    "assign_owners",
    "reduce_gradients",
    "abort_on_uncaught",
    "set_nonfinite",
]
