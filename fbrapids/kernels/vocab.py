"""Vocabularies for ``lookup`` / ``categorify``: value -> id, as a hash table the kernels probe.

Example:
    >>> v = Vocabulary.from_mapping({"a": 1, "b": 2})
    >>> v.kind, len(v), v.ids.tolist()
    ('str', 2, [1, 2])
    >>> Vocabulary.from_counts({"x": 5, "y": 1, "z": 5}, min_freq=2).mapping()
    {'x': 1, 'z': 2}
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from fbrapids.kernels import host_helpers as R
from fbrapids.errors import ArgumentError


class Vocabulary:
    """Keys (all int or all str) with their int64 ids, and the probe table built over them."""

    def __init__(self, keys: list[Any] | np.ndarray, ids: Iterable[int], kind: str | None = None) -> None:
        keys = list(keys.tolist() if isinstance(keys, np.ndarray) else keys)
        keys = [int(k) if isinstance(k, np.integer) else k for k in keys]
        if kind in ("str", "int") and not keys:
            self.kind = kind
        elif keys and all(isinstance(k, str) for k in keys):
            self.kind = "str"
        elif all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys):
            self.kind = "int"
        else:
            raise ArgumentError("vocabulary keys must be all strings or all integers")
        self.keys = keys
        self.ids = np.asarray(list(ids), dtype=np.int64)
        if len(self.ids) != len(keys):
            raise ArgumentError(f"{len(keys)} keys but {len(self.ids)} ids")
        if len(set(keys)) != len(keys):
            raise ArgumentError("vocabulary keys must be unique")
        self.mask = R.table_size(len(keys)) - 1
        h = hashlib.sha1(repr((self.kind, keys)).encode())
        h.update(self.ids.tobytes())
        self.key = ("vocab", h.hexdigest())
        self._table: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"Vocabulary({self.kind}, {len(self)} keys)"

    def mapping(self) -> dict[Any, int]:
        return dict(zip(self.keys, self.ids.tolist()))

    @classmethod
    def from_mapping(cls, mapping: Mapping[Any, int]) -> "Vocabulary":
        """From a user dictionary ``{value: id}``."""
        return cls(list(mapping), list(mapping.values()))

    @classmethod
    def from_values(cls, values: Iterable[Any], start: int = 1, kind: str | None = None) -> "Vocabulary":
        """Ids ``start, start+1, ...`` in the order given."""
        values = list(values)
        return cls(values, range(start, start + len(values)), kind=kind)

    @classmethod
    def from_counts(cls, counts: Mapping[Any, int] | pd.Series, min_freq: int = 1,
                    kind: str | None = None) -> "Vocabulary":
        """Values seen at least ``min_freq`` times; ids 1.. by descending count, ties by value."""
        items = counts.items() if not isinstance(counts, pd.Series) else zip(counts.index.tolist(), counts.tolist())
        kept = sorted(((k, int(c)) for k, c in items if c >= min_freq and k is not None and k == k),
                      key=lambda kc: (-kc[1], kc[0]))
        return cls.from_values([k for k, _ in kept], kind=kind)

    def table(self) -> tuple[np.ndarray, ...]:
        """The buffers the lookup kernel reads: (slots, keys, ids) or (slots, key offsets,
        key bytes, ids)."""
        if self._table is None:
            if self.kind == "int":
                keys = np.asarray(self.keys, dtype=np.int64) if self.keys else np.zeros(0, np.int64)
                self._table = (R.build_int_table(keys, self.mask), keys if len(keys) else np.zeros(1, np.int64),
                               self.ids if len(self.ids) else np.zeros(1, np.int64))
            else:
                enc = [k.encode("utf-8") for k in self.keys]
                koffs = R.prefix(np.array([len(b) for b in enc], dtype=np.int64))
                kbytes = np.frombuffer(b"".join(enc) or b"\0", dtype=np.uint8).copy()
                self._table = (R.build_str_table(koffs, kbytes, self.mask), koffs, kbytes, self.ids)
        return self._table
