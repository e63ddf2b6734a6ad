"""float16 and bfloat16 arrays in every kernel (dense and sparse): the result is bit-identical to upcasting
every array to float32, running the float32 kernel and rounding each updated array once (round to nearest
even), as the issue's contract states; plus the conversions themselves, mixed dtypes and errors."""
import ast
import inspect
import textwrap
import zlib

import ml_dtypes
import numpy as np
import pytest

from optkernels.conformance.cases import CASES, draw, draw_attrs
from optkernels.kernels import _lowp

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALF = [pytest.param(F16, id="float16"), pytest.param(BF16, id="bfloat16")]


def _half_copy(inputs: dict, dtype) -> dict:
    return {k: v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
            for k, v in inputs.items()}


def _upcast(inputs: dict) -> dict:
    """float32 copies of every float array (the float32 ones copied too: both runs update in place)."""
    return {k: v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind in "fV" else v
            for k, v in inputs.items()}


def _results(case, inputs, attrs):
    result = case.kernel(*case.args(inputs), **attrs)
    out = {name: inputs[name] for name in case.states}
    if case.output != "states":
        out[case.output] = result
    else:
        assert all(r is inputs[n] for r, n in zip(result, case.states)), "must return the arrays themselves"
    return out


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def check_contract(case, half: dict, attrs: dict, what: str) -> None:
    """Run ``case`` on the half arrays, and the float32 kernel on their upcasts; compare the rounded bits."""
    wide = _upcast(half)
    expected = _results(case, wide, attrs)
    dtypes = {k: v.dtype for k, v in half.items() if isinstance(v, np.ndarray)}
    actual = _results(case, half, attrs)
    for name, value in expected.items():
        storage = dtypes.get(name, next(iter(dtypes.values())))
        assert actual[name].dtype == storage, f"{what} {name}: dtype {actual[name].dtype}, expected {storage}"
        want = value.astype(storage)
        got = actual[name]
        assert np.array_equal(_bits(got), _bits(want)), (
            f"{what} {name}: {np.count_nonzero(_bits(got) != _bits(want))} elements differ from the float32 "
            f"kernel rounded once")


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_half_kernel_is_float32_kernel_rounded_once(case, dtype):
    """Every op, all arrays in one half dtype: two steps over a shape spanning several chunks."""
    rng = np.random.default_rng(zlib.crc32(f"{case.name} {dtype.name}".encode()))
    shape = (2 * 2048 + 37,) if case.module == "kernels" and case.name != "fused_ada_factor" else (37, 9)
    if case.name == "fused_ada_factor":
        shape = (5, 7) if rng.integers(2) else (41,)
    inputs = draw(case, rng, shape, np.float32)
    attrs = draw_attrs(case, rng, np.float32)
    half = _half_copy(inputs, dtype)
    for step in range(2):
        if step:
            fresh = _half_copy(draw(case, rng, shape, np.float32), dtype)
            half.update({k: v for k, v in fresh.items() if k not in case.states})
        check_contract(case, half, attrs, f"{case.name} {dtype.name} step {step}")


def test_mixed_dtypes_adam_weight_decay_half_var_float32_moments():
    """MindSpore's AdamWeightDecay: var float16 with m, v float32 (and a float16 gradient)."""
    case = next(c for c in CASES if c.name == "adam_weight_decay")
    rng = np.random.default_rng(3)
    for var_dtype in (F16, BF16):
        inputs = draw(case, rng, (3001,), np.float32)
        inputs["var"] = inputs["var"].astype(var_dtype)
        inputs["gradient"] = inputs["gradient"].astype(var_dtype)
        check_contract(case, inputs, {}, f"adam_weight_decay var {var_dtype.name}, m/v float32")


@pytest.mark.parametrize("name", ["apply_adam", "apply_momentum", "apply_ftrl"])
def test_mixed_dtypes_float32_state_half_gradient(name):
    """A float32 parameter and slots with a bfloat16 (or float16) gradient: the float32 arrays are updated
    exactly as the float32 kernel on the upcast gradient updates them."""
    case = next(c for c in CASES if c.name == name)
    rng = np.random.default_rng(4)
    inputs = draw(case, rng, (2500,), np.float32)
    grad = next(k for k in case.positional if k not in case.states and isinstance(inputs[k], np.ndarray))
    for dtype in (F16, BF16):
        mixed = dict(inputs, **{grad: inputs[grad].astype(dtype)})
        mixed.update({k: mixed[k].copy() for k in case.states})
        check_contract(case, mixed, draw_attrs(case, rng, np.float32), f"{name} grad {dtype.name}")


def test_float64_cannot_mix_with_half():
    from optkernels.kernels import apply_adam

    var = np.ones(4, np.float64)
    with pytest.raises(TypeError, match="gradient"):
        apply_adam(var, var.copy(), var.copy(), 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, np.ones(4, F16))
    assert np.all(var == 1)


def test_conversions_exact_on_every_half_bit_pattern_and_edge_floats():
    """The integer-math conversions against NumPy's float16 and ml_dtypes' bfloat16 casts."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.empty(h.size, np.float32)
    _lowp.CPU["_widen_bf16"](h, out)
    assert np.array_equal(out.view(np.uint32), h.view(BF16).astype(np.float32).view(np.uint32))
    _lowp.CPU["_widen_f16"](h, out)
    assert np.array_equal(out.view(np.uint32), h.view(F16).astype(np.float32).view(np.uint32))
    rng = np.random.default_rng(0)
    bits = np.concatenate([
        rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
        np.arange(0x33000000 - 64, 0x38800000 + 4096, 97, dtype=np.uint32),     # float16 subnormals
        np.arange(0x477FE000 - 16, 0x47800010, dtype=np.uint32),                  # float16 overflow
        np.arange(0x7F7F7FF0, 0x7F800010, dtype=np.uint32),                       # bfloat16 overflow
        np.array([0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FA00001, 0x00000001], np.uint32)])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    x = bits.view(np.float32)
    got = np.empty(x.size, np.uint16)
    with np.errstate(all="ignore"):
        _lowp.CPU["_narrow_bf16"](x, got)
        assert np.array_equal(got, x.astype(BF16).view(np.uint16))
        _lowp.CPU["_narrow_f16"](x, got)
        assert np.array_equal(got, x.astype(F16).view(np.uint16))


def test_half_tolerance_is_in_the_storage_dtypes_ulps():
    """verify's rule for half results: a rounded-once result passes, one 16 ulps of the dtype off fails."""
    from optkernels.conformance.tolerance import compare

    expected = np.linspace(-2.0, 2.0, 101)
    for dtype, eps in ((F16, 2.0 ** -10), (BF16, 2.0 ** -7)):
        rounded = expected.astype(np.float32).astype(dtype)
        assert compare(rounded, expected, dtype, 8.0).worst_ulps <= 0.5
        off = (expected + 16 * eps * 2.0).astype(np.float32).astype(dtype)
        result = compare(off, expected, dtype, 8.0)
        assert not result.ok and result.worst_ulps > 8


def test_verify_covers_the_half_dtypes():
    from optkernels.conformance.verify import verify

    (report,) = verify(cases=4, only=["apply_adagrad"])
    assert report.ok and report.steps == 12
    assert 0 < report.worst_ulps["float16"] <= 0.5 and 0 < report.worst_ulps["bfloat16"] <= 0.5


@pytest.mark.parametrize("name", ["apply_adam", "apply_centered_rms_prop", "sgd", "lars_update"])
def test_scratch_driver_gives_the_same_bits(name, monkeypatch):
    """The chunked-scratch driver (used for stochastic rounding, and for element functions the rewrite
    does not take) meets the same contract as the fused loop."""
    from optkernels.kernels import _elementwise

    monkeypatch.setattr(_elementwise, "_fused_entry", lambda py_func, kinds, flags=(): None)
    case = next(c for c in CASES if c.name == name)
    rng = np.random.default_rng(12)
    for dtype in (F16, BF16):
        for kernel in _elementwise_kernels(case):
            monkeypatch.setattr(kernel, "_half_drivers", {}, raising=False)
        inputs = _half_copy(draw(case, rng, (1500,), np.float32), dtype)
        check_contract(case, inputs, draw_attrs(case, rng, np.float32), f"{name} {dtype.name} scratch")


def _elementwise_kernels(case):
    import importlib

    from optkernels.kernels._elementwise import Elementwise

    module = importlib.import_module(case.kernel.__module__)
    return [v for v in vars(module).values() if isinstance(v, Elementwise)]


def test_every_dense_element_function_takes_the_fused_loop():
    import importlib

    from optkernels.kernels._elementwise import ChunkedSumsOfSquares, Elementwise

    names = ["adam", "adam_weight_decay", "ada_max", "adagrad", "momentum", "sgd", "rms_prop", "ftrl",
             "proximal_adagrad", "lars", "axpy"]
    found = 0
    for name in names:
        module = importlib.import_module(f"optkernels.kernels.{name}")
        for ew in vars(module).values():
            if isinstance(ew, Elementwise) and not isinstance(ew, ChunkedSumsOfSquares):
                tree = ast.parse(textwrap.dedent(inspect.getsource(ew.py_func)))
                indexed = {node.value.id for node in ast.walk(tree)
                           if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)}
                params = list(inspect.signature(ew.py_func).parameters)[1:]
                kinds = tuple("bf16" if p in indexed else None for p in params)
                assert _lowp.fused_element(ew.py_func, kinds) is not None, ew.__name__
                found += 1
    assert found >= 12
