"""Which rank owns an embedding row: a hash of the raw id picks one of a few thousand
virtual buckets, and a bucket table maps buckets to ranks.

The hash is splitmix64's finaliser over the id's 64 bits (a bijection that mixes every
input bit into every output bit), so structured ids (multiples of the world size, ids of
one range, ids sharing low bits) spread evenly; the bucket is ``hash % n_buckets``.  The
table starts with buckets dealt round-robin (bucket ``b`` to rank ``b % world``) and is
saved with every sharded checkpoint, so a later planner may move buckets between ranks
(:meth:`BucketTable.with_owners`); never ``id % world_size``.

Example:
    >>> import numpy as np
    >>> t = BucketTable.default(4)
    >>> np.bincount(t.owner_of(np.arange(0, 400_000, 4)), minlength=4).tolist()  # multiples of W
    [25025, 25044, 24797, 25134]
    >>> BucketTable.from_dict(t.to_dict()) == t
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, SupportsInt, TypedDict

import numpy as np

from fbrapids.errors import ArgumentError
from fbrapids.trainers.sparse import as_uint64_ids
from fbrapids.trainers.sparse.init import splitmix64
from fbrapids.trainers.sparse.row_directory import Ids

#: virtual buckets per table (a power of two; enough for any node's world size to balance)
N_BUCKETS = 4096

def mix64(ids: Ids) -> np.ndarray:
    """splitmix64's finaliser of the raw 64-bit ids (uint64 out).

    Example:
        >>> mix64(np.array([0, 1], dtype=np.uint64)).tolist()
        [0, 6238072747940578789]
    """
    return splitmix64(as_uint64_ids(ids).ravel())


class BucketTableDict(TypedDict):
    """A :class:`BucketTable` as JSON (a sharded checkpoint's layout holds one)."""

    world: int
    owners: list[int]


@dataclass(frozen=True)
class BucketTable:
    """``owners[b]``: the rank owning virtual bucket ``b``; ``world``: the number of ranks."""

    owners: tuple[int, ...]
    world: int

    def __post_init__(self) -> None:
        n = len(self.owners)
        if n < 1 or n & (n - 1):
            raise ArgumentError(f"a bucket table needs a power-of-two number of buckets, got {n}")
        bad = [o for o in self.owners if not 0 <= o < self.world]
        if bad:
            raise ArgumentError(f"bucket table for {self.world} ranks names rank {bad[0]}")

    @classmethod
    def default(cls, world: int, n_buckets: int = N_BUCKETS) -> "BucketTable":
        """Buckets dealt round-robin over ``world`` ranks."""
        if world < 1:
            raise ArgumentError(f"world size must be >= 1, got {world}")
        return cls(tuple(b % world for b in range(n_buckets)), world)

    @property
    def n_buckets(self) -> int:
        return len(self.owners)

    def bucket_of(self, ids: Ids) -> np.ndarray:
        """The virtual bucket (int64) of each raw id."""
        return (mix64(ids) & np.uint64(self.n_buckets - 1)).astype(np.int64)

    def owner_of(self, ids: Ids) -> np.ndarray:
        """The owning rank (int64) of each raw id."""
        return np.asarray(self.owners, dtype=np.int64)[self.bucket_of(ids)]

    def with_owners(self, owners: Iterable[SupportsInt]) -> "BucketTable":
        """The same buckets with new owners (a rebalancing plan)."""
        return BucketTable(tuple(int(o) for o in owners), self.world)

    def to_dict(self) -> BucketTableDict:
        return {"world": self.world, "owners": list(self.owners)}

    @classmethod
    def from_dict(cls, d: BucketTableDict) -> "BucketTable":
        return cls(tuple(int(o) for o in d["owners"]), int(d["world"]))
