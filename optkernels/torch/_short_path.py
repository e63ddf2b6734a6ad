"""The step of an optimizer whose plain steps take a short path once a generic step has planned them
(SGD's :class:`.sgd._PlainStep`, half-precision Adam's :class:`._half_step.HalfStep`): ``step`` goes to the
short path straight where nothing watches the step (no hooks, closure or profiler), and the generic step
makes the next short path after it runs."""

from __future__ import annotations

from typing import Any

from ._base import unwrapped

__all__ = ["ShortPathSteps"]


class ShortPathSteps:
    """Mixin before :class:`._base.KernelOptimizer`: subclasses implement :meth:`_short_path_of`."""

    _fast: Any = None  # the short path of plain steps, once a generic step made it possible
    _fast_refused: Any = None  # the plan whose guard refused the short path (not retried with that plan)

    def _short_path_of(self) -> Any:
        """The short path of the next steps (an object whose ``run(optimizer)`` steps and returns True, or
        returns False having written nothing), or None where the last step was not one it repeats."""
        raise NotImplementedError

    @unwrapped
    def step(self, closure: Any = None) -> Any:
        """One update of every parameter that has a gradient (see :meth:`KernelOptimizer.step`); a plain
        step without hooks, closure or profiler takes the short path straight from here."""
        fast = self._fast
        if fast is not None and closure is None and self._unobserved():  # type: ignore[attr-defined]
            if fast.run(self):
                return None
            self._fast = None
        return super().step(closure)  # type: ignore[misc]

    def _step(self, closure: Any = None) -> Any:
        fast = self._fast
        if fast is not None and closure is None and fast.run(self):
            return None
        self._fast = None
        loss = super()._step(closure)  # type: ignore[misc]
        self._fast = self._short_path_of()
        return loss
