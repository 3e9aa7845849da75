"""A columnar LRU cache of item-side features, keyed by an item's full content, bounded
in items and in bytes.

The scorer keys an item by the tuple of all its item-side column values (its id included),
so two clients sending the same id with different features never share an entry: a
cached row is reused only for exactly the content it was computed from.  Bytes held are
counted per entry (its sparse values, its dense row and its key, strings included);
:meth:`ItemCache.reserve` evicts the least recently used entries not touched by the
current call until a call's new entries fit both bounds, or says they cannot (the caller
then scores them without caching).

Rows live in slots of preallocated arrays: dense ``[capacity, width]`` float32 and, per
sparse feature, a values buffer with each slot's ``(start, length)``.  Looking up N items
is one dict probe per unique key; gathering them is vectorised (a ragged take), so the
cost per request does not grow with Python work per item.  A call is a :meth:`ItemCache.lookup` followed by
:meth:`ItemCache.put` of its misses; when full, the least recently used slots not touched
by the current call are evicted; a values buffer is compacted when
more than half of it is garbage.

Example:
    >>> import numpy as np
    >>> from fbrapids.serving.forward import SideArrays
    >>> c = ItemCache(2, dense_width=1, sparse=["t"])
    >>> arr = SideArrays(np.array([[1.0], [2.0]], np.float32), {"t": (np.array([5, 6, 7]), np.array([0, 1, 3]))})
    >>> slots = c.put([10, 20], arr)
    >>> got = c.gather(c.lookup([20, 10]))
    >>> got.dense.ravel().tolist(), got.sparse["t"][0].tolist(), got.sparse["t"][1].tolist()
    ([2.0, 1.0], [6, 7, 5], [0, 2, 3])
    >>> c.lookup([30, 10]).tolist()  # a later call: 10 is used again, 30 is new
    [-1, 0]
    >>> _ = c.put([30], SideArrays(np.array([[3.0]], np.float32), {"t": (np.array([9]), np.array([0, 1]))}))
    >>> c.lookup([10, 20, 30]).tolist(), c.stats["evictions"]  # 20, least recently used, made room
    ([0, -1, 1], 1)
    >>> small = ItemCache(10, dense_width=1, sparse=["t"], max_bytes=100)
    >>> small.reserve(1, 500)  # one entry of 500 bytes can never fit 100
    False
"""

from __future__ import annotations

import sys
from typing import Hashable, Sequence

import numpy as np

from fbrapids.errors import ArgumentError
from fbrapids.serving.forward import SideArrays


class ItemCache:
    """Item-side feature rows by item key (module docstring).

    Args:
        capacity: items held.
        dense_width: dense item-side inputs per item.
        sparse: names of the sparse item-side inputs.
        max_bytes: bytes held by the entries (None: no byte bound).  The sparse value
            buffers may hold up to as much again as garbage before they are compacted.
    """

    def __init__(self, capacity: int, dense_width: int, sparse: Sequence[str], max_bytes: int | None = None) -> None:
        if capacity < 1:
            raise ArgumentError(f"ItemCache capacity must be >= 1, got {capacity}")
        if max_bytes is not None and max_bytes < 1:
            raise ArgumentError(f"ItemCache max_bytes must be >= 1, got {max_bytes}")
        self.capacity = int(capacity)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self._bytes = np.zeros(self.capacity, dtype=np.int64)
        self.bytes = 0
        self.sparse = list(sparse)
        self._slot: dict[Hashable, int] = {}
        self._key: list[Hashable] = [None] * self.capacity
        self._free = list(range(self.capacity - 1, -1, -1))
        self._last = np.zeros(self.capacity, dtype=np.int64)
        self._tick = 0
        self._dense = np.zeros((self.capacity, dense_width), dtype=np.float32)
        self._start = {f: np.zeros(self.capacity, dtype=np.int64) for f in self.sparse}
        self._len = {f: np.zeros(self.capacity, dtype=np.int64) for f in self.sparse}
        self._buf = {f: np.zeros(1024, dtype=np.int64) for f in self.sparse}
        self._used = dict.fromkeys(self.sparse, 0)
        self.stats = {"hits": 0, "misses": 0, "evictions": 0, "compactions": 0}

    def __len__(self) -> int:
        return len(self._slot)

    def lookup(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Slot of each key, ``-1`` where absent; marks the found ones as used now."""
        self._tick += 1
        get = self._slot.get
        slots = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        hit = slots >= 0
        self._last[slots[hit]] = self._tick
        n_hit = int(hit.sum())
        self.stats["hits"] += n_hit
        self.stats["misses"] += len(keys) - n_hit
        return slots

    def entry_bytes(self, keys: Sequence[Hashable], arrays: SideArrays) -> np.ndarray:
        """Bytes each new entry would hold: its sparse values, its dense row and its key."""
        n = len(keys)
        out = np.full(n, arrays.dense.shape[1] * 4 + 64, dtype=np.int64)
        for f in self.sparse:
            out += np.diff(arrays.sparse[f][1]) * 8
        out += np.fromiter((_key_bytes(k) for k in keys), dtype=np.int64, count=n)
        return out

    def reserve(self, n: int, nbytes: int) -> bool:
        """Make room for ``n`` new entries of ``nbytes`` in all, evicting least recently used
        entries not touched by the current call; False (nothing evicted) if they cannot fit."""
        free_bytes = None if self.max_bytes is None else self.max_bytes - self.bytes
        if n <= len(self._free) and (free_bytes is None or nbytes <= free_bytes):
            return True
        candidates = np.flatnonzero(self._last < self._tick)
        candidates = candidates[[self._key[s] is not None for s in candidates.tolist()]]
        candidates = candidates[np.argsort(self._last[candidates], kind="stable")]
        need_slots = max(0, n - len(self._free))
        freed = np.cumsum(self._bytes[candidates])
        need_bytes = 0 if free_bytes is None else max(0, nbytes - free_bytes)
        if len(candidates) < need_slots or (need_bytes and (not len(freed) or freed[-1] < need_bytes)):
            return False
        k = max(need_slots, int(np.searchsorted(freed, need_bytes)) + 1 if need_bytes else 0)
        self._drop(candidates[:k])
        return True

    def _drop(self, victims: np.ndarray) -> None:
        for s in victims.tolist():
            del self._slot[self._key[s]]
            self._key[s] = None
            self._free.append(s)
            for f in self.sparse:
                self._len[f][s] = 0
            self.bytes -= int(self._bytes[s])
            self._bytes[s] = 0
        self.stats["evictions"] += len(victims)

    def _append(self, f: str, values: np.ndarray) -> int:
        buf, used = self._buf[f], self._used[f]
        if used + len(values) > len(buf):
            live = int(self._len[f].sum())
            if live + len(values) <= len(buf) // 2:
                self._compact(f)
                buf, used = self._buf[f], self._used[f]
            if used + len(values) > len(buf):
                grown = np.zeros(max(2 * len(buf), used + len(values)), dtype=np.int64)
                grown[:used] = buf[:used]
                self._buf[f] = buf = grown
        buf[used : used + len(values)] = values
        self._used[f] = used + len(values)
        return used

    def _compact(self, f: str) -> None:
        ln, st = self._len[f], self._start[f]
        live = np.flatnonzero(ln > 0)
        vals, off = _ragged(self._buf[f], st[live], ln[live])
        buf = np.zeros(len(self._buf[f]), dtype=np.int64)
        buf[: len(vals)] = vals
        st[live] = off[:-1]
        self._buf[f], self._used[f] = buf, len(vals)
        self.stats["compactions"] += 1

    def put(self, keys: Sequence[Hashable], arrays: SideArrays) -> np.ndarray:
        """Store the rows of ``arrays`` under ``keys`` (new keys); returns their slots.
        Raises ``ValueError`` if they cannot fit (check with :meth:`reserve` first)."""
        n = len(keys)
        sizes = self.entry_bytes(keys, arrays)
        if not self.reserve(n, int(sizes.sum())):
            raise ArgumentError(f"ItemCache: {n} new items of {int(sizes.sum())} bytes do not fit (capacity "
                             f"{self.capacity} items, {self.max_bytes} bytes, less entries used by this call)")
        slots = np.array([self._free.pop() for _ in range(n)], dtype=np.int64)
        for k, s in zip(keys, slots.tolist()):
            self._slot[k] = s
            self._key[s] = k
        self._last[slots] = self._tick
        self._bytes[slots] = sizes
        self.bytes += int(sizes.sum())
        self._dense[slots] = arrays.dense
        for f in self.sparse:
            v, o = arrays.sparse[f]
            base = self._append(f, v[o[0] : o[-1]])
            self._start[f][slots] = base + o[:-1] - o[0]
            self._len[f][slots] = np.diff(o)
        return slots

    def gather(self, slots: np.ndarray) -> SideArrays:
        """The rows of ``slots`` (all present), in order."""
        sp = {f: _ragged(self._buf[f], self._start[f][slots], self._len[f][slots]) for f in self.sparse}
        return SideArrays(self._dense[slots], sp)

    def clear(self) -> None:
        self.__init__(self.capacity, self._dense.shape[1], self.sparse, self.max_bytes)  # type: ignore[misc]


def _key_bytes(key: object) -> int:
    """Memory held by a key: the tuple and its values (strings at their size)."""
    if isinstance(key, tuple):
        return sys.getsizeof(key) + sum(_key_bytes(v) for v in key)
    return sys.getsizeof(key)


def _ragged(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(length, out=off[1:])
    pos = np.repeat(start - off[:-1], length) + np.arange(int(off[-1]), dtype=np.int64)
    return buf[pos], off
