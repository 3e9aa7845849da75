"""Rows of floats that grow in place: a growable CPU table over address space reserved once.

A growable cache (:class:`~fbrapids.trainers.sparse.tiers.CacheTier`) starts small and
multiplies as rows come in.  Growing a torch tensor allocates a new one and copies every row
into it: each growth first-touches the new memory and reads and writes the old rows, and the
pages of the old tensor go back to the system.  A 10-candidate trial's shared stores grew so
that 20% of its 1.5 M page faults were those copies and 40% the new rows' first writes.

:class:`ReservedRows` reserves the address space of the largest table that could be held once
(``MAP_NORESERVE``: nothing is committed or touched until a row is written, so the reservation
costs no memory) and hands out views of its first rows: growing is a new view of the same
memory, no copy, and rows keep their addresses.  Each view's torch storage covers its own rows
only (``torch.save`` of one writes those, not the reservation).  The mapping is released when
the last view is gone.

No transparent huge pages are asked for (``madvise(MADV_HUGEPAGE)``; the system's own policy
applies): they cut the page faults of new rows 512-fold, but on a virtual machine that hands
freed memory back to its host a first write into a fresh 2 MiB page cost far more than into
512 small ones (2-AMD-EPYC-core KVM, 1 GiB written a few seconds after memory was freed:
2.2-8.6 s in huge pages, 0.4-0.55 s in 4 KiB pages), and ``fit`` on the demo's batches, the
two alternated in one process, ran slower with them: 1.83 and 2.16 s against 1.52 and 1.48 s
at 200k rows, 8.14 against 7.47 s at 1M (medians of four rounds each).  Where the system refuses the reservation
(an address-space limit) or is not Linux, or runs with strict overcommit (where the
reservation would be charged as committed memory), :meth:`ReservedRows.reserve`
returns None and the caller keeps its copying growth.

Example:
    >>> r = ReservedRows.reserve(width=3)
    >>> a = r.view(2); a[:] = 1.0
    >>> b = r.view(4)  # the same memory, two rows more
    >>> b[:2].tolist(), b.data_ptr() == a.data_ptr(), b.untyped_storage().nbytes()
    ([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], True, 48)
    >>> r.view(r.capacity + 1) is None  # past the reservation: the caller copies
    True
"""

from __future__ import annotations

import logging
import mmap
import os
import sys

import numpy as np
import torch

log = logging.getLogger(__name__)

#: Linux's ``MAP_NORESERVE`` (Python 3.11's mmap module does not name it): no swap or commit
#: charged for the reservation, pages backed only as they are written
MAP_NORESERVE = 0x4000
#: the most bytes one table reserves: the machine's memory (a table past it would not fit), at
#: most 1 TiB of address space a table
MAX_RESERVE_BYTES = 1 << 40


def strict_overcommit() -> bool:
    """Whether Linux runs with strict overcommit (``vm.overcommit_memory`` 2), where
    ``MAP_NORESERVE`` is ignored and a reservation would be charged in full against the commit
    limit that every other allocation draws on: then nothing is reserved.

    Example:
        >>> strict_overcommit() in (True, False)
        True
    """
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "2"
    except OSError:
        return False


def machine_bytes() -> int:
    """This machine's physical memory in bytes (0 where the system does not say).

    Example:
        >>> machine_bytes() > 0
        True
    """
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


class ReservedRows:
    """Address space for ``capacity`` rows of ``width`` float32s, reserved (:func:`reserve`);
    :meth:`view` is a float32 tensor over its first rows."""

    def __init__(self, memory: mmap.mmap, width: int, capacity: int) -> None:
        self.memory, self.width, self.capacity = memory, int(width), int(capacity)

    @classmethod
    def reserve(cls, width: int, rows: int = 0, reserve_bytes: int | None = None) -> ReservedRows | None:
        """Reserve room for as many rows of ``width`` floats as ``reserve_bytes`` holds (default:
        the machine's memory, at most :data:`MAX_RESERVE_BYTES`), at least ``rows``; None where
        the system refuses the mapping (or has no anonymous private ``mmap``)."""
        row_bytes = 4 * max(1, int(width))
        limit = reserve_bytes if reserve_bytes is not None else min(machine_bytes() or MAX_RESERVE_BYTES,
                                                                   MAX_RESERVE_BYTES)
        capacity = max(int(rows), limit // row_bytes, 1)
        flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        if not flags or not sys.platform.startswith("linux"):  # (MAP_NORESERVE's value is Linux's)
            return None
        if strict_overcommit():  # (the reservation would be committed memory, not address space)
            log.debug("strict overcommit: no reservation of %d rows of %d floats, growth copies", capacity, width)
            return None
        try:
            memory = mmap.mmap(-1, capacity * row_bytes, flags=flags | MAP_NORESERVE)
        except (OSError, ValueError, OverflowError) as e:
            log.debug("no reservation of %d rows of %d floats (%s): growth copies", capacity, width, e)
            return None
        return cls(memory, width, capacity)

    def view(self, rows: int) -> torch.Tensor | None:
        """The first ``rows`` rows as a ``[rows, width]`` float32 tensor (its storage those rows
        only), or None past :attr:`capacity`."""
        if int(rows) > self.capacity:
            return None
        flat = np.frombuffer(self.memory, dtype=np.float32, count=int(rows) * self.width)
        return torch.from_numpy(flat.reshape(int(rows), self.width))
