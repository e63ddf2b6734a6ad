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
    return cuda.jit(function, extensions=[_NONE_ARGUMENTS])


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
