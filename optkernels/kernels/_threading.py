"""Safe parallel launches from several Python threads and after ``fork`` (whatever Numba layer is in use).

Every parallel CPU launch of the package runs as ``with parallel_launch(): for_this_process(f)(...)``. On
the first one (lazily, not at import), the threading layer is settled:

* If the user chose nothing (neither ``NUMBA_THREADING_LAYER`` nor ``NUMBA_THREADING_LAYER_PRIORITY`` is
  set, and ``numba.config.THREADING_LAYER`` is still ``'default'``) and Numba has not started a layer yet,
  it is set to Numba's ``'forksafe'``: TBB where it can be loaded, otherwise OpenMP except GNU's (on macOS
  and Windows), otherwise ``workqueue``. The ``tbb`` wheel the package depends on installs its runtime in
  the environment's own library folder (``<venv>/lib``), which the dynamic loader does not search: it is
  loaded from there first (:func:`load_packaged_tbb`), so that Numba finds it already in the process. A
  caller may ask for OpenMP first instead (:func:`prefer_openmp`: optkernels.torch does, so that its
  kernels share the cores the way torch's own OpenMP kernels do).
* ``workqueue`` is not thread-safe (two concurrent launches abort the process): the package's launches
  are then serialised with one lock (other Numba code launched at the same time is not covered).
* GNU OpenMP (``omp`` on Linux) is thread-safe but its thread pool does not survive ``fork``: in a process
  forked after the layer started, every launch runs a single-threaded twin of the compiled loop instead
  (:func:`for_this_process`; compiled on first use in that process, the same bits, since no kernel's
  result depends on the thread count), as torch runs one thread in its forked workers.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

_USER_VARIABLES = ("NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY")

_decide_lock = threading.Lock()
_guard = None  # the context every launch enters once decided (None: decide on the next launch)
_forked_from_gnu_omp = False  # launches run single-threaded twins (see for_this_process)
_twins: dict = {}  # id(parallel dispatcher) -> (dispatcher, its single-threaded twin)
_preferred = "forksafe"  # what the first launch asks Numba for when the user chose nothing
_host_threads: Any = None  # (get, set) of the host library's thread count, kept across the start
chosen_by_user = False  # whether the settled layer is the user's choice (see _decide)
tbb_loaded_from: str | None = None  # the file load_packaged_tbb loaded (None: none needed, or none found)

#: Numba's layer priority of :func:`prefer_openmp` (OpenMP, then the others where it cannot load).
OPENMP_FIRST = ["omp", "tbb", "workqueue"]


#: The file name of the TBB runtime Numba's TBB layer links against, per platform.
TBB_LIBRARY = {"win32": "tbb12.dll", "darwin": "libtbb.12.dylib"}.get(sys.platform, "libtbb.so.12")


def _packaged_tbb_candidates() -> list[str]:
    """Where the ``tbb`` wheel may have put :data:`TBB_LIBRARY`: the environment's own library folders,
    then the files the installed ``tbb`` distribution records (a ``--user`` or ``--prefix`` install)."""
    folders = ("Library/bin", "bin") if sys.platform == "win32" else ("lib",)
    found = [
        os.path.join(prefix, folder, TBB_LIBRARY)
        for prefix in dict.fromkeys((sys.prefix, sys.base_prefix))
        for folder in folders
    ]
    found = [path for path in found if os.path.isfile(path)]
    if not found:
        try:
            from importlib import metadata

            files = metadata.files("tbb") or []
        except Exception:
            files = []
        found = [str(f.locate()) for f in files if f.name == TBB_LIBRARY]
    return found


def load_packaged_tbb() -> str | None:
    """Load the TBB runtime installed by the ``tbb`` wheel into this process, if the dynamic loader cannot
    find it by name (it sits in ``<environment>/lib``, not on the loader's path); return the file loaded
    (by this call or an earlier one), or None (loadable by name already, or no such file). Numba's TBB layer then finds the library already loaded
    (the loader matches its name). Harmless when called again or when TBB is not installed."""
    import ctypes

    global tbb_loaded_from
    if tbb_loaded_from is not None:
        return tbb_loaded_from
    try:
        ctypes.CDLL(TBB_LIBRARY)
        return None  # found by name (system TBB, conda, LD_LIBRARY_PATH, or loaded before)
    except OSError:
        pass
    for path in _packaged_tbb_candidates():
        try:
            ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
        except OSError:
            continue
        tbb_loaded_from = path
        return path
    return None


def user_chose_layer() -> bool:
    """Whether the user chose Numba's threading layer (environment or ``numba.config``)."""
    import numba

    return (
        any(v in os.environ for v in _USER_VARIABLES)
        or str(numba.config.THREADING_LAYER).lower() != "default"
    )


def _gnu_omp_started() -> bool:
    """Whether this process has started Numba's threading layer and it is GNU OpenMP."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is None or not parallel._is_initialized or parallel._threading_layer != "omp":
        return False
    omppool = sys.modules.get("numba.np.ufunc.omppool")
    return omppool is not None and getattr(omppool, "openmp_vendor", "") == "GNU"


def _decide():
    """Settle the layer (see the module docstring) and return the guard of every later launch."""
    global _guard, chosen_by_user
    with _decide_lock:
        if _guard is not None:
            return _guard
        if _forked_from_gnu_omp:
            _guard = contextlib.nullcontext()
            return _guard
        import numba
        from numba.np.ufunc import parallel

        if not parallel._is_initialized:
            load_packaged_tbb()  # so that TBB loads wherever it is asked for (by us or by the user)
        chosen_by_user = user_chose_layer()
        if not parallel._is_initialized and not chosen_by_user:
            if _preferred == "omp":
                numba.config.THREADING_LAYER_PRIORITY = list(OPENMP_FIRST)
            else:
                numba.config.THREADING_LAYER = _preferred
        keep = _host_threads if not parallel._is_initialized else None
        before = keep[0]() if keep is not None else None
        parallel._launch_threads()
        if keep is not None and keep[0]() != before:
            keep[1](before)  # Numba's OpenMP start set the shared runtime's count (see prefer_openmp)
        layer = numba.threading_layer()
        _guard = threading.Lock() if layer == "workqueue" else contextlib.nullcontext()
        return _guard


def parallel_launch():
    """The context manager every parallel CPU launch of optkernels runs in: nothing for TBB and OpenMP, a
    lock under ``workqueue``.

    Usage: ``with parallel_launch(): for_this_process(compiled_parallel_function)(...)``.
    """
    guard = _guard
    return guard if guard is not None else _decide()


def thread_mask() -> tuple[Any, Any]:
    """``(get, set)`` of the calling thread's Numba thread count, as :func:`numba.get_num_threads` and
    :func:`numba.set_num_threads` (which cost microseconds a call) without their per-call checks: Numba's
    own C functions once its threads are launched. Call it inside :func:`parallel_launch`."""
    global _mask
    if _mask is None:
        import numba
        from numba.np.ufunc import parallel

        numba.get_num_threads()  # launches Numba's threads: its C functions exist from here on
        get, put = getattr(parallel, "_get_num_threads", None), getattr(parallel, "_set_num_threads", None)
        _mask = (
            (get, put)
            if get is not None and put is not None
            else (numba.get_num_threads, numba.set_num_threads)
        )
    return _mask


_mask: tuple[Any, Any] | None = None


def for_this_process(function: Any) -> Any:
    """``function`` (a Numba dispatcher compiled with ``parallel=True``), or, in a process forked from one
    that had started GNU OpenMP, its single-threaded twin: the same Python function compiled with
    ``parallel=False`` (``prange`` runs as ``range``) on first use in this process, not cached on disk
    (Numba's cache does not tell the two apart). Call it inside :func:`parallel_launch`."""
    if not _forked_from_gnu_omp:
        return function
    entry = _twins.get(id(function))
    if entry is None:
        import numba

        options = dict(function.targetoptions, parallel=False)
        options.pop("nopython", None)  # implied by njit, which warns when it is given
        entry = _twins.setdefault(id(function), (function, numba.njit(**options)(function.py_func)))
    return entry[1]


def parallel_allowed() -> bool:
    """Whether launches may run on Numba's thread pool: False in a process forked from one that had started
    GNU OpenMP (there they run on the calling thread, see :func:`for_this_process`). Call it inside
    :func:`parallel_launch`."""
    return not _forked_from_gnu_omp


def prefer_openmp(host_threads: tuple[Any, Any] | None = None) -> bool:
    """Ask the first launch for Numba's OpenMP layer (then TBB, then ``workqueue``) instead of the
    fork-safe choice, unless the user chose a layer or the layer is already settled; True if the request
    stands. For code whose host library runs its own kernels on OpenMP threads (torch's CPU build): there,
    a TBB worker waking for a kernel competes for the cores with the host's still-spinning OpenMP threads.
    After ``fork`` such a process runs its kernels single-threaded (:func:`for_this_process`).

    Where the host's OpenMP runtime is loaded into the global scope first (torch's ``libgomp``), Numba's
    OpenMP layer binds to that runtime rather than its own: one thread pool, whose count Numba's start
    sets to ``NUMBA_NUM_THREADS``. ``host_threads``, ``(get, set)`` of the host's thread count (such as
    ``(torch.get_num_threads, torch.set_num_threads)``), has the count read before the start and set back
    after it where it changed, whichever layer starts (unless the layer is already settled)."""
    global _preferred, _host_threads
    with _decide_lock:
        parallel = sys.modules.get("numba.np.ufunc.parallel")
        started = parallel is not None and parallel._is_initialized
        if _guard is not None or started:
            return False
        if host_threads is not None:
            _host_threads = host_threads
        if user_chose_layer():
            return False
        _preferred = "omp"
        return True


def layer() -> str:
    """The threading layer the package's launches use ('tbb', 'omp' or 'workqueue'), settling it now if no
    launch has yet."""
    import numba

    parallel_launch()
    return numba.threading_layer()


def _after_fork_in_child() -> None:
    global _guard, _forked_from_gnu_omp, _decide_lock
    _decide_lock = threading.Lock()  # a lock held by another thread at the fork stays held in the child
    if _gnu_omp_started():
        _forked_from_gnu_omp = True
        _guard = contextlib.nullcontext()
    elif isinstance(_guard, type(_decide_lock)):
        _guard = threading.Lock()  # likewise the launch lock


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
