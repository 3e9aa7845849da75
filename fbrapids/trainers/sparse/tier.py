"""What every tier of a table is: an object that holds rows at places of its own and can
:meth:`~Tier.take` (copy out), :meth:`~Tier.put` (write), :meth:`~Tier.evict` (let go),
:meth:`~Tier.persist` (make durable) and count what moved (:attr:`~Tier.stats`).

A place is a slot for a RAM tier (the cache, host RAM) and the global row number for the SSD
file.  The cache (:class:`~fbrapids.trainers.sparse.tiers.CacheTier`), host RAM
(:class:`~fbrapids.trainers.sparse.tiers.HostTier`) and the SSD file
(:class:`~fbrapids.trainers.sparse.ssd.SsdTier`) each are a :class:`Tier`;
:class:`~fbrapids.trainers.sparse.hierarchy.TierStack` moves rows between them through it.

The host tier is chosen by name (``StoreConfig.host_tier``).  A host tier is a
:class:`SlottedTier`: this class keeps which row is in which slot and which are dirty; a
subclass stores the rows (:meth:`~SlottedTier.take`, :meth:`~SlottedTier.put`,
:meth:`~SlottedTier.resize`) and registers itself by setting :attr:`~SlottedTier.kind`.
Adding a host tier is one new module that defines such a class: nothing else changes.

Example:
    >>> import numpy as np
    >>> class DictTier(SlottedTier):
    ...     kind = "doctest-dict"
    ...     def __init__(self, capacity, width):
    ...         self.rows = {}
    ...         super().__init__(capacity, width)
    ...     def take(self, slots):
    ...         return np.array([self.rows[int(s)] for s in slots], np.float32).reshape(-1, self.width)
    ...     def put(self, slots, rows):
    ...         self.rows.update(zip(slots.tolist(), np.array(rows, np.float32)))
    >>> t = host_tier_class("doctest-dict")(None, width=2)
    >>> isinstance(t, Tier)
    True
    >>> s = t.hold(np.array([7, 9]), np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([True, False]))
    >>> t.slots.owner[s].tolist(), t.take(s[1:]).tolist()
    ([7, 9], [[3.0, 4.0]])
    >>> rows, dirty = t.give_up(s[:1]); rows.tolist(), dirty.tolist(), t.slots.used
    ([[1.0, 2.0]], [True], 1)
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from fbrapids.errors import ArgumentError, StoreError
from fbrapids.trainers.sparse.reserved import GrowingArray


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


@runtime_checkable
class Tier(Protocol):
    """One tier of a table: rows of ``width`` floats at places the tier defines."""

    width: int
    stats: TierStats

    def take(self, where: np.ndarray) -> np.ndarray:
        """Copies of the rows at ``where`` (``[len(where), width]`` float32); nothing moves."""
        ...

    def put(self, where: np.ndarray, rows: np.ndarray) -> None:
        """Write ``rows`` at ``where``."""
        ...

    def evict(self, where: np.ndarray) -> None:
        """Let go of the rows at ``where`` (their places are free again)."""
        ...

    def persist(self) -> None:
        """Make the rows put so far durable (nothing to do for a RAM tier)."""
        ...


_DESCENDING_CHUNK = 1 << 16


def fill_descending(out: np.ndarray, top: int) -> None:
    """``out[i] = top - i`` written in place, a chunk at a time: not ``out[:] = np.arange(top,
    ...)``, which made a temporary as long as ``out`` (a growth of a free-slot stack by 1.5M
    slots faulted in 12 MB of fresh pages for it: 35 ms of the prefetch thread, while the
    trainer waited for its prepare).

    Example:
        >>> a = np.zeros(5, dtype=np.int64); fill_descending(a, 9); a.tolist()
        [9, 8, 7, 6, 5]
    """
    n = len(out)
    down = np.arange(0, -min(n, _DESCENDING_CHUNK), -1, dtype=np.int64)
    for a in range(0, n, _DESCENDING_CHUNK):
        b = min(a + _DESCENDING_CHUNK, n)
        np.add(down[: b - a], top - a, out=out[a:b])


#: held while a tier's arrays made on first use are made (:class:`Slots`, the cache's pins)
FIRST_USE = threading.RLock()


class Slots:
    """Which global row occupies each slot of a tier, dirtiness, and a stack of free slots.

    The three arrays (:attr:`owner`, :attr:`dirty`, :attr:`free`: 17 bytes a slot) are made
    on first use: a tier never used touches none of their memory.  A trial builds every
    arm's model with its own stores and then hands their rows to one shared store
    (:class:`~fbrapids.trainers.arms_batched.SharedTables`): at 65,536 slots a store, a
    10-candidate trial filled and dropped 1.4 GB of such arrays before this.

    The arrays are :class:`~fbrapids.trainers.sparse.reserved.GrowingArray` s. ``reserve``: a
    growable tier's reserve address space for that many slots and grow in place (no copy); 0:
    they are copied when the tier grows.

    Example:
        >>> s = Slots(4)
        >>> s.made
        False
        >>> a = s.pop(3); s.n_free, s.made
        (1, True)
        >>> s.release(a[:2]); s.n_free
        3
    """

    def __init__(self, capacity: int, reserve: int = 0) -> None:
        self.capacity = int(capacity)
        self.n_free = self.capacity
        self.reserve = int(reserve)  # slots a growable tier's arrays reserve address space for (0: they copy)
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._growing: tuple[GrowingArray, GrowingArray, GrowingArray] | None = None

    @property
    def made(self) -> bool:
        """Whether the arrays exist yet (a slot was asked for, or one of them was read)."""
        return self._arrays is not None

    def _arrays_made(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        arrays = self._arrays
        if arrays is None:
            with FIRST_USE:  # a store's prefetch thread and its caller may both be first
                if self._arrays is None:
                    c = self.capacity  # (reserve 0: they copy as they grow)
                    self._growing = (GrowingArray(c, np.int64, -1, reserve=self.reserve),
                                     GrowingArray(c, np.bool_, False, reserve=self.reserve),
                                     GrowingArray(c, np.int64, 0, reserve=self.reserve))
                    fill_descending(self._growing[2].array[:c], c - 1)
                    self._arrays = (self._growing[0].array, self._growing[1].array, self._growing[2].array)
                arrays = self._arrays
        return arrays

    @property
    def owner(self) -> np.ndarray:
        """The global row in each slot (-1: free)."""
        return self._arrays_made()[0]

    @property
    def dirty(self) -> np.ndarray:
        """Whether each slot's row is not yet written to the tier below."""
        return self._arrays_made()[1]

    @property
    def free(self) -> np.ndarray:
        """The stack of free slots: ``free[:n_free]``, the next popped last."""
        return self._arrays_made()[2]

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
        with FIRST_USE:
            if self._arrays is None:  # nothing used yet: more slots to make on first use
                self.capacity, self.n_free = int(capacity), self.n_free + extra
                return
        kept = self._arrays_made()[2][: self.n_free].copy()
        assert self._growing is not None  # (made just above)
        owner, dirty, free = (g.grow(int(capacity)) for g in self._growing)  # in place, or copied
        free[extra : extra + self.n_free] = kept  # the new slots under the free ones: those go first
        fill_descending(free[:extra], int(capacity) - 1)
        self._arrays = (owner, dirty, free)
        self.n_free, self.capacity = self.n_free + extra, int(capacity)

    def in_place_rows(self) -> int:
        """The most slots the arrays hold growing in place (over their reservation); before
        they are made, the slots they will reserve (0: they will copy as they grow)."""
        growing = self._growing
        if growing is None:
            return self.reserve
        return min(g.capacity for g in growing)

    @property
    def used(self) -> int:
        return self.capacity - self.n_free

    def occupied(self) -> np.ndarray:
        """Slots holding a row."""
        return np.flatnonzero(self.owner >= 0)

    def dirty_occupied(self) -> np.ndarray:
        """Slots holding a row not yet written to the tier below."""
        return np.flatnonzero(self.dirty & (self.owner >= 0))


class SlottedTier(ABC):
    """A host tier: rows by slot, ``capacity`` slots (``None``: it grows without bound, and
    then there is no SSD tier).  This class keeps the slots' owners and dirtiness
    (:attr:`slots`) and the counters; a subclass stores the rows.

    A subclass with a :attr:`kind` registers itself under that name, which
    ``StoreConfig.host_tier`` names (see :func:`host_tier_class`).
    """

    #: the name ``StoreConfig.host_tier`` gives this kind of tier (None: not registered)
    kind: ClassVar[str | None] = None
    registered: ClassVar[dict[str, type[SlottedTier]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is not None:
            SlottedTier.registered[kind] = cls

    def __init__(self, capacity: int | None, width: int) -> None:
        self.width = int(width)
        self.bounded = capacity is not None
        # unbounded: start at 1024 rows, or fewer wide ones (at most 16 MiB; it grows on demand)
        cap = int(capacity) if capacity is not None else max(1, min(1024, (16 << 20) // max(1, 4 * self.width)))
        self.slots = Slots(cap)
        self.stats = TierStats()
        self.resize(cap)

    @abstractmethod
    def take(self, where: np.ndarray) -> np.ndarray:
        """Copies of the rows in slots ``where``; nothing moves."""

    @abstractmethod
    def put(self, where: np.ndarray, rows: np.ndarray) -> None:
        """Write ``rows`` into slots ``where``."""

    def resize(self, capacity: int) -> None:
        """Room for rows in slots ``0 .. capacity - 1`` (the rows held keep their slots);
        nothing to do for storage that needs no room made ahead."""

    def evict(self, where: np.ndarray) -> None:
        """Free slots ``where``."""
        self.slots.release(where)

    def persist(self) -> None:
        """Nothing: RAM is not durable; the SSD tier below is."""

    def hold(self, g: np.ndarray, rows: np.ndarray, dirty: np.ndarray) -> np.ndarray:
        """Place rows of global rows ``g`` in free slots (there must be room); their slots."""
        slots = self.slots.pop(len(g))
        self.put(slots, rows)
        self.slots.owner[slots] = g
        self.slots.dirty[slots] = dirty
        self.stats.bytes_in += len(g) * self.width * 4
        return slots

    def give_up(self, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows and dirty flags of slots ``where``, which are freed."""
        rows = self.take(where)
        dirty = self.slots.dirty[where].copy()
        self.evict(where)
        return rows, dirty

    def grow_for(self, k: int) -> None:
        """Room for ``k`` more rows in an unbounded tier."""
        cap = max(self.slots.capacity * 2, self.slots.used + k)
        self.slots.grow(cap)
        self.resize(cap)


def host_tier_class(kind: str) -> type[SlottedTier]:
    """The host tier registered as ``kind``.

    Example:
        >>> host_tier_class("nowhere")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        fbrapids.errors.ArgumentError: no host tier 'nowhere' is registered (known: ...
    """
    if kind not in SlottedTier.registered:
        raise ArgumentError(f"no host tier {kind!r} is registered (known: {sorted(SlottedTier.registered)}); a host "
                            "tier registers itself by subclassing SlottedTier with kind = <name>")
    return SlottedTier.registered[kind]
