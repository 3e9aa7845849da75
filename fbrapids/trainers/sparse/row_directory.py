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


def _records(n: int, keep: np.ndarray | None = None) -> np.ndarray:
    """``[n, len(RECORD_FIELDS)]`` int64 records starting on a 64-byte boundary (so no 32-byte
    record straddles two cache lines): ``keep``'s first, empty rows' values after them."""
    width = len(RECORD_FIELDS)
    raw = np.empty(n * width + 8, dtype=np.int64)
    skip = (-raw.ctypes.data % 64) // 8
    out = raw[skip : skip + n * width].reshape(n, width)
    k = 0
    if keep is not None and len(keep):
        k = len(keep)
        out[:k] = keep
    out[k:] = np.array(list(RECORD_FIELDS.values()), dtype=np.int64)
    return out


def _grown(old: np.ndarray, n: int, dtype: type[np.generic], fill: object) -> np.ndarray:
    """``old`` copied into a new array of ``n`` entries, the rest ``fill``."""
    out: np.ndarray = np.empty(n, dtype=dtype)
    out[: len(old)] = old
    out[len(old) :] = fill
    return out


class RowDirectory:
    """Ids to global rows, with admission after ``admit_after`` sightings.

    ``cache_loc``, ``host_loc``, ``last`` and ``freq`` are int64 views of one record per row
    (:data:`RECORD_FIELDS`), ``on_ssd`` a bool array; all are replaced when the directory grows.
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
        self.g2id = np.zeros(capacity, dtype=np.uint64)
        dtype, fill = ROW_ARRAYS["on_ssd"]
        self.on_ssd = np.full(capacity, fill, dtype=dtype)
        self._bind(_records(capacity))

    def _bind(self, records: np.ndarray) -> None:
        """Point the record fields at the columns of ``records`` (in :data:`RECORD_FIELDS`' order)."""
        self.records = records
        self.cache_loc, self.host_loc, self.last, self.freq = (records[:, k] for k in range(len(RECORD_FIELDS)))

    def __len__(self) -> int:
        """Rows admitted so far."""
        return self.n

    def grow(self, n: int) -> None:
        """Make room in the per-row arrays for ``n`` rows (doubling)."""
        cap = len(self.g2id)
        if n <= cap:
            return
        new = max(n, 2 * cap)
        ssd_dtype, ssd_fill = ROW_ARRAYS["on_ssd"]
        self.g2id = _grown(self.g2id, new, np.uint64, 0)
        self.on_ssd = _grown(self.on_ssd, new, ssd_dtype, ssd_fill)
        self._bind(_records(new, self.records))

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
