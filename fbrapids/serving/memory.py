"""Handing freed heap memory back to the operating system after a large call.

CPython and numpy free a large request's objects into the C allocator's arenas, which keep
them: a process that once scored one large call stays that large.  :func:`release_memory`
asks glibc to return the free pages (``malloc_trim(0)``); elsewhere it does nothing.

Example:
    >>> release_memory() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _trim():  # the C library's malloc_trim, or None
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim") if name else None
    except (OSError, AttributeError):
        return None


def release_memory() -> bool:
    """Return the allocator's free pages to the system; whether it could be asked."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
