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
  stream the same after a partition.
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
