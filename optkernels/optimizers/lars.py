"""``LARS``: layer-wise adaptive rate scaling around another optimizer (MindSpore ``nn.LARS``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..kernels.lars import lars_update
from ..kernels.sum_squares import square_sum_all
from . import _gradient_steps as steps
from ._validators import check_bool, check_float
from .optimizer import Optimizer
from .parameter import Parameter

__all__ = ["LARS"]


def _default_lars_filter(param: Parameter) -> bool:
    return "LayerNorm" not in param.name and "bias" not in param.name


class LARS(Optimizer):
    r"""LARS (MindSpore ``nn.LARS``; OPTIMIZERS §2.13): rewrites each gradient with ``lars_update``, then
    calls the wrapped optimizer::

        g ← g/loss_scale                                     (the wrapped optimizer's loss_scale, if != 1)
        for parameters with lars_filter(p) True:
            coeff = coefficient·‖w‖/(‖g‖ + wd·‖w‖ + epsilon)   (use_clip: coeff ← clip(coeff/lr, 0, 1))
            g ← coeff·(g + wd·w)
        (other parameters, e.g. bias and LayerNorm: g unchanged, NO weight decay)
        optimizer(g)

    ``wd`` is the wrapped optimizer's weight decay for ``p`` (its user value, evaluated at the global step) if
    its decay flag is set, else 0; ``lr`` (use_clip only) is its current learning rate for ``p``. The norms
    are passed as sums of squares (``square_sum_all``, float64). Construction changes the wrapped optimizer:
    its weight decay is switched off (decay flags False) and its loss-scale division too, since LARS does
    both. The global step is the wrapped optimizer's; LARS advances it when only the weight decay was
    dynamic. Dense gradients only. ``state_dict``/``load_state_dict`` are the wrapped optimizer's.

    Args:
        optimizer: the wrapped :class:`Optimizer`.
        epsilon: float added to the denominator. Default 1e-05.
        coefficient: float trust coefficient. Default 0.001.
        use_clip: bool. Default False.
        lars_filter: callable ``Parameter -> bool`` choosing the parameters LARS rescales. Default: names
            containing neither 'LayerNorm' nor 'bias'.
        comm: None, or the communicator of a parallel wrapped optimizer (which it already has: LARS
            rescales every gradient, the wrapped optimizer updates its rank's share and broadcasts).

    Raises:
        TypeError: ``optimizer`` not an Optimizer, ``epsilon``/``coefficient`` not floats, ``use_clip`` not a
            bool, ``lars_filter`` not callable.
        ValueError: ``use_clip`` with an optimizer that has both group and dynamic learning rates.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        epsilon: float = 1e-05,
        coefficient: float = 0.001,
        use_clip: bool = False,
        lars_filter: Callable[[Parameter], bool] = _default_lars_filter,
        comm: Any = None,
    ):
        owner = self._owner = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"For '{owner}', 'optimizer' must be an Optimizer, got {type(optimizer).__name__}"
            )
        inner = optimizer._parallel
        if comm is not None and (inner is None or inner.comm is not comm):
            raise ValueError(
                f"For '{owner}', 'comm' must be the wrapped optimizer's communicator: build the "
                "wrapped optimizer with comm= (LARS runs its parallel step)"
            )
        self.epsilon = check_float("epsilon", epsilon, owner)
        self.coefficient = check_float("coefficient", coefficient, owner)
        self.use_clip = check_bool("use_clip", use_clip, owner)
        if not callable(lars_filter):
            raise TypeError(
                f"For '{owner}', 'lars_filter' must be callable, got {type(lars_filter).__name__}"
            )
        if self.use_clip and optimizer.is_group_lr and optimizer.dynamic_lr:
            raise ValueError(
                f"For '{owner}', 'use_clip' is not supported with an optimizer that has both "
                f"group and dynamic learning rates"
            )
        self.opt = optimizer
        self._inner_loss_scale = optimizer.loss_scale if optimizer._scales_gradients else 1.0
        self._decay_of = optimizer.decay_flags
        self._lars_flags = tuple(bool(lars_filter(p)) for p in optimizer.parameters)
        self._counts_for_inner = optimizer.dynamic_weight_decay and not (
            optimizer.dynamic_lr or optimizer._always_counts_steps
        )
        optimizer._hand_over_decay_and_scale()

    # The wrapped optimizer's view.
    parameters = property(lambda self: self.opt.parameters, doc="The wrapped optimizer's parameters.")
    learning_rate = property(lambda self: self.opt.learning_rate, doc="The wrapped optimizer's lr.")
    global_step = property(lambda self: self.opt.global_step, doc="The (shared) global step.")
    loss_scale = property(lambda self: self._inner_loss_scale, doc="The loss scale LARS divides by.")
    is_group = property(lambda self: self.opt.is_group)
    is_group_lr = property(lambda self: self.opt.is_group_lr)
    dynamic_lr = property(lambda self: self.opt.dynamic_lr)

    @property  # type: ignore[misc]  # read-only on purpose: set the wrapped optimizer's target
    def target(self) -> str:
        """The wrapped optimizer's target (LARS itself has no sparse path)."""
        return self.opt.target

    @property  # type: ignore[misc]  # read-only on purpose: set the wrapped optimizer's unique
    def unique(self) -> bool:
        return self.opt.unique

    def get_lr(self) -> Any:
        return self.opt.get_lr()

    def get_lr_parameter(self, param: Parameter | list) -> Any:
        return self.opt.get_lr_parameter(param)

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.opt.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.opt.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        if name == "opt":
            raise AttributeError(name)
        return getattr(self.opt, name)

    def step(self, gradients: Sequence[Any]) -> bool:
        """Rescale the gradients and run the wrapped optimizer's step; returns True (see the class
        docstring)."""
        opt = self.opt
        grads = opt._check_gradients(gradients)
        for plan, grad in zip(opt._plans, grads):
            if not (isinstance(grad, np.ndarray) or plan.device == "cuda"):
                raise TypeError(f"For '{self._owner}', the gradient of {plan.name} must be dense")
        step = opt._global_step
        wds = opt._wd_values(step)
        lrs = opt._lr_values() if self.use_clip else None
        scale = self._inner_loss_scale
        new = []
        for plan, grad in zip(opt._plans, grads):
            if not plan.owned:  # another rank of a parallel optimizer updates it
                new.append(grad)
                continue
            if scale != 1.0:
                grad = steps.unscale(grad, plan.cdtype.type(1.0 / scale), False)
            if self._lars_flags[plan.index]:
                weight = plan.param.data
                wd = wds[plan.wd_index] if self._decay_of[plan.index] else 0.0
                lr = lrs[plan.lr_index] if lrs is not None else 0.0  # a list iff use_clip
                norm_w, norm_g = square_sum_all(weight, grad)
                grad = lars_update(
                    weight,
                    grad,
                    norm_w,
                    norm_g,
                    wd,
                    lr,
                    epsilon=self.epsilon,
                    hyperpara=self.coefficient,
                    use_clip=self.use_clip,
                )
            new.append(grad)
        opt.step(new)
        if self._counts_for_inner:
            opt._global_step += 1
        return True

    def __repr__(self) -> str:
        return f"LARS({self.opt!r})"
