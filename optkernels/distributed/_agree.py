"""Agreement across ranks before every collective of :mod:`optkernels.distributed`, so that a failure or a
disagreement on one rank is an error on every rank instead of a hang or a silent divergence.

Each collective entry point first runs its local checks, then calls :func:`agree`: one all-gather of a
small fixed record per rank (which call it is, whether its checks passed, whether its gradients are
finite, a digest of the configuration that must agree). Every rank then knows the same facts and takes the
same decision: all raise (the failing rank's error, naming it), all skip, or all go on into the real
collective. The messages and the differing fields are exchanged only on the failure path.

Two process-wide guards are installed when a communicator of more than one rank is first used:

* an ``excepthook`` that prints an uncaught exception's traceback and calls ``MPI_Abort`` on
  ``COMM_WORLD`` (as ``python -m mpi4py`` does), so that an exception on one rank ends every rank at once
  instead of leaving the others waiting in a collective. Opt out with ``OPTKERNELS_MPI_ABORT=0`` in the
  environment, or :func:`abort_on_uncaught` ``(False)``;
* an exit check (``atexit``): a rank whose program ends takes part in one last record exchange on every
  communicator it used, so a rank still stepping (the ranks took different numbers of steps) raises
  instead of waiting forever, and the exiting rank reports the mismatch and aborts the job.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from . import _comm
from ._fingerprint import describe, digest_fields

__all__ = ["abort_on_uncaught", "agree", "register"]

KINDS = (
    "construction",
    "step",
    "load_state_dict",
    "load",
    "consolidated_state_dict",
    "reduce_gradients",
    "all_finite",
    "flag",
    "lookup",
    "gather",
    "exit",
)
_MAGIC = 0x6F6B6167726565  # 'okagree'
_MAGIC_AT, _KIND, _OK, _FINITE, _OBJECT, _COUNT = range(6)
_DIGEST = 8  # record[8:12]: the 32-byte digest
_RECORD = 12
_ERRORS = {
    e.__name__: e
    for e in (
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        RuntimeError,
        FloatingPointError,
        ZeroDivisionError,
        OverflowError,
        NotImplementedError,
        AttributeError,
        LookupError,
        ArithmeticError,
    )
}


class _Session:
    """What this process knows of one communicator: the objects built on it (in construction order, the
    same on every rank), and the communicator itself (for the exit check)."""

    def __init__(self, comm: Any):
        self.comm = comm
        self.objects: list[str] = []


_sessions: dict[int, _Session] = {}
_hook: dict[str, Any] = {"installed": False, "previous": None, "enabled": None}


def _session(comm: Any) -> _Session:
    key = comm.py2f()
    session = _sessions.get(key)
    if session is None or session.comm != comm:
        session = _sessions[key] = _Session(comm)
        if not _hook["installed"]:
            _install()
    return session


def register(comm: Any, name: str) -> int:
    """A new object (an optimizer, a table) built on ``comm``: its index, the same on every rank (called
    by every rank at construction, whatever its local checks found)."""
    session = _session(comm)
    session.objects.append(name)
    return len(session.objects) - 1


def agree(
    comm: Any,
    kind: str,
    where: str,
    *,
    error: BaseException | None = None,
    finite: bool = True,
    obj: int = -1,
    count: int = 0,
    fields: Callable[[], dict] | dict | None = None,
    explain: Callable[[], dict] | None = None,
    what: str = "the configurations",
) -> list[int]:
    """One record exchange over ``comm`` (a collective call): raise on every rank if any rank failed or
    disagrees; else the ranks whose gradients were not finite (empty: all finite).

    Args:
        comm: the communicator.
        kind: which call this is (one of ``KINDS``): every rank must be in the same one.
        where: the call's name for messages, e.g. ``"Adam.step"``.
        error: this rank's error from its local checks (None: they passed).
        finite: whether this rank's gradients are finite (reported back, not raised).
        obj: the index of the object (:func:`register`), -1 for a function.
        count: the object's call counter (e.g. its number of steps): every rank must be at the same one.
        fields: what must agree across ranks, ``{name: value}`` (or a callable returning it, evaluated
            among the local checks: its exceptions count as this rank's failure).
        explain: the fields in full, when ``fields`` holds digests of some (called only when they differ,
            to name the fields that differ).
        what: what the fields are, for the message.

    Raises:
        RuntimeError: the ranks are in different calls (a rank skipped a step, or its program ended).
        The type of the first failing rank's error: a rank's local checks failed (its message, its rank).
        ValueError: the counters or fields differ (naming the fields and the ranks).
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    values: dict | None = None  # the fields, evaluated (None: none, or this rank failed)
    if fields is not None and error is None:
        try:
            values = fields() if callable(fields) else fields
        except Exception as caught:  # a schedule raising, say: this rank's failure like any other
            error = caught
    if size == 1:
        if error is not None:
            raise error
        return [] if finite else [0]
    session = _session(comm)
    mine = np.zeros(_RECORD, np.int64)
    mine[[_MAGIC_AT, _KIND, _OK, _FINITE, _OBJECT, _COUNT]] = (
        _MAGIC,
        KINDS.index(kind),
        error is None,
        bool(finite),
        obj,
        count,
    )
    if values is not None and error is None:
        mine[_DIGEST:] = np.frombuffer(digest_fields(values), np.int64)
    every = np.empty((size, _RECORD), np.int64)
    comm.Allgather(mine, every)
    _check_same_call(every, session, where, rank, size)
    failed = [r for r in range(size) if not every[r, _OK]]
    if failed:
        _raise_together(comm, failed, error, where, size)
    counts = every[:, _COUNT]
    if (counts != counts[0]).any():
        raise ValueError(
            f"For '{where}', the ranks are at different calls (step counters {counts.tolist()} "
            f"on ranks 0..{size - 1}): every rank must call it the same number of times"
        )
    differ = [r for r in range(size) if (every[r, _DIGEST:] != every[0, _DIGEST:]).any()]
    if differ:
        _raise_differing_fields(comm, explain() if explain is not None else values, where, what)
    return [r for r in range(size) if not every[r, _FINITE]]


def _call_name(record: np.ndarray, session: _Session) -> str:
    if record[_MAGIC_AT] != _MAGIC or not 0 <= record[_KIND] < len(KINDS):
        return "a collective that is not optkernels'"
    kind, obj = KINDS[record[_KIND]], int(record[_OBJECT])
    if kind == "exit":
        return "the end of its program"
    owner = session.objects[obj] if 0 <= obj < len(session.objects) else None
    return f"{owner}.{kind} (call {int(record[_COUNT])})" if owner else kind


def _check_same_call(every: np.ndarray, session: _Session, where: str, rank: int, size: int) -> None:
    keys = [(int(r[_MAGIC_AT]), int(r[_KIND]), int(r[_OBJECT])) for r in every]
    if all(k == keys[0] for k in keys):
        return
    calls = "; ".join(f"rank {r}: {_call_name(every[r], session)}" for r in range(size))
    raise RuntimeError(
        f"For '{where}', the ranks are not in the same call ({calls}): every rank must make "
        "the same collective calls in the same order (a rank that skips a step, takes more "
        f"steps or leaves the loop early desynchronizes them); this is rank {rank}"
    )


def _raise_together(
    comm: Any, failed: list[int], error: BaseException | None, where: str, size: int
) -> NoReturn:
    told = comm.allgather(None if error is None else (type(error).__name__, _message(error)))
    first = failed[0]
    name, message = told[first]
    others = f" (ranks {failed} failed)" if len(failed) > 1 else ""
    text = f"For '{where}', rank {first} of {size} failed{others}: {message}"
    raised = _ERRORS.get(name, RuntimeError)(text)
    if error is not None:
        raise raised from error
    raise raised


def _message(error: BaseException) -> str:
    if isinstance(error, KeyError) and len(error.args) == 1:
        return str(error.args[0])
    return str(error)


def _raise_differing_fields(comm: Any, fields: Any, where: str, what: str) -> None:
    shown = {k: describe(v) for k, v in (fields or {}).items()}
    every = comm.allgather(shown)
    names = list(dict.fromkeys(k for d in every for k in d))
    lines = []
    for name in names:
        values = [d.get(name, "(absent)") for d in every]
        if any(v != values[0] for v in values):
            ranks = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            lines.append(f"{name} ({ranks})")
    detail = "; ".join(lines) if lines else "they hash differently"
    raise ValueError(f"For '{where}', {what} differ across ranks: {detail}")


# ---------------------------------------------------------------------------------------- process guards


def abort_on_uncaught(enabled: bool = True) -> None:
    """Whether an uncaught exception on this rank aborts every rank (``MPI_Abort`` on ``COMM_WORLD`` after
    printing the traceback). On by default once a communicator of several ranks is used, unless the
    environment has ``OPTKERNELS_MPI_ABORT=0``; ``abort_on_uncaught(False)`` restores the previous
    ``sys.excepthook`` (then an uncaught exception on one rank leaves the others waiting in their next
    collective until the launcher's timeout, as plain MPI programs do).

    Args:
        enabled: install (True) or remove (False) the hook.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"For 'abort_on_uncaught', 'enabled' must be a bool, got {type(enabled).__name__}")
    _hook["enabled"] = enabled
    if enabled and sys.excepthook is not _excepthook:
        _hook["previous"] = sys.excepthook
        sys.excepthook = _excepthook
    elif not enabled and sys.excepthook is _excepthook:
        sys.excepthook = _hook["previous"] or sys.__excepthook__


def _install() -> None:
    _hook["installed"] = True
    atexit.register(_exit_check)
    wanted = _hook["enabled"]
    if wanted is None:
        setting = os.environ.get("OPTKERNELS_MPI_ABORT", "1").strip().lower()
        wanted = setting not in ("0", "false", "no", "off")
    if wanted and _comm.mpi().COMM_WORLD.Get_size() > 1:
        abort_on_uncaught(True)


def _excepthook(kind: type, value: BaseException, tb: Any) -> None:
    previous = _hook["previous"] or sys.__excepthook__
    try:
        previous(kind, value, tb)
    except Exception:  # pragma: no cover - a broken previous hook must not stop the abort
        traceback.print_exception(kind, value, tb)
    MPI = _comm.mpi()
    if MPI.Is_finalized():
        return
    world = MPI.COMM_WORLD
    sys.stderr.write(
        f"optkernels.distributed: uncaught {kind.__name__} on rank {world.Get_rank()} of "
        f"{world.Get_size()}: aborting every rank (MPI_Abort). To opt out: "
        "OPTKERNELS_MPI_ABORT=0 or optkernels.distributed.abort_on_uncaught(False)\n"
    )
    sys.stderr.flush()
    sys.stdout.flush()
    # give mpiexec a moment to forward what every rank printed: MPI_Abort kills the job, dropping output
    # still in transit (the cause could be lost when all ranks raise the agreed error together)
    time.sleep(0.5)
    world.Abort(1)


def _exit_check() -> None:
    """At exit, one last record exchange on every communicator used (see the module docstring)."""
    MPI = _comm.mpi()
    if MPI.Is_finalized() or not MPI.Is_initialized():
        return
    for session in list(_sessions.values()):
        comm = session.comm
        try:
            if comm == MPI.COMM_NULL or comm.Get_size() == 1:
                continue
            agree(comm, "exit", "the exit check of optkernels.distributed")
        except RuntimeError as error:
            sys.stderr.write(
                f"optkernels.distributed: rank {comm.Get_rank()} ended its program while "
                f"another rank is still in a collective call: {error}\n"
            )
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
        except Exception:  # a freed communicator, MPI errors at shutdown: nothing left to check
            continue
