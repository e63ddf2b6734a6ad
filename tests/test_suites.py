"""The suites that need a process of their own, launched from the plain ``python -m pytest``: the CUDA tests
under Numba's CUDA simulator, and the MPI tests under ``mpiexec -n 2`` and ``-n 3`` (uneven shards). Each
passes when its run exits 0 with tests passed; its report is shown on failure.
``python -m pytest -m "not subsuite"`` leaves them out."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.subsuite


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   **env)
    environ.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=1500)


def _assert_passed(done: subprocess.CompletedProcess) -> None:
    report = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, report
    assert re.search(r"\b\d+ passed\b", done.stdout), report
    assert not re.search(r"\b\d+ (failed|errors?)\b", done.stdout), report


def test_cuda_suite_under_the_simulator():
    if importlib.util.find_spec("numba.cuda") is None:
        pytest.skip("numba-cuda is not installed (pip install 'optkernels[cuda]')")
    _assert_passed(_run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cuda"],
                        NUMBA_ENABLE_CUDASIM="1"))


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_suite(ranks):
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install 'optkernels[mpi]')")
    # The mpich wheel puts mpiexec beside the interpreter: found there when the venv is not activated.
    mpiexec = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    if mpiexec is None:
        pytest.skip("no mpiexec on PATH (pip install 'optkernels[mpi]' installs MPICH's)")
    # OpenMPI refuses to run as root without these; MPICH ignores them.
    _assert_passed(_run([mpiexec, "-n", str(ranks), sys.executable, "-m", "pytest", "-q", "-p",
                         "no:cacheprovider", "tests/mpi"],
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
