"""The hook through which an optimizer built with ``comm=`` becomes a parallel optimizer.

The layering rule keeps this package below :mod:`optkernels.distributed` (which needs mpi4py): nothing here
imports it. Instead ``optkernels.distributed`` installs, when it is imported, a factory (:func:`install`);
``Optimizer(..., comm=c)`` calls :func:`attach`, which asks that factory for the object that decides which
parameters this rank owns (it sets ``plan.owned`` on the optimizer's plans), broadcasts the updated
parameters after each step, agrees on overflow flags and gathers the state. Without ``comm`` none of this
runs, and an optimizer never looks at it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._install import install_hint

__all__ = ["attach", "install", "installed"]

_factory: Callable[[Any, Any], Any] | None = None


def install(factory: Callable[[Any, Any], Any]) -> None:
    """Install ``factory(optimizer, comm) -> hook`` (done by ``optkernels.distributed`` on import)."""
    global _factory
    _factory = factory


def installed() -> bool:
    """Whether a parallel-optimizer factory is installed."""
    return _factory is not None


def attach(optimizer: Any, comm: Any) -> Any:
    """The parallel hook of ``optimizer`` for the communicator ``comm`` (a collective call: every rank of
    ``comm`` constructs the same optimizer).

    Raises:
        RuntimeError: ``optkernels.distributed`` was not imported (it installs the factory).
    """
    if _factory is None:
        raise RuntimeError(
            f"For '{type(optimizer).__name__}', 'comm' needs the parallel optimizer of "
            "optkernels.distributed: run `import optkernels.distributed` first "
            f"({install_hint('mpi')})"
        )
    return _factory(optimizer, comm)
