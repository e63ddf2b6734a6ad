"""The test view of the op table: optkernels.conformance's cases plus the inputs that must raise.

The case generators, the kernel/reference runners and the tolerance rule live in
:mod:`optkernels.conformance` (``python -m optkernels verify`` uses them too); this module adds, per op, the
out-of-range values and bad attributes of the error tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from optkernels.conformance.cases import (  # noqa: F401 -- re-exported for the tests
    CASES_BY_NAME,
    OpCase,
    bounds,
    cast_scalars,
    draw,
    draw_attrs,
    run_kernel,
    run_reference,
)
from optkernels.conformance.tolerance import compare


@dataclass(frozen=True)
class OpInfo:
    """A conformance case with the inputs that must raise.

    Attributes:
        case: the :class:`OpCase` (generators, states, output, tolerance).
        bad_values: (input name, value) pairs that must raise ValueError.
        bad_attrs: (attribute, value, exception type) triples that must raise.
    """

    case: OpCase
    bad_values: list = field(default_factory=list)
    bad_attrs: list = field(default_factory=list)

    def __getattr__(self, name):  # name, states, kernel, reference, positional, args, ulps, output, ...
        return getattr(self.case, name)


_ADAM_BAD = [("beta1", 1.0), ("beta1", 0.0), ("beta2", 1.5), ("epsilon", -1e-8), ("lr", -0.1),
             ("beta1_power", 1.0), ("beta2_power", -0.5)]
_BOOL_BAD = [("use_locking", 1, TypeError), ("use_nesterov", "yes", TypeError)]

ERRORS = {
    "apply_adam": dict(bad_values=_ADAM_BAD, bad_attrs=_BOOL_BAD),
    "apply_adam_with_amsgrad": dict(
        bad_values=[("lr", -1.0), ("beta1_power", 1.0)],
        bad_attrs=[("beta1", 1, TypeError), ("beta1", 1.0, ValueError), ("epsilon", -1e-8, ValueError),
                   ("beta2", "0.9", TypeError), ("use_locking", None, TypeError)]),
    "adam_no_update_param": dict(bad_values=_ADAM_BAD[:-2], bad_attrs=_BOOL_BAD),
    "adam_weight_decay": dict(
        bad_values=[("decay", -0.1), ("beta1", 1.0), ("beta2", 0.0), ("epsilon", -1.0), ("lr", -1e-3)],
        bad_attrs=[("use_locking", 0, TypeError)]),
    "apply_ada_max": dict(bad_values=[("beta1_power", 1.0), ("beta1", 1.0), ("beta2", -0.1), ("epsilon", -1e-8),
                                      ("lr", -1.0)]),
    "apply_adagrad": dict(bad_values=[("lr", -0.1)], bad_attrs=[("update_slots", 1, TypeError)]),
    "apply_adagrad_v2": dict(
        bad_values=[("lr", -0.1)],
        bad_attrs=[("epsilon", 1, TypeError), ("epsilon", -1e-6, ValueError), ("update_slots", "no", TypeError)]),
    "apply_momentum": dict(bad_values=[("momentum", -0.5), ("learning_rate", -0.1)],
                           bad_attrs=[("gradient_scale", 1, TypeError), ("use_nesterov", 1, TypeError)]),
    "sgd": dict(bad_values=[("learning_rate", -0.1)],
                bad_attrs=[("dampening", 0, TypeError), ("weight_decay", "0", TypeError), ("nesterov", 1, TypeError)]),
    "apply_rms_prop": dict(bad_values=[("decay", 1.5), ("momentum", -0.1), ("epsilon", -1e-10),
                                       ("learning_rate", -1.0)],
                           bad_attrs=[("use_locking", "False", TypeError)]),
    "apply_centered_rms_prop": dict(bad_values=[("decay", -0.5), ("momentum", -0.1), ("epsilon", -1e-10)]),
    "apply_ftrl": dict(bad_values=[("lr", 0.0), ("l1", -0.1), ("l2", -0.1), ("lr_power", 0.5)]),
    "apply_ftrl_v2": dict(bad_values=[("lr", 0.0), ("l1", -0.1), ("l2", -0.1), ("l2_shrinkage", -0.1),
                                      ("lr_power", 0.5)],
                          bad_attrs=[("use_locking", 1, TypeError)]),
    "apply_proximal_adagrad": dict(bad_values=[("lr", -0.1), ("l1", -0.1), ("l2", -1.0)]),
    "lars_update": dict(bad_values=[("norm_weight", -1.0), ("weight_decay", -0.1)],
                        bad_attrs=[("epsilon", 0, TypeError), ("hyperpara", None, TypeError),
                                   ("use_clip", 1, TypeError)]),
    "lamb": dict(bad_values=[("global_step", 0), ("beta1", 1.0), ("decay", -0.1), ("epsilon", -1e-6)]),
    "lion": dict(bad_values=[("lr", -0.1), ("beta1", 1.5), ("beta2", -0.1), ("weight_decay", -0.1)]),
    "adopt": dict(bad_values=[("lr", -0.1), ("beta1", 1.0), ("beta2", -0.1), ("epsilon", -1e-6),
                              ("weight_decay", -0.1), ("step", -1), ("clip", -1.0)],
                  bad_attrs=[("decouple", 1, TypeError)]),
    "ademamix": dict(bad_values=[("lr", -0.1), ("beta1", 1.0), ("beta2", -0.1), ("beta3", 1.0), ("alpha", -1.0),
                                 ("epsilon", -1e-8), ("weight_decay", -0.1), ("step", 0)],
                     bad_attrs=[("decay_after_update", "no", TypeError)]),
    "schedule_free_adamw": dict(bad_values=[("lr", -0.1), ("beta1", 1.0), ("beta2", 1.0), ("epsilon", -1e-8),
                                            ("weight_decay", -0.1), ("c", 1.5), ("step", 0)]),
    "schedule_free_sgd": dict(bad_values=[("lr", -0.1), ("momentum", 1.0), ("weight_decay", -0.1), ("c", -0.5)]),
}

OPS = [OpInfo(CASES_BY_NAME[name], **errors) for name, errors in ERRORS.items()]
OPS_BY_NAME = {op.name: op for op in OPS}


def assert_close(actual, expected, dtype, ulps: float, what: str = "", before=None) -> None:
    """Assert the tolerance rule of :mod:`optkernels.conformance.tolerance`."""
    result = compare(actual, expected, dtype, ulps, before)
    assert result.ok, result.message(what)
