"""Row-sparse gradients and the sparse optimizer ops (MindSpore's ``Fused*`` and ``SparseApply*`` families),
for the CPU and CUDA.

A row-sparse gradient touches a few rows of a (possibly huge) table, often the same row many times in one
batch (embedding tables, click-through models). It is given as ``(grad, indices)``: ``indices`` 1-D int32 or
int64, ``grad.shape == (len(indices),) + var.shape[1:]``, or as a :class:`RowSparse`.

Every op here first merges duplicate indices (:func:`merge_duplicates`): the gradient rows of a repeated
index are summed, in order of appearance and in the arrays' dtype, then ONE update is applied per distinct
row, as MindSpore's fused CPU ops do (TensorFlow's SparseApply ops apply repeats one after another, which
depends on their order). The merge is deterministic: the same bits every run, with any number of threads,
on the CPU and on CUDA. Indices outside ``[0, var.shape[0])`` (negative ones included: there is no
wrap-around) raise IndexError before anything is written, unless ``out_of_range="drop"`` (MindSpore's fused
ops drop them silently).

The kernels follow the conventions of :mod:`optkernels.kernels`: MindSpore's inputs positionally in its
order, its attributes keyword-only with its names and defaults, state updated in place and returned as a
tuple of the real arrays, scalars converted to the state's dtype, NumPy arrays on the CPU (parallel Numba
loops) and CUDA arrays on the GPU. Where the per-element math is the same as a dense op's, the very same
compiled function is used (FTRL, proximal Adagrad, Adagrad); sparse Adam's differs and lives in
:mod:`optkernels.sparse.adam`. ``optkernels.reference`` holds the float64 reference of every op here.
"""

from .adagrad import sparse_apply_adagrad, sparse_apply_adagrad_v2
from .adam import fused_sparse_adam, fused_sparse_lazy_adam
from .ftrl import fused_sparse_ftrl, sparse_apply_ftrl, sparse_apply_ftrl_v2
from .merge import merge_duplicates
from .proximal_adagrad import fused_sparse_proximal_adagrad, sparse_apply_proximal_adagrad
from .row_sparse import RowSparse
from .rowwise_adagrad import rowwise_adagrad

__all__ = [
    "RowSparse",
    "fused_sparse_adam",
    "fused_sparse_ftrl",
    "fused_sparse_lazy_adam",
    "fused_sparse_proximal_adagrad",
    "merge_duplicates",
    "sparse_apply_adagrad",
    "sparse_apply_adagrad_v2",
    "sparse_apply_ftrl",
    "sparse_apply_ftrl_v2",
    "sparse_apply_proximal_adagrad",
    "rowwise_adagrad",
]
