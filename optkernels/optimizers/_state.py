"""``state_dict``/``load_state_dict`` of the optimizers: a flat ``{str: NumPy array}`` keyed by parameter
name.

Keys: ``"global_step"`` (0-d int64), ``"<slot>.<parameter name>"`` for every slot of every parameter, and the
optimizer's per-step scalars (``"beta1_power"``...). Savable with ``np.savez`` and loadable from
``np.load``'s ``NpzFile``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import _cuda


class StateDictMixin:
    """The state methods of :class:`~optkernels.optimizers.Optimizer` (it provides ``_plans``,
    ``_slot_names``, ``_global_step`` and ``_owner``)."""

    _owner: str
    _plans: list[Any]
    _local_plans: list[Any]
    _slot_names: list[str]

    def _low_precision_state(self) -> dict:
        """Master weights and the stochastic-rounding counter (see ``_low_precision``)."""
        return {}

    def _load_low_precision_state(self, arrays: dict) -> None:
        """Restore what :meth:`_low_precision_state` described (already validated)."""

    def _scalar_state(self) -> dict[str, np.ndarray]:
        """Per-step scalars of the subclass (e.g. ``beta1_power``) as 0-d arrays."""
        return {}

    def _load_scalar_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`_scalar_state` returned (already validated)."""

    def _state_layout(self) -> dict[str, tuple[tuple, np.dtype, Any]]:
        """key -> (shape, dtype, the array it is loaded into, or None for a scalar)."""
        layout: dict[str, tuple] = {"global_step": ((), np.dtype(np.int64), None)}
        for slot in self._slot_names:
            for plan in self._local_plans:
                array = plan.slots[slot]
                layout[f"{slot}.{plan.name}"] = (plan.shape, plan.dtype, array)
        for key, value in self._scalar_state().items():
            layout[key] = (value.shape, value.dtype, None)
        for key, (array, value) in self._low_precision_state().items():
            layout[key] = (
                (array.shape, np.dtype(array.dtype), array)
                if array is not None
                else (value.shape, value.dtype, None)
            )
        return layout

    def state_dict(self) -> dict[str, np.ndarray]:
        """The optimizer's state as a flat ``{str: NumPy array}`` dict (copies), savable with ``np.savez``.

        Keys: ``"global_step"`` (0-d int64), ``"<slot>.<parameter name>"`` for every slot of every parameter
        (``"moment1.fc.weight"``; CUDA slots are copied to the host), and the optimizer's per-step scalars
        (``"beta1_power"``, ``"beta2_power"``: 0-d arrays). Keyed by parameter name, not position, so a state
        can be loaded into an optimizer whose parameters are listed in another order. Learning rates and
        hyper-parameters are not state: they come from the constructor. A parallel optimizer's state holds
        its rank's share, and ``"share.world_size"``, ``"share.rank"``, ``"share.fingerprint"``.
        """
        out = {"global_step": np.array(self._global_step, dtype=np.int64)}
        for slot in self._slot_names:
            for plan in self._local_plans:
                array = plan.slots[slot]
                host = array.copy() if isinstance(array, np.ndarray) else _cuda.to_host(array)
                out[f"{slot}.{plan.name}"] = host
        out.update({k: np.array(v) for k, v in self._scalar_state().items()})
        for key, (array, value) in self._low_precision_state().items():
            out[key] = (
                value.copy()
                if array is None
                else (array.copy() if isinstance(array, np.ndarray) else _cuda.to_host(array))
            )
        parallel = getattr(self, "_parallel", None)
        if parallel is not None:  # a rank's share says whose it is ("share.rank"...: optkernels.distributed)
            out.update(parallel.share_metadata(self))
        return out

    def consolidated_state_dict(self, root: int | None = 0) -> dict[str, np.ndarray] | None:
        """The whole state (as :meth:`state_dict` of one process) of a parallel optimizer, whose
        :meth:`state_dict` holds only its rank's share: gathered on rank ``root`` (None: on every rank),
        None on the other ranks; a collective call. It loads into a single-process optimizer, or into a
        parallel one of any number of ranks (which takes its share). One process: :meth:`state_dict`."""
        parallel = getattr(self, "_parallel", None)
        if parallel is None:
            return self.state_dict()
        return parallel.consolidated_state_dict(self, root)

    def load_state_dict(self, state: Any) -> None:
        """Restore a state saved by :meth:`state_dict` (a dict, or the ``NpzFile`` of ``np.load``), in place.

        Everything is checked before anything is written. A run resumed from a loaded state is bit-identical
        to one that was never interrupted.

        Raises:
            TypeError: ``state`` is not a mapping; an array of the wrong dtype (naming the key).
            KeyError: a key this optimizer expects is missing (naming the parameter), or an unexpected key
                (state of a parameter this optimizer does not have).
            ValueError: an array of the wrong shape (naming the key), or a negative global_step.

        A parallel optimizer (``comm=``) checks the state on every rank and compares the loaded step counters
        and per-step scalars across ranks before any rank writes: an error on one rank raises on all.
        """
        parallel = getattr(self, "_parallel", None)
        if parallel is not None:
            parallel.load_state(self, state)
            return
        self._write_state(self._checked_state(state))

    def _checked_state(self, state: Any) -> dict[str, np.ndarray]:
        """The arrays of ``state`` to load, by key, after every check of :meth:`load_state_dict`."""
        if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
            raise TypeError(
                f"For '{self._owner}', load_state_dict needs a mapping of str to arrays, got "
                f"{type(state).__name__}"
            )
        layout = self._state_layout()
        given = set(state.keys())
        foreign = {plan.name for plan in self._plans if not plan.owned}
        if foreign:  # a parallel optimizer takes its share of a whole state (another rank's slots pass)
            given = {k for k in given if k in layout or k.partition(".")[2] not in foreign}
        missing = [k for k in layout if k not in given]
        if missing:
            raise KeyError(
                f"For '{self._owner}', the state has no entry {missing[0]!r}"
                f"{self._which_parameter(missing[0])} ({len(missing)} missing)"
            )
        unexpected = sorted(given - set(layout))
        if unexpected:
            raise KeyError(
                f"For '{self._owner}', the state has the unexpected entry {unexpected[0]!r}: this "
                f"optimizer has no such parameter or state ({len(unexpected)} unexpected)"
            )
        arrays = {}
        for key, (shape, dtype, _) in layout.items():
            value = np.asarray(state[key])
            if value.shape != shape:
                raise ValueError(
                    f"For '{self._owner}', the state entry {key!r} has shape {value.shape} but "
                    f"needs shape {shape}"
                )
            if key == "global_step":
                if value.dtype.kind not in "iu" or int(value) < 0:
                    raise ValueError(
                        f"For '{self._owner}', 'global_step' must be a non-negative integer, got {value!r}"
                    )
            elif value.dtype != dtype:
                raise TypeError(
                    f"For '{self._owner}', the state entry {key!r} has dtype {value.dtype} but "
                    f"needs dtype {dtype}"
                )
            arrays[key] = value
        return arrays

    def _write_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Load the arrays :meth:`_checked_state` returned."""
        layout = self._state_layout()
        for key, (_, _, target) in layout.items():
            if target is None:
                continue
            if isinstance(target, np.ndarray):
                target[...] = arrays[key]
            else:
                _cuda.copy_to_device(target, np.ascontiguousarray(arrays[key]))
        self._global_step = int(arrays["global_step"])
        self._load_scalar_state({k: arrays[k] for k in self._scalar_state()})
        self._load_low_precision_state(arrays)

    def _which_parameter(self, key: str) -> str:
        slot, _, name = key.partition(".")
        return f" (slot {slot!r} of parameter {name!r})" if name else ""
