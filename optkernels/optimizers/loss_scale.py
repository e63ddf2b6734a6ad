"""Loss scaling for mixed-precision training: MindSpore's loss-scale managers, ``amp.DynamicLossScaler``,
``amp.all_finite``, and :func:`loss_scaled_step`, the skip-on-overflow step of
``TrainOneStepWithLossScaleCell``.

The training loop this module serves (NumPy arrays)::

    scale = manager.get_loss_scale()
    grads = gradients_of(scale * loss)                 # the backward pass seeded with the loss scale
    applied, scale = loss_scaled_step(optimizer, grads, manager)

``loss_scaled_step`` divides the gradients by the scale, checks them for inf/NaN, calls the optimizer only if
they are all finite (an overflowing step leaves every parameter and optimizer slot untouched) and updates the
manager's scale.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from .schedules import _check_int

__all__ = [
    "FixedLossScaleManager",
    "DynamicLossScaleManager",
    "DynamicLossScaler",
    "all_finite",
    "loss_scaled_step",
]


def _check_scale_number(owner: str, name: str, value: Any) -> float:
    """A real number (Python or NumPy int/float, not bool) that is finite and >= 1; returned as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"For '{owner}', '{name}' must be a float or an int, but got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not number >= 1:
        raise ValueError(f"For '{owner}', '{name}' must be a finite number >= 1, but got {value}")
    return number


def _as_flag(owner: str, name: str, value: Any) -> bool:
    """A bool, a NumPy bool, or a 0-d / shape-(1,) bool array, as a Python bool."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.ndim <= 1 and value.size == 1:
        return bool(value.reshape(-1)[0])
    raise TypeError(
        f"For '{owner}', '{name}' must be a bool or a 0-d bool array, but got {type(value).__name__}"
    )


class FixedLossScaleManager:
    """A constant loss scale (MindSpore ``FixedLossScaleManager``).

    With ``drop_overflow_update=True`` (MindSpore's TrainOneStepWithLossScaleCell, see
    :func:`loss_scaled_step`) the gradients of ``loss_scale * loss`` are divided by ``loss_scale`` before the
    optimizer and a step whose gradients hold an inf or NaN is skipped; the optimizer's own ``loss_scale``
    must stay 1.0. With ``drop_overflow_update=False`` (MindSpore's plain TrainOneStepCell with ``sens =
    loss_scale``) the gradients reach the optimizer still scaled and unchecked, and the optimizer must be
    built with the same ``loss_scale`` so that it divides them itself. The scale never changes.

    Args:
        loss_scale: the scale, a real number >= 1 (Python or NumPy int or float; not bool).
        drop_overflow_update: skip the optimizer step when the gradients overflow.

    Raises:
        TypeError: ``loss_scale`` not a real number; ``drop_overflow_update`` not a bool (MindSpore does not
            check this flag; a non-bool here is rejected rather than read as truthy).
        ValueError: ``loss_scale`` < 1, NaN or inf (MindSpore rejects only < 1).
    """

    def __init__(self, loss_scale: float = 128.0, drop_overflow_update: bool = True):
        owner = type(self).__name__
        self._loss_scale = _check_scale_number(owner, "loss_scale", loss_scale)
        if not isinstance(drop_overflow_update, (bool, np.bool_)):
            raise TypeError(
                f"For '{owner}', 'drop_overflow_update' must be a bool, but got "
                f"{type(drop_overflow_update).__name__}"
            )
        self._drop_overflow_update = bool(drop_overflow_update)

    def get_loss_scale(self) -> float:
        """The loss scale (a float)."""
        return self._loss_scale

    def get_drop_overflow_update(self) -> bool:
        """Whether an overflowing step is skipped (``drop_overflow_update``)."""
        return self._drop_overflow_update

    def update_loss_scale(self, overflow: Any) -> None:
        """Does nothing: the scale is fixed. ``overflow`` (a bool or 0-d bool array) is only type-checked."""
        _as_flag(type(self).__name__, "overflow", overflow)

    def __repr__(self) -> str:
        return (
            f"FixedLossScaleManager(loss_scale={self._loss_scale!r}, "
            f"drop_overflow_update={self._drop_overflow_update!r})"
        )


class DynamicLossScaleManager:
    """A loss scale that halves on overflow and doubles after ``scale_window`` clean steps (MindSpore
    ``DynamicLossScaleManager``, host-side ``update_loss_scale``).

    State: ``loss_scale``; ``cur_iter`` (starts at 1), ``last_overflow_iter`` (0), ``bad_step`` (0). Per call
    of ``update_loss_scale(overflow)``:

    * overflow: ``loss_scale = max(loss_scale * (1 / scale_factor), 1)``, ``last_overflow_iter = cur_iter``,
      ``bad_step += 1``; more than ``bad_step_max = 1000`` consecutive overflows raise RuntimeError (on the
      1001st, after the scale was lowered and before ``cur_iter`` advances);
    * no overflow: if ``(cur_iter - last_overflow_iter) % scale_window == 0``: ``loss_scale *= scale_factor``;
      ``bad_step = 0``;
    * then ``cur_iter += 1``.

    So the scale grows by ``scale_factor`` after every ``scale_window`` consecutive clean steps (counted from
    the last overflow or the start); this is the same sequence as MindSpore's ``DynamicLossScaleUpdateCell``.
    The decrease multiplies by the reciprocal as MindSpore does (for ``scale_factor = 2`` that is exact). The
    scale is kept as a Python float (MindSpore keeps the int ``2**24`` until the first decrease: equal
    values); it has no upper bound, as in MindSpore's host-side rule.

    Args:
        init_loss_scale: the initial scale, a real number >= 1 (not bool).
        scale_factor: the growth and shrink factor, a real number > 0 (not bool).
        scale_window: the number of consecutive clean steps before the scale grows, an int > 0.

    Raises:
        TypeError: ``init_loss_scale``/``scale_factor`` not a real number, ``scale_window`` not an int.
        ValueError: ``init_loss_scale`` < 1 (or not finite), ``scale_window`` < 1, ``scale_factor`` <= 0 (or
            not finite). Checked in MindSpore's order: init_loss_scale, scale_window, scale_factor.
    """

    bad_step_max = 1000
    scale_factor: float
    cur_iter: int
    last_overflow_iter: int
    bad_step: int

    def __init__(self, init_loss_scale: float = 2**24, scale_factor: float = 2, scale_window: int = 2000):
        owner = type(self).__name__
        self.loss_scale = _check_scale_number(owner, "init_loss_scale", init_loss_scale)
        self.scale_window = _check_int(owner, "scale_window", scale_window)
        if isinstance(scale_factor, (bool, np.bool_)) or not isinstance(scale_factor, numbers.Real):
            raise TypeError(
                f"For '{owner}', 'scale_factor' must be a float or an int, but got "
                f"{type(scale_factor).__name__}"
            )
        if not math.isfinite(scale_factor) or not scale_factor > 0:
            raise ValueError(
                f"For '{owner}', 'scale_factor' must be a finite number > 0, but got {scale_factor}"
            )
        self.scale_factor = scale_factor
        self.cur_iter = 1
        self.last_overflow_iter = 0
        self.bad_step = 0

    def get_loss_scale(self) -> float:
        """The current loss scale (a float)."""
        return self.loss_scale

    def get_drop_overflow_update(self) -> bool:
        """Always True: an overflowing step is skipped."""
        return True

    def update_loss_scale(self, overflow: Any) -> None:
        """Apply the update rule above for one step.

        Args:
            overflow: whether this step's gradients held an inf or NaN (a bool or a 0-d bool array).

        Raises:
            TypeError: ``overflow`` is not a bool.
            RuntimeError: more than 1000 consecutive overflows.
        """
        overflow = _as_flag(type(self).__name__, "overflow", overflow)
        if overflow:
            self.loss_scale = max(self.loss_scale * (1 / self.scale_factor), 1.0)
            self.last_overflow_iter = self.cur_iter
            self.bad_step += 1
        else:
            if (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
                self.loss_scale = float(self.loss_scale * self.scale_factor)
            self.bad_step = 0
        if self.bad_step > self.bad_step_max:
            raise RuntimeError(
                f"Dynamic loss scale: {self.bad_step} consecutive overflows, more than the "
                f"maximum of {self.bad_step_max}"
            )
        self.cur_iter += 1

    def __repr__(self) -> str:
        return (
            f"DynamicLossScaleManager(loss_scale={self.loss_scale!r}, "
            f"scale_factor={self.scale_factor!r}, scale_window={self.scale_window!r})"
        )


Arrays = np.ndarray | tuple | list


class DynamicLossScaler:
    """Dynamic loss scaling with a float32 scale and a step counter (MindSpore 2.x ``amp.DynamicLossScaler``).

    ``scale_value`` is a float32 number (read it as a Python float); ``counter`` counts the consecutive finite
    steps since the last growth or overflow, modulo ``scale_window``. ``adjust(grads_finite)``:

    * finite: if ``counter == scale_window - 1`` the scale becomes ``scale_value * scale_factor`` (float32)
      unless that product is inf (then it stays); ``counter = (counter + 1) % scale_window`` (so 0 after a
      growth);
    * not finite: ``scale_value = max(1, scale_value / scale_factor)`` (float32); ``counter = 0``.

    The scale therefore grows after every ``scale_window`` consecutive finite steps and shrinks at every
    overflow, never below 1.

    Args:
        scale_value: the initial scale, a real number >= 1 (Python or NumPy int or float; not bool); stored as
            float32.
        scale_factor: the growth and shrink factor, an int > 0.
        scale_window: the number of consecutive finite steps before the scale grows, an int > 0.

    Raises:
        TypeError: ``scale_value`` not a real number; ``scale_window``/``scale_factor`` not an int.
        ValueError: ``scale_value`` < 1 (or not finite, which MindSpore does not check); ``scale_window``/
            ``scale_factor`` < 1. Checked in MindSpore's order: scale_value, scale_window, scale_factor.
    """

    def __init__(self, scale_value: float, scale_factor: int, scale_window: int):
        owner = type(self).__name__
        self._scale = np.float32(_check_scale_number(owner, "scale_value", scale_value))
        self.scale_window = _check_int(owner, "scale_window", scale_window)
        self.scale_factor = _check_int(owner, "scale_factor", scale_factor)
        self._counter = 0

    @property
    def scale_value(self) -> float:
        """The current scale (a float32 value, as a Python float)."""
        return float(self._scale)

    @property
    def counter(self) -> int:
        """Consecutive finite steps since the last growth or overflow (0 .. scale_window - 1)."""
        return self._counter

    def scale(self, inputs: Arrays) -> Arrays:
        """``inputs * scale_value``: new arrays, in each array's dtype (the loss value before backward).

        Args:
            inputs: a floating NumPy array, or a tuple/list (nested allowed) of them; the same structure is
                returned.

        Raises:
            TypeError: an element is not a floating NumPy array.
        """
        return _map_arrays("inputs", inputs, lambda x: _times(x, self.scale_value))

    def unscale(self, inputs: Arrays) -> Arrays:
        """``inputs / scale_value``: new arrays, in each array's dtype (the gradients after backward).

        MindSpore multiplies by the float32 reciprocal of the scale; a true division is used here. The two
        are identical whenever the scale is a power of two (always, when the initial scale and the factor are
        powers of two), and within an ulp otherwise.

        Args:
            inputs: a floating NumPy array, or a tuple/list (nested allowed) of them; the same structure is
                returned.

        Raises:
            TypeError: an element is not a floating NumPy array.
        """
        return _map_arrays("inputs", inputs, lambda x: _divided(x, self.scale_value))

    def adjust(self, grads_finite: Any) -> bool:
        """Update ``scale_value`` and ``counter`` (rule in the class docstring); return True, as MindSpore.

        Args:
            grads_finite: whether every gradient was finite (a bool or a 0-d bool array, e.g. from
                :func:`all_finite`).

        Raises:
            TypeError: ``grads_finite`` is not a bool.
        """
        finite = _as_flag(type(self).__name__, "grads_finite", grads_finite)
        factor = np.float32(self.scale_factor)
        if finite:
            if self._counter == self.scale_window - 1:
                with np.errstate(over="ignore"):
                    grown = self._scale * factor
                if np.isfinite(grown):
                    self._scale = grown
            self._counter = (self._counter + 1) % self.scale_window
        else:
            self._scale = max(np.float32(1.0), self._scale / factor)
            self._counter = 0
        return True

    def __repr__(self) -> str:
        return (
            f"DynamicLossScaler(scale_value={self.scale_value!r}, scale_factor={self.scale_factor!r}, "
            f"scale_window={self.scale_window!r})"
        )


def _times(x: np.ndarray, scale: float) -> np.ndarray:
    """``x * scale`` in x's dtype (float16 through float32)."""
    if x.dtype.itemsize < 4:
        return (x.astype(np.float32) * np.float32(scale)).astype(x.dtype)
    return x * x.dtype.type(scale)


def _divided(x: np.ndarray, scale: float) -> np.ndarray:
    """``x / scale``, correctly rounded in x's dtype (float16 through float32, where 2**24 is not inf)."""
    if x.dtype.itemsize < 4:
        return (x.astype(np.float32) / np.float32(scale)).astype(x.dtype)
    return x / x.dtype.type(scale)


def _map_arrays(name: str, inputs: Any, fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    """Apply ``fn`` to every array of an array or (nested) tuple/list, after checking them all."""
    _check_float_arrays(name, inputs)
    return _apply(inputs, fn)


def _check_float_arrays(name: str, inputs: Any) -> None:
    if isinstance(inputs, (tuple, list)):
        for i, item in enumerate(inputs):
            _check_float_arrays(f"{name}[{i}]", item)
    elif (
        not isinstance(inputs, np.ndarray)
        or inputs.dtype.kind != "f"
        or isinstance(inputs, np.ma.MaskedArray)
    ):
        kind = f"array of dtype {inputs.dtype}" if isinstance(inputs, np.ndarray) else type(inputs).__name__
        if isinstance(inputs, np.ma.MaskedArray):
            kind = "a masked array (its mask cannot be honoured)"
        raise TypeError(f"{name} must be a floating NumPy array or a tuple/list of them, but got {kind}")


def _apply(inputs: Any, fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(_apply(item, fn) for item in inputs)
    return fn(inputs)


def all_finite(inputs: Any) -> bool:
    """True iff every element of every array in ``inputs`` is finite (no inf, no NaN) (MindSpore
    ``amp.all_finite``, returned as a Python bool).

    Args:
        inputs: a NumPy array, a CUDA array (anything with ``__cuda_array_interface__``, or a Numba simulator
            array), a real number, an object with a ``.values`` array attribute (a row-sparse gradient: only
            its values are checked), or a tuple/list (nested allowed) of these. Integer and bool arrays are
            always finite; an empty tuple is all finite. A CUDA array is copied to the host and checked there
            (one transfer per array; the check stops at the first non-finite array).

    Raises:
        TypeError: an element of another type (e.g. a string or an object-dtype array), named by its position.
    """
    return _all_finite("inputs", inputs)


def _all_finite(name: str, x: Any) -> bool:
    if isinstance(x, np.ma.MaskedArray):  # np.isfinite(x).all() would skip the masked elements
        raise TypeError(f"{name} is a masked array, whose mask all_finite cannot honour; pass a plain array")
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "fc":
            return bool(np.isfinite(x).all())
        if x.dtype.kind == "V" and x.dtype.itemsize == 2 and x.dtype.name == "bfloat16":
            # bfloat16: finite unless every exponent bit is set
            return not bool(((x.view(np.uint16) & np.uint16(0x7F80)) == np.uint16(0x7F80)).any())
        if x.dtype.kind in "iub":
            return True
        raise TypeError(f"{name} must have a numeric dtype, but got {x.dtype}")
    if isinstance(x, (tuple, list)):
        return all(_all_finite(f"{name}[{i}]", item) for i, item in enumerate(x))
    if isinstance(x, (bool, np.bool_, numbers.Integral, np.integer)):
        return True
    if isinstance(x, (numbers.Real, np.floating, np.complexfloating)):
        return bool(np.isfinite(np.asarray(x)))
    if hasattr(x, "values") and not callable(x.values):
        return _all_finite(f"{name}.values", x.values)
    if hasattr(x, "__cuda_array_interface__") or type(x).__module__.startswith("numba.cuda"):
        from ..kernels import _cuda  # imported only when a CUDA array is seen (it loads Numba)

        if _cuda.is_device_array(x):
            return _all_finite(name, _cuda.to_host(x))
    raise TypeError(
        f"{name} must be an array, a number, an object with a '.values' array, or a tuple/list "
        f"of them, but got {type(x).__name__}"
    )


Manager = FixedLossScaleManager | DynamicLossScaleManager | DynamicLossScaler


def loss_scaled_step(
    optimizer: Callable[[Any], Any], scaled_gradients: Any, manager: Manager
) -> tuple[bool, float]:
    """One optimizer step on loss-scaled gradients, skipped on overflow (``TrainOneStepWithLossScaleCell``).

    With a :class:`DynamicLossScaleManager`, a :class:`DynamicLossScaler`, or a :class:`FixedLossScaleManager`
    with ``drop_overflow_update=True``:

    1. ``grads = scaled_gradients / scale`` with ``scale`` the manager's current scale: new arrays (the inputs
       are not modified), a true division correctly rounded in each gradient's dtype (MindSpore multiplies by
       the float32 reciprocal: identical for power-of-two scales, within an ulp otherwise);
    2. ``overflow = not all_finite(grads)``; for a parallel optimizer (built with ``comm=``) the flag is
       global: an overflow on any rank is an overflow on every rank, so all of them skip the step;
    3. if not overflow: ``optimizer(grads)``, with ``grads`` in the structure of ``scaled_gradients``. On
       overflow the optimizer is **not called at all**, so every parameter and optimizer slot (and its step
       counter) stays bit-identical;
    4. the manager is updated: ``update_loss_scale(overflow)`` (managers) or ``adjust(not overflow)``
       (:class:`DynamicLossScaler`). MindSpore updates it just before the optimizer; the result is the same,
       and here a failing optimizer call leaves the manager untouched.

    With a :class:`FixedLossScaleManager` with ``drop_overflow_update=False`` (MindSpore: a plain
    TrainOneStepCell seeded with ``sens = loss_scale``): ``optimizer(scaled_gradients)`` is called
    unconditionally with the gradients still scaled, unchecked; the optimizer divides them by its own
    ``loss_scale``.

    Row-sparse gradients are duck-typed: any object with ``indices``, ``values`` (a floating NumPy array) and
    ``dense_shape`` attributes. The unscaled copy is ``dataclasses.replace(g, values=new_values)`` for a
    dataclass instance, else ``type(g)(g.indices, new_values, g.dense_shape)``; only its values are divided
    and checked.

    Args:
        optimizer: a callable taking the gradients (e.g. an optimizer of :mod:`optkernels.optimizers`). If it
            has a numeric ``loss_scale`` attribute, that must be 1.0 (skip-on-overflow modes: the gradients
            arrive unscaled) or equal the manager's scale (``drop_overflow_update=False``), else ValueError.
        scaled_gradients: the gradients of ``scale * loss``: a floating NumPy array, a row-sparse gradient, or
            a tuple/list of them (NumPy only; CUDA arrays are a TypeError).
        manager: a :class:`FixedLossScaleManager`, :class:`DynamicLossScaleManager` or
            :class:`DynamicLossScaler`.

    Returns:
        ``(applied, scale)``: whether the optimizer was called, and the manager's scale after the update (the
        scale to seed the next backward pass with; MindSpore's cell returns its scale Parameter).

    Raises:
        TypeError: ``manager`` of another type, ``optimizer`` not callable, a gradient that is not a floating
            NumPy array or a row-sparse gradient (named by its position, e.g. ``scaled_gradients[2]``).
        ValueError: the optimizer's ``loss_scale`` does not fit the mode (see ``optimizer``).
        RuntimeError: from :meth:`DynamicLossScaleManager.update_loss_scale` after 1000 consecutive overflows.
        All checks run before anything is divided, called or updated.
    """
    if not isinstance(manager, (FixedLossScaleManager, DynamicLossScaleManager, DynamicLossScaler)):
        raise TypeError(
            f"manager must be a FixedLossScaleManager, a DynamicLossScaleManager or a "
            f"DynamicLossScaler, but got {type(manager).__name__}"
        )
    if not callable(optimizer):
        raise TypeError(f"optimizer must be callable, but got {type(optimizer).__name__}")
    _check_gradients("scaled_gradients", scaled_gradients)
    scale = manager.scale_value if isinstance(manager, DynamicLossScaler) else manager.get_loss_scale()
    drop = not isinstance(manager, FixedLossScaleManager) or manager.get_drop_overflow_update()
    _check_optimizer_loss_scale(optimizer, 1.0 if drop else scale, drop)

    if not drop:
        optimizer(scaled_gradients)
        return True, scale

    grads = _apply_gradients(scaled_gradients, lambda v: _divided(v, scale))
    finite = all_finite(grads)
    parallel = getattr(optimizer, "_parallel", None)
    if parallel is not None:  # a parallel optimizer (comm=): every rank skips if any rank overflows
        finite = parallel.all_agree(finite)
    if finite:
        optimizer(grads)
    if isinstance(manager, DynamicLossScaler):
        manager.adjust(finite)
        return finite, manager.scale_value
    manager.update_loss_scale(not finite)
    return finite, manager.get_loss_scale()


def _is_sparse(g: Any) -> bool:
    return not isinstance(g, (np.ndarray, tuple, list)) and hasattr(g, "values") and not callable(g.values)


def _check_gradients(name: str, grads: Any) -> None:
    if isinstance(grads, (tuple, list)):
        for i, g in enumerate(grads):
            if isinstance(g, (tuple, list)):
                raise TypeError(
                    f"{name}[{i}] must be an array or a row-sparse gradient, but got {type(g).__name__}"
                )
            _check_gradients(f"{name}[{i}]", g)
        return
    if _is_sparse(grads):
        values = grads.values
        if not isinstance(values, np.ndarray) or values.dtype.kind != "f":
            raise TypeError(
                f"{name}.values must be a floating NumPy array, but got "
                f"{getattr(values, 'dtype', type(values).__name__)}"
            )
        if dataclasses.is_dataclass(grads) and not isinstance(grads, type):
            if not any(f.name == "values" and f.init for f in dataclasses.fields(grads)):
                raise TypeError(f"{name} is a dataclass without an init field 'values'")
        elif not (hasattr(grads, "indices") and hasattr(grads, "dense_shape")):
            raise TypeError(
                f"{name} has '.values' but no 'indices' and 'dense_shape' attributes; a "
                f"row-sparse gradient is rebuilt as type(g)(g.indices, values, g.dense_shape)"
            )
        return
    if not isinstance(grads, np.ndarray) or grads.dtype.kind != "f":
        kind = f"an array of dtype {grads.dtype}" if isinstance(grads, np.ndarray) else type(grads).__name__
        raise TypeError(f"{name} must be a floating NumPy array or a row-sparse gradient, but got {kind}")


def _apply_gradients(grads: Any, fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    """The gradients with ``fn`` applied to each dense array or to each row-sparse gradient's values."""
    if isinstance(grads, (tuple, list)):
        return type(grads)(_apply_gradients(g, fn) for g in grads)
    if _is_sparse(grads):
        values = fn(grads.values)
        if dataclasses.is_dataclass(grads) and not isinstance(grads, type):
            return dataclasses.replace(grads, values=values)
        return type(grads)(grads.indices, values, grads.dense_shape)
    return fn(grads)


def _check_optimizer_loss_scale(optimizer: Any, expected: float, drop: bool) -> None:
    """An optimizer's own ``loss_scale`` (when it has a numeric one) must fit the loss-scale mode."""
    own = getattr(optimizer, "loss_scale", None)
    if isinstance(own, (bool, np.bool_)) or not isinstance(own, numbers.Real):
        return
    if float(own) != expected:
        if drop:
            raise ValueError(
                f"optimizer has loss_scale={own}, but with a skip-on-overflow manager the "
                f"gradients are unscaled before the optimizer: build it with loss_scale=1.0"
            )
        raise ValueError(
            f"optimizer has loss_scale={own}, but FixedLossScaleManager(drop_overflow_update="
            f"False) passes gradients scaled by {expected}: build the optimizer with "
            f"loss_scale={expected}"
        )
