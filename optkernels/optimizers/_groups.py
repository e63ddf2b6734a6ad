"""Parameters and parameter groups of an optimizer (OPTIMIZERS §1.1-1.2, §1.4), parsed into one layout.

A layout lists the parameters in optimizer order and, per parameter, the index of its learning rate and of
its weight decay (distinct objects are kept once), its MindSpore decay flag and its group's
``grad_centralization`` flag.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._learning_rate import LearningRate, parse_learning_rate
from .parameter import Parameter

GROUP_KEYS = ("params", "lr", "weight_decay", "grad_centralization", "order_params")


def default_decay_filter(param: Parameter) -> bool:
    """MindSpore's default weight-decay filter for ungrouped parameters: no 'beta' and no 'gamma' in the
    name (the normalization layers' shift and scale are not decayed)."""
    return "beta" not in param.name and "gamma" not in param.name


@dataclass
class Layout:
    """The parsed parameters (see the module docstring)."""

    params: list = field(default_factory=list)
    lrs: list[LearningRate] = field(default_factory=list)  # distinct learning rates; [0] is the default
    wds: list[Any] = field(default_factory=list)  # distinct weight decays (float or callable)
    lr_index: list[int] = field(default_factory=list)
    wd_index: list[int] = field(default_factory=list)
    flags: list[bool] = field(default_factory=list)
    gcs: list[bool] = field(default_factory=list)
    is_group: bool = False
    is_group_lr: bool = False
    ordered: bool = False


def check_parameters(owner: str, parameters: Any) -> list:
    """MindSpore's checks of ``parameters``: not None (ValueError), iterable (TypeError), not empty
    (ValueError), all Parameter or all dict (TypeError)."""
    if parameters is None:
        raise ValueError(f"For '{owner}', the argument 'parameters' must not be None")
    if isinstance(parameters, (Parameter, str, bytes, dict)) or not isinstance(parameters, Iterable):
        raise TypeError(
            f"For '{owner}', the argument 'parameters' must be a list of Parameter or of dict, "
            f"got {type(parameters).__name__}"
        )
    items = list(parameters)
    if not items:
        raise ValueError(f"For '{owner}', the argument 'parameters' must not be empty")
    if not (all(isinstance(x, Parameter) for x in items) or all(isinstance(x, dict) for x in items)):
        raise TypeError(
            f"For '{owner}', all elements of the argument 'parameters' must be Parameter or "
            f"all must be dict, got {sorted({type(x).__name__ for x in items})}"
        )
    return items


def parse_weight_decay(owner: str, weight_decay: Any, what: str = "weight_decay") -> Any:
    """A float >= 0 (ints converted; ValueError if negative or not finite), or a callable of the global step
    (dynamic decay); anything else (bool included) is a TypeError."""
    if isinstance(weight_decay, (bool, np.bool_)):
        raise TypeError(f"For '{owner}', '{what}' must be a float, an int or a callable, got bool")
    if isinstance(weight_decay, (int, float, np.integer, np.floating)):
        value = float(weight_decay)
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"For '{owner}', '{what}' must be a finite number >= 0, got {value}")
        return value
    if callable(weight_decay):
        return weight_decay
    raise TypeError(
        f"For '{owner}', '{what}' must be a float, an int or a callable of the global step, got "
        f"{type(weight_decay).__name__}"
    )


def parse(owner: str, parameters: Any, learning_rate: Any, weight_decay: Any, *, decay_all: bool) -> Layout:
    """The layout of ``parameters`` (a list of Parameters or of group dicts).

    Ungrouped: one learning rate and one decay for all; decay flags by :func:`default_decay_filter` (all True
    when ``decay_all``, FTRL's rule); two parameters with one name are a ValueError (state is keyed by name).
    Grouped: see :func:`_parse_groups`. ``learning_rate`` is parsed before the groups, ``weight_decay`` after
    the group keys are checked (MindSpore's order).
    """
    items = check_parameters(owner, parameters)
    default_lr = parse_learning_rate(learning_rate, owner)
    layout = Layout(lrs=[default_lr])
    if isinstance(items[0], dict):
        _parse_groups(owner, items, weight_decay, layout)
        return layout
    seen = set()
    for p in items:
        if p.name in seen:
            raise ValueError(
                f"For '{owner}', the parameter name '{p.name}' appears twice; optimizer state "
                "is "
                f"keyed by name, so every parameter needs a unique name"
            )
        seen.add(p.name)
    n = len(items)
    layout.params = items
    layout.wds.append(parse_weight_decay(owner, weight_decay))
    layout.lr_index, layout.wd_index, layout.gcs = [0] * n, [0] * n, [False] * n
    layout.flags = [True if decay_all else default_decay_filter(p) for p in items]
    return layout


def _parse_groups(owner: str, groups: list[dict], weight_decay: Any, layout: Layout) -> None:
    """MindSpore's group rules (§1.2): unknown keys → KeyError; a group without 'params' → KeyError; empty
    'params' → ValueError; a non-Parameter → TypeError; a parameter set twice → RuntimeError; learning-rate
    tables of different lengths → ValueError; 'order_params' alone in its dict (ValueError), iterable
    (TypeError), listing every grouped parameter once (ValueError). A group's decay flag is
    ``weight_decay > 0`` or a callable (no name filter)."""
    for k, group in enumerate(groups):
        unknown = [key for key in group if key not in GROUP_KEYS]
        if unknown:
            raise KeyError(
                f"For '{owner}', the key(s) {unknown} of parameter group {k} cannot be "
                "recognized; "
                f"valid keys are {list(GROUP_KEYS)}"
            )
    layout.is_group = True
    layout.wds.append(parse_weight_decay(owner, weight_decay))
    table_length = layout.lrs[0].table_length
    order = None
    seen: set[str] = set()
    for k, group in enumerate(groups):
        if "order_params" in group:
            if len(group) > 1:
                raise ValueError(
                    f"For '{owner}', the dict with 'order_params' must contain only that key, "
                    "got "
                    f"{list(group)}"
                )
            value = group["order_params"]
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TypeError(
                    f"For '{owner}', 'order_params' must be an iterable of Parameter, got "
                    f"{type(value).__name__}"
                )
            order = list(value)
            continue
        if "params" not in group:
            raise KeyError(f"For '{owner}', parameter group {k} has no 'params' key")
        members = group["params"]
        if isinstance(members, (Parameter, str, bytes, dict)) or not isinstance(members, Iterable):
            raise TypeError(
                f"For '{owner}', 'params' of group {k} must be an iterable of Parameter, got "
                f"{type(members).__name__}"
            )
        members = list(members)
        if not members:
            raise ValueError(f"For '{owner}', 'params' of group {k} is empty")
        for j, p in enumerate(members):
            if not isinstance(p, Parameter):
                raise TypeError(
                    f"For '{owner}', the {j}th item of 'params' of group {k} must be a "
                    "Parameter, "
                    f"got {type(p).__name__}"
                )
        lr_index = 0
        if "lr" in group:
            layout.is_group_lr = True
            lr = parse_learning_rate(group["lr"], owner, f"learning_rate_group_{k}")
            if lr.table_length is not None:
                if table_length is None:
                    table_length = lr.table_length
                elif lr.table_length != table_length:
                    raise ValueError(
                        f"For '{owner}', learning-rate tables must all have one length: group "
                        f"{k} "
                        f"has {lr.table_length}, another has {table_length}"
                    )
            layout.lrs.append(lr)
            lr_index = len(layout.lrs) - 1
        wd_index = 0
        if "weight_decay" in group:
            layout.wds.append(parse_weight_decay(owner, group["weight_decay"]))
            wd_index = len(layout.wds) - 1
        gc = group.get("grad_centralization", False)
        if not isinstance(gc, (bool, np.bool_)):
            raise TypeError(
                f"For '{owner}', 'grad_centralization' of group {k} must be a bool, got {type(gc).__name__}"
            )
        wd = layout.wds[wd_index]
        flag = callable(wd) or wd > 0.0
        for p in members:
            if p.name in seen:
                raise RuntimeError(
                    f"For '{owner}', the parameter {p.name} appears in more than one group "
                    "(or "
                    f"twice in one); every parameter may be set only once"
                )
            seen.add(p.name)
            layout.params.append(p)
            layout.lr_index.append(lr_index)
            layout.wd_index.append(wd_index)
            layout.flags.append(flag)
            layout.gcs.append(bool(gc))
    if order is not None:
        _reorder(owner, order, layout)


def _reorder(owner: str, order: list, layout: Layout) -> None:
    """Put the parameters (with their lr, decay and flags) in the order of ``order_params``."""
    params = layout.params
    if len(order) != len(params):
        raise ValueError(
            f"For '{owner}', 'order_params' has {len(order)} parameters but the groups have "
            f"{len(params)}; they must be the same"
        )
    position: dict[str, int] = {}
    for j, p in enumerate(order):
        if not isinstance(p, Parameter):
            raise TypeError(
                f"For '{owner}', the {j}th item of 'order_params' must be a Parameter, got {type(p).__name__}"
            )
        if p.name in position:
            raise ValueError(f"For '{owner}', 'order_params' lists the parameter {p.name} twice")
        position[p.name] = j
    for p in params:
        if p.name not in position:
            raise ValueError(f"For '{owner}', the grouped parameter {p.name} is not in 'order_params'")
    rank = sorted(range(len(params)), key=lambda i: position[params[i].name])
    for name in ("params", "lr_index", "wd_index", "flags", "gcs"):
        column = getattr(layout, name)
        setattr(layout, name, [column[i] for i in rank])
    layout.ordered = True
