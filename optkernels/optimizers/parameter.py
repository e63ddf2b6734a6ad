"""``Parameter``: a named array that optimizers update in place (MindSpore ``mindspore.Parameter``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import _cuda
from ..kernels._checks import FLOAT_DTYPES, plain_array

__all__ = ["Parameter"]


class Parameter:
    """A named, trainable array: what an optimizer updates (MindSpore ``Parameter``).

    The array is kept as given (no copy), so ``p.data`` and ``np.asarray(p)`` are the very array that every
    optimizer step updates in place. It may be a NumPy array (steps run on the CPU) or a CUDA array
    (anything with ``__cuda_array_interface__``, or a Numba simulator array; steps run on the GPU). Replace
    the values with :meth:`set_data`, which copies into the same array, so optimizers keep seeing it.

    Args:
        data: a float32 or float64 array, C-contiguous and writeable; anything else NumPy can convert
            (a list, a number) is converted with ``np.array`` and must then have a float dtype.
        name: the parameter's name, a non-empty ``str``. Optimizers key their state by it, apply the
            default weight-decay filter to it ("beta"/"gamma") and LARS its filter ("LayerNorm"/"bias").
        requires_grad: MindSpore's flag, kept for compatibility; optimizers update every parameter they
            were given, as MindSpore's do.

    Attributes:
        unique: MindSpore's ``Parameter.unique`` (default False): True says the network already merged the
            duplicate indices of this parameter's row-sparse gradients, and turns off the optimizer's
            ``unique`` de-duplication (OPTIMIZERS §1.8).

    Raises:
        TypeError: ``name`` is not a non-empty str, ``requires_grad`` is not a bool, or the data is not a
            float32/float64 array.
        ValueError: the data is read-only or not C-contiguous.
    """

    __slots__ = ("_data", "name", "requires_grad", "unique")

    def __init__(self, data: Any, name: str, requires_grad: bool = True):
        if not isinstance(name, str) or not name:
            raise TypeError(f"Parameter name must be a non-empty str, got {name!r}")
        if not isinstance(requires_grad, (bool, np.bool_)):
            raise TypeError(f"requires_grad must be a bool, got {type(requires_grad).__name__}")
        self._data = _as_parameter_array(data, name)
        self.name = name
        self.requires_grad = bool(requires_grad)
        self.unique = False

    @property
    def data(self) -> Any:
        """The array itself (NumPy or CUDA), updated in place by optimizer steps."""
        return self._data

    def set_data(self, data: Any) -> Parameter:
        """Copy ``data`` into the parameter's array (same shape; cast to the parameter's dtype).

        A CUDA parameter accepts NumPy or CUDA data. Returns ``self`` (as MindSpore's ``set_data``).

        Raises:
            ValueError: ``data`` has another shape.
        """
        if _cuda.is_device_array(self._data):
            host = _cuda.to_host(data) if _cuda.is_device_array(data) else np.asarray(data)
            if host.shape != self.shape:
                raise ValueError(
                    f"set_data: data has shape {host.shape} but {self.name} has shape {self.shape}"
                )
            _cuda.copy_to_device(self._data, np.ascontiguousarray(host, dtype=self.dtype))
            return self
        new = np.asarray(data)
        if new.shape != self._data.shape:
            raise ValueError(f"set_data: data has shape {new.shape} but {self.name} has shape {self.shape}")
        self._data[...] = new
        return self

    @property
    def shape(self) -> tuple:
        """The array's shape."""
        return tuple(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype (float32, float64, float16 or bfloat16)."""
        return np.dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_cuda(self) -> bool:
        """True if the array lives on a CUDA device."""
        return not isinstance(self._data, np.ndarray)

    def asnumpy(self) -> np.ndarray:
        """The values as a NumPy array: the array itself on the CPU, a copy for a CUDA parameter."""
        if isinstance(self._data, np.ndarray):
            return self._data
        return _cuda.to_host(self._data)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(p)``: the array itself for a NumPy parameter (a host copy for a CUDA one)."""
        arr = self.asnumpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def __repr__(self) -> str:
        where = "cuda" if self.is_cuda else "cpu"
        return f"Parameter(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, device={where})"


def _as_parameter_array(data: Any, name: str) -> Any:
    """Check (or convert) a parameter's array: float32/float64, C-contiguous, writeable. A NumPy subclass
    (``np.matrix``, ``np.memmap``) is kept as a plain ``ndarray`` view of its memory; a masked array is
    refused (TypeError: its mask cannot be honoured)."""
    data = plain_array(f"Parameter {name!r}", data)
    if not isinstance(data, np.ndarray) and _cuda.is_device_array(data):
        face = _cuda.interface(data)
        dtype = np.dtype(face["typestr"])
        if dtype.kind == "V" and isinstance(getattr(data, "dtype", None), np.dtype):
            dtype = data.dtype  # bfloat16 (the interface's typestr says '<V2')
        if dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"Parameter {name!r} has dtype {dtype}; supported dtypes are float32, float64, "
                "float16 and bfloat16"
            )
        if face.get("strides") is not None:
            from ..kernels._checks import _c_strides

            if tuple(face["strides"]) != _c_strides(tuple(face["shape"]), dtype.itemsize):
                raise ValueError(f"Parameter {name!r} must be C-contiguous")
        if face["data"][1]:
            raise ValueError(f"Parameter {name!r} is read-only")
        return data
    if not isinstance(data, np.ndarray):
        data = np.array(data)
    if data.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"Parameter {name!r} has dtype {data.dtype}; supported dtypes are float32, float64, "
            "float16 and bfloat16"
        )
    if not data.flags.c_contiguous:
        raise ValueError(f"Parameter {name!r} must be C-contiguous")
    if not data.flags.writeable:
        raise ValueError(f"Parameter {name!r} is read-only")
    return data
