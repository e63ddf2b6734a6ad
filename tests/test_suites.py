"""The suites that need a process of their own, launched from the plain ``python -m pytest``: the CUDA tests
under Numba's CUDA simulator, and the MPI tests under ``mpiexec -n 2`` and ``-n 3`` (uneven shards). Each
passes when its run exits 0 with tests passed; its report is shown on failure.
``python -m pytest -m "not subsuite"`` leaves them out. The CUDA suite starts as soon as collection ends
(``conftest.pytest_collection_finish``) and runs beside the CPU tests, which leave a core idle most of the
time (they mostly compile); its test waits for it. Under pytest-xdist (setup.cfg's ``-n 2``) the first worker
to finish collecting starts it, detached, and the test waits for the exit status it leaves in a folder named
by the run's id, whichever worker runs it; the subsuites' own pytest runs take ``-n 0`` (no workers: one
process per MPI rank)."""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.subsuite


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   **env)
    for name in [name for name in environ if name.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))]:
        del environ[name]
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=1500)


def _assert_passed(done: subprocess.CompletedProcess) -> None:
    report = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, report
    assert re.search(r"\b\d+ passed\b", done.stdout), report
    assert not re.search(r"\b\d+ (failed|errors?)\b", done.stdout), report


_CUDA_COMMAND = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/cuda"]
_started: dict[str, tuple] = {}
_detached: list[subprocess.Popen] = []  # the shared suite's recorder, kept from garbage collection
# Runs a command with its output in a file, then writes its exit status to another (os.replace: whole).
_RECORDER = ("import os, subprocess, sys\n"
             "out, status = sys.argv[1:3]\n"
             "with open(out, 'w') as f:\n"
             "    try:\n"
             "        code = subprocess.call(sys.argv[3:], stdout=f, stderr=subprocess.STDOUT, timeout=1500)\n"
             "    except subprocess.TimeoutExpired:\n"
             "        code = -9\n"
             "with open(status + '.part', 'w') as f:\n"
             "    f.write(str(code))\n"
             "os.replace(status + '.part', status)\n")


def _cuda_environment() -> dict[str, str]:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   NUMBA_ENABLE_CUDASIM="1")
    for name in [name for name in environ if name.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))]:
        del environ[name]
    return environ


def _shared_folder(run: str | None = None) -> Path | None:
    """The folder the workers of one pytest-xdist run (``run``: its id, by default this worker's) share the
    CUDA suite through (None without xdist)."""
    run = run or os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return None if run is None else Path(tempfile.gettempdir()) / f"optkernels-cuda-suite-{run}"


def stop_shared_suite(run: str) -> None:
    """Kill the CUDA suite that a worker of the pytest-xdist run ``run`` started, if no test collected it
    (the run was interrupted or stopped at a failure), and remove its folder; called by the controller."""
    folder = _shared_folder(run)
    if folder is None or not folder.exists():
        return
    pid = folder / "pid"
    if pid.exists() and not (folder / "status").exists():
        try:
            os.killpg(int(pid.read_text()), signal.SIGKILL)  # the recorder and its pytest
        except (ProcessLookupError, PermissionError, ValueError):
            pass
    shutil.rmtree(folder, ignore_errors=True)


def start_cuda_suite() -> None:
    """Start the CUDA suite under the simulator in the background (once a run), its output to a file."""
    if "cuda" in _started or importlib.util.find_spec("numba.cuda") is None:
        return
    folder = _shared_folder()
    if folder is not None:
        try:
            folder.mkdir()  # atomic: one worker of the run starts the suite
        except FileExistsError:
            _started["cuda"] = ("shared", folder)
            return
        command = [sys.executable, "-c", _RECORDER, str(folder / "out"), str(folder / "status"), *_CUDA_COMMAND]
        recorder = subprocess.Popen(command, cwd=ROOT, env=_cuda_environment(), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        (folder / "pid").write_text(str(recorder.pid))  # its process group: see stop_shared_suite
        _detached.append(recorder)
        _started["cuda"] = ("shared", folder)
        return
    out = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(_CUDA_COMMAND, cwd=ROOT, env=_cuda_environment(), stdout=out,
                               stderr=subprocess.STDOUT, text=True)
    _started["cuda"] = (process, out)


def stop_cuda_suite() -> None:
    """Kill the background CUDA suite if the session ends before its test collected it (without xdist; under
    xdist the suite outlives the worker that started it, for the worker whose test waits for it)."""
    process, out = _started.pop("cuda", (None, None))
    if isinstance(process, subprocess.Popen):
        process.kill()
        process.wait()
        out.close()


def _wait_for_shared_suite(folder: Path, timeout: float = 1560.0) -> subprocess.CompletedProcess:
    """The shared suite's output and exit status, once it has left them (it kills its pytest after 1500 s)."""
    status = folder / "status"
    deadline = time.monotonic() + timeout
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    if not status.exists():
        pytest.fail(f"the CUDA suite left no exit status within {timeout:.0f} s")
    output = (folder / "out").read_text()
    returncode = int(status.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    return subprocess.CompletedProcess(_CUDA_COMMAND, returncode, output, "")


def test_cuda_suite_under_the_simulator():
    if importlib.util.find_spec("numba.cuda") is None:
        pytest.skip("numba-cuda is not installed (pip install 'optkernels[cuda]')")
    start_cuda_suite()  # already running unless this test was run on its own
    process, out = _started.pop("cuda")
    if process == "shared":
        _assert_passed(_wait_for_shared_suite(out))
        return
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
    _assert_passed(_run([mpiexec, "-n", str(ranks), sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                         "no:cacheprovider", "tests/mpi"],
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
