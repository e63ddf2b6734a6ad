"""torch's own implementation behind an optkernels.torch class, for what optkernels' kernels do not serve.

The ``torch.optim`` class of the same name is, for an optkernels.torch class: the judge of its constructor's
arguments (torch's error types and messages, torch's normalised ``defaults``, torch's initial state), the
implementation of its step for the parameters the kernels do not serve (run over those parameters only, on
the optimizer's own ``state``, with the group's own switches), and the judge of tensors torch may take or refuse
(a rehearsal of torch's step on copies tells what torch raises without touching the originals).
"""

from __future__ import annotations

import collections
import collections.abc
import inspect
import warnings
from typing import Any

import torch

__all__ = ["TorchRunner", "fill_older_groups", "materialize", "torch_class"]


def torch_class(cls: type) -> type | None:
    """The ``torch.optim`` class an optkernels.torch class stands for: the first class in its MRO whose name
    ``torch.optim`` also defines (a user's subclass of ``optkernels.torch.Adam`` still finds
    ``torch.optim.Adam``), or None (``torch.optim.Optimizer`` itself, every class's base, stands for none)."""
    for klass in cls.__mro__:
        found = getattr(torch.optim, klass.__name__, None)
        if (
            isinstance(found, type)
            and issubclass(found, torch.optim.Optimizer)
            and found is not torch.optim.Optimizer
            and found.__module__.startswith("torch.")
        ):
            return found
    return None


def fill_older_groups(cls: type, groups: list[dict]) -> None:
    """Set in each of ``groups`` (parameter groups of a loaded state) the switches it lacks as
    ``cls.__setstate__`` sets them (a state saved before torch added ``maximize``, ``foreach``,
    ``differentiable``, ... gets the value ``cls`` gives it, its own default)."""
    optimizer: Any = cls  # a torch.optim class, typed as a plain type here
    probe = object.__new__(optimizer)
    shells = [{**{k: v for k, v in group.items() if k != "params"}, "params": []} for group in groups]
    optimizer.__setstate__(probe, {"defaults": {}, "state": {}, "param_groups": shells})
    for group, shell in zip(groups, probe.param_groups):
        for key, value in shell.items():
            group.setdefault(key, value)


def materialize(params: Any) -> Any:
    """``params`` as a list (of tensors, ``(name, tensor)`` pairs or group dicts, each group's ``params``
    listed), so that two optimizers can read it; a tensor, a set or anything torch refuses is passed on as it
    is, for torch to raise its own error."""
    if isinstance(params, (torch.Tensor, set)) or not isinstance(params, collections.abc.Iterable):
        return params
    items = list(params)
    out = []
    for item in items:
        if isinstance(item, dict) and not isinstance(item.get("params"), (torch.Tensor, set, type(None))):
            item = dict(item, params=list(item["params"]))
        out.append(item)
    return out


def _copies(params: Any) -> Any:
    if not isinstance(params, list):
        return params
    return [dict(item) if isinstance(item, dict) else item for item in params]


def _torch_kwargs(cls: type, defaults: dict) -> dict:
    accepted = inspect.signature(cls).parameters  # the constructor's, without self
    return {name: value for name, value in defaults.items() if name in accepted}


def _unhooked_step(cls: type) -> Any:
    """``cls.step`` without torch's hook wrapper (the owner ran the hooks already)."""
    step: Any = getattr(cls, "step")  # noqa: B009 -- a torch.optim class, typed as a plain type here
    return step.__wrapped__ if getattr(step, "hooked", False) else step


class TorchRunner:
    """A ``torch.optim`` instance run on behalf of an optkernels.torch optimizer.

    Args:
        cls: the ``torch.optim`` class.
        params: the parameters as the user gave them (after :func:`materialize`), or None for a runner
            built from ``defaults`` alone (after unpickling).
        defaults: the owner's defaults (its constructor's arguments).

    Raises:
        Whatever ``cls(params, **defaults)`` raises: torch's error types and messages.
    """

    def __init__(self, cls: type, params: Any, defaults: dict):
        self.cls = cls
        if params is None:
            params = [torch.zeros(1, 1, requires_grad=True)]  # a matrix: torch.optim.Muon takes no other
        with warnings.catch_warnings():  # the owner's own construction gives torch's warnings once
            warnings.simplefilter("ignore")
            self.twin = cls(_copies(params), **_torch_kwargs(cls, defaults))
        self.initial_state = dict(self.twin.state)  # Adagrad builds its state in its constructor
        self.twin.param_groups, self.twin.state = [], collections.defaultdict(dict)
        self._step = _unhooked_step(cls)
        self.refused_state: dict | None = None

    @property
    def defaults(self) -> dict:
        """torch's defaults (hyper-parameters as torch normalised them)."""
        return self.twin.defaults

    @property
    def amp_scaling(self) -> bool:
        """True where torch's class takes ``grad_scale``/``found_inf`` from ``torch.amp.GradScaler``."""
        return bool(getattr(self.twin, "_step_supports_amp_scaling", False))

    def step(self, work: list, state: Any, defaults: dict) -> None:
        """torch's step over ``work``, a list of ``(group, parameters)``, reading and writing ``state`` (a
        ``defaultdict(dict)`` keyed by parameter, as ``optimizer.state``), with the groups' own switches:
        torch's single-tensor path by default on the CPU (its foreach path gives the same bits), its fused
        kernels where ``fused=True`` asks for them (gradients already unscaled: no ``grad_scale`` is
        passed)."""
        twin = self.twin
        twin.defaults, twin.state = defaults, state
        twin.param_groups = [dict(group, params=params) for group, params in work]
        try:
            self._step(twin)
        finally:
            twin.param_groups, twin.state = [], collections.defaultdict(dict)

    def rehearse(self, group: dict, p: torch.Tensor, state: dict, defaults: dict) -> None:
        """Run torch's step of ``p`` (its gradient and its ``state``) on copies: raises what torch raises
        for it, changes nothing. Where torch raises, :attr:`refused_state` is then the state entry torch's
        step left for ``p`` (on copies: the tensors it created lazily, as it left them), or None where it
        made none."""
        q = p.detach().clone()
        assert p.grad is not None  # only parameters with a gradient are rehearsed
        grad = p.grad.detach().clone()
        try:
            q.grad = grad
        except RuntimeError:  # another shape or dtype: as ``p.grad.data = ...`` made it
            q.grad = torch.zeros_like(q)
            q.grad.data = grad
        copies: collections.defaultdict = collections.defaultdict(dict)
        if state:
            copies[q] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
        self.refused_state = None
        try:
            self.step([(group, [q])], copies, defaults)
        except Exception:
            self.refused_state = copies.get(q)
            raise
