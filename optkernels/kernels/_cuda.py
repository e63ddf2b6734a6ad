"""The one place optkernels imports CUDA from.

Today the CUDA target is numba-cuda (``numba.cuda``). numba-cuda is in maintenance mode; moving to its
successor means editing this module alone: every other module asks it whether an object is a CUDA array,
to wrap one, and for the ``cuda`` namespace that kernels are compiled with.

Nothing here imports CUDA at import time, and optkernels works without numba-cuda installed: NumPy arrays
never reach this module's imports. Under ``NUMBA_ENABLE_CUDASIM=1`` (set before the first import) Numba's
CUDA simulator stands in for a GPU; its arrays have no ``__cuda_array_interface__``, so they are
recognised by type.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
from typing import Any

from .._install import install_hint

_INSTALL_HINT = "CUDA arrays need numba-cuda: " + install_hint("cuda")


@functools.cache
def installed() -> bool:
    """True if a CUDA backend (numba-cuda) can be imported, without importing it."""
    try:
        return importlib.util.find_spec("numba.cuda") is not None
    except (ImportError, ValueError):
        return False


def simulator_enabled() -> bool:
    """True if Numba's CUDA simulator is requested for this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def module() -> Any:
    """The ``cuda`` namespace (``numba.cuda``), imported on first use.

    Raises:
        ImportError: numba-cuda is not installed.
    """
    if not installed():
        raise ImportError(_INSTALL_HINT)
    from numba import cuda

    if not _compile_hook_installed and not simulator_enabled():
        _install_compile_hook()
    return cuda


def kernel(function: Any) -> Any:
    """``function`` compiled as a CUDA kernel (``cuda.jit``), as every optkernels kernel is: its launches
    accept ``None`` for an absent optional array (see :class:`_NoneArguments`), and its code is generated
    without contracting a multiply and an add into a fused multiply-add (see :func:`_install_compile_hook`)."""
    cuda = module()
    if simulator_enabled():
        return cuda.jit(function)
    if _jit_takes_lto(cuda):
        # Linked as PTX, not as LTO-IR: an LTO link optimises the whole kernel again in libNVVM with its
        # default -fma=1 (which no link option turns off), contracting the multiply-adds that the -fma=0
        # compilation kept apart (seen on an H200 with numba-cuda 0.30, where LTO is the default). PTX keeps
        # its separately rounded mul.rn/add.rn pairs apart when it becomes machine code.
        return cuda.jit(function, extensions=[_NONE_ARGUMENTS], lto=False)
    return cuda.jit(function, extensions=[_NONE_ARGUMENTS])


@functools.cache
def _jit_takes_lto(cuda: Any) -> bool:
    """Whether numba-cuda's ``jit`` takes ``lto`` (numba-cuda 0.16 and later)."""
    import inspect

    return "lto" in inspect.signature(cuda.jit).parameters


class _NoneArguments:
    """A numba-cuda launch extension for ``None`` arguments.

    Kernels here are specialised on ``None`` for an absent optional array (``if m is None`` branches are
    resolved at compile time), as on the CPU. numba-cuda compiles such a kernel (its ``none`` argument is
    one pointer-sized parameter) but cannot pass ``None`` at launch; this passes the null pointer in its
    place, which the kernel never reads."""

    def prepare_args(self, ty: Any, val: Any, stream: Any = None, retr: Any = None) -> tuple[Any, Any]:
        if val is None:
            try:  # numba-cuda's own type objects where it has them (the dispatcher compares with those)
                from numba.cuda import types
            except ImportError:
                from numba.core import types

            if ty == types.none:
                return types.uintp, 0
        return ty, val


_NONE_ARGUMENTS = _NoneArguments()

#: The mangled-name fragment of every function defined in optkernels' modules (Itanium mangling of the
#: top-level package name): a compiled module that holds one is an optkernels kernel.
_OUR_SYMBOLS = "10optkernels"
_compile_hook_installed = False
_HOOK_LOCK = threading.Lock()


def _ours(ir: str | bytes) -> bool:
    """True if the LLVM IR ``ir`` defines or calls a function of optkernels."""
    if isinstance(ir, bytes):
        return _OUR_SYMBOLS.encode() in ir
    return _OUR_SYMBOLS in ir


def _install_compile_hook() -> None:
    """Generate optkernels' CUDA kernels with NVVM's ``-fma=0``.

    NVVM contracts ``a * b + c`` into one fused multiply-add by default (``-fma=1``) even without fast math,
    which rounds once where the CPU kernels and the float64 references round twice: results would differ by
    an ulp from the CPU's. numba-cuda has no per-kernel option for it, so NVVM's compile entry point is
    wrapped: a compilation whose IR defines an optkernels function gets ``fma=False`` (explicit ``fma``
    calls, the torch rules', stay fused); every other compilation in the process is left as it was."""
    global _compile_hook_installed
    from numba.cuda.cudadrv import nvvm

    compile_ir = nvvm.compile_ir

    def compile_ir_exactly(llvmir: Any, **options: Any) -> Any:
        texts = [llvmir] if isinstance(llvmir, (str, bytes)) else llvmir
        if not options.get("fastmath") and any(_ours(text) for text in texts):
            options.setdefault("fma", False)
        return compile_ir(llvmir, **options)

    with _HOOK_LOCK:
        if not _compile_hook_installed:
            nvvm.compile_ir = compile_ir_exactly
            _compile_hook_installed = True


def is_device_array(x: Any) -> bool:
    """True if ``x`` lives on a CUDA device (or in the CUDA simulator).

    Any object exposing ``__cuda_array_interface__`` counts (Numba device arrays, CuPy arrays, PyTorch CUDA
    tensors), as do the simulator's device arrays.
    """
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return type(x).__module__.startswith("numba.cuda.simulator") and hasattr(x, "copy_to_host")


def interface(x: Any) -> dict:
    """The ``__cuda_array_interface__`` of ``x``, or an equivalent dict for a simulator array."""
    if hasattr(x, "__cuda_array_interface__"):
        return x.__cuda_array_interface__
    # The simulator wraps a host ndarray; describe it as a C-contiguous or strided device array would be.
    host = x._ary
    return {
        "shape": host.shape,
        "typestr": host.dtype.str,
        "strides": None if host.flags.c_contiguous else host.strides,
        "data": (host.__array_interface__["data"][0], not host.flags.writeable),
        "version": 3,
    }


def as_device_array(x: Any) -> Any:
    """A Numba device-array view of the CUDA array ``x`` (no copy)."""
    cuda = module()
    if simulator_enabled() or type(x).__module__.startswith("numba.cuda"):
        return x
    return cuda.as_cuda_array(x)


def to_host(x: Any):
    """Copy a (small) CUDA array to a NumPy array."""
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return as_device_array(x).copy_to_host()


def loaded() -> bool:
    """True if the CUDA module was already imported by someone (cheap check for hot paths)."""
    return "numba.cuda" in sys.modules


# ------------------------------------------------------------------------- host <-> device copies of any dtype
# numba-cuda copies between host and device through the host array's buffer protocol, which NumPy refuses
# for dtypes it does not define itself (ml_dtypes' bfloat16, ``'E'``: "cannot include dtype 'E' in a
# buffer"). These copies move such arrays as unsigned integers of the same size -- the same bytes -- and view
# the result back; for NumPy's own dtypes (float16 included) they are numba-cuda's copies unchanged.


def _carrier(dtype: Any) -> Any:
    """The unsigned integer dtype of ``dtype``'s size that carries its bytes through a copy, or None when
    numba-cuda copies ``dtype`` itself (NumPy's built-in dtypes)."""
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.isbuiltin == 2 and dtype.itemsize in (1, 2, 4, 8):
        return np.dtype(f"u{dtype.itemsize}")
    return None


def _view(array: Any, dtype: Any) -> Any:
    """``array.view(dtype)`` for a dtype of the same size; numba-cuda's ``view`` fails on a 0-d array (it
    hashes the shape as a list), so that one is rebuilt over the same memory."""
    if array.ndim == 0 and not simulator_enabled():
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        return DeviceNDArray((), (), dtype, stream=array.stream, gpu_data=array.gpu_data)
    return array.view(dtype)


def to_device(host: Any, stream: Any = 0) -> Any:
    """A new device array holding a copy of the host array ``host`` (``cuda.to_device``, for any dtype).

    Parameters
    ----------
    host : array_like
        The array to copy; bfloat16 (and other ml_dtypes) arrays are copied as their bits and the device
        array is a view of them with ``host``'s dtype. The shape is kept (0-d and empty too); an array that
        is neither C- nor Fortran-contiguous is copied C-contiguous (numba-cuda moves one memory region).
    stream : numba CUDA stream, optional
        The stream of the copy; 0 (default) copies synchronously.

    Returns
    -------
    DeviceNDArray
        The device array, with ``host``'s dtype and shape.
    """
    import numpy as np

    cuda = module()
    host = np.asarray(host)
    if not (host.flags.c_contiguous or host.flags.f_contiguous):
        host = np.ascontiguousarray(host)
    carrier = _carrier(host.dtype)
    if carrier is None:
        return cuda.to_device(host, stream=stream)
    return _view(cuda.to_device(host.view(carrier), stream=stream), host.dtype)


def copy_to_device(device: Any, host: Any, stream: Any = 0) -> None:
    """Copy the host (or device) array ``host`` into the existing device array ``device``, for any dtype.

    Parameters
    ----------
    device : DeviceNDArray (or any CUDA array)
        The C-contiguous destination; ``host`` must have its dtype and shape.
    host : array_like
        The source, a NumPy array or a device array.
    stream : numba CUDA stream, optional
        The stream of the copy; 0 (default) copies synchronously.
    """
    import numpy as np

    device = as_device_array(device)
    on_device = is_device_array(host)
    host = as_device_array(host) if on_device else np.asarray(host)
    carrier = _carrier(device.dtype)
    if carrier is None or host.dtype != device.dtype:
        device.copy_to_device(host, stream=stream)
    else:
        bits = _view(host, carrier) if on_device else host.view(carrier)
        _view(device, carrier).copy_to_device(bits, stream=stream)


def queue_copy_to_device(device: Any, host: Any, stream: Any) -> None:
    """Queue the copy of the C-contiguous host array ``host`` into the device array ``device`` (the same
    bytes: any dtype, the caller vouches for sizes) on ``stream``, with the driver's asynchronous copy
    called directly: none of numba-cuda's per-call array checks, which cost a pipeline as much Python time
    per chunk as its kernel launch. For pinned ``host`` the copy is asynchronous: keep ``host`` unchanged
    until the stream has passed it. Under the simulator: :func:`copy_to_device`.
    """
    if simulator_enabled():
        copy_to_device(device, host, stream=stream)
        return
    from numba.cuda.cudadrv import driver

    driver.host_to_device(device, host.ctypes.data, host.nbytes, stream=stream)


def queue_copy_to_host(host: Any, device: Any, stream: Any) -> None:
    """Queue the copy of the device array ``device`` into the C-contiguous host array ``host`` (the same
    bytes, as :func:`queue_copy_to_device`) on ``stream``, with the driver's asynchronous copy called
    directly. For pinned ``host`` the copy is asynchronous: read ``host`` once the stream has passed it.
    Under the simulator: :func:`copy_to_host`.
    """
    if simulator_enabled():
        copy_to_host(device, host, stream=stream)
        return
    from numba.cuda.cudadrv import driver

    driver.device_to_host(host.ctypes.data, device, host.nbytes, stream=stream)


def prepared_launch(dispatcher: Any, griddim: int, blockdim: int, stream: Any, args: tuple) -> Any:
    """A callable that queues ``dispatcher[griddim, blockdim, stream](*args)`` each time it is called.

    The arguments are typed and the compiled kernel found once, here; each call then goes straight to
    the kernel's launch (numba-cuda's per-launch typing and overload search skipped): for a pipeline
    that launches the same kernel on the same buffers many times. Under the simulator (or a numba-cuda
    without these internals) each call is the plain launch.
    """
    configured = dispatcher[griddim, blockdim, stream]
    if simulator_enabled():
        return lambda: configured(*args)
    if not stream:
        stream = module().default_stream()  # the kernel's launch takes a stream object, not 0
    try:
        kernel = dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in args))
        launch = kernel.launch
    except (AttributeError, TypeError):  # another numba-cuda's internals: the plain launch
        return lambda: configured(*args)
    return lambda: launch(args, (griddim, 1, 1), (blockdim, 1, 1), stream, 0)


def copy_to_host(device: Any, out: Any = None, stream: Any = 0) -> Any:
    """Copy the device array ``device`` to the host, into ``out`` when given, for any dtype.

    Parameters
    ----------
    device : DeviceNDArray (or any CUDA array)
        The source.
    out : numpy.ndarray, optional
        The destination (pinned memory for an asynchronous copy), of ``device``'s dtype and shape; by default
        a new array.
    stream : numba CUDA stream, optional
        The stream of the copy; 0 (default) copies synchronously.

    Returns
    -------
    numpy.ndarray
        ``out``, or the new host array.
    """
    device = as_device_array(device)
    carrier = _carrier(device.dtype)
    if carrier is None or (out is not None and out.dtype != device.dtype):
        return device.copy_to_host(out, stream=stream)
    if out is None:
        return _view(device, carrier).copy_to_host(stream=stream).view(device.dtype)
    _view(device, carrier).copy_to_host(out.view(carrier), stream=stream)
    return out
