"""Numba's on-disk cache for optkernels' compiled code, stamped with all of its compiled sources.

Numba stamps a cached function with a hash of the one file that defines it. optkernels' kernels inline
code from other modules (element functions, ``_lowp``'s conversions, the intrinsics, the chunk loops), so
an edit there would leave stale machine code in the cache of every kernel that inlines it: updating a
clone (``git pull`` under an editable install) could run the old code. The locators registered here add a
hash of every source file under ``kernels/`` and ``sparse/`` to the stamp of the functions defined there:
any edit there recompiles them, once. Functions elsewhere keep Numba's own locators.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from numba.core import caching

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COMPILED = ("kernels", "sparse")


@functools.cache
def sources_digest() -> str:
    """SHA-256 of the names and contents of every ``.py`` file in ``kernels/`` and ``sparse/`` (read once
    per process)."""
    digest = hashlib.sha256()
    for folder in _COMPILED:
        root = os.path.join(_PACKAGE, folder)
        for name in sorted(n for n in os.listdir(root) if n.endswith(".py")):
            with open(os.path.join(root, name), "rb") as source:
                digest.update(f"{folder}/{name}\0".encode())
                digest.update(source.read())
    return digest.hexdigest()


def _is_compiled_source(py_file: str) -> bool:
    folder = os.path.dirname(os.path.abspath(py_file))
    return os.path.dirname(folder) == _PACKAGE and os.path.basename(folder) in _COMPILED


class _SourcesStamp(caching._CacheLocator):
    """Locator mixin: only for files of ``kernels/`` and ``sparse/``; the stamp adds :func:`sources_digest`."""

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if not _is_compiled_source(py_file):
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self) -> Any:
        return (super().get_source_stamp(), sources_digest())


class _UserProvided(_SourcesStamp, caching.UserProvidedCacheLocator):
    """``NUMBA_CACHE_DIR``'s locator, with the sources' stamp."""


class _InTree(_SourcesStamp, caching.InTreeCacheLocator):
    """The ``__pycache__`` locator, with the sources' stamp."""


class _UserWide(_SourcesStamp, caching.UserWideCacheLocator):
    """The user-wide cache folder's locator (a read-only install), with the sources' stamp."""


def install() -> None:
    """Put the locators above first in Numba's list (before the first cached function is defined)."""
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in Numba 0.68
    classes = impl._locator_classes
    if _InTree not in classes:
        classes[0:0] = [_UserProvided, _InTree, _UserWide]


install()
