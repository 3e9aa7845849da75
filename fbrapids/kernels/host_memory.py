"""Host buffers for the kernels' outputs: a large one comes from the system allocator, in
plain pages.

numpy asks the kernel for transparent huge pages on every array of 4 MiB or more
(``madvise(MADV_HUGEPAGE)``); with Linux's common ``defrag=madvise`` setting, faulting such
an array in compacts memory first.  A kernel's outputs are written once, right after they
are allocated, and at 2M rows they are hundreds of MB per partition: on the 2-core
benchmark box, the canonical chain at 2M rows spent 1.6-4.2 s of system time per run with
numpy's buffers, 0.8-1.6 s without the advice.  Here a buffer of :data:`LARGE_BYTES` or more
is a pyarrow buffer from the system allocator (malloc: plain pages, no advice), viewed as a
numpy array that keeps it alive; a smaller one is numpy's own.  Values are never read
before they are written, so the choice changes no result.

Example:
    >>> a = empty(1 << 20, np.int64)
    >>> a[:] = 7
    >>> int(a.sum()), a.dtype.name, a.flags.writeable
    (7340032, 'int64', True)
    >>> zeros(3, np.int64).tolist()
    [0, 0, 0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

#: arrays this large (bytes) come from the system allocator (numpy's hugepage advice starts at 4 MiB)
LARGE_BYTES = 4 << 20


def empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised 1-d array of ``n`` items of ``dtype`` (see the module doc)."""
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < LARGE_BYTES:
        return np.empty(n, dtype=dtype)
    return np.frombuffer(pa.allocate_buffer(nbytes, memory_pool=pa.system_memory_pool()), dtype=dtype, count=int(n))


def zeros(n: int, dtype: Any) -> np.ndarray:
    """:func:`empty`, zeroed."""
    out = empty(n, dtype)
    if out.nbytes >= LARGE_BYTES:
        out.fill(0)
        return out
    return np.zeros(n, dtype=dtype)


def full(n: int, value: Any, dtype: Any) -> np.ndarray:
    """:func:`empty`, every item ``value``."""
    out = empty(n, dtype)
    out.fill(value)
    return out
