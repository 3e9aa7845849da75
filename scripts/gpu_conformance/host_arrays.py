"""Host arrays that present a ``__cuda_array_interface__``: stand-ins for cupy arrays in the
host-only dry runs.  pylibcudf records the pointers of a ``gpumemoryview`` without reading
them, so the column builders' output can be handed to cudf on a machine with no device
(nothing here may be read back as data: the pointers are host addresses)."""

from __future__ import annotations

import numpy as np


class HostCAI(np.ndarray):
    """A numpy array whose CUDA array interface reports its host buffer."""

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.__array_interface__["data"][0], False),
                "version": 3, "strides": None}


def host(values, dtype) -> HostCAI:
    return np.ascontiguousarray(np.asarray(values, dtype=dtype)).view(HostCAI)
