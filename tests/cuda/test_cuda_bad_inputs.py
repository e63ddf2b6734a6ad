"""Bad input on CUDA arrays (issue #13): hostile values for the arguments of CUDA calls give TypeError,
ValueError or IndexError naming the argument, never a Numba error, and nothing is written; a Lamb or
AdaFactor step over CUDA parameters whose last gradient is bad leaves everything as it was."""
import numba.core.errors
import numpy as np
import pytest

from optkernels.conformance.cases import CASES_BY_NAME, draw, draw_attrs
from optkernels.kernels import _cuda

OPS = ["apply_adam", "lamb", "lars_update", "fused_ada_factor", "fused_sparse_adam", "sparse_apply_ftrl"]
ALLOWED = (TypeError, ValueError, IndexError)


def _device(inputs):
    return {k: _cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _hostile_device_arrays(a: np.ndarray) -> dict:
    out = {"host copy": a.copy(), "float64": _cuda.to_device(a.astype(np.float64)),
           "int32": _cuda.to_device(a.astype(np.int32)), "float16": _cuda.to_device(a.astype(np.float16)),
           "0-d": _cuda.to_device(np.array(a.reshape(-1)[0] if a.size else 0, a.dtype)),
           "extra axis": _cuda.to_device(a[None].copy()), "list": a.tolist(), "None": None}
    if a.ndim >= 1 and a.shape[-1] > 1:
        big = _cuda.to_device(np.repeat(a, 2, axis=-1))
        # every other element of the last axis; numba-cuda's device arrays take no Ellipsis in an index
        out["non-contiguous"] = big[(slice(None),) * (a.ndim - 1) + (slice(None, None, 2),)]
        out["shorter"] = _cuda.to_device(a[..., :-1].copy())
    return out


HOSTILE_SCALARS = {"huge int": 10 ** 400, "nan": float("nan"), "str": "1", "complex": 1j,
                   "device 2-vector": "device2", "masked": np.ma.masked_array([0.1])}


def _snapshot(values):
    return [(v, _cuda.to_host(v)) for v in values if _cuda.is_device_array(v)]


@pytest.mark.parametrize("name", OPS)
def test_hostile_values_on_cuda_calls(name):
    case = CASES_BY_NAME[name]
    problems = []
    valid = draw(case, np.random.default_rng(1), (3, 4), np.float32)
    attrs = draw_attrs(case, np.random.default_rng(0), np.float32)
    for arg in case.positional:
        if isinstance(valid[arg], np.ndarray):
            values = _hostile_device_arrays(valid[arg])
        else:
            values = {k: (_cuda.to_device(np.array([0.1, 0.2], np.float32)) if v == "device2" else v)
                      for k, v in HOSTILE_SCALARS.items()}
        for label, bad in values.items():
            inputs = _device(draw(case, np.random.default_rng(1), (3, 4), np.float32))
            inputs[arg] = bad
            before = _snapshot(inputs.values())
            try:
                case.kernel(*case.args(inputs), **attrs)
            except numba.core.errors.NumbaError as error:
                problems.append(f"{arg}={label}: Numba error {type(error).__name__}: {error}")
            except ALLOWED as error:
                names = list(inputs) if isinstance(valid[arg], np.ndarray) else [arg]
                if not any(n in str(error) for n in names):
                    problems.append(f"{arg}={label}: the error names no argument: {error}")
                if any(not np.array_equal(_cuda.to_host(v), h, equal_nan=True) for v, h in before):
                    problems.append(f"{arg}={label}: raised after writing")
            except Exception as error:
                problems.append(f"{arg}={label}: {type(error).__name__}: {error}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("which", ["Lamb", "AdaFactor"])
def test_cuda_step_with_a_bad_last_gradient_writes_nothing(which):
    from optkernels.optimizers import AdaFactor, Lamb, Parameter

    rng = np.random.default_rng(4)
    shapes = [(3, 4), (5,)]
    params = [Parameter(_cuda.to_device(rng.standard_normal(s).astype(np.float32)), f"w{k}")
              for k, s in enumerate(shapes)]
    opt = Lamb(params, learning_rate=0.01) if which == "Lamb" else AdaFactor(params, beta1=0.9)
    good = [_cuda.to_device(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    opt(tuple(good))
    for bad in (params[1].data, _cuda.to_device(np.ones((4,), np.float32)),
                _cuda.to_device(np.ones((5,), np.float64))):
        before = {k: np.array(v, copy=True) for k, v in opt.state_dict().items()}
        before.update({p.name: _cuda.to_host(p.data) for p in params})
        step = opt.global_step
        with pytest.raises(ALLOWED, match="w1"):
            opt((good[0], bad))
        after = {k: np.array(v, copy=True) for k, v in opt.state_dict().items()}
        after.update({p.name: _cuda.to_host(p.data) for p in params})
        assert opt.global_step == step
        for k in before:
            assert before[k].tobytes() == after[k].tobytes(), k
