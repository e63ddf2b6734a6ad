"""``python -m optkernels demo``: optkernels' optimizers training small models on data generated here.

Two problems, each trained from the same initial weights with the same batches by every chosen optimizer:

* :class:`~optkernels.demo.tasks.SpiralsTask`: two interleaved spirals classified by a NumPy MLP
  (:mod:`~optkernels.demo.mlp`, dense gradients) with SGD, Momentum, Adam, AdamWeightDecay, AdaMax, RMSProp,
  Lamb, LARS (around Momentum) and AdaFactor;
* :class:`~optkernels.demo.tasks.ClickTask`: generated click logs, hashed into an embedding table
  (:mod:`~optkernels.demo.click`: row-sparse gradients as :class:`~optkernels.sparse.RowSparse`, dense ones
  for the head) with Adam (non-lazy sparse), LazyAdam, FTRL and ProximalAdagrad.

Modules: :mod:`~optkernels.demo.data` (the generated data), :mod:`~optkernels.demo.metrics` (losses,
accuracy, AUC), :mod:`~optkernels.demo.mlp`, :mod:`~optkernels.demo.click`, :mod:`~optkernels.demo.recipes`
(the optimizers and their settings), :mod:`~optkernels.demo.tasks`, :mod:`~optkernels.demo.training` (the
timed loop), :mod:`~optkernels.demo.progress` (the bar on stderr), :mod:`~optkernels.demo.report` (tables and
plot), :mod:`~optkernels.demo.runner` (the command line).

From Python::

    from optkernels.demo import run
    results = run(steps=500, optimizers=["Adam", "FTRL"])   # prints the tables; returns the results
"""

from .runner import main, run

__all__ = ["main", "run"]
