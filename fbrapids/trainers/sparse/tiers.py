"""Slot bookkeeping for a fixed-size tier, and the SSD tier's memory-mapped file."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
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
        free = np.empty(int(capacity), dtype=np.int64)
        free[: self.n_free] = self.free[: self.n_free]
        free[self.n_free : self.n_free + extra] = np.arange(int(capacity) - 1, self.capacity - 1, -1)
        self.free, self.n_free, self.capacity = free, self.n_free + extra, int(capacity)

    @property
    def used(self) -> int:
        return self.capacity - self.n_free


class SsdFile:
    """Every admitted row on disk: ``rows.f32`` (row g at offset g * width * 4), memory-mapped.

    The id -> row index is persisted next to it as ``index.npz`` by :meth:`write_index`.

    Example:
        >>> import tempfile, numpy as np
        >>> f = SsdFile(tempfile.mkdtemp(), width=3)
        >>> f.write(np.array([5]), np.ones((1, 3), np.float32))
        >>> f.read(np.array([5])).tolist()
        [[1.0, 1.0, 1.0]]
    """

    def __init__(self, directory: str | os.PathLike, width: int, capacity: int = 1 << 12) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "rows.f32"
        self.width = int(width)
        self.capacity = 0
        with open(self.path, "wb"):
            pass  # a new store starts from an empty file
        self._mm: np.memmap | None = None
        self.ensure(capacity)

    def ensure(self, rows: int) -> None:
        """Grow the file (doubling) so that it holds at least ``rows`` rows."""
        if rows <= self.capacity:
            return
        cap = max(int(rows), 2 * self.capacity, 1 << 12)
        if self._mm is not None:
            self._mm.flush()
            self._mm = None
        with open(self.path, "r+b") as f:
            f.truncate(cap * self.width * 4)
        self._mm = np.memmap(self.path, dtype=np.float32, mode="r+", shape=(cap, self.width))
        self.capacity = cap

    def read(self, g: np.ndarray) -> np.ndarray:
        self.ensure(int(g.max()) + 1 if len(g) else 0)
        return np.asarray(self._mm[g])

    def write(self, g: np.ndarray, rows: np.ndarray) -> None:
        if len(g) == 0:
            return
        self.ensure(int(g.max()) + 1)
        self._mm[g] = rows

    def rows_view(self, start: int, stop: int) -> np.ndarray:
        self.ensure(stop)
        return self._mm[start:stop]

    def sync(self) -> None:
        """Write the mapped pages out and fsync the file."""
        if self._mm is not None:
            self._mm.flush()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_index(self, ids: np.ndarray, meta: dict) -> None:
        """Persist the id -> row mapping (row g holds ``ids[g]``) atomically."""
        tmp = self.dir / "index.npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, ids=ids, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / "index.npz")
