"""Arrays that grow in place: a growable CPU table (and a store's directory) over address
space reserved once.

A growable cache (:class:`~fbrapids.trainers.sparse.tiers.CacheTier`) starts small and
multiplies as rows come in.  Growing a torch tensor allocates a new one and copies every row
into it: each growth first-touches the new memory and reads and writes the old rows, and the
pages of the old tensor go back to the system.  A 10-candidate trial's shared stores grew so
that 20% of its 1.5 M page faults were those copies and 40% the new rows' first writes.

A store's directory (:class:`~fbrapids.trainers.sparse.row_directory.RowDirectory`: a record
per row, its id, its SSD flag) grows the same way (:class:`ReservedArray`): it doubled before,
each time copying its records into new memory numpy asked huge pages for, on the prefetch
thread; at 200,000 rows of the demo that was 154 MB copied and first-touched in 0.24-0.34 s
of a fresh process's run (0.08-0.10 s in 4 KiB pages), time the training step waits for.

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
import numpy.typing as npt
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


class ReservedArray:
    """Address space for ``capacity`` entries of a numpy ``dtype`` (each of shape ``row``),
    reserved once (:meth:`reserve`); :meth:`view` is an array over its first entries, zeros
    where never written.  Growing is a longer view of the same memory: no copy, and what is
    written keeps its address (an earlier view stays valid, and sees the same entries).

    Example:
        >>> r = ReservedArray.reserve(np.int64, (4,))
        >>> a = r.view(2); a[:] = 7
        >>> b = r.view(3); b.tolist(), a.ctypes.data == b.ctypes.data, b.ctypes.data % 64
        ([[7, 7, 7, 7], [7, 7, 7, 7], [0, 0, 0, 0]], True, 0)
    """

    def __init__(self, memory: mmap.mmap, dtype: np.dtype, row: tuple[int, ...], capacity: int) -> None:
        self.memory, self.dtype, self.row, self.capacity = memory, dtype, row, int(capacity)

    @classmethod
    def reserve(cls, dtype: npt.DTypeLike, row: tuple[int, ...] = (), entries: int = 0,
                reserve_bytes: int | None = None) -> ReservedArray | None:
        """Reserve room for as many entries as ``reserve_bytes`` holds (default: the machine's
        memory, at most :data:`MAX_RESERVE_BYTES`), at least ``entries``; None where the system
        refuses the mapping (or has no anonymous private ``mmap``), or runs with strict
        overcommit."""
        dt = np.dtype(dtype)
        entry_bytes = max(1, dt.itemsize * int(np.prod(row, dtype=np.int64)))
        limit = reserve_bytes if reserve_bytes is not None else min(machine_bytes() or MAX_RESERVE_BYTES,
                                                                   MAX_RESERVE_BYTES)
        capacity = max(int(entries), limit // entry_bytes, 1)
        flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        if not flags or not sys.platform.startswith("linux"):  # (MAP_NORESERVE's value is Linux's)
            return None
        if strict_overcommit():  # (the reservation would be committed memory, not address space)
            log.debug("strict overcommit: no reservation of %d entries of %s, growth copies", capacity, dt)
            return None
        try:
            memory = mmap.mmap(-1, capacity * entry_bytes, flags=flags | MAP_NORESERVE)
        except (OSError, ValueError, OverflowError) as e:
            log.debug("no reservation of %d entries of %s (%s): growth copies", capacity, dt, e)
            return None
        return cls(memory, dt, tuple(int(k) for k in row), capacity)

    def view(self, entries: int) -> np.ndarray | None:
        """The first ``entries`` entries as an array of shape ``[entries, *row]``, or None past
        :attr:`capacity`."""
        if int(entries) > self.capacity:
            return None
        per = int(np.prod(self.row, dtype=np.int64))
        flat = np.frombuffer(self.memory, dtype=self.dtype, count=int(entries) * per)
        return flat.reshape(int(entries), *self.row)


class ReservedRows:
    """Address space for ``capacity`` rows of ``width`` float32s, reserved (:func:`reserve`);
    :meth:`view` is a float32 tensor over its first rows."""

    def __init__(self, array: ReservedArray) -> None:
        self.array, self.width, self.capacity = array, array.row[0], array.capacity

    @classmethod
    def reserve(cls, width: int, rows: int = 0, reserve_bytes: int | None = None) -> ReservedRows | None:
        """Reserve room for as many rows of ``width`` floats as ``reserve_bytes`` holds (default:
        the machine's memory, at most :data:`MAX_RESERVE_BYTES`), at least ``rows``; None where
        the system refuses the mapping (or has no anonymous private ``mmap``)."""
        array = ReservedArray.reserve(np.float32, (max(1, int(width)),), rows, reserve_bytes)
        return cls(array) if array is not None else None

    def view(self, rows: int) -> torch.Tensor | None:
        """The first ``rows`` rows as a ``[rows, width]`` float32 tensor (its storage those rows
        only), or None past :attr:`capacity`."""
        flat = self.array.view(rows)
        return torch.from_numpy(flat) if flat is not None else None


class GrowingArray:
    """A numpy array of ``[entries, *row]`` that grows keeping its entries: in place over
    address space reserved once (:class:`ReservedArray`, for ``reserve`` entries; None: as
    many as the machine's memory holds) where the system grants it, else copied into new
    memory (64-byte aligned, as a reservation is).  New entries take ``fill``.  :attr:`array`
    is the current array; after a growth in place an earlier one is a shorter view of the
    same memory (still valid), after a copy it is the old memory.

    Example:
        >>> g = GrowingArray(2, np.int64, -1); g.array[:] = [3, 4]; first = g.array
        >>> g.grow(4).tolist(), first.ctypes.data == g.array.ctypes.data, g.in_place
        ([3, 4, -1, -1], True, True)
        >>> c = GrowingArray(2, np.int64, -1, reserve=0); c.array[:] = [3, 4]; c.grow(3).tolist(), c.in_place
        ([3, 4, -1], False)
    """

    def __init__(self, entries: int, dtype: npt.DTypeLike, fill: object, row: tuple[int, ...] = (),
                 reserve: int | None = None) -> None:
        self.dtype, self.row, self.fill = np.dtype(dtype), tuple(row), np.asarray(fill, dtype=dtype)
        per = self.dtype.itemsize * int(np.prod(self.row, dtype=np.int64))
        self._room = (ReservedArray.reserve(self.dtype, self.row, entries,
                                            None if reserve is None else max(int(reserve), int(entries)) * per)
                      if reserve != 0 else None)
        self.array = self._made(int(entries), None)

    @property
    def capacity(self) -> int:
        """Entries its reservation holds (0: none; it copies)."""
        return self._room.capacity if self._room is not None else 0

    @property
    def in_place(self) -> bool:
        """Whether it still grows in place (it has a reservation with room)."""
        return self._room is not None

    def grow(self, entries: int) -> np.ndarray:
        """Room for ``entries`` entries (nothing when it has them); returns :attr:`array`."""
        if int(entries) > len(self.array):
            self.array = self._made(int(entries), self.array)
        return self.array

    def _made(self, n: int, old: np.ndarray | None) -> np.ndarray:
        k = 0 if old is None else len(old)
        if self._room is not None:
            view = self._room.view(n)
            if view is not None:
                if self.fill.any():  # (never written, the new entries read zeros)
                    view[k:] = self.fill
                return view
            self._room = None  # past the reservation: copies from now on
        per = int(np.prod(self.row, dtype=np.int64))
        raw = np.empty(n * per * self.dtype.itemsize + 64, dtype=np.uint8)
        skip = -raw.ctypes.data % 64
        out = raw[skip : skip + n * per * self.dtype.itemsize].view(self.dtype).reshape(n, *self.row)
        if old is not None:
            out[:k] = old
        out[k:] = self.fill
        return out
