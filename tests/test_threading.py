"""Kernels called from several Python threads at once and from worker processes (issue #13), under each
Numba threading layer this machine can load. Each layer runs in a fresh process (tests/threading_scenarios.py;
the layer is chosen at the first parallel launch) with a time limit, so a hang fails instead of blocking.

Rules checked (README, "Threads and processes"): with no layer chosen the package picks a fork-safe one (TBB
when it loads); concurrent calls never crash and give the serial bits under every layer (``workqueue``
launches are serialised); after the parent ran kernels, pool workers started by fork, forkserver and spawn
compute the same bits (under GNU OpenMP a forked worker runs single-threaded twins of the loops).
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "threading_scenarios.py"
LIMIT = 240  # seconds for one layer's process (a hang must fail the test, not block CI)


def run_scenarios(layer: str | None, *scenarios: str, prefer_openmp: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    if layer is not None:
        env["NUMBA_THREADING_LAYER"] = layer
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        flags = ["--prefer-openmp"] if prefer_openmp else []
        done = subprocess.run([sys.executable, str(SCRIPT), *flags, *scenarios], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"layer {layer}: no answer within {LIMIT} s (a hang); output so far: {error.stdout!r}")
    assert done.returncode == 0, f"layer {layer}: exit code {done.returncode}\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.splitlines()
    if lines and lines[0].startswith("layer unavailable"):
        pytest.skip(f"the {layer!r} threading layer cannot be loaded on this machine: {lines[0]}")
    # the scenario's answers, one "key value" line each; a runtime's own warnings (TBB may print "Unable to
    # join threads to shut down before fork()" on a busy machine) are not answers
    keys = {"layer", *scenarios}
    out = dict(line.split(" ", 1) for line in lines if line.split(" ", 1)[0] in keys and " " in line)
    assert set(out) == keys, done.stdout + done.stderr
    return out


def _gnu_openmp() -> bool:
    try:
        from numba.np.ufunc import omppool
    except ImportError:
        return False
    return omppool.openmp_vendor == "GNU"


def _tbb_loads() -> bool:
    try:
        from numba.np.ufunc.parallel import _check_tbb_version_compatible

        _check_tbb_version_compatible()
        from numba.np.ufunc import tbbpool  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("layer", ["workqueue", "tbb"])
def test_threads_and_fork_under_a_fork_safe_layer(layer):
    out = run_scenarios(layer, "threads", "pool:fork")
    assert out["layer"] == layer
    assert out["threads"] == "ok"
    assert out["pool:fork"] == "ok"


def test_openmp_threads_and_pools():
    """OpenMP: threads are safe; workers forked after the parent ran kernels compute the same bits (under
    GNU OpenMP, whose pool does not survive fork, with single-threaded twins of the loops, where Numba's
    pool would terminate them and leave the pool waiting forever); forkserver and spawn workers too."""
    out = run_scenarios("omp", "threads", "pool:fork", "pool:forkserver", "pool:spawn")
    assert out["layer"] == "omp"
    assert out == {"layer": "omp", "threads": "ok", "pool:fork": "ok", "pool:forkserver": "ok",
                   "pool:spawn": "ok"}


def test_prefer_openmp_when_nothing_is_chosen():
    """``prefer_openmp`` (what ``import optkernels.torch`` asks): OpenMP when it loads, and forked workers
    still work."""
    out = run_scenarios(None, "threads", "pool:fork", prefer_openmp=True)
    assert out["layer"] in ("omp", "tbb", "workqueue")
    if _gnu_openmp():
        assert out["layer"] == "omp"
    assert out["threads"] == "ok"
    assert out["pool:fork"] == "ok"


def test_a_chosen_layer_outranks_prefer_openmp():
    out = run_scenarios("workqueue", "pool:fork", prefer_openmp=True)
    assert out == {"layer": "workqueue", "pool:fork": "ok"}


def _tbb_installed_beside_python() -> bool:
    """Whether the running environment holds the TBB runtime that Numba's TBB layer needs, found here
    without optkernels' loader: by the dynamic loader, in ``sys.prefix``'s library folder (where the
    ``tbb`` wheel puts it), or among the files the installed ``tbb`` distribution records."""
    import ctypes
    from importlib import metadata

    name = {"win32": "tbb12.dll", "darwin": "libtbb.12.dylib"}.get(sys.platform, "libtbb.so.12")
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        pass
    if (Path(sys.prefix) / "lib" / name).is_file():
        return True
    try:
        return any(f.name == name and Path(f.locate()).is_file() for f in metadata.files("tbb") or [])
    except metadata.PackageNotFoundError:
        return False


def test_no_layer_chosen_gives_a_fork_safe_one():
    """Nothing set by the user: TBB where it loads, else (Linux) workqueue, never GNU OpenMP; threads and
    forked workers work."""
    out = run_scenarios(None, "threads", "pool:fork")
    if _tbb_loads():
        assert out["layer"] == "tbb"
    else:
        assert out["layer"] in ("workqueue", "omp") and not (out["layer"] == "omp" and _gnu_openmp())
    assert out["threads"] == "ok"
    assert out["pool:fork"] == "ok"


def test_a_plain_install_does_not_fall_to_workqueue():
    """A venv made as README says (``pip install -e .``) has the ``tbb`` wheel's runtime in ``<venv>/lib``,
    where the dynamic loader does not look: the package must load it, so that with nothing chosen its
    launches run on TBB (thread-safe, fork-safe, parallel) instead of ``workqueue`` behind one lock; 4
    threads at once and a forked child still give the serial bits. (Where no TBB runtime is installed,
    GNU OpenMP is the only other parallel layer: then the package's choice is ``workqueue`` by design.)"""
    if not _tbb_installed_beside_python():
        pytest.skip("no TBB runtime in this environment (the tbb wheel exists for Linux x86-64 and Windows x64)")
    out = run_scenarios(None, "threads", "fork")
    assert out == {"layer": "tbb", "threads": "ok", "fork": "ok"}


def test_the_layer_start_keeps_torchs_thread_count():
    """``import optkernels.torch`` asks for Numba's OpenMP layer, which then binds to torch's libgomp (one
    runtime, one pool); Numba's start sets that pool's thread count to its own: the count the user gave
    torch before the first launch must survive it (else torch runs on every logical CPU afterwards)."""
    pytest.importorskip("torch", reason="optkernels.torch needs PyTorch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    code = ("import torch; torch.set_num_threads(1); import optkernels.torch; "
            "from optkernels.kernels import _threading; print(_threading.layer(), torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=LIMIT)
    assert done.returncode == 0, done.stderr
    layer, count = done.stdout.split()
    assert count == "1", f"torch's thread count after the {layer} layer started: {count}"


def _plus_one(x):
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = x[i] + 1.0
    return out


def test_a_single_threaded_twin_is_made_without_warnings(monkeypatch):
    """In a process forked from GNU OpenMP a parallel loop runs as its twin compiled with parallel=False;
    making it from a dispatcher's options (which hold ``nopython``) warned once per process in numba.njit."""
    from optkernels.kernels import _threading

    parallel = numba.njit(parallel=True)(_plus_one)
    monkeypatch.setattr(_threading, "_forked_from_gnu_omp", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twin = _threading.for_this_process(parallel)
        assert twin(np.arange(3.0)).tolist() == [1.0, 2.0, 3.0]
    assert twin is not parallel and twin.targetoptions["parallel"] is False
