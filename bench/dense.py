"""Dense kernels (float32) against the memory limit, torch, TensorFlow's raw ops and in-place NumPy.
Last, host Adam against DeepSpeed's CPUAdam, float32 and bfloat16 (``cpu_adam.py``).

Each size allocates one state per implementation, then times all of them interleaved. Bytes per element:
the kernels read 4 arrays and write 3 (28 B in float32), like the limit kernel.
"""
from __future__ import annotations

import math

import numba
import numpy as np

import optkernels.kernels as K
from harness import Row, Suite, optional

BYTES = 28  # 4 reads + 3 writes of float32
F = np.float32


@numba.njit(parallel=True, cache=True)
def adam_shaped_memory(var, m, v, g):
    """The memory traffic of an Adam step (read var, m, v, g; write var, m, v) with one add per write."""
    for i in numba.prange(var.size):
        a, b, c, d = var[i], m[i], v[i], g[i]
        var[i] = a + d
        m[i] = b + d
        v[i] = c + d


def _state(n: int, seed: int, positive: tuple[int, ...] = (2,)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(n, dtype=np.float32) * F(0.1) for _ in range(4)]
    for k in positive:
        np.abs(arrays[k], out=arrays[k])
        arrays[k] += F(0.1)
    return arrays


# ----------------------------------------------------------------------------------------------- NumPy
def numpy_adam(var, m, v, g, tmp, lr_t, b1, b2, eps):
    np.subtract(g, m, out=tmp); tmp *= F(1) - b1; m += tmp  # noqa: E702
    np.multiply(g, g, out=tmp); tmp -= v; tmp *= F(1) - b2; v += tmp  # noqa: E702
    np.sqrt(v, out=tmp); tmp += eps; np.divide(m, tmp, out=tmp); tmp *= lr_t; var -= tmp  # noqa: E702


def numpy_ftrl(var, accum, linear, g, tmp, tmp2, lr, l1, l2):
    np.multiply(g, g, out=tmp); tmp += accum  # accum_new  # noqa: E702
    np.sqrt(tmp, out=tmp2); np.sqrt(accum, out=accum); tmp2 -= accum; tmp2 /= lr; tmp2 *= var  # noqa: E702
    linear += g; linear -= tmp2  # noqa: E702
    accum[...] = tmp
    np.sqrt(tmp, out=tmp2); tmp2 /= lr; tmp2 += F(2) * l2  # denominator  # noqa: E702
    np.sign(linear, out=tmp); tmp *= l1; tmp -= linear; tmp /= tmp2  # noqa: E702
    np.copyto(var, np.where(np.abs(linear) > l1, tmp, F(0)))


def numpy_rms_prop(var, ms, mom, g, tmp, lr, rho, momentum, eps):
    np.multiply(g, g, out=tmp); tmp -= ms; tmp *= F(1) - rho; ms += tmp  # noqa: E702
    np.add(ms, eps, out=tmp); np.sqrt(tmp, out=tmp); np.divide(g, tmp, out=tmp); tmp *= lr  # noqa: E702
    mom *= momentum; mom += tmp; var -= mom  # noqa: E702


def numpy_adam_weight_decay(var, m, v, g, tmp, lr, b1, b2, eps, decay):
    np.subtract(g, m, out=tmp); tmp *= F(1) - b1; m += tmp  # noqa: E702
    np.multiply(g, g, out=tmp); tmp -= v; tmp *= F(1) - b2; v += tmp  # noqa: E702
    np.sqrt(v, out=tmp); tmp += eps; np.divide(m, tmp, out=tmp)  # noqa: E702
    tmp += decay * var; tmp *= lr; var -= tmp  # noqa: E702


# ----------------------------------------------------------------------------------------------- torch
def torch_adam(torch, n: int, seed: int, *, fused: bool):
    var, _, _, g = _state(n, seed)
    p = torch.nn.Parameter(torch.from_numpy(var))
    p.grad = torch.from_numpy(g)
    kind = dict(fused=True) if fused else dict(foreach=True)
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kind)
    return opt.step


# ----------------------------------------------------------------------------------------------- TensorFlow
def tf_op(tf, name: str, n: int, seed: int):
    arrays = _state(n, seed)
    variables = [tf.Variable(a) for a in arrays[:3]]
    grad = tf.constant(arrays[3])
    handles = [v.handle for v in variables]
    raw = tf.raw_ops
    if name == "apply_adam":
        def step():
            raw.ResourceApplyAdam(var=handles[0], m=handles[1], v=handles[2], beta1_power=F(0.9),
                                  beta2_power=F(0.999), lr=F(1e-3), beta1=F(0.9), beta2=F(0.999),
                                  epsilon=F(1e-8), grad=grad)
    elif name == "apply_ftrl":
        def step():
            raw.ResourceApplyFtrl(var=handles[0], accum=handles[2], linear=handles[1], grad=grad, lr=F(0.01),
                                  l1=F(0.001), l2=F(0.001), lr_power=F(-0.5))
    elif name == "apply_rms_prop":
        def step():
            raw.ResourceApplyRMSProp(var=handles[0], ms=handles[2], mom=handles[1], lr=F(1e-3), rho=F(0.9),
                                     momentum=F(0.9), epsilon=F(1e-7), grad=grad)
    else:
        return None
    return step


# ----------------------------------------------------------------------------------------------- suite
def implementations(name: str, n: int, torch, tf) -> dict:
    """name -> zero-argument callable doing one step of ``name`` over n elements (each its own state)."""
    ours = _state(n, 1)
    theirs = _state(n, 1)
    tmp, tmp2 = np.empty(n, np.float32), np.empty(n, np.float32)
    if name == "apply_adam":
        lr_t = F(1e-3) * F(math.sqrt(F(1) - F(0.999))) / (F(1) - F(0.9))
        impls = {
            "optkernels": lambda: K.apply_adam(*ours[:3], 0.9, 0.999, 1e-3, 0.9, 0.999, 1e-8, ours[3]),
            "numpy (in place)": lambda: numpy_adam(*theirs, tmp, lr_t, F(0.9), F(0.999), F(1e-8)),
        }
        if torch is not None:
            impls["torch Adam(fused=True)"] = torch_adam(torch, n, 1, fused=True)
            impls["torch Adam(foreach=True)"] = torch_adam(torch, n, 1, fused=False)
    elif name == "apply_ftrl":
        impls = {
            "optkernels": lambda: K.apply_ftrl(ours[0], ours[2], ours[1], ours[3], 0.01, 0.001, 0.001, -0.5),
            "numpy (in place)": lambda: numpy_ftrl(theirs[0], theirs[2], theirs[1], theirs[3], tmp, tmp2,
                                                   F(0.01), F(0.001), F(0.001)),
        }
    elif name == "apply_rms_prop":
        impls = {
            "optkernels": lambda: K.apply_rms_prop(ours[0], ours[2], ours[1], 1e-3, ours[3], 0.9, 0.9, 1e-7),
            "numpy (in place)": lambda: numpy_rms_prop(theirs[0], theirs[2], theirs[1], theirs[3], tmp,
                                                       F(1e-3), F(0.9), F(0.9), F(1e-7)),
        }
    else:  # adam_weight_decay
        impls = {
            "optkernels": lambda: K.adam_weight_decay(*ours[:3], 1e-3, 0.9, 0.999, 1e-6, 0.01, ours[3]),
            "numpy (in place)": lambda: numpy_adam_weight_decay(*theirs, tmp, F(1e-3), F(0.9), F(0.999),
                                                                F(1e-6), F(0.01)),
        }
    if tf is not None:
        step = tf_op(tf, name, n, 1)
        if step is not None:
            impls[f"tensorflow raw {name}"] = step
    return impls


OPS = ("apply_adam", "apply_ftrl", "apply_rms_prop", "adam_weight_decay")


def run(suite: Suite, sizes: list[int]) -> None:
    torch = optional("torch")
    tf = optional("tensorflow")
    if torch is None:
        suite.note("torch is not installed: its anchors are skipped (pip install 'optkernels[bench]')")
    if tf is None:
        suite.note("tensorflow is not installed: its anchors are skipped")
    for n in sizes:
        repeats = 3 if suite.quick else (21 if n <= 1e6 else 11)
        inner = max(1, int(3e6 // n)) if not suite.quick else max(1, int(3e5 // n))
        limit_state = _state(n, 2)
        limit = {"limit": lambda state=limit_state: adam_shaped_memory(*state)}
        for name in OPS:
            impls = dict(limit, **implementations(name, n, torch, tf))
            times = suite.time_interleaved(impls, repeats=repeats, inner=inner)
            for impl, seconds in times.items():
                note = "" if impl == "limit" else f"{100 * times['limit'] / seconds:5.1f}% of limit"
                case = "Adam-shaped memory kernel" if impl == "limit" else name
                suite.add(Row("dense", case, impl, n, seconds, BYTES * n, note))
            del impls
    import cpu_adam  # here: it imports this module

    cpu_adam.run(suite, sizes)
