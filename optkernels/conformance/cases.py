"""Random valid inputs for every op: the case generators of ``python -m optkernels verify`` and of the tests.

Each :class:`OpCase` says how to draw valid inputs for one op (arrays of a dtype and shape, scalars and
attributes in their valid ranges), which inputs are state arrays updated in place, where its result lives,
and how much float32 rounding its results may show against the float64 reference (see
:mod:`optkernels.conformance.tolerance`).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

# OpCase and the draws shared with the sparse cases live a floor down, in .opcase; re-exported here.
from .opcase import OpCase, adam_scalars, moments, nesterov_attr, normal, uniform
from .sparse_cases import SPARSE_CASES


def make_adam(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        **moments(rng, shape, dtype),
        gradient=normal(rng, shape, dtype),
        **adam_scalars(rng),
    )


def make_amsgrad(rng, shape, dtype):
    s = adam_scalars(rng)
    mom = moments(rng, shape, dtype)
    return dict(
        var=normal(rng, shape, dtype),
        **mom,
        vhat=uniform(rng, shape, dtype, 0.0, 0.5),
        beta1_power=s["beta1_power"],
        beta2_power=s["beta2_power"],
        lr=s["lr"],
        grad=normal(rng, shape, dtype),
    )


def make_adam_delta(rng, shape, dtype):
    inputs = make_adam(rng, shape, dtype)
    del inputs["var"]
    return inputs


def make_adam_weight_decay(rng, shape, dtype):
    s = adam_scalars(rng)
    return dict(
        var=normal(rng, shape, dtype),
        **moments(rng, shape, dtype),
        lr=s["lr"],
        beta1=s["beta1"],
        beta2=s["beta2"],
        epsilon=s["epsilon"],
        decay=rng.uniform(0.0, 0.1),
        gradient=normal(rng, shape, dtype),
    )


def make_ada_max(rng, shape, dtype):
    s = adam_scalars(rng)
    return dict(
        var=normal(rng, shape, dtype),
        **moments(rng, shape, dtype),
        beta1_power=s["beta1_power"],
        lr=s["lr"],
        beta1=s["beta1"],
        beta2=s["beta2"],
        epsilon=s["epsilon"],
        grad=normal(rng, shape, dtype),
    )


def make_adagrad(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        lr=rng.uniform(1e-3, 0.1),
        grad=normal(rng, shape, dtype),
    )


def make_momentum(rng, shape, dtype):
    return dict(
        variable=normal(rng, shape, dtype),
        accumulation=normal(rng, shape, dtype, 0.1),
        learning_rate=rng.uniform(1e-3, 0.1),
        gradient=normal(rng, shape, dtype),
        momentum=rng.uniform(0.0, 0.99),
    )


def make_sgd(rng, shape, dtype):
    return dict(
        parameters=normal(rng, shape, dtype),
        gradient=normal(rng, shape, dtype),
        learning_rate=rng.uniform(1e-3, 0.1),
        accum=normal(rng, shape, dtype, 0.1),
        momentum=float(rng.choice([0.0, rng.uniform(0.1, 0.99)])),
        stat=rng.integers(0, 2, shape).astype(dtype),
    )


def sgd_attrs(rng):
    nesterov = bool(rng.integers(2))
    return dict(
        dampening=0.0 if nesterov else float(rng.choice([0.0, 0.1])),
        weight_decay=float(rng.choice([0.0, 0.01])),
        nesterov=nesterov,
    )


def _rms_scalars(rng):
    return dict(
        learning_rate=rng.uniform(1e-3, 0.1),
        decay=rng.uniform(0.5, 0.99),
        momentum=rng.uniform(0.0, 0.9),
        epsilon=float(10.0 ** rng.uniform(-10, -3)),
    )


def make_rms_prop(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        mean_square=uniform(rng, shape, dtype, 0.01, 1.0),
        moment=normal(rng, shape, dtype, 0.1),
        grad=normal(rng, shape, dtype),
        **_rms_scalars(rng),
    )


def make_centered_rms_prop(rng, shape, dtype):
    mean_gradient = normal(rng, shape, dtype, 0.3)
    # A variance that stays well above zero, so that denom > 0 is decided the same way in every precision.
    mean_square = np.asarray(
        mean_gradient.astype(np.float64) ** 2 + rng.uniform(0.1, 1.0, shape), dtype=dtype
    )
    return dict(
        var=normal(rng, shape, dtype),
        mean_gradient=mean_gradient,
        mean_square=mean_square,
        moment=normal(rng, shape, dtype, 0.1),
        grad=normal(rng, shape, dtype),
        **_rms_scalars(rng),
    )


def make_ftrl(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        linear=normal(rng, shape, dtype),
        grad=normal(rng, shape, dtype),
        lr=rng.uniform(0.01, 0.5),
        l1=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        l2=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        lr_power=float(rng.choice([-0.5, rng.uniform(-1.0, 0.0), 0.0])),
    )


def make_ftrl_v2(rng, shape, dtype):
    inputs = make_ftrl(rng, shape, dtype)
    inputs["l2_shrinkage"] = float(rng.choice([0.0, rng.uniform(0.0, 0.5)]))
    return inputs


def make_proximal_adagrad(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        accum=uniform(rng, shape, dtype, 0.1, 1.0),
        lr=rng.uniform(1e-3, 0.1),
        l1=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        l2=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        grad=normal(rng, shape, dtype),
    )


def make_lars(rng, shape, dtype):
    weight, gradient = normal(rng, shape, dtype), normal(rng, shape, dtype)
    return dict(
        weight=weight,
        gradient=gradient,
        norm_weight=float(np.sum(weight.astype(np.float64) ** 2)),
        norm_gradient=float(np.sum(gradient.astype(np.float64) ** 2)),
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        learning_rate=rng.uniform(0.01, 1.0),
    )


def make_lamb(rng, shape, dtype):
    s = adam_scalars(rng)
    return dict(
        var=normal(rng, shape, dtype),
        **moments(rng, shape, dtype),
        lr=s["lr"],
        beta1=s["beta1"],
        beta2=s["beta2"],
        epsilon=float(10.0 ** rng.uniform(-8, -4)),
        decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        global_step=int(rng.integers(1, 100)),
        gradient=normal(rng, shape, dtype),
    )


def make_ada_factor(rng, shape, dtype):
    """FusedAdaFactor's inputs: factored row/column slots for rank >= 2, the element-wise slot otherwise (the
    unused ones are MindSpore's shape-(1,) dummies); a global norm of 0 (no scaling) or of about 1."""
    factored = len(shape) >= 2
    dummy = np.zeros((1,), dtype)
    t = int(rng.integers(1, 50))
    return dict(
        epsilon=np.asarray([rng.choice([0.0, 1e-30]), 1e-3], dtype=dtype),
        clip_threshold=rng.uniform(0.5, 2.0),
        beta1=rng.uniform(0.5, 0.95),
        beta2t=1.0 - t**-0.8,
        weight_decay=rng.uniform(0.0, 0.1),
        learning_rate=rng.uniform(1e-3, 0.1),
        grad=normal(rng, shape, dtype),
        param=normal(rng, shape, dtype),
        exp_avg=normal(rng, shape, dtype, 0.1),
        exp_avg_sq_row=uniform(rng, shape[:-1], dtype, 0.1, 2.0) if factored else dummy,
        exp_avg_sq_col=(uniform(rng, shape[:-2] + shape[-1:], dtype, 0.1, 2.0) if factored else dummy.copy()),
        exp_avg_sq=dummy.copy() if factored else uniform(rng, shape, dtype, 0.1, 2.0),
        global_norm=float(rng.choice([0.0, rng.uniform(0.5, 4.0)])),
    )


def ada_factor_attrs(rng):
    return {
        flag: bool(rng.integers(2))
        for flag in ("enable_scale_parameter", "enable_first_moment", "enable_weight_decay")
    }


def adam_delta_terms(inputs, attrs=None):
    """Magnitude of delta without cancellation: lr_t·(β1|m| + (1−β1)|g|)/(sqrt(v_new) + ε)."""
    f = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    lr_t = f["lr"] * np.sqrt(1 - f["beta2_power"]) / (1 - f["beta1_power"])
    v_new = f["beta2"] * f["v"] + (1 - f["beta2"]) * f["gradient"] ** 2
    numerator = f["beta1"] * np.abs(f["m"]) + (1 - f["beta1"]) * np.abs(f["gradient"])
    return {"delta": lr_t * (1 + f["beta1"]) * numerator / (np.sqrt(v_new) + f["epsilon"])}


def ftrl_terms(inputs, attrs=None):
    """Magnitudes FTRL's results are made of: sigma·var cancels (sigma = (a'^p − a^p)/lr), so its rounding
    is relative to ``(a'^p + a^p)/lr·|var|``; var inherits linear's error through the shrinkage."""
    f = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    p = -f["lr_power"]
    accum_new = f["accum"] + f["grad"] ** 2
    y_new, y_old = accum_new**p, f["accum"] ** p
    linear = np.abs(f["linear"]) + np.abs(f["grad"]) + (y_new + y_old) / f["lr"] * np.abs(f["var"])
    if "l2_shrinkage" in f:  # FTRL-V2: linear's gradient is g + 2·l2_shrinkage·var
        linear = linear + 2 * f["l2_shrinkage"] * np.abs(f["var"])
    return {"linear": linear, "accum": accum_new, "var": (f["l1"] + linear) / (y_new / f["lr"] + 2 * f["l2"])}


def lars_terms(inputs, attrs):
    """LARS's new gradient without cancellation: ``coeff·(|g| + wd·|w|)`` (``g + wd·w`` cancels, and with one
    element nothing else bounds the result); ``coeff`` depends on the norms and attributes only."""
    f = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    wn, gn, wd = np.sqrt(f["norm_weight"]), np.sqrt(f["norm_gradient"]), f["weight_decay"]
    coeff = attrs.get("hyperpara", 0.001) * wn / (gn + wd * wn + attrs.get("epsilon", 1e-5))
    if attrs.get("use_clip", False):
        coeff = np.clip(coeff / f["learning_rate"], 0.0, 1.0)
    return {"new_gradient": np.abs(coeff) * (np.abs(f["gradient"]) + wd * np.abs(f["weight"]))}


def make_lion(rng, shape, dtype):
    return dict(
        var=normal(rng, shape, dtype),
        exp_avg=normal(rng, shape, dtype, 0.1),
        grad=normal(rng, shape, dtype),
        lr=rng.uniform(1e-4, 0.1),
        beta1=rng.uniform(0.5, 0.99),
        beta2=rng.uniform(0.9, 0.999),
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 1.0)])),
    )


def make_adopt(rng, shape, dtype):
    step = int(rng.choice([0, rng.integers(1, 50)]))
    return dict(
        var=normal(rng, shape, dtype),
        exp_avg=normal(rng, shape, dtype, 0.1),
        exp_avg_sq=uniform(rng, shape, dtype, 0.0, 0.5),
        grad=normal(rng, shape, dtype),
        lr=rng.uniform(1e-4, 0.1),
        beta1=rng.uniform(0.5, 0.99),
        beta2=rng.uniform(0.9, 0.9999),
        epsilon=float(10.0 ** rng.uniform(-8, -3)),
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        step=step,
        clip=float(rng.choice([max(step, 1) ** 0.25, np.inf])),
    )


def make_ademamix(rng, shape, dtype):
    s = adam_scalars(rng)
    return dict(
        var=normal(rng, shape, dtype),
        m1=normal(rng, shape, dtype, 0.1),
        m2=normal(rng, shape, dtype, 0.1),
        nu=uniform(rng, shape, dtype, 0.0, 0.5),
        grad=normal(rng, shape, dtype),
        lr=s["lr"],
        beta1=s["beta1"],
        beta2=s["beta2"],
        beta3=rng.uniform(0.99, 0.9999),
        alpha=rng.uniform(0.0, 8.0),
        epsilon=s["epsilon"],
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        step=int(rng.integers(1, 50)),
    )


def _schedule_free_c(rng):
    return float(rng.choice([1.0, rng.uniform(0.0, 1.0), 0.25 / rng.integers(1, 20)]))


def make_schedule_free_adamw(rng, shape, dtype):
    s = adam_scalars(rng)
    return dict(
        y=normal(rng, shape, dtype),
        z=normal(rng, shape, dtype),
        exp_avg_sq=uniform(rng, shape, dtype, 0.0, 0.5),
        grad=normal(rng, shape, dtype),
        lr=s["lr"],
        beta1=s["beta1"],
        beta2=s["beta2"],
        epsilon=s["epsilon"],
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        c=_schedule_free_c(rng),
        step=int(rng.integers(1, 50)),
    )


def make_schedule_free_sgd(rng, shape, dtype):
    return dict(
        y=normal(rng, shape, dtype),
        z=normal(rng, shape, dtype),
        grad=normal(rng, shape, dtype),
        lr=rng.uniform(1e-3, 0.5),
        momentum=rng.uniform(0.1, 0.99),
        weight_decay=float(rng.choice([0.0, rng.uniform(0.0, 0.1)])),
        c=_schedule_free_c(rng),
    )


CASES = [
    OpCase("apply_adam", ("var", "m", "v"), make_adam, nesterov_attr),
    OpCase(
        "apply_adam_with_amsgrad",
        ("var", "m", "v", "vhat"),
        make_amsgrad,
        lambda rng: dict(
            beta1=float(rng.uniform(0.5, 0.99)),
            beta2=float(rng.uniform(0.9, 0.9999)),
            epsilon=float(10.0 ** rng.uniform(-8, -3)),
        ),
    ),
    OpCase(
        "adam_no_update_param",
        ("m", "v"),
        make_adam_delta,
        nesterov_attr,
        output="delta",
        terms=adam_delta_terms,
    ),
    OpCase("adam_weight_decay", ("var", "m", "v"), make_adam_weight_decay),
    OpCase("apply_ada_max", ("var", "m", "v"), make_ada_max),
    OpCase(
        "apply_adagrad", ("var", "accum"), make_adagrad, lambda rng: dict(update_slots=bool(rng.integers(2)))
    ),
    OpCase(
        "apply_adagrad_v2",
        ("var", "accum"),
        make_adagrad,
        lambda rng: dict(epsilon=float(10.0 ** rng.uniform(-8, -3)), update_slots=bool(rng.integers(2))),
    ),
    OpCase(
        "apply_momentum",
        ("variable", "accumulation"),
        make_momentum,
        lambda rng: dict(use_nesterov=bool(rng.integers(2)), gradient_scale=float(rng.choice([1.0, 0.5]))),
    ),
    OpCase("sgd", ("parameters", "accum", "stat"), make_sgd, sgd_attrs),
    OpCase("apply_rms_prop", ("var", "mean_square", "moment"), make_rms_prop),
    OpCase(
        "apply_centered_rms_prop", ("var", "mean_gradient", "mean_square", "moment"), make_centered_rms_prop
    ),
    OpCase("apply_ftrl", ("var", "accum", "linear"), make_ftrl, terms=ftrl_terms),
    OpCase("apply_ftrl_v2", ("var", "accum", "linear"), make_ftrl_v2, terms=ftrl_terms),
    OpCase("apply_proximal_adagrad", ("var", "accum"), make_proximal_adagrad),
    OpCase(
        "lars_update",
        (),
        make_lars,
        lambda rng: dict(
            epsilon=float(10.0 ** rng.uniform(-6, -4)),
            hyperpara=float(rng.uniform(1e-3, 1e-2)),
            use_clip=bool(rng.integers(2)),
        ),
        output="new_gradient",
        terms=lars_terms,
    ),
    OpCase("lamb", ("var", "m", "v"), make_lamb),
    OpCase(
        "fused_ada_factor",
        ("param", "exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"),
        make_ada_factor,
        ada_factor_attrs,
    ),
    OpCase("lion", ("var", "exp_avg"), make_lion),
    OpCase(
        "adopt",
        ("var", "exp_avg", "exp_avg_sq"),
        make_adopt,
        lambda rng: dict(decouple=bool(rng.integers(2))),
    ),
    OpCase(
        "ademamix",
        ("var", "m1", "m2", "nu"),
        make_ademamix,
        lambda rng: dict(decay_after_update=bool(rng.integers(2))),
    ),
    OpCase("schedule_free_adamw", ("y", "z", "exp_avg_sq"), make_schedule_free_adamw),
    OpCase("schedule_free_sgd", ("y", "z"), make_schedule_free_sgd),
]

CASES.extend(SPARSE_CASES)  # the row-sparse ops' cases (.sparse_cases), after the dense ones
CASES_BY_NAME = {case.name: case for case in CASES}


def cast_scalars(inputs: dict, dtype) -> dict:
    """Round float scalars to ``dtype``, so that the kernel and the reference see the very same inputs."""
    return {k: np.dtype(dtype).type(v) if isinstance(v, float) else v for k, v in inputs.items()}


def draw(case: OpCase, rng: np.random.Generator, shape: tuple, dtype) -> dict:
    """Valid inputs for ``case``, float scalars already in ``dtype``."""
    return cast_scalars(case.make(rng, shape, dtype), dtype)


#: The low-precision storage dtypes of the conformance cases (computed in float32 by the kernels).
HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def compute_dtype(dtype) -> np.dtype:
    """float32 for a half storage dtype, else the dtype itself."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF_DTYPES else np.dtype(dtype)


def draw_stored(case: OpCase, rng: np.random.Generator, shape: tuple, dtype) -> dict:
    """:func:`draw` for any storage dtype: for float16/bfloat16, the float32 case with its float arrays
    rounded to the storage dtype (scalars stay float32, as the kernels take them)."""
    if np.dtype(dtype) not in HALF_DTYPES:
        return draw(case, rng, shape, dtype)
    inputs = draw(case, rng, shape, np.float32)
    return {
        k: v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v
        for k, v in inputs.items()
    }


def draw_attrs(case: OpCase, rng: np.random.Generator, dtype) -> dict:
    """Valid attributes for ``case``, float ones already rounded to ``dtype`` (still floating types)."""
    return cast_scalars(case.attrs(rng), compute_dtype(dtype))


def bounds(case: OpCase, inputs: dict, attrs: dict | None = None) -> dict:
    """Per result, the magnitudes its rounding error is relative to besides itself (see tolerance.compare);
    ``attrs``: the call's attributes (default: none given, the op's defaults)."""
    out = {name: np.copy(inputs[name]) for name in case.states}
    if case.terms is not None:
        out.update(case.terms(inputs, attrs or {}))
    return out


def run_kernel(case: OpCase, inputs: dict, attrs: dict) -> dict[str, Any]:
    """Run the kernel on ``inputs`` (in place); return its results by name (states, and the output)."""
    result = case.kernel(*case.args(inputs), **attrs)
    out = {name: inputs[name] for name in case.states}
    if case.output != "states":
        out[case.output] = result
    else:
        if len(result) != len(case.states) or any(r is not inputs[n] for r, n in zip(result, case.states)):
            raise AssertionError(
                f"{case.name} must return its updated state arrays themselves, in input order"
            )
    return out


def _reference_copy(a):
    """A copy for the reference; half arrays widened to float64 (exact)."""
    if not isinstance(a, np.ndarray):
        return a
    return a.astype(np.float64) if a.dtype in HALF_DTYPES else np.copy(a)


def run_reference(case: OpCase, inputs: dict, attrs: dict) -> dict[str, np.ndarray]:
    """Run the float64 reference on copies of ``inputs``; return its results by name."""
    result = case.reference(*[_reference_copy(a) for a in case.args(inputs)], **attrs)
    names = ((case.output,) if case.output != "states" else ()) + case.states
    if len(result) != len(names):
        raise AssertionError(f"reference {case.name} returned {len(result)} arrays, expected {len(names)}")
    return dict(zip(names, result))
