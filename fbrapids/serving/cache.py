"""A columnar LRU cache of item-side features, keyed by item key.

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
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fbrapids.serving.forward import SideArrays


class ItemCache:
    """Item-side feature rows by item key (module docstring).

    Args:
        capacity: items held.
        dense_width: dense item-side inputs per item.
        sparse: names of the sparse item-side inputs.
    """

    def __init__(self, capacity: int, dense_width: int, sparse: Sequence[str]) -> None:
        if capacity < 1:
            raise ValueError(f"ItemCache capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.sparse = list(sparse)
        self._slot: dict[Any, int] = {}
        self._key: list[Any] = [None] * self.capacity
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

    def lookup(self, keys: Sequence[Any]) -> np.ndarray:
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

    def _evict(self, need: int) -> None:
        candidates = np.flatnonzero(self._last < self._tick)
        candidates = candidates[[self._key[s] is not None for s in candidates.tolist()]]
        if len(candidates) < need:
            raise ValueError(f"ItemCache: {need} new items in one call but only {len(candidates)} evictable "
                             f"slots of {self.capacity}")
        victims = candidates[np.argsort(self._last[candidates], kind="stable")[:need]]
        for s in victims.tolist():
            del self._slot[self._key[s]]
            self._key[s] = None
            self._free.append(s)
            for f in self.sparse:
                self._len[f][s] = 0
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

    def put(self, keys: Sequence[Any], arrays: SideArrays) -> np.ndarray:
        """Store the rows of ``arrays`` under ``keys`` (new keys); returns their slots."""
        n = len(keys)
        if n > self.capacity:
            raise ValueError(f"ItemCache: {n} items do not fit a cache of {self.capacity}")
        if n > len(self._free):
            self._evict(n - len(self._free))
        slots = np.array([self._free.pop() for _ in range(n)], dtype=np.int64)
        for k, s in zip(keys, slots.tolist()):
            self._slot[k] = s
            self._key[s] = k
        self._last[slots] = self._tick
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
        self.__init__(self.capacity, self._dense.shape[1], self.sparse)  # type: ignore[misc]


def _ragged(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(length, out=off[1:])
    pos = np.repeat(start - off[:-1], length) + np.arange(int(off[-1]), dtype=np.int64)
    return buf[pos], off
