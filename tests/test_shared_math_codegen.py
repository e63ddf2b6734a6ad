"""Loops built on shared scalar math (kernels/_elementwise.scalar_math) are vectorised: the dense FTRL and
Adagrad loops after the refactor, and the row loops of the sparse kernels."""
import platform
import re

import numba
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="checks x86 instructions")


def _asm(element, dtype, *scalars):
    loop = element.cpu_uncached()
    x = np.ones(64, dtype)
    arrays = [x.copy() for _ in range(loop.py_func.__code__.co_argcount - 1 - len(scalars))]
    loop(x.size, *arrays, *scalars)
    return loop.inspect_asm(loop.signatures[0])


@pytest.mark.parametrize("v2", [False, True], ids=["ftrl", "ftrl_v2"])
@pytest.mark.parametrize("dtype, suffix", [(np.float32, "ps"), (np.float64, "pd")])
def test_apply_ftrl_cpu_loop_is_vectorised(dtype, suffix, v2):
    """Packed sqrt and div in the FTRL loop (lr_power = -0.5), and no float64 in the float32 loop; no pow
    call either (the general-power variant is a separate loop). The same for FTRL-V2 (L2 shrinkage)."""
    from optkernels.kernels.ftrl import _ftrl_sqrt, _ftrl_v2_sqrt

    s = dtype(0.5)
    asm = _asm(_ftrl_v2_sqrt, dtype, s, s, s, s) if v2 else _asm(_ftrl_sqrt, dtype, s, s, s)
    assert "pow" not in asm, "the lr_power = -0.5 loop calls pow"
    assert re.search(rf"\bv?sqrt{suffix}\b", asm), f"no packed sqrt{suffix} in apply_ftrl's loop"
    assert re.search(rf"\bv?div{suffix}\b", asm), f"no packed div{suffix} in apply_ftrl's loop"
    if dtype == np.float32:
        assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 loop promoted to float64"


@pytest.mark.parametrize("dtype, suffix", [(np.float32, "ps"), (np.float64, "pd")])
def test_apply_adagrad_cpu_loop_is_vectorised(dtype, suffix):
    from optkernels.kernels.adagrad import _adagrad

    s = dtype(0.5)
    asm = _asm(_adagrad, dtype, s, s, True)
    assert re.search(rf"\bv?sqrt{suffix}\b", asm), f"no packed sqrt{suffix} in apply_adagrad's loop"
    if dtype == np.float32:
        assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 loop promoted to float64"


@pytest.mark.parametrize("which", ["amsgrad", "ada_max", "proximal_adagrad"])
def test_nan_propagating_loops_stay_vectorised(which):
    """The NaN policy's max (kernels/_ieee.nan_max) and proximal Adagrad's NaN-propagating shrinkage keep the
    float32 loops packed, without float64."""
    from optkernels.kernels.ada_max import _ada_max
    from optkernels.kernels.adam import _adam_amsgrad
    from optkernels.kernels.proximal_adagrad import _proximal_adagrad

    s = np.float32(0.5)
    element, scalars, packed = {"amsgrad": (_adam_amsgrad, (s,) * 4, "sqrtps"),
                                "ada_max": (_ada_max, (s,) * 4, "divps"),
                                "proximal_adagrad": (_proximal_adagrad, (s,) * 4, "sqrtps")}[which]
    asm = _asm(element, np.float32, *scalars)
    assert re.search(rf"\bv?{packed}\b", asm), f"no packed {packed} in {which}'s loop"
    assert not re.search(r"\bv?(sqrt|div)[sp]d\b", asm), "float32 loop promoted to float64"


@pytest.mark.parametrize("which", ["lazy", "non-lazy"])
def test_sparse_adam_row_loops_are_vectorised(which):
    """The per-row loops of the sparse kernels (2-D row views, indices from 0 up) use packed float32 sqrt, and
    the lazy loop prefetches (its rows are scattered over the table)."""
    from optkernels.kernels._workers import packed
    from optkernels.sparse.adam import _fused_adam_task, _lazy_adam

    f = np.float32
    plan = (np.array([0, 2], np.int64), np.array([0, 1, 2], np.int64), np.array([0, 1], np.int64))
    grad = np.ones((2, 64), f)
    states = [np.ones((5, 64), f) for _ in range(3)]
    scalars = (f(0.5), f(0.9), f(0.1), f(0.999), f(0.001), f(1e-8), False)
    if which == "lazy":  # packed C workers (numba.cfunc), compiled afresh: their optimised LLVM IR
        worker = _lazy_adam.cpu_worker(np.dtype(np.int64), np.dtype(np.int32), np.dtype(f), scalars, cache=False)
    else:
        args = (4, *plan, grad, *states, *(s.reshape(-1) for s in states), *scalars)
        worker = packed(_fused_adam_task, tuple(map(numba.typeof, args)), cache=False)
    ir = worker.cfunc.inspect_llvm()
    assert re.search(r"@llvm\.sqrt\.v\d+f32\b", ir), f"no packed float32 sqrt in the {which} sparse Adam loop"
    if which == "lazy":
        assert "@llvm.prefetch" in ir, "no prefetch instructions in the lazy row loop"
    assert not re.search(r"@llvm\.sqrt\.(v\d+)?f64\b|fdiv (<\d+ x )?double", ir), "float32 loop promoted"


def test_merge_duplicates_sum_loop_is_vectorised():
    """The ordered segment sums of merge_duplicates use packed float32 adds (element-wise: same bits)."""
    from optkernels.kernels._workers import packed
    from optkernels.sparse.merge import _segment_sums_task

    values = np.ones((3, 64), np.float32)
    args = (np.array([0, 2]), np.array([0, 2, 3]), np.array([0, 2, 1]), values, np.empty((2, 64), np.float32))
    ir = packed(_segment_sums_task, tuple(map(numba.typeof, args)), cache=False).cfunc.inspect_llvm()
    assert re.search(r"fadd <\d+ x float>", ir), "no packed float32 add in merge_duplicates' sum loop"
