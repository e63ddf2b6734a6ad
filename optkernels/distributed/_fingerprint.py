"""Fingerprints of configurations: what must agree across ranks, as plain nested tuples that hash the same
in every process (no ``id``, no memory address), and the per-field view of an optimizer's configuration.

A class is named by module and qualified name; a function (a lambda included) by its name, its bytecode,
its constants, its defaults and the values its closure captured (so ``lambda p: Adam(p, learning_rate=lr)``
with another ``lr`` differs); a ``functools.partial`` by its function, arguments and keywords; an array by
its dtype, shape and a hash of its bytes (small arrays by their values); any other object by its class and
its attributes, a few levels deep.
"""

from __future__ import annotations

import functools
import hashlib
import types
from typing import Any

import numpy as np

__all__ = [
    "config_fields",
    "describe",
    "digest_fields",
    "fingerprint",
    "optimizer_fields",
    "small_scalar_state",
    "step_fields",
]

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
_DEPTH = 5
_COUNTERS = ("global_step", "rounding_step")


def fingerprint(value: Any, depth: int = 0) -> Any:
    """``value`` as nested tuples of plain values, equal in two processes iff the values are configured
    alike (see the module docstring)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, np.generic):
        return (value.dtype.str, value.item())
    if isinstance(value, np.ndarray):
        if value.size <= 8 and value.dtype.kind in "biuf":
            return ("array", value.dtype.str, value.shape, tuple(value.reshape(-1).tolist()))
        data = np.ascontiguousarray(value).tobytes()
        return ("array", value.dtype.str, value.shape, hashlib.sha256(data).hexdigest()[:16])
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if depth > _DEPTH:
        return type(value).__qualname__
    deeper = depth + 1
    if isinstance(value, (tuple, list)):
        return tuple(fingerprint(v, deeper) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), fingerprint(v, deeper)) for k, v in value.items()))
    if isinstance(value, functools.partial):
        return (
            "partial",
            fingerprint(value.func, deeper),
            fingerprint(value.args, deeper),
            fingerprint(value.keywords, deeper),
        )
    if isinstance(value, types.MethodType):
        return ("method", fingerprint(value.__func__, deeper), fingerprint(value.__self__, deeper))
    if isinstance(value, types.FunctionType):
        cells = tuple(_cell(c) for c in value.__closure__ or ())
        return (
            "function",
            f"{value.__module__}.{value.__qualname__}",
            _code(value.__code__),
            fingerprint(value.__defaults__, deeper),
            fingerprint(value.__kwdefaults__, deeper),
            fingerprint(cells, deeper),
        )
    if isinstance(value, types.BuiltinFunctionType):
        return ("builtin", getattr(value, "__module__", None), value.__qualname__)
    attributes = _attributes(value)
    if attributes is None:
        return type(value).__qualname__
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    return (name, tuple((k, fingerprint(v, deeper)) for k, v in attributes))


def describe(value: Any) -> str:
    """A short readable text of ``value`` for messages (what :func:`fingerprint` compares, in words)."""
    if isinstance(value, functools.partial):
        keywords = "".join(f", {k}={describe(v)}" for k, v in value.keywords.items())
        args = "".join(f", {describe(a)}" for a in value.args)
        return f"partial({describe(value.func)}{args}{keywords})"
    if isinstance(value, type):
        return value.__qualname__
    if isinstance(value, types.FunctionType):
        cells = ", ".join(describe(_cell(c)) for c in value.__closure__ or ())
        return f"{value.__qualname__}" + (f" (capturing {cells})" if cells else "")
    if isinstance(value, (_PLAIN, np.generic)):
        return repr(value)
    text = repr(fingerprint(value))
    return text if len(text) <= 100 else text[:80] + f"... #{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _code(code: types.CodeType) -> tuple:
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else fingerprint(c) for c in code.co_consts)
    return (hashlib.sha256(code.co_code).hexdigest()[:16], consts, code.co_names)


def _attributes(value: Any) -> list | None:
    names = getattr(value, "__dict__", None)
    if names is not None:
        return sorted(names.items())
    slots = [s for cls in type(value).__mro__ for s in getattr(cls, "__slots__", ())]
    if not slots:
        return None
    return sorted((s, getattr(value, s)) for s in set(slots) if hasattr(value, s))


def _is_scalar(value: Any) -> bool:
    """A number, string, flag or a tuple of them. Not None (a cache built on first use), nor a tuple
    holding None (per-parameter slots, which differ from rank to rank in a parallel optimizer)."""
    if value is None:
        return False
    if isinstance(value, (_PLAIN, np.generic)):
        return True
    return (
        isinstance(value, tuple)
        and len(value) > 0
        and all(isinstance(v, (_PLAIN, np.generic)) and v is not None for v in value)
    )


def optimizer_fields(optimizer: Any) -> dict[str, Any]:
    """The configuration of an optimizer, field by field: its rule (class), every scalar attribute
    (hyper-parameters such as ``beta1``, ``eps``, ``loss_scale``, flags, counters), the learning rate of
    every group (the value, the table or the schedule's fingerprint) and the weight decay of every group (a
    number or a callable's fingerprint)."""
    cls = type(optimizer)
    fields: dict[str, Any] = {"rule": f"{cls.__module__}.{cls.__qualname__}"}
    slots = set(getattr(optimizer, "_slot_names", ()))  # this rank's share of the slots
    for name, value in sorted(vars(optimizer).items()):
        if _is_scalar(value) and name != "_owner" and name not in slots:
            fields[name.lstrip("_")] = value
    lrs = getattr(optimizer, "_lrs", None)
    if lrs is not None:
        fields["learning rates of the groups"] = tuple(_learning_rate(lr) for lr in lrs)
        fields["weight decays of the groups"] = fingerprint(list(optimizer._wds))
    return fields


def _learning_rate(lr: Any) -> Any:
    """A fixed rate's value, a table's fingerprint, a schedule's fingerprint (its class and settings)."""
    if lr.kind == "fixed":
        return float(np.asarray(lr.obj.data))
    return fingerprint(lr.obj.data if lr.kind == "table" else lr.obj)


def config_fields(optimizer: Any) -> dict[str, Any]:
    """:func:`optimizer_fields` without what changes from step to step (the counters, the per-step scalars
    such as beta powers): what a checkpoint's fingerprint and the first step compare."""
    fields = optimizer_fields(optimizer)
    for key in (*_COUNTERS, *optimizer._scalar_state()):
        fields.pop(key, None)
    return fields


def small_scalar_state(optimizer: Any) -> bool:
    """Whether the optimizer's per-step state is a few scalars (beta powers), cheap to compare every step
    (THOR's also holds its inverse matrices)."""
    return sum(np.size(v) for v in optimizer._scalar_state().values()) <= 64


def step_fields(optimizer: Any, config: bytes | None = None, scalars: bool = True) -> dict[str, Any]:
    """What the next step uses: the configuration (:func:`config_fields`, or its digest ``config`` when
    given: the per-step check stays cheap), the counters, the learning rate and weight decay of every group
    at the current global step, and (when ``scalars``) the small per-step scalars (beta powers)."""
    fields: dict[str, Any] = (
        config_fields(optimizer) if config is None else {"configuration (digest)": config}
    )
    for counter in _COUNTERS:
        fields[counter] = getattr(optimizer, "_" + counter, 0)
    if getattr(optimizer, "_lrs", None) is not None:
        step = optimizer._global_step
        # a table's value follows from the table and the step (both compared; no past-the-end warning here)
        fields["learning rates at this step"] = tuple(
            lr.value(step) if lr.kind != "table" else None for lr in optimizer._lrs
        )
        fields["weight decays at this step"] = tuple(
            float(w(step)) if callable(w) else w for w in optimizer._wds
        )
    for key, value in (optimizer._scalar_state() if scalars else {}).items():
        if np.size(value) <= 8:
            fields[key] = fingerprint(np.asarray(value))
    return fields


def digest_fields(fields: dict[str, Any]) -> bytes:
    """A 32-byte SHA-256 of the fields' fingerprints (names included)."""
    h = hashlib.sha256()
    for name, value in fields.items():
        h.update(repr((name, fingerprint(value))).encode())
        h.update(b"\0")
    return h.digest()
