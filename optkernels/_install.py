"""The install command an error message suggests for an optional extra, in both of its forms: from PyPI and
from a clone of the repository (where ``pip install 'optkernels[extra]'`` would look for the name on PyPI)."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` (``'cuda'``, ``'mpi'``, ``'torch'``, ``'demo'``, ``'bench'``):
    ``python -m pip install 'optkernels[<extra>]'``, or from a clone ``python -m pip install -e '.[<extra>]'``.

    Parameters
    ----------
    extra : str
        The name of the optional dependency group in pyproject.toml.

    Returns
    -------
    str
        Both forms of the command, for an error message.
    """
    return (
        f"python -m pip install 'optkernels[{extra}]' "
        f"(from a clone of the repository: python -m pip install -e '.[{extra}]')"
    )
