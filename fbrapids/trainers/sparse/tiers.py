"""The RAM tiers of a table: the cache (a torch tensor on the training device) and host RAM
(numpy), each a fixed set of slots holding rows by global row number, with take / put /
evict; plus the slot bookkeeping and per-tier counters they share.  The SSD tier is in
:mod:`fbrapids.trainers.sparse.ssd`.

Example:
    >>> import numpy as np, torch
    >>> c = CacheTier(4, width=2, device=torch.device("cpu"))
    >>> s = c.slots.pop(1); c.put(s, np.array([[1.0, 2.0]], np.float32)); c.take(s).tolist()
    [[1.0, 2.0]]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from fbrapids.errors import StoreError


@dataclass
class TierStats:
    """Counters of one tier.

    hits: rows found in this tier when a tier above asked for them (for the top tier:
    unique admitted ids of a lookup already there).  misses: rows asked for and not
    found.  evictions: rows pushed out to the tier below.  bytes_in / bytes_out: bytes
    copied into this tier / written back out of it.
    """

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Slots:
    """Which global row occupies each slot of a tier, dirtiness, and a stack of free slots.

    Example:
        >>> s = Slots(4)
        >>> a = s.pop(3); s.n_free
        1
        >>> s.release(a[:2]); s.n_free
        3
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.owner = np.full(self.capacity, -1, dtype=np.int64)
        self.dirty = np.zeros(self.capacity, dtype=bool)
        self.free = np.arange(self.capacity - 1, -1, -1, dtype=np.int64)
        self.n_free = self.capacity

    def pop(self, m: int) -> np.ndarray:
        if m > self.n_free:
            raise StoreError(f"asked for {m} free slots, {self.n_free} left")
        out = self.free[self.n_free - m : self.n_free][::-1].copy()
        self.n_free -= m
        return out

    def release(self, slots: np.ndarray) -> None:
        k = len(slots)
        self.owner[slots] = -1
        self.dirty[slots] = False
        self.free[self.n_free : self.n_free + k] = slots
        self.n_free += k

    def grow(self, capacity: int) -> None:
        """Add slots (for an unbounded tier)."""
        extra = int(capacity) - self.capacity
        if extra <= 0:
            return
        self.owner = np.concatenate([self.owner, np.full(extra, -1, dtype=np.int64)])
        self.dirty = np.concatenate([self.dirty, np.zeros(extra, dtype=bool)])
        free = np.empty(int(capacity), dtype=np.int64)  # the new slots under the free ones: those go first
        free[:extra] = np.arange(int(capacity) - 1, self.capacity - 1, -1)
        free[extra : extra + self.n_free] = self.free[: self.n_free]
        self.free, self.n_free, self.capacity = free, self.n_free + extra, int(capacity)

    @property
    def used(self) -> int:
        return self.capacity - self.n_free

    def occupied(self) -> np.ndarray:
        """Slots holding a row."""
        return np.flatnonzero(self.owner >= 0)

    def dirty_occupied(self) -> np.ndarray:
        """Slots holding a row not yet written to the tier below."""
        return np.flatnonzero(self.dirty & (self.owner >= 0))


class CacheTier:
    """The top tier: ``rows`` rows of ``width`` floats in a torch tensor on ``device``, and
    ``pin[slot]``, the last step a slot is pinned for (pinned rows are never evicted).

    A ``growable`` cache (the one RAM tier of a CPU store whose host tier is unbounded:
    :class:`~fbrapids.trainers.sparse.hierarchy.TierStack`) doubles instead of evicting:
    ``rows`` is then where it starts.

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
        # only touched as rows come in
        alloc = torch.empty if self.growable else torch.zeros
        self.data = alloc((int(rows), self.width), dtype=torch.float32, device=device)
        self.table: np.ndarray | None = self.data.numpy() if self.data.device.type == "cpu" else None
        self.slots = Slots(rows)
        self.pin = np.full(int(rows), -1, dtype=np.int64)
        self.stats = TierStats()
        self._copies: Any = None  # CUDA: the side stream rows are copied up on
        self._copied: Any = None  # CUDA: the event after the last copy up

    @property
    def device(self) -> torch.device:
        return self.data.device

    def to(self, device: torch.device) -> None:
        """Move the rows to ``device`` (slots and bookkeeping are unchanged)."""
        if torch.device(device) == self.data.device:
            return
        if self.table is None:
            self.wait_copies()
            self._copies = None
        self.data = self.data.to(device)
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
        data = torch.empty((int(rows), self.width), dtype=torch.float32, device=self.data.device)
        data[:old] = self.data  # the new slots are written before they are read (a row placed in them)
        self.data = data
        self.table = self.data.numpy() if self.data.device.type == "cpu" else None
        self.pin = np.concatenate([self.pin, np.full(int(rows) - old, -1, dtype=np.int64)])
        self.slots.grow(rows)

    def evictable(self, step: int) -> np.ndarray:
        """Occupied slots not pinned at ``step``."""
        return np.flatnonzero((self.slots.owner >= 0) & (self.pin < step))

    def room(self, step: int) -> int:
        """Rows the cache can take at ``step``: free slots plus unpinned occupied ones (any
        number, for a growable cache)."""
        if self.growable:
            return 1 << 62
        return self.slots.n_free + int(((self.slots.owner >= 0) & (self.pin < step)).sum())


class HostTier:
    """Host-RAM rows (numpy); ``capacity=None`` grows without bound (then there is no SSD)."""

    def __init__(self, capacity: int | None, width: int) -> None:
        self.width = int(width)
        self.bounded = capacity is not None
        # unbounded: start at 1024 rows, or fewer wide ones (at most 16 MiB; it grows on demand)
        cap = int(capacity) if capacity is not None else max(1, min(1024, (16 << 20) // max(1, 4 * self.width)))
        self.table = np.zeros((cap, self.width), dtype=np.float32)
        self.slots = Slots(cap)
        self.stats = TierStats()

    def take(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows and dirty flags of ``slots``, which are freed."""
        rows = self.table[slots]
        dirty = self.slots.dirty[slots].copy()
        self.slots.release(slots)
        return rows, dirty

    def grow_for(self, k: int) -> None:
        """Room for ``k`` more rows in an unbounded tier."""
        sl = self.slots
        cap = max(sl.capacity * 2, sl.used + k)
        sl.grow(cap)
        grown = np.zeros((cap, self.width), dtype=np.float32)
        grown[: len(self.table)] = self.table
        self.table = grown

    def put(self, g: np.ndarray, rows: np.ndarray, dirty: np.ndarray) -> np.ndarray:
        """Place rows of global rows ``g`` in free slots (there must be room); their slots."""
        slots = self.slots.pop(len(g))
        self.table[slots] = rows
        self.slots.owner[slots] = g
        self.slots.dirty[slots] = dirty
        self.stats.bytes_in += len(g) * self.width * 4
        return slots
