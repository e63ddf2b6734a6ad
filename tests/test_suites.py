"""The suites that need a process of their own, launched from the plain ``python -m pytest``: the CUDA tests
under Numba's CUDA simulator, and the MPI tests under ``mpiexec -n 2`` and ``-n 3`` (uneven shards). Each
passes when its run exits 0 with tests passed; its report is shown on failure.
``python -m pytest -m "not subsuite"`` leaves them out. The CUDA suite starts as soon as collection ends
(``conftest.pytest_collection_finish``) and runs beside the CPU tests, which leave a core idle most of the
time (they mostly compile); its test waits for it."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


_CUDA_COMMAND = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cuda"]
_started: dict[str, tuple] = {}


def start_cuda_suite() -> None:
    """Start the CUDA suite under the simulator in the background (once), its output to a temporary file."""
    if "cuda" in _started or importlib.util.find_spec("numba.cuda") is None:
        return
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   NUMBA_ENABLE_CUDASIM="1")
    environ.pop("PYTEST_ADDOPTS", None)
    out = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(_CUDA_COMMAND, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT,
                               text=True)
    _started["cuda"] = (process, out)


def stop_cuda_suite() -> None:
    """Kill the background CUDA suite if the session ends before its test collected it."""
    process, out = _started.pop("cuda", (None, None))
    if process is not None:
        process.kill()
        process.wait()
        out.close()


def test_cuda_suite_under_the_simulator():
    if importlib.util.find_spec("numba.cuda") is None:
        pytest.skip("numba-cuda is not installed (pip install 'optkernels[cuda]')")
    start_cuda_suite()  # already running unless this test was run on its own
    process, out = _started.pop("cuda")
    try:
        returncode = process.wait(timeout=1500)
    except subprocess.TimeoutExpired:
        process.kill()
        returncode = process.wait()
    out.seek(0)
    _assert_passed(subprocess.CompletedProcess(_CUDA_COMMAND, returncode, out.read(), ""))
    out.close()


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
