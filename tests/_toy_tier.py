"""A toy host tier in one file, as a user would add one: rows kept zlib-compressed in a dict
by slot (lossless, so it trains the same rows as the built-in one).  Importing this module
registers it as ``"zlib"``: ``StoreConfig(host_tier="zlib")`` then uses it
(``tests/project/test_toy_tier.py``)."""

from __future__ import annotations

import zlib

import numpy as np

from fbrapids.trainers.sparse.tier import SlottedTier

KIND = "zlib"


class ZlibHostTier(SlottedTier):
    """Host-RAM rows, each one zlib-compressed bytes string; counts the rows put and taken."""

    kind = KIND

    def __init__(self, capacity: int | None, width: int) -> None:
        self.packed: dict[int, bytes] = {}
        self.rows_put = 0
        self.rows_taken = 0
        super().__init__(capacity, width)

    def take(self, where: np.ndarray) -> np.ndarray:
        self.rows_taken += len(where)
        out = np.empty((len(where), self.width), dtype=np.float32)
        for i, slot in enumerate(np.asarray(where).tolist()):
            out[i] = np.frombuffer(zlib.decompress(self.packed[slot]), dtype=np.float32)
        return out

    def put(self, where: np.ndarray, rows: np.ndarray) -> None:
        self.rows_put += len(where)
        rows = np.ascontiguousarray(rows, dtype=np.float32).reshape(len(where), self.width)
        for slot, row in zip(np.asarray(where).tolist(), rows):
            self.packed[slot] = zlib.compress(row.tobytes())

    def evict(self, where: np.ndarray) -> None:
        for slot in np.asarray(where).tolist():
            self.packed.pop(slot, None)
        super().evict(where)
