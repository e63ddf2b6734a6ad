"""float16/bfloat16 parameters in the optimizers: master weights, stochastic rounding, Kahan summation.

Every optimizer accepts four keyword arguments on top of its own (taken here, by a wrapper that
:class:`LowPrecisionMixin` puts around each subclass's ``__init__``):

* ``master_weights=False``: with True, each float16/bfloat16 parameter gets a float32 master copy and
  float32 slots; the step updates the master (gradients in the parameter's dtype, widened on the fly) and
  then writes the parameter as the master rounded once. ``state_dict`` holds the masters
  (``"master.<name>"``), so a resumed run is bit-identical. Without it, slots have the parameter's dtype and
  the kernels round each updated array once per step (float32 math).
* ``stochastic_rounding=False``: with True, the low-precision write-back of each step (the parameter from
  its master, or, without masters, the parameter and its slots) is rounded stochastically
  (:func:`optkernels.kernels.stochastic_rounding`), from a counter-based stream of ``seed`` and the
  optimizer's own step counter (in ``state_dict`` as ``"rounding_step"``): reproducible bit for bit.
* ``seed=0``: the stochastic-rounding seed, an integer in [0, 2**64).
* ``kahan_summation=False``: with True, each bfloat16 parameter gets a bfloat16 compensation buffer
  (``state_dict``: ``"compensation.<name>"``) and a float32 working copy (scratch, not state): each step
  widens the parameter into the copy, updates the copy in float32 (slots keep the parameter's dtype) and
  writes the parameter back Kahan-compensated (LOWBIT.md §9.3, :func:`~optkernels.kernels.any_precision.
  kahan_write_back`), so that updates below half a bfloat16 ulp accumulate instead of being lost.
  Named as the sibling keywords (torchdistx's ``AnyPrecisionAdamW`` calls it ``use_kahan_summation``, which
  :class:`~optkernels.optimizers.AnyPrecisionAdamW` keeps). Exclusive with ``master_weights`` and
  ``stochastic_rounding`` (ValueError); float16 parameters are refused with it (TypeError).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import HALF_DTYPES, _flatten
from ..kernels._lowp import BFLOAT16

_OPTIONS = "_low_precision_options"
_LAUNCHES_PER_STEP = 1 << 20  # the stochastic-rounding counter of step s starts at s * 2**20


def _check_options(
    owner: str, master_weights: Any, stochastic_rounding: Any, seed: Any, kahan_summation: Any
) -> tuple:
    flags = (
        ("master_weights", master_weights),
        ("stochastic_rounding", stochastic_rounding),
        ("kahan_summation", kahan_summation),
    )
    for name, value in flags:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"For '{owner}', '{name}' must be a bool, got {type(value).__name__}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"For '{owner}', 'seed' must be an int, got {type(seed).__name__}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"For '{owner}', 'seed' must be in [0, 2**64), got {seed}")
    for name, value in flags[:2]:
        if kahan_summation and value:
            raise ValueError(
                f"For '{owner}', 'kahan_summation' and '{name}' are exclusive: pick one way to keep "
                "small updates of low-precision parameters"
            )
    return bool(master_weights), bool(stochastic_rounding), int(seed), bool(kahan_summation)


def widened_gradient(grad: Any, dtype: np.dtype) -> Any:
    """A half gradient (dense or row-sparse) as a new array of the master's ``dtype`` (exact)."""
    values = getattr(grad, "values", None)
    if values is not None and not isinstance(grad, np.ndarray):
        return type(grad)(grad.indices, widened_gradient(values, dtype), grad.dense_shape)
    if isinstance(grad, np.ndarray):
        return grad.astype(dtype)
    return _cuda.to_device(_cuda.to_host(grad).astype(dtype))


class LowPrecisionMixin:
    """Master weights and stochastic rounding for :class:`~optkernels.optimizers.Optimizer` (see the module
    docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_takes_low_precision", False):
            return

        @functools.wraps(init)
        def __init__(
            self: Any,
            *args: Any,
            master_weights: bool = False,
            stochastic_rounding: bool = False,
            seed: int = 0,
            kahan_summation: bool = False,
            **kw: Any,
        ) -> None:
            if self.__dict__.get(_OPTIONS) is None:  # the outermost constructor's options win
                self.__dict__[_OPTIONS] = _check_options(
                    type(self).__name__, master_weights, stochastic_rounding, seed, kahan_summation
                )
            init(self, *args, **kw)

        __init__._takes_low_precision = True  # type: ignore[attr-defined]  # a marker on the function
        cls.__init__ = __init__  # type: ignore[method-assign]  # the class's constructor, wrapped on purpose

    def _init_low_precision(self) -> None:
        options: tuple[bool, bool, int, bool] = self.__dict__.get(_OPTIONS) or (False, False, 0, False)
        self._master_weights, self._stochastic_rounding, self._rounding_seed, self._kahan = options
        self._rounding_step = 0
        self._masters: list = []  # plans whose ``param`` is a float32 master of a half parameter
        self._compensated: list = []  # (bfloat16 parameter, its float32 working copy, compensation)

    @property
    def master_weights(self) -> bool:
        """True if float16/bfloat16 parameters are updated through float32 master copies."""
        return self._master_weights

    @property
    def kahan_summation(self) -> bool:
        """True if bfloat16 parameters are written back Kahan-compensated (see the module docstring)."""
        return self._kahan

    def _master_of(self, param: Any) -> Any:
        """The parameter a plan updates: a float32 master (a new Parameter of the same name) of a half
        parameter when master weights are on, a float32 working copy of a bfloat16 one with Kahan
        summation (its slots keep the parameter's dtype: see :meth:`_slot_dtype`), else ``param``."""
        if param.dtype not in HALF_DTYPES or not (self._master_weights or self._kahan):
            return param
        if self._kahan and param.dtype != BFLOAT16:
            raise TypeError(
                f"For '{type(self).__name__}', 'kahan_summation' compensates bfloat16 parameters; "
                f"{param.name} is {param.dtype} (use master_weights or stochastic_rounding for it)"
            )
        from .parameter import Parameter

        if param.is_cuda:
            host = _cuda.to_host(param.data).astype(np.float32)
            master = Parameter(_cuda.to_device(host), param.name)
        else:
            master = Parameter(np.asarray(param.data).astype(np.float32), param.name)
        if self._kahan:
            zeros = np.zeros(param.shape, BFLOAT16)
            compensation = _cuda.to_device(zeros) if param.is_cuda else zeros
            self._compensated.append((param, master, compensation))
        else:
            self._masters.append((param, master))
        return master

    def _slot_dtype(self, param: Any, updated: Any) -> Any:
        """The dtype of the slots of ``param`` whose update writes ``updated`` (:meth:`_master_of`): the
        parameter's own with Kahan summation, the master's float32 with master weights."""
        return param.dtype if self._kahan else updated.dtype

    def _widen_compensated(self) -> None:
        """Each Kahan-compensated parameter widened into its float32 working copy (exact): called before
        the launches that update the copies, whose :meth:`_write_masters` writes the parameters back."""
        if not self._compensated:
            return
        from ..kernels._upcast import _copy

        for param, work, _ in self._compensated:
            device = "cuda" if param.is_cuda else "cpu"
            _copy.launch(device, param.size, _flatten(work.data, device), _flatten(param.data, device))

    def _rounding_context(self) -> Any:
        if not self._stochastic_rounding:
            return contextlib.nullcontext()
        from ..kernels import stochastic_rounding

        step = self._rounding_step
        self._rounding_step = step + 1
        return stochastic_rounding(self._rounding_seed, (step * _LAUNCHES_PER_STEP) % 2**64)

    def _write_masters(self, compensated: bool = True) -> None:
        """Each half parameter ← its master, rounded once; with ``compensated``, each Kahan-compensated
        parameter ← its updated working copy through its compensation buffer."""
        if compensated and self._compensated:
            from ..kernels.any_precision import kahan_write_back

            for param, work, compensation in self._compensated:
                device = "cuda" if param.is_cuda else "cpu"
                flat = (
                    _flatten(param.data, device),
                    _flatten(work.data, device),
                    _flatten(compensation, device),
                )
                kahan_write_back(*flat)
        if not self._masters:
            return
        from ..kernels._upcast import _copy

        for param, master in self._masters:
            device = "cuda" if param.is_cuda else "cpu"
            _copy.launch(device, param.size, _flatten(param.data, device), _flatten(master.data, device))

    # ------------------------------------------------------------------------------------------- state

    def _low_precision_state(self) -> dict[str, tuple[Any, Any]]:
        """key -> (the array to save and load into, or None for a scalar; its value for a scalar)."""
        out: dict[str, tuple[Any, Any]] = {}
        for param, master in self._masters:
            out[f"master.{param.name}"] = (master.data, None)
        for param, _, compensation in self._compensated:
            out[f"compensation.{param.name}"] = (compensation, None)
        if self._stochastic_rounding:
            out["rounding_step"] = (None, np.array(self._rounding_step, np.int64))
        return out

    def _load_low_precision_state(self, arrays: dict[str, np.ndarray]) -> None:
        if "rounding_step" in arrays:
            self._rounding_step = int(arrays["rounding_step"])
        self._write_masters(compensated=False)  # the parameters: the loaded masters rounded
