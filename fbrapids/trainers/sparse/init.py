"""Deterministic initial rows: a pure function of (id, seed, column).

A new row's value does not depend on when its id first arrives, so a store of any tier
sizes, or a resumed run, creates exactly the same rows.  Each element is a splitmix64
hash of ``id``, ``seed`` and the column, whose top 24 bits give a float32 in [0, 1)
exactly; that maps to ``[-scale, scale)``.

Example:
    >>> import numpy as np
    >>> a = init_rows(np.array([3, 2**64 - 1], dtype=np.uint64), dim=4, seed=1, scale=0.5)
    >>> b = init_rows(np.array([2**64 - 1], dtype=np.uint64), dim=4, seed=1, scale=0.5)
    >>> bool((a[1] == b[0]).all()), a.dtype, bool((abs(a) <= 0.5).all())
    (True, dtype('float32'), True)
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def seed_mix(seed: int) -> int:
    """The splitmix64 of ``seed`` (mod 2**64) that every initial row of that seed is keyed by."""
    return int(splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0])


def init_rows(ids: np.ndarray, dim: int, seed: int, scale: float) -> np.ndarray:
    """Initial embeddings ``[len(ids), dim]`` float32, uniform in ``[-scale, scale)``.

    Args:
        ids: raw ids, uint64 (int64 is read as its two's-complement uint64).
    """
    ids = np.asarray(ids)
    if ids.dtype == np.int64:
        ids = ids.view(np.uint64)
    seed_mix = splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    cols = (np.arange(1, dim + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    with np.errstate(over="ignore"):
        h = splitmix64((splitmix64(ids ^ seed_mix)[:, None]) + cols)
    unit = (h >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)  # exact, in [0, 1)
    return ((unit * np.float32(2.0) - np.float32(1.0)) * np.float32(scale)).astype(np.float32)
