"""The id -> row directory of one table: raw uint64 ids to global row numbers, the
admission gate, and per-row arrays (where each row lives, when and how often it was used).

A global row number ``g`` is given to an id when it is admitted and never changes; the
tiers hold rows by ``g``.  ``cache_loc[g]`` / ``host_loc[g]`` are the row's slot in the
cache / host tier (-1: not there), ``on_ssd[g]`` whether the SSD file holds it, ``last[g]``
the step it was last looked up at and ``freq[g]`` how many times it was looked up
(the eviction policies' keys).

Example:
    >>> import numpy as np
    >>> d = RowDirectory(admit_after=2)
    >>> d.admit(np.array([7, 8], dtype=np.uint64)).tolist()   # first sighting: waiting
    [-1, -1]
    >>> d.admit(np.array([7], dtype=np.uint64)).tolist(), len(d), d.ids_of(np.array([0])).tolist()
    ([0], 1, [7])
"""

from __future__ import annotations

from typing import TypeAlias, Union

import numpy as np
import numpy.typing as npt
import torch

from fbrapids.errors import ArgumentError, InputTypeError
from fbrapids.trainers.sparse.hashmap import UInt64HashMap
from fbrapids.trainers.sparse.reserved import GrowingArray

#: raw embedding ids as a caller hands them to a table: a torch tensor, or what numpy reads as
#: an integer array (an array, a list of ints...)
Ids: TypeAlias = Union[torch.Tensor, npt.ArrayLike]


def as_uint64_ids(ids: Ids) -> np.ndarray:
    """Raw ids as a uint64 numpy array; int64 (also negative) is reinterpreted bit for bit.

    Example:
        >>> import numpy as np
        >>> as_uint64_ids(np.array([-1, 3])).tolist()
        [18446744073709551615, 3]
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    raise InputTypeError(f"embedding ids must be integers (int64 / uint64), got dtype {arr.dtype}")


#: the int64 fields of a row, side by side in one 32-byte record per row (a lookup reads and
#: writes them together: one cache line, not four), and the value of a row that has none;
#: ``cache_loc`` etc. are the columns of :attr:`RowDirectory.records` (strided views)
RECORD_FIELDS = {"cache_loc": -1, "host_loc": -1, "last": 0, "freq": 0}
#: the other per-row arrays and the value of a row that has none
ROW_ARRAYS = {"on_ssd": (np.bool_, False)}
#: a directory growing in place grows by this share of its rows (at least
#: :data:`IN_PLACE_MIN_GROWTH` rows): a growth in place copies nothing but writes the new rows'
#: records (their "none" values), so doubling wrote up to twice the records a table holds (on
#: the demo's batches at 200k rows, one ``fit`` wrote 78 MB of records doubling, 47 MB so)
IN_PLACE_GROWTH = 0.25
#: the fewest rows a directory growing in place grows by
IN_PLACE_MIN_GROWTH = 1 << 12


class RowDirectory:
    """Ids to global rows, with admission after ``admit_after`` sightings.

    ``cache_loc``, ``host_loc``, ``last`` and ``freq`` are int64 views of one record per row
    (:data:`RECORD_FIELDS`), ``on_ssd`` a bool array; all are replaced when the directory grows
    (by longer views of the same memory where its address space is reserved: :meth:`grow`).
    """

    #: the slot of each row in the cache tier (-1: not cached), a column of :attr:`records`
    cache_loc: np.ndarray
    #: the slot of each row in the host tier (-1: not there), a column of :attr:`records`
    host_loc: np.ndarray
    #: the step each row was last looked up at, a column of :attr:`records`
    last: np.ndarray
    #: how many times each row was looked up, a column of :attr:`records`
    freq: np.ndarray
    #: whether the SSD file holds each row
    on_ssd: np.ndarray

    def __init__(self, admit_after: int = 1, capacity: int = 1024) -> None:
        self.admit_after = int(admit_after)
        self.map = UInt64HashMap(1024)
        self.pending = UInt64HashMap(1024) if self.admit_after > 1 else None
        self.n = 0
        self.admissions = 0
        # the per-row arrays grow in place over address space reserved once (no copy, no huge pages first
        # touched: the prefetch thread grows them beside the training step); copied where refused
        ssd_dtype, ssd_fill = ROW_ARRAYS["on_ssd"]
        self._rows = GrowingArray(capacity, np.int64, list(RECORD_FIELDS.values()), row=(len(RECORD_FIELDS),))
        room = self._rows.capacity
        self._ids = GrowingArray(capacity, np.uint64, 0, reserve=room)
        self._ssd = GrowingArray(capacity, ssd_dtype, ssd_fill, reserve=room)
        self._rebind()

    def _rebind(self) -> None:
        self.g2id, self.on_ssd = self._ids.array, self._ssd.array
        self._bind(self._rows.array)

    def _bind(self, records: np.ndarray) -> None:
        """Point the record fields at the columns of ``records`` (in :data:`RECORD_FIELDS`' order)."""
        self.records = records
        self.cache_loc, self.host_loc, self.last, self.freq = (records[:, k] for k in range(len(RECORD_FIELDS)))

    def __len__(self) -> int:
        """Rows admitted so far."""
        return self.n

    def grow(self, n: int) -> None:
        """Make room in the per-row arrays for ``n`` rows: in place where their address space
        is reserved (the rows keep their values and addresses; the arrays are new, longer
        views), by :data:`IN_PLACE_GROWTH` of their rows at least, else copied into new arrays
        of twice the rows (:class:`~fbrapids.trainers.sparse.reserved.GrowingArray`).

        Example:
            >>> d = RowDirectory(capacity=2); d.last[:2] = [5, 6]; before = d.records.ctypes.data
            >>> d.grow(3); len(d.g2id), d.last[:3].tolist(), int(d.cache_loc[2]), d.records.ctypes.data == before
            (4098, [5, 6, 0], -1, True)
        """
        cap = len(self.g2id)
        if n <= cap:
            return
        room = min(a.capacity for a in (self._rows, self._ids, self._ssd))  # (0: no reservation)
        if room >= n:  # in place, never past the reservation (that would copy)
            new = min(room, max(n, cap + max(int(cap * IN_PLACE_GROWTH), IN_PLACE_MIN_GROWTH)))
        else:
            new = max(n, 2 * cap)
        for rows in (self._rows, self._ids, self._ssd):
            rows.grow(new)
        self._rebind()

    def note_admitted(self, k: int) -> None:
        """Count ``k`` rows admitted straight into the arrays and the map (grown first) by a
        C pass (:meth:`~fbrapids.trainers.sparse.hierarchy.TierStack.ram_tier_words`)."""
        self.n += int(k)
        self.admissions += int(k)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """Global rows of ``keys`` (-1: not admitted)."""
        return self.map.get(keys)

    def unique_rows(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(distinct keys in first-occurrence order, inverse, counts, their rows or -1)``."""
        return self.map.unique_get(keys)

    def ids_of(self, g: np.ndarray) -> np.ndarray:
        """The ids of global rows ``g``."""
        return self.g2id[g]

    def all_ids(self) -> np.ndarray:
        """Every admitted id, by global row (a view)."""
        return self.g2id[: self.n]

    def admit(self, keys: np.ndarray, gate: bool = True) -> np.ndarray:
        """Global rows for ids not yet in the directory; -1 where still waiting for admission.

        Each call counts one sighting of each key; with ``gate=False`` every key is admitted.
        """
        out = np.full(len(keys), -1, dtype=np.int64)
        if self.pending is not None and gate:
            ok = self.pending.incr(keys) >= self.admit_after
        else:
            ok = np.ones(len(keys), dtype=bool)
        m = int(ok.sum())
        if m:
            g = np.arange(self.n, self.n + m, dtype=np.int64)
            self.grow(self.n + m)
            self.map.put(keys[ok], g)
            self.g2id[g] = keys[ok]
            self.n += m
            out[ok] = g
            self.admissions += m
        return out

    def pending_items(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids waiting for admission and their sighting counts."""
        if self.pending is None:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return self.pending.items()

    def restore(self, ids: np.ndarray, last: np.ndarray, freq: np.ndarray, pending_ids: np.ndarray,
                pending_counts: np.ndarray) -> None:
        """Fill an empty directory with saved rows (row g = ``ids[g]``) and admission counts."""
        if self.n:
            raise ArgumentError("restore() needs an empty directory")
        n = len(ids)
        self.grow(n)
        self.map.put(ids, np.arange(n, dtype=np.int64))
        self.g2id[:n] = ids
        self.last[:n], self.freq[:n] = last, freq
        self.n = n
        if self.pending is not None and len(pending_ids):
            self.pending.put(pending_ids, pending_counts)
