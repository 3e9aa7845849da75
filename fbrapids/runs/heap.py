"""Handing freed heap memory back to the operating system, so a long process's RSS is what
it holds, not what it once held.

CPython, numpy, pandas and pyarrow free their buffers into the C allocator's arenas, which
keep them: the freed pages scattered among live ones stay resident.  A serving process
that once scored one large call stays that large, and small calls do the same more slowly
(the item cache's entries are replaced as it evicts, each worker thread allocates from its
own arena: ``benchmarks/inference.py --rss-plateau`` measures it).  A training run does
the same with every partition it extracts and cuts into batches: at 4M rows its arenas held
1.2-1.4 GB free beside 0.7-1.0 GB in use, all resident, and the held-out pass (another
pattern of sizes) added to it (:class:`fbrapids.app.pipeline.TimedPartitions` releases
after a partition, at most every few seconds).

* :func:`release_memory` asks glibc to return the free pages of every arena
  (``malloc_trim(0)``); elsewhere it does nothing.  The scorer calls it after a large call,
  and :class:`PeriodicRelease` at most every few seconds after any call; a run's partition
  stream the same after a partition; a run's memory watch before it stops a run past its
  budget (:class:`~fbrapids.runs.memory_watch.MemoryWatch`).
* :func:`keep_freed_blocks` keeps blocks up to 64 MiB, and a free heap top up to 256 MiB,
  for reuse (``mallopt``): a training step allocates and frees the same tensors every step
  (a trial's arms: tens of MiB each), which glibc's defaults hand back to the system as they
  are freed, so the next step faults every page in again.  ``fit`` asks for it; what it
  keeps still goes back at :func:`release_memory`.
* :func:`limit_arenas` caps glibc's arenas (``mallopt(M_ARENA_MAX)``): ``fbrapids serve``
  keeps two, not eight per core, so its worker threads share their freed pages.

Example:
    >>> release_memory() in (True, False)
    True
    >>> r = PeriodicRelease(interval_s=3600.0)
    >>> r.maybe(), r.maybe()
    (True, False)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time

M_ARENA_MAX = -8  #: glibc's mallopt parameter number for the arena cap
M_TRIM_THRESHOLD = -1  #: glibc's mallopt parameter: the free heap top it keeps before trimming
M_MMAP_THRESHOLD = -3  #: glibc's mallopt parameter: blocks from this size up are mapped (and unmapped when freed)
KEEP_BLOCKS_BELOW = 64 << 20  #: :func:`keep_freed_blocks`: blocks below this come from the heap
KEEP_TOP_BELOW = 256 << 20  #: :func:`keep_freed_blocks`: a free heap top up to this is kept


@functools.lru_cache(maxsize=1)
def _libc():  # the C library, or None
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def _trim():  # the C library's malloc_trim, or None
    return getattr(_libc(), "malloc_trim", None)


def release_memory() -> bool:
    """Return the allocator's free pages to the system; whether it could be asked."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True


def limit_arenas(n: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``n`` for the threads that start from now on; whether the
    C library took it (False elsewhere than glibc)."""
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, int(n)) == 1)


@functools.lru_cache(maxsize=1)
def keep_freed_blocks() -> bool:
    """Keep freed blocks below :data:`KEEP_BLOCKS_BELOW` in the heap and a free heap top up to
    :data:`KEEP_TOP_BELOW` (glibc's ``mallopt``) for the allocations that follow, once per
    process; whether the C library took both (False elsewhere than glibc).

    glibc maps a block of 32 MiB or more (its largest automatic threshold) on its own and
    unmaps it when freed, and trims a free heap top over twice its threshold: a training
    step's tensors of that size fault every page in again at every step (a K = 3 trial's
    arms at 200k rows: about 1.1M page faults).  Kept, the next step reuses them;
    :func:`release_memory` (the pipeline every few seconds, each stage's start) still hands
    them back.

    Example:
        >>> keep_freed_blocks() in (True, False)
        True
    """
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_BLOCKS_BELOW) == 1 and mallopt(M_TRIM_THRESHOLD, KEEP_TOP_BELOW) == 1)


class PeriodicRelease:
    """:func:`release_memory` at most once every ``interval_s`` seconds, from any thread:
    :meth:`maybe` after each call (a trim of a few hundred MiB of heap takes milliseconds)."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = float(interval_s)
        self._last = -float("inf")
        self._lock = threading.Lock()
        self.releases = 0

    def maybe(self) -> bool:
        """Release now if the last release is ``interval_s`` old; whether it did."""
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                return False
            self._last = now
            self.releases += 1
        release_memory()
        return True
