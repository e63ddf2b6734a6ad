"""Shared test setup: the tests folder on sys.path (for the op table and example loader), the repository root
too (so plain ``pytest`` works without installing), and hypothesis profiles (CI: derandomized)."""
import os
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

_TESTS = Path(__file__).resolve().parent
for path in (str(_TESTS), str(_TESTS.parent)):
    if path not in sys.path:
        sys.path.insert(0, path)

settings.register_profile("default", deadline=None, max_examples=25)
settings.register_profile("soak", deadline=None, max_examples=400)
settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "default"))

# One threading layer for the whole run, whatever the collection order: settled now, before any test module
# is imported (``import optkernels.torch`` would otherwise ask for OpenMP first, see
# optkernels/kernels/_threading.py); NUMBA_THREADING_LAYER chooses another. tests/test_threading.py runs
# every layer, and optkernels.torch's choice, in processes of their own.
from optkernels.kernels import _threading  # noqa: E402

_LAYER = _threading.layer()


_MPI_LAUNCH_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Under mpiexec each rank is one pytest process: no pytest-xdist workers (setup.cfg's ``-n 2``), whose
    processes would inherit the rank's MPI launch variables."""
    if any(name in os.environ for name in _MPI_LAUNCH_VARS) and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"


def pytest_report_header(config):
    return f"optkernels: Numba threading layer {_LAYER}"


def pytest_collection_finish(session):
    """Start the CUDA-simulator suite in the background when its test is to run (tests/test_suites.py)."""
    if any(item.nodeid.endswith("test_suites.py::test_cuda_suite_under_the_simulator") for item in session.items):
        import test_suites

        test_suites.start_cuda_suite()


def _xdist_controller(config) -> bool:
    """Whether this process is the controller of a pytest-xdist run (it runs no tests: its workers do)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", 0))


def pytest_configure(config):
    """A pytest-xdist run's id chosen here, so that the controller knows the folder through which its
    workers share the CUDA suite (``tests/test_suites.py``)."""
    if _xdist_controller(config) and getattr(config.option, "testrunuid", None) is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config):
    """Stop the background CUDA suite if the run ended before its test waited for it (in this process, or
    under pytest-xdist, started by a worker of this run)."""
    module = sys.modules.get("test_suites")
    if module is not None:
        module.stop_cuda_suite()
    if _xdist_controller(config):
        import test_suites

        test_suites.stop_shared_suite(config.option.testrunuid)
