"""Representative CUDA kernels of the library compile to PTX with the real numba-cuda and libNVVM, without a GPU,
and bfloat16 arrays travel to and from the device.

tests/test_cuda_codegen.py stops at numba-cuda's front end; here kernels reached through the library's own
calls go on through libNVVM to PTX for compute capability 9.0 (float16/bfloat16 storage with and without
stochastic rounding, Kahan summation, a sum of squares, sparse rows, an 8-bit blockwise update), so a
construct that numba-cuda types but cannot lower (a NumPy ufunc in a device function) fails here and not
first on a GPU. The CUDA simulator runs kernels as Python and catches none of this.

The device is stubbed: device memory is host memory (copies are real, through numba-cuda's own host-pointer
code, which is what refuses a bfloat16 buffer), kernels are compiled to PTX and never run, so results are not
checked (tests/cuda checks them on a GPU and under the simulator). Skipped without libNVVM, under the
simulator, and where a GPU is present.
"""

from __future__ import annotations

import contextlib
import ctypes
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from optkernels.kernels import _cuda

CC = (9, 0)
BF16 = np.dtype(ml_dtypes.bfloat16)


def _skip_reason():
    if not _cuda.installed():
        return "numba-cuda is not installed"
    if _cuda.simulator_enabled():
        return "the CUDA simulator replaces numba-cuda's compiler in this process"
    from numba.cuda.cudadrv import nvvm

    if not nvvm.is_available():
        return "libNVVM is not found (the CUDA toolkit's nvvm, e.g. pip install nvidia-cuda-nvcc)"
    if _cuda.module().is_available():
        return "a GPU is present: tests/cuda compiles and runs the kernels on it"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


class _Memory:
    """Device memory that is host memory (a NumPy byte buffer)."""

    __cuda_memory__ = True

    def __init__(self, buf, offset=0, size=None):
        self.buf, self.offset = buf, offset
        self.size = buf.size - offset if size is None else size
        self._depends_ = []

    @property
    def device_pointer(self):
        return self.buf.ctypes.data + self.offset

    device_pointer_value = device_pointer

    @property
    def device_ctypes_pointer(self):
        return ctypes.c_void_p(self.device_pointer)

    def view(self, start, stop=None):
        return _Memory(self.buf, self.offset + start, (self.size if stop is None else stop) - start)


@pytest.fixture
def fake_device(monkeypatch):
    """A stub device: returns the list of the PTX of every kernel compiled while it is in place."""
    from numba import cuda
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv import devices, driver

    class Stream(driver.Stream):
        def __init__(self):
            self.handle, self.external = 1, False

        def synchronize(self):
            pass

    context = SimpleNamespace(
        device=SimpleNamespace(compute_capability=CC, id=0),
        memalloc=lambda size: _Memory(np.zeros(size + 64, np.uint8)),
        memhostalloc=lambda size, **kw: np.zeros(max(size, 1), np.uint8),
        create_stream=Stream,
        create_event=lambda timing=True: SimpleNamespace(record=lambda stream=0: None, synchronize=lambda: None),
    )

    def copy(to, frm):
        def move(dst, src, size, stream=0):
            ctypes.memmove(to(dst), frm(src), size)

        return move

    host = lambda a: driver.host_pointer(a)  # noqa: E731 -- numba-cuda's own: refuses a bfloat16 buffer
    ptx = []
    monkeypatch.setattr(devices._runtime, "ensure_context", contextlib.nullcontext)
    monkeypatch.setattr(devices._runtime, "get_or_create_context", lambda devnum=None: context)
    monkeypatch.setattr(devices, "get_context", lambda devnum=None: context)
    monkeypatch.setattr(driver, "host_to_device", copy(driver.device_pointer, host))
    monkeypatch.setattr(driver, "device_to_host", copy(host, driver.device_pointer))
    monkeypatch.setattr(driver, "device_to_device", copy(driver.device_pointer, driver.device_pointer))
    monkeypatch.setattr(cuda, "stream", Stream)
    monkeypatch.setattr(dispatcher._Kernel, "bind", lambda k: ptx.append(k._codelibrary.get_asm_str(cc=CC)))
    monkeypatch.setattr(dispatcher._Kernel, "launch", lambda k, *args, **kw: None)
    monkeypatch.setattr(dispatcher.CUDACache, "load_overload", lambda self, *a, **kw: None)
    monkeypatch.setattr(dispatcher.CUDACache, "save_overload", lambda self, *a, **kw: None)
    return ptx


def _compiles(ptx, call):
    """``call()`` compiles at least one new kernel, and every new one to PTX with an entry point."""
    before = len(ptx)
    call()
    assert len(ptx) > before and all(".entry" in p for p in ptx[before:])


def test_bfloat16_copies_go_through_uint16(fake_device):
    from numba import cuda

    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4).astype(BF16) / 3
    with pytest.raises(ValueError, match="buffer"):
        cuda.to_device(x)  # numba-cuda's own copy: NumPy exports no bfloat16 buffer
    for host in (x, x[:, ::2], np.array(x[1, 1]), x[:0]):
        d = _cuda.to_device(host)
        assert d.dtype == BF16 and d.shape == host.shape
        back = _cuda.copy_to_host(d)
        assert back.dtype == BF16 and np.array_equal(back.view(np.uint16), host.view(np.uint16))
    d = _cuda.module().device_array(x.shape, np.uint16).view(BF16)
    _cuda.copy_to_device(d, x)
    e = _cuda.to_device(np.zeros_like(x))
    _cuda.copy_to_device(e, d)  # device to device
    assert np.array_equal(_cuda.copy_to_host(e).view(np.uint16), x.view(np.uint16))
    scalar = _cuda.to_device(np.zeros((), BF16))
    _cuda.copy_to_device(scalar, x[2, 3])
    assert _cuda.copy_to_host(scalar).view(np.uint16) == x[2, 3].view(np.uint16)
    out = np.zeros_like(x)
    assert _cuda.copy_to_host(d, out) is out and np.array_equal(out.view(np.uint16), x.view(np.uint16))
    assert np.array_equal(_cuda.to_host(d).view(np.uint16), x.view(np.uint16))


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_half_kernels_compile_with_and_without_stochastic_rounding(fake_device, dtype):
    from optkernels.kernels import apply_momentum, stochastic_rounding

    var, acc, g = (_cuda.to_device(np.ones(40, np.float32).astype(dtype)) for _ in range(3))
    _compiles(fake_device, lambda: apply_momentum(var, acc, 0.1, g, 0.9))
    with stochastic_rounding(seed=1):
        _compiles(fake_device, lambda: apply_momentum(var, acc, 0.1, g, 0.9))


def test_kahan_sums_sparse_and_8bit_kernels_compile(fake_device):
    from optkernels.kernels import blockwise_optim as bo
    from optkernels.kernels.quantization import dynamic_map
    from optkernels.kernels.sum_squares import square_sum_all
    from optkernels.optimizers import Adam, Parameter
    from optkernels.sparse import fused_sparse_lazy_adam

    f32 = np.float32
    w = Parameter(_cuda.to_device(np.ones(12, f32).astype(BF16)), "w")
    adam = Adam([w], learning_rate=1e-3, kahan_summation=True)
    _compiles(fake_device, lambda: adam((_cuda.to_device(np.ones(12, f32).astype(BF16)),)))
    x = _cuda.to_device(np.ones(30, f32))
    _compiles(fake_device, lambda: square_sum_all(x, x))
    var, m, v = (_cuda.to_device(np.ones((5, 3), f32)) for _ in range(3))
    rows, grad = _cuda.to_device(np.array([3, 1, 3])), _cuda.to_device(np.ones((3, 3), f32))
    _compiles(fake_device, lambda: fused_sparse_lazy_adam(var, m, v, f32(0.9), f32(0.99), f32(1e-3), f32(0.9),
                                                          f32(0.99), f32(1e-8), grad, rows))
    p, s1, absmax = _cuda.to_device(np.ones(256, f32)), _cuda.to_device(np.zeros(256, np.uint8)), _cuda.to_device(
        np.zeros(1, f32))
    _compiles(fake_device, lambda: bo.optimizer_update_8bit_blockwise(
        "momentum", _cuda.to_device(np.ones(256, f32)), p, s1, None, 0.9, 0.0, 0.0, 0.0, 1e-8, 1, 1e-3,
        _cuda.to_device(dynamic_map(True)), None, absmax, None))


def test_weight_decay_survives_in_the_torch_sgd_kernel(fake_device):
    """torch's SGD rule with weight decay: the kernel loads its ``weight_decay`` parameter. numba-cuda's
    inlining of an ``inline="always"`` helper dropped the value ``torch_grad`` assigns in its weight-decay
    branch (a GPU then ignored weight decay), and NVVM removed the unused parameter's load."""
    from optkernels.kernels import torch_rules as T

    var, grad = _cuda.to_device(np.ones(8)), _cuda.to_device(np.ones(8))
    scalars = T.sgd_scalars(np.dtype(np.float64), True, 0.1, 0.0, 0.0, 0.5, False, False)
    _compiles(fake_device, lambda: T._torch_sgd.launch("cuda", 8, var, grad, *scalars))
    # parameters: n, two arrays of 7 fields each, negate, coupled, then weight_decay
    assert "_param_17]" in fake_device[-1]
