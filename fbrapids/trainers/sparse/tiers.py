"""The RAM tiers of a table: the cache (a torch tensor on the training device) and host RAM
(numpy), each a fixed set of slots holding rows by global row number, each a
:class:`~fbrapids.trainers.sparse.tier.Tier` (take / put / evict / persist / stats).  The
SSD tier is in :mod:`fbrapids.trainers.sparse.ssd`; the slot bookkeeping and the counters
they share are in :mod:`fbrapids.trainers.sparse.tier`.

Example:
    >>> import numpy as np, torch
    >>> c = CacheTier(4, width=2, device=torch.device("cpu"))
    >>> s = c.slots.pop(1); c.put(s, np.array([[1.0, 2.0]], np.float32)); c.take(s).tolist()
    [[1.0, 2.0]]
"""

from __future__ import annotations

import numpy as np
import torch

from fbrapids.errors import StoreError
from fbrapids.trainers.sparse.reserved import GrowingArray, ReservedRows
from fbrapids.trainers.sparse.tier import FIRST_USE, Slots, SlottedTier, TierStats

#: the most slots a growable cache over reserved address space starts with: its slots' arrays
#: and pins (25 bytes a slot) are written in full when first used, while growing costs little
#: (in place, on the prefetch thread: :meth:`CacheTier.in_place_rows`); at the demo's 200k
#: rows, 26 tables started at 131,072 slots spent about 25 ms of the first step making them,
#: where most tables hold under a thousand rows; a table that outgrows it grows to ``cache_rows``
#: first (:meth:`~fbrapids.trainers.sparse.hierarchy.TierStack.reserve`), as if it had started there
IN_PLACE_START = 1 << 14


class CacheTier:
    """The top tier: ``rows`` rows of ``width`` floats in a torch tensor on ``device``, and
    ``pin[slot]``, the last step a slot is pinned for (pinned rows are never evicted).

    A ``growable`` cache (the one RAM tier of a CPU store whose host tier is unbounded:
    :class:`~fbrapids.trainers.sparse.hierarchy.TierStack`) multiplies instead of evicting.
    On the CPU it grows in place, over address space reserved once
    (:class:`~fbrapids.trainers.sparse.reserved.ReservedRows`: no copy of the rows, pages
    touched only as rows are written), and so do its slots' arrays and pins; it then starts
    at ``rows`` slots or :data:`IN_PLACE_START`, the fewer (without a reservation: at
    ``rows``).

    On the CPU the tensor's memory is also seen as a numpy array (``table``), whose row
    gathers, scatters and the in-place C optimizers are cheaper than torch's.  On a CUDA
    device, rows coming up from host RAM or the SSD file are copied through pinned memory
    on a side stream (a prefetch for the next batch overlaps the current batch's compute);
    reads and writes of the cache wait for that copy's event.
    """

    def __init__(self, rows: int, width: int, device: torch.device, growable: bool = False) -> None:
        self.width = int(width)
        self.growable = bool(growable)
        # a growable cache's free slots are written before they are read (a row placed in them): its memory is
        # only touched as rows come in; on the CPU it grows in place over address space reserved once
        self._reserved = (ReservedRows.reserve(self.width, int(rows))
                          if self.growable and torch.device(device).type == "cpu" else None)
        if self._reserved is not None:
            rows = min(int(rows), IN_PLACE_START)  # (it grows in place as rows come)
        view = self._reserved.view(int(rows)) if self._reserved is not None else None
        alloc = torch.empty if self.growable else torch.zeros
        self.data = view if view is not None else alloc((int(rows), self.width), dtype=torch.float32, device=device)
        self.table: np.ndarray | None = self.data.numpy() if self.data.device.type == "cpu" else None
        # a reserved cache's slot arrays and pins grow in place too (no copy), over as many slots as it has rows
        self.slots = Slots(rows, reserve=self._reserved.capacity if self._reserved is not None else 0)
        self._pins: GrowingArray | None = None  # made on first use, as the slots' arrays are (:class:`Slots`)
        self.stats = TierStats()
        self._copies: torch.cuda.Stream | None = None  # CUDA: the side stream rows are copied up on
        self._copied: torch.cuda.Event | None = None  # CUDA: the event after the last copy up

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def pin(self) -> np.ndarray:
        """``pin[slot]``: the last step the slot is pinned for (-1: never)."""
        pins = self._pins
        if pins is None:
            with FIRST_USE:
                if self._pins is None:
                    self._pins = GrowingArray(self.slots.capacity, np.int64, -1, reserve=self.slots.reserve)
                pins = self._pins
        return pins.array

    def to(self, device: torch.device) -> None:
        """Move the rows to ``device`` (slots and bookkeeping are unchanged)."""
        if torch.device(device) == self.data.device:
            return
        if self.table is None:
            self.wait_copies()
            self._copies = None
        self.data = self.data.to(device)
        self._reserved = None  # (the rows are elsewhere now: a later growth copies)
        self.table = self.data.numpy() if self.data.device.type == "cpu" else None

    def host_table(self) -> np.ndarray:
        """:attr:`table`, which only a CPU cache has (a device cache's rows are no numpy array)."""
        if self.table is None:
            raise StoreError(f"a cache on {self.device} has no host table: only a CPU cache takes this path")
        return self.table

    def slot_tensor(self, slots: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(slots).to(self.data.device, non_blocking=True)

    def wait_copies(self) -> None:
        """Make the current CUDA stream wait for the rows being copied up (CUDA only)."""
        if self._copied is not None:
            torch.cuda.current_stream(self.data.device).wait_event(self._copied)
            self._copied = None

    def gather(self, slots: np.ndarray) -> torch.Tensor:
        """Full rows ``[len(slots), width]`` on the device (a new tensor)."""
        if self.table is not None:
            return torch.from_numpy(self.table.take(slots, axis=0))
        self.wait_copies()
        return self.data.index_select(0, self.slot_tensor(slots))

    def take(self, slots: np.ndarray) -> np.ndarray:
        """Full rows of ``slots`` as a host numpy array (a copy)."""
        if self.table is not None:
            return self.table.take(slots, axis=0)
        return self.gather(slots).cpu().numpy()

    def put(self, slots: np.ndarray, rows: np.ndarray | torch.Tensor) -> None:
        """Write full rows into ``slots``."""
        if self.table is not None:
            self.table[slots] = rows.detach().numpy() if isinstance(rows, torch.Tensor) else rows
        elif isinstance(rows, torch.Tensor) and rows.device == self.data.device:
            self.wait_copies()
            self.data.index_copy_(0, self.slot_tensor(slots), rows)
        else:  # host rows: through pinned memory, on a side stream; readers wait for its event
            src = (rows.detach().cpu() if isinstance(rows, torch.Tensor)
                   else torch.from_numpy(np.ascontiguousarray(rows)))
            src, idx = src.pin_memory(), torch.from_numpy(np.ascontiguousarray(slots)).pin_memory()
            if self._copies is None:
                self._copies = torch.cuda.Stream(device=self.data.device)
            self._copies.wait_stream(torch.cuda.current_stream(self.data.device))  # after the slots' last readers
            with torch.cuda.stream(self._copies):
                self.data.index_copy_(0, idx.to(self.data.device, non_blocking=True),
                                      src.to(self.data.device, non_blocking=True))
                self._copied = torch.cuda.Event()
                self._copied.record(self._copies)

    def evict(self, where: np.ndarray) -> None:
        """Free slots ``where`` (the rows in them are gone: copy them out first)."""
        self.slots.release(where)

    def persist(self) -> None:
        """Nothing: the cache is not durable; the tiers below it are written back to."""

    def grow(self, rows: int) -> None:
        """Room for ``rows`` rows in all (the rows and their slots keep their places).

        Example:
            >>> c = CacheTier(2, width=1, device=torch.device("cpu"), growable=True)
            >>> s = c.slots.pop(2); c.put(s, np.array([[1.0], [2.0]], np.float32)); c.grow(5)
            >>> c.slots.capacity, c.slots.n_free, c.take(s).ravel().tolist(), c.slots.pop(1).tolist()
            (5, 3, [1.0, 2.0], [2])
        """
        old = self.slots.capacity
        if rows <= old:
            return
        self.wait_copies()
        # the new slots are written before they are read (a row placed in them)
        data = self._reserved.view(int(rows)) if self._reserved is not None else None
        if data is None:  # no reservation, or past it: a new tensor, the rows copied
            self._reserved = None
            data = torch.empty((int(rows), self.width), dtype=torch.float32, device=self.data.device)
            data[:old] = self.data
        # the slots' arrays and pins first, the rows after: a reader on another thread that takes the table and
        # then the slots' arrays (a growth in place there, :meth:`in_place_rows`) finds them at least as long
        with FIRST_USE:  # (the pins made meanwhile would miss the new slots)
            if self._pins is not None:
                self._pins.grow(int(rows))
            self.slots.grow(rows)
        self.data = data  # (in the reservation: the same memory, the rows where they were)
        self.table = self.data.numpy() if self.data.device.type == "cpu" else None

    def in_place_rows(self) -> int:
        """The most rows this cache holds growing in place: its rows, its slots' arrays and its
        pins all over address space reserved for them (0: a growth copies some of them).  A
        growth within it moves nothing, so another thread may grow it while this one reads
        arrays it took before (they stay valid, shorter views of the same memory).

        Example:
            >>> c = CacheTier(2, width=1, device=torch.device("cpu"), growable=True)
            >>> c.in_place_rows() >= 1 << 20, CacheTier(2, 1, torch.device("cpu")).in_place_rows()
            (True, 0)
        """
        if self._reserved is None or self.table is None:
            return 0
        room = min(self._reserved.capacity, self.slots.in_place_rows())
        pins = self._pins
        return room if pins is None else min(room, pins.capacity)

    def evictable(self, step: int) -> np.ndarray:
        """Occupied slots not pinned at ``step``."""
        return np.flatnonzero((self.slots.owner >= 0) & (self.pin < step))

    def room(self, step: int) -> int:
        """Rows the cache can take at ``step``: free slots plus unpinned occupied ones (any
        number, for a growable cache)."""
        if self.growable:
            return 1 << 62
        return self.slots.n_free + int(((self.slots.owner >= 0) & (self.pin < step)).sum())


class HostTier(SlottedTier):
    """Host-RAM rows (numpy); ``capacity=None`` grows without bound (then there is no SSD).
    The built-in host tier: ``StoreConfig(host_tier="ram")``.

    Example:
        >>> h = HostTier(None, width=2)
        >>> s = h.hold(np.array([5]), np.array([[1.0, 2.0]]), np.array([True])); h.take(s).tolist()
        [[1.0, 2.0]]
    """

    kind = "ram"

    def __init__(self, capacity: int | None, width: int) -> None:
        self.table = np.zeros((0, int(width)), dtype=np.float32)
        super().__init__(capacity, width)

    def take(self, where: np.ndarray) -> np.ndarray:
        return self.table[where]

    def put(self, where: np.ndarray, rows: np.ndarray) -> None:
        self.table[where] = rows

    def resize(self, capacity: int) -> None:
        grown = np.zeros((capacity, self.width), dtype=np.float32)
        grown[: len(self.table)] = self.table
        self.table = grown
