"""Host buffers for the kernels' and the row takes' outputs: a large one comes from a
retained pool of mapped blocks, in plain pages.

Two costs of fresh memory, both measured on the 2-core benchmark box (a virtual machine,
where a page fault costs 3-7 us):

* numpy asks the kernel for transparent huge pages on every array of 4 MiB or more
  (``madvise(MADV_HUGEPAGE)``), and so does pyarrow's mimalloc for its large segments; with
  Linux's common ``defrag=madvise`` setting, faulting such a buffer in compacts memory
  first.  The canonical chain at 2M rows spent 1.6-4.2 s of system time per run with
  numpy's buffers.
* A buffer from the system allocator (``malloc``: plain pages) is unmapped when it is
  freed, so the next partition's outputs fault every page in again: at 2M rows the
  extraction and the merge faulted 300k-430k pages (1.2-1.7 GB) per run, 0.8-2.2 s of
  system time.

So a buffer of :data:`LARGE_BYTES` or more is carved from an anonymous mapping (plain
pages, no advice), and when the last array, view or Arrow buffer over it is gone, the
mapping is kept for the next buffer of its size class instead of being unmapped: a
partition's outputs reuse the pages the previous partition's outputs were faulted into,
as a device pool (RMM) does on the GPU.  What is kept is capped at
``$FBRAPIDS_HOST_CACHE_BYTES`` (unset or empty: :func:`default_cap`; ``0`` keeps nothing): past
it, the blocks kept longest are unmapped first; :func:`release` unmaps them all.  A
smaller buffer is numpy's or pyarrow's own.  Values are never read before they are
written (:func:`zeros` and :func:`full` write every item), so reuse changes no result.
:func:`stats` counts the blocks reused, mapped and kept.

Example:
    >>> a = empty(1 << 20, np.int64)
    >>> a[:] = 7
    >>> int(a.sum()), a.dtype.name, a.flags.writeable
    (7340032, 'int64', True)
    >>> zeros(3, np.int64).tolist()
    [0, 0, 0]
    >>> before = stats()["reused"]
    >>> address = a.ctypes.data
    >>> del a  # its block is kept ...
    >>> b = empty(1 << 20, np.int64)  # ... and this array of the same size class reuses it
    >>> stats()["reused"] - before, b.ctypes.data == address
    (1, True)
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import weakref
from collections import OrderedDict, deque

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fbrapids.errors import UsageError

#: buffers this large (bytes) come from the retained blocks (numpy's hugepage advice starts at 4 MiB)
LARGE_BYTES = 4 << 20
#: the environment variable capping the bytes of freed blocks kept for reuse
ENV_CACHE_BYTES = "FBRAPIDS_HOST_CACHE_BYTES"


def _machine_bytes() -> int:
    """The machine's memory (1 GiB where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 30


#: the default cap: 1/8 of the machine's memory, at most 4 GiB (in a dask worker, see :func:`default_cap`)
DEFAULT_CACHE_BYTES = min(4 << 30, _machine_bytes() // 8)
#: a block may serve a buffer of its size class or of this many classes below (up to ~1.5x the need)
CLASS_SLACK = 4
_PAGE = mmap.PAGESIZE


def size_class(nbytes: int) -> int:
    """The block size that serves ``nbytes``: rounded up to an eighth of its power of two
    (at most 12.5% more), and to whole pages.

    Example:
        >>> size_class(5 << 20) == 5 << 20, size_class((5 << 20) + 1) == (5 << 20) + (512 << 10)
        (True, True)
    """
    nbytes = max(int(nbytes), 1)
    step = max(_PAGE, 1 << max(nbytes.bit_length() - 4, 0))
    return -(-nbytes // step) * step


def _next_class(size: int) -> int:
    return size_class(size + 1)


class _Blocks:
    """The freed blocks kept for reuse, by size class, oldest first for eviction, under one lock.

    A block comes back from a finalizer, which may run inside any frame of any thread,
    also one that holds the lock (the garbage collector runs on an allocation).  So
    :meth:`give_back` never waits for the lock: it queues the block, and files it (keeps it
    or unmaps it) only if the lock is free; whoever holds the lock files the queue when it
    lets go."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.returned: deque[mmap.mmap] = deque()  #: blocks given back, not yet filed
        self.free: dict[int, list[mmap.mmap]] = {}
        self.order: OrderedDict[int, mmap.mmap] = OrderedDict()  #: id -> block, the longest kept first
        self.kept_bytes = 0
        self.reused = 0
        self.mapped = 0
        self.dropped = 0

    def cap(self) -> int:
        """The cap in force: ``$FBRAPIDS_HOST_CACHE_BYTES`` (a whole number of bytes), else
        :func:`default_cap` (unset or empty, as an empty ``$FBRAPIDS_DICTIONARY`` is its default)."""
        value = os.environ.get(ENV_CACHE_BYTES)
        if value is None or not value.strip():
            return default_cap()
        try:
            cap = int(value)
        except ValueError:
            cap = -1
        if cap < 0:
            raise UsageError(f"${ENV_CACHE_BYTES}={value!r}: expected a whole number of bytes, 0 or more "
                             "(0 keeps no freed block)")
        return cap

    def take(self, nbytes: int) -> mmap.mmap:
        """A block of at least ``nbytes``: the last kept one of its class (or of up to
        CLASS_SLACK classes above), else a new mapping."""
        size = size_class(nbytes)
        cap = self.cap()  # a malformed cap is an error here, where a caller sees it (not in a finalizer)
        block = None
        with self.lock:
            self._file_locked(cap)
            want = size
            for _ in range(CLASS_SLACK + 1):
                kept = self.free.get(want)
                if kept:
                    block = kept.pop()
                    del self.order[id(block)]
                    self.kept_bytes -= len(block)
                    self.reused += 1
                    break
                want = _next_class(want)
            else:
                self.mapped += 1
        self.file()
        return block if block is not None else mmap.mmap(-1, size)

    def give_back(self, block: mmap.mmap) -> None:
        """Called when the last array over ``block`` is gone (see the class doc)."""
        self.returned.append(block)
        self.file()

    def file(self) -> None:
        """File the queued blocks unless the lock is held (its holder files them when it lets go)."""
        while self.returned and self.lock.acquire(blocking=False):
            try:
                self._file_locked()
            finally:
                self.lock.release()

    def _file_locked(self, cap: int | None = None) -> None:
        """Keep each queued block, unmapping the blocks kept longest while the cap (read
        here unless given) would be passed (the workload's sizes have moved on); a block
        larger than the cap is unmapped."""
        if not self.returned:
            return
        if cap is None:
            try:
                cap = self.cap()
            except UsageError:  # (reported by take; a finalizer's exception would only be printed)
                cap = 0
        while self.returned:
            block = self.returned.popleft()
            if len(block) > cap:
                self.dropped += 1
                continue  # unmapped once the last reference (the array's export) goes
            while self.kept_bytes + len(block) > cap:
                _, old = self.order.popitem(last=False)
                self.free[len(old)].remove(old)
                self.kept_bytes -= len(old)
                self.dropped += 1
            self.free.setdefault(len(block), []).append(block)
            self.order[id(block)] = block
            self.kept_bytes += len(block)

    def release(self) -> int:
        with self.lock:
            self._file_locked()
            freed, self.kept_bytes = self.kept_bytes, 0
            self.free, self.order = {}, OrderedDict()
        self.file()
        return freed

    def counts(self) -> dict[str, int]:
        with self.lock:
            self._file_locked()
            counts = {"reused": self.reused, "mapped": self.mapped, "dropped": self.dropped,
                      "kept_bytes": self.kept_bytes, "kept_blocks": len(self.order)}
        self.file()
        return counts


_BLOCKS = _Blocks()


def default_cap() -> int:
    """The cap without ``$FBRAPIDS_HOST_CACHE_BYTES``: :data:`DEFAULT_CACHE_BYTES`, or, in a
    dask worker's task with a memory limit, an eighth of that limit if less (several worker
    processes on one machine each keep their own blocks, and a worker's memory monitor
    counts them).

    Example:
        >>> default_cap() <= DEFAULT_CACHE_BYTES
        True
    """
    if "distributed" in sys.modules:  # a worker imports it; a plain process may never
        from distributed import get_worker

        try:
            limit = get_worker().memory_manager.memory_limit
        except (ValueError, AttributeError):
            limit = None
        if limit:
            return min(DEFAULT_CACHE_BYTES, int(limit) // 8)
    return DEFAULT_CACHE_BYTES


def _large(nbytes: int) -> np.ndarray:
    """``nbytes`` bytes (uint8) over a retained block; the block is given back when the array
    and everything viewing it are gone."""
    block = _BLOCKS.take(nbytes)
    out = np.frombuffer(block, dtype=np.uint8, count=nbytes)
    weakref.finalize(out, _BLOCKS.give_back, block).atexit = False
    return out


def empty(n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """An uninitialised 1-d array of ``n`` items of ``dtype`` (see the module doc)."""
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < LARGE_BYTES:
        return np.empty(n, dtype=dtype)
    return _large(nbytes).view(dtype)


def zeros(n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """:func:`empty`, zeroed."""
    out = empty(n, dtype)
    if out.nbytes >= LARGE_BYTES:
        out.fill(0)
        return out
    return np.zeros(n, dtype=dtype)


def full(n: int, value: int | float, dtype: npt.DTypeLike) -> np.ndarray:
    """:func:`empty`, every item ``value``."""
    out = empty(n, dtype)
    out.fill(value)
    return out


def arrow_buffer(nbytes: int) -> pa.Buffer:
    """A mutable, uninitialised pyarrow buffer of ``nbytes``: over a retained block when large,
    else from pyarrow's default pool (which reuses small and middling buffers itself).

    Example:
        >>> buf = arrow_buffer(LARGE_BYTES)
        >>> buf.size == LARGE_BYTES, buf.is_mutable, buf.address % 64
        (True, True, 0)
    """
    if nbytes < LARGE_BYTES:
        return pa.allocate_buffer(nbytes)
    return pa.py_buffer(_large(nbytes))


def release() -> int:
    """Unmap every kept block (each is unmapped once nothing views it); returns the bytes let go.

    Example:
        >>> _ = release()
        >>> stats()["kept_bytes"]
        0
    """
    return _BLOCKS.release()


def stats() -> dict[str, int]:
    """Counters of the retained blocks: ``reused`` (a buffer served by a kept block),
    ``mapped`` (a new mapping), ``dropped`` (a freed block unmapped: the cap was reached),
    ``kept_bytes`` and ``kept_blocks`` (kept now).

    Example:
        >>> sorted(stats())
        ['dropped', 'kept_blocks', 'kept_bytes', 'mapped', 'reused']
    """
    return _BLOCKS.counts()
