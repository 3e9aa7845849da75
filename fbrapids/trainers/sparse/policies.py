"""Eviction policies: which rows a full tier pushes down.

A policy gives each row a key (smaller: evicted sooner) from the directory's usage arrays;
:meth:`EvictionPolicy.victims` picks about ``k`` candidates with the smallest keys.  To add
a policy, subclass :class:`EvictionPolicy`, implement :meth:`~EvictionPolicy.keys` and
register it in :data:`POLICIES`; ``StoreConfig(eviction=name)`` then selects it.
A policy with ``uses_window`` also ranks by the upcoming batches announced to the store
(:meth:`fbrapids.trainers.sparse.TieredEmbeddingStore.announce`, kept in a
:class:`~fbrapids.trainers.sparse.lookahead.UseWindow`): ``lfu_window``.

``keeps_ram_full`` says how much a full host-RAM tier lets go of (see
:meth:`fbrapids.trainers.sparse.hierarchy.TierStack.host_insert`): False (``lru``,
``lfu``), as many rows as it examined (an ``evict_fraction`` of the tier, so it examines
rarely); True (``lfu_full``, ``lfu_window``), only as many as the incoming rows need, the lowest ranked
among those examined and the incoming, so the RAM tiers stay full.  Where rows are kept
never changes their values (tests/trainers/test_store_hit_rate.py).

Example:
    >>> import numpy as np
    >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
    >>> d = RowDirectory(); _ = d.admit(np.array([5, 6, 7], dtype=np.uint64))
    >>> d.last[:3] = [4, 1, 9]
    >>> LRU().victims(d, owner=np.array([0, 1, 2]), candidates=np.array([0, 1, 2]), k=1, need=1).tolist()
    [1]
"""

from __future__ import annotations

import numpy as np

from fbrapids.errors import ArgumentError
from fbrapids.trainers.sparse.lookahead import UseWindow
from fbrapids.trainers.sparse.row_directory import RowDirectory


class EvictionPolicy:
    """Chooses victims among a tier's candidate slots by a per-row key."""

    name = ""
    keeps_ram_full = False
    uses_window = False
    #: the announced upcoming batches (None: the policy does not use them)
    window: UseWindow | None = None

    def keys(self, directory: RowDirectory, g: np.ndarray) -> np.ndarray:
        """Eviction keys of global rows ``g``: the smallest go first."""
        raise NotImplementedError

    def victims(self, directory: RowDirectory, owner: np.ndarray, candidates: np.ndarray, k: int,
                need: int) -> np.ndarray:
        """About ``k`` (at least ``need``) of the ``candidates`` slots with the smallest keys.

        ``owner[slot]`` is the global row in a slot.  The cut-off is the k-th smallest key
        of a fixed strided sample of the candidates, so a large tier is not fully
        partitioned on every eviction; exact when there are few candidates.
        """
        if k >= len(candidates):
            return candidates
        key = self.keys(directory, owner[candidates])
        n = len(candidates)
        if n > 16384:
            sample = key[:: n // 4096]
            j = min(len(sample) - 1, int(len(sample) * k / n))
            sel = np.flatnonzero(key <= np.partition(sample, j)[j])
            if need <= len(sel) <= 2 * k:
                return candidates[sel]
            if len(sel) > 2 * k:  # many ties at the cut-off: the exact k among them
                return candidates[sel[np.argpartition(key[sel], k - 1)[:k]]]
        return candidates[np.argpartition(key, k - 1)[:k]]


class LRU(EvictionPolicy):
    """Least recently used: the rows looked up longest ago go first."""

    name = "lru"

    def keys(self, directory: RowDirectory, g: np.ndarray) -> np.ndarray:
        return directory.last[g]


class LFU(EvictionPolicy):
    """Least frequently used: the rows looked up the fewest times go first."""

    name = "lfu"

    def keys(self, directory: RowDirectory, g: np.ndarray) -> np.ndarray:
        return directory.freq[g]


class FullLFU(LFU):
    """LFU keeping the RAM tiers full: a full host tier drops only the rows it must.

    On the embedding benchmark's Zipf stream (``benchmarks/embedding.py``) ``lfu`` leaves
    up to an eighth of host RAM empty after each drop; filling it serves more lookups from
    RAM (counted there against the stream's offline optimum, Belady's).
    """

    name = "lfu_full"
    keeps_ram_full = True


class WindowLFU(FullLFU):
    """``lfu_full`` that first keeps the rows the announced upcoming batches use again.

    Rows used again within the announced window rank above all others (the sooner, the
    higher: Belady's rule inside the window); the others by their lookup counts, so a row
    not needed in the window and rarely seen leaves RAM first after its batch.  Without
    announcements it is ``lfu_full``.  On the embedding benchmark's stream, announcing the
    32 batches ahead (what :func:`fbrapids.trainers.fit.fit` does) serves about 0.98 of
    Belady's optimum from RAM, against 0.957 for ``lfu_full`` (benchmarks/embedding.py).

    Example:
        >>> import numpy as np
        >>> d = RowDirectory(); _ = d.admit(np.array([5, 6, 7], dtype=np.uint64))
        >>> d.freq[:3] = [9, 1, 4]
        >>> p = WindowLFU(); _ = p.window.announce(np.array([1]), step=1)   # row 1 is needed at step 1
        >>> p.victims(d, owner=np.array([0, 1, 2]), candidates=np.array([0, 1, 2]), k=1, need=1).tolist()
        [2]
    """

    name = "lfu_window"
    uses_window = True

    def __init__(self) -> None:
        self.window: UseWindow = UseWindow()

    def keys(self, directory: RowDirectory, g: np.ndarray) -> np.ndarray:
        return self.window.keys(g, directory.freq)


POLICIES: dict[str, type[EvictionPolicy]] = {"lru": LRU, "lfu": LFU, "lfu_full": FullLFU, "lfu_window": WindowLFU}


def eviction_policy(name: str) -> EvictionPolicy:
    """The policy registered as ``name``.

    Example:
        >>> eviction_policy("lfu").name
        'lfu'
    """
    try:
        return POLICIES[name]()
    except KeyError:
        raise ArgumentError(f"unknown eviction policy {name!r}; registered: {', '.join(POLICIES)}") from None
