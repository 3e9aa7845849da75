"""What the CUDA runtime uses of the device libraries' values, as types mypy checks.

cupy and pylibcudf ship no type information (and are absent without a GPU); the names here
say which of their values a signature takes, and the Protocols spell out the part of them
that :mod:`~fbrapids.kernels.device_columns` and :mod:`~fbrapids.kernels.runtime_cuda` use,
so mypy checks those uses:

* :data:`DeviceArray`: a ``cupy.ndarray`` (a device buffer, its address in ``data.ptr``);
* :data:`XArray`: an array of the array module ``xp`` -- numpy's on the host, cupy's on the
  device -- for the functions that run on either (their ``xp`` a :class:`~types.ModuleType`);
* :class:`DeviceModule`, :class:`DeviceFunction`: a loaded CUDA module and its kernels;
* :class:`PlcColumn`: a ``pylibcudf.Column`` (buffers, null mask, children).

Example:
    >>> import typing, numpy as np
    >>> typing.get_args(XArray)[0] is np.ndarray
    True
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol, TypeAlias, Union

import numpy as np

if TYPE_CHECKING:  # (annotations only: cupy is the gpu extra's)
    import cupy


#: a cupy array (device memory, its address in ``data.ptr``).  cupy has no stubs: where it is
#: absent, mypy reads the name as it reads cudf's (:data:`fbrapids.frames.backend.FrameLike`)
DeviceArray: TypeAlias = "cupy.ndarray"
#: an array of the array module ``xp``: numpy's on the host, cupy's on the device
XArray: TypeAlias = Union[np.ndarray, "cupy.ndarray"]


class DeviceFunction(Protocol):
    """A kernel of a loaded CUDA module (cupy's ``Function``): launched over ``grid`` blocks
    of ``block`` threads with ``args`` (scalars and device arrays)."""

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[object, ...]) -> None: ...


class DeviceModule(Protocol):
    """A loaded CUDA module (cupy's ``cuda.function.Module``, as a ``RawModule`` serves kernels)."""

    def get_function(self, name: str) -> DeviceFunction: ...


class DataType(Protocol):
    """A pylibcudf ``DataType``: its ``id()`` a ``TypeId`` member (``INT32``, ``STRING``, ``LIST`` ...)."""

    def id(self) -> enum.Enum: ...


class GpuMemoryView(Protocol):
    """A pylibcudf ``gpumemoryview``: a device buffer's address."""

    @property
    def ptr(self) -> int: ...


class PlcColumn(Protocol):
    """A pylibcudf ``Column``, as libcudf lays it out (``device_columns``' module docstring)."""

    def type(self) -> DataType: ...

    def size(self) -> int: ...

    def offset(self) -> int: ...

    def null_count(self) -> int: ...

    def null_mask(self) -> GpuMemoryView | None: ...

    def data(self) -> GpuMemoryView | None: ...

    def num_children(self) -> int: ...

    def child(self, index: int) -> PlcColumn: ...
