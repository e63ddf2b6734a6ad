"""Numba's on-disk cache of a kernel module is invalidated by an edit to any compiled source (``kernels/``,
``sparse/``), not only to the file that defines the function (``kernels/_cache_locator.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import optkernels

_RUN = """
import numpy as np
from optkernels.kernels import _pointers
words = np.array([7, 9], np.int64)
out = np.zeros(1, np.int64)
_pointers._read_words(np.array([words.ctypes.data], np.int64), 8, out)
assert out[0] == 9, out
print(sum(_pointers._read_words.stats.cache_hits.values()))
"""


def _cache_hits(root: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_an_edit_to_another_kernel_file_recompiles(tmp_path):
    package = Path(optkernels.__file__).parent
    shutil.copytree(package, tmp_path / "optkernels", ignore=shutil.ignore_patterns("__pycache__"))
    assert _cache_hits(tmp_path) == 0  # compiled and saved
    assert _cache_hits(tmp_path) == 1  # loaded
    with open(tmp_path / "optkernels" / "kernels" / "lion.py", "a") as source:
        source.write("\n# an edit in another kernel file\n")
    assert _cache_hits(tmp_path) == 0  # _pointers.py is unchanged, but its cache is stale
    assert _cache_hits(tmp_path) == 1
    with open(tmp_path / "optkernels" / "optimizers" / "sgd.py", "a") as source:
        source.write("\n# an edit outside the compiled sources\n")
    assert _cache_hits(tmp_path) == 1
