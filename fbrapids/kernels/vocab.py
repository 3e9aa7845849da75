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
from typing import Iterable, Mapping, Sequence, TypeAlias, Union

import numpy as np
import pandas as pd

from fbrapids.errors import OperatorError
from fbrapids.kernels import host_helpers as R

#: a key as a vocabulary is given it: an int (numpy's too) or a str -- all of one kind, checked
KeyIn: TypeAlias = Union[int, str, np.integer]


class Vocabulary:
    """Keys (all int or all str) with their int64 ids, and the probe table built over them."""

    def __init__(self, keys: Sequence[KeyIn] | np.ndarray, ids: Iterable[int], kind: str | None = None) -> None:
        given = keys.tolist() if isinstance(keys, np.ndarray) else keys
        items: list[int | str] = [int(k) if isinstance(k, np.integer) else k for k in given]
        if kind in ("str", "int") and not items:
            self.kind = kind
        elif items and all(isinstance(k, str) for k in items):
            self.kind = "str"
        elif all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in items):
            self.kind = "int"
        else:
            raise OperatorError("vocabulary keys must be all strings or all integers")
        if self.kind == "int":
            wide = [k for k in items if isinstance(k, int) and not -(2**63) <= k < 2**64]  # (all int: checked above)
            if wide:
                raise OperatorError(f"vocabulary key {wide[0]} fits no integer column (int64 or uint64)")
        self.keys = items
        ids = list(ids)
        bad = [(k, i) for k, i in zip(items, ids) if isinstance(i, bool) or not isinstance(i, (int, np.integer))
               or not -(2**63) <= i < 2**63]
        if bad:
            raise OperatorError(f"vocabulary id {bad[0][1]!r} (key {bad[0][0]!r}) is not an int64")
        self.ids = np.asarray(ids, dtype=np.int64)
        if len(self.ids) != len(items):
            raise OperatorError(f"{len(items)} keys but {len(self.ids)} ids")
        if len(set(items)) != len(items):
            raise OperatorError("vocabulary keys must be unique")
        self.mask = R.table_size(len(items)) - 1
        h = hashlib.sha1(repr((self.kind, items)).encode())
        h.update(self.ids.tobytes())
        self.key = ("vocab", h.hexdigest())
        self._tables: dict[bool, tuple[np.ndarray, ...]] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"Vocabulary({self.kind}, {len(self)} keys)"

    def mapping(self) -> dict[int | str, int]:
        return dict(zip(self.keys, self.ids.tolist()))

    @classmethod
    def from_mapping(cls, mapping: Mapping[KeyIn, int]) -> "Vocabulary":
        """From a user dictionary ``{value: id}``."""
        return cls(list(mapping), list(mapping.values()))

    @classmethod
    def from_values(cls, values: Iterable[KeyIn], start: int = 1, kind: str | None = None) -> "Vocabulary":
        """Ids ``start, start+1, ...`` in the order given."""
        values = list(values)
        return cls(values, range(start, start + len(values)), kind=kind)

    @classmethod
    def from_counts(cls, counts: Mapping[KeyIn | None, int] | pd.Series, min_freq: int = 1,
                    kind: str | None = None) -> "Vocabulary":
        """Values seen at least ``min_freq`` times; ids 1.. by descending count, ties by value."""
        items = counts.items() if not isinstance(counts, pd.Series) else zip(counts.index.tolist(), counts.tolist())
        kept = sorted(((k, int(c)) for k, c in items if c >= min_freq and k is not None and k == k),
                      key=lambda kc: (-kc[1], kc[0]))
        return cls.from_values([k for k, _ in kept], kind=kind)

    def table(self, unsigned: bool = False) -> tuple[np.ndarray, ...]:
        """The buffers the lookup kernel reads: (slots, keys, ids) or (slots, key offsets,
        key bytes, ids).  Integer keys as the 64 bits a column holds them in: for a uint64
        column (``unsigned``) the keys in [0, 2^64), else those in [-2^63, 2^63), so 2^64 - 1
        never meets -1 (a key outside the column's range matches nothing)."""
        if unsigned not in self._tables:
            if self.kind == "int":
                lo, hi = (0, 2**64) if unsigned else (-(2**63), 2**63)
                kept = [(k, i) for k, i in zip(self.keys, self.ids.tolist()) if isinstance(k, int) and lo <= k < hi]
                keys = np.array([k for k, _ in kept] or [0], dtype=np.uint64 if unsigned else np.int64).view(np.int64)
                ids = np.array([i for _, i in kept] or [0], dtype=np.int64)
                self._tables[unsigned] = (R.build_int_table(keys[: len(kept)], self.mask), keys, ids)
            else:
                enc = [k.encode("utf-8") for k in self.keys if isinstance(k, str)]  # (all str: the kind)
                koffs = R.prefix(np.array([len(b) for b in enc], dtype=np.int64))
                kbytes = np.frombuffer(b"".join(enc) or b"\0", dtype=np.uint8).copy()
                self._tables[unsigned] = (R.build_str_table(koffs, kbytes, self.mask), koffs, kbytes, self.ids)
        return self._tables[unsigned]
