"""Raw image vectors, stored once per image id, in host RAM or in memory-mapped files.

AMS ("Image Matters", Ge et al., 2018) keeps each image's raw feature vector (e.g. 4096
floats from a CNN) once, keyed by image id, never copied into every sample that refers to
it.  :class:`ImageVectorStore` is that store: an id -> row index (a pandas hash index
over uint64 ids) plus a ``[rows, dim]`` float32 matrix, held in RAM or in an ``np.memmap``
file (``vectors.npy``, with ``ids.npy`` and ``meta.json`` beside it).

**Unknown image ids** (ids the store does not hold) read the store's ``default`` vector,
all zeros unless given, and are counted: ``get`` returns the mask of unknown references
and ``stats["unknown_references"]`` / ``stats["unknown_lookups"]`` accumulate them.

:func:`synthetic_vectors` makes deterministic vectors from ids alone (a splitmix64 hash of
``(seed, id, column)`` mapped to uniform ``[-1, 1)``); the Taobao example uses them because
the public sample carries no images.

Example:
    >>> import numpy as np
    >>> store = ImageVectorStore.from_ids([10, 20], dim=4)
    >>> v, unknown = store.get(np.array([20, 99, 10]))
    >>> v.shape, unknown.tolist(), float(abs(v[1]).sum()), store.stats["unknown_references"]
    ((3, 4), [False, True, False], 0.0, 1)
    >>> bool(np.array_equal(v[0], synthetic_vectors([20], 4)[0]))
    True
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd

from fbrapids.errors import ArgumentError, InputTypeError, MissingFileError

if TYPE_CHECKING:  # (annotations only: the store itself needs no torch)
    import torch

#: image ids: a torch tensor, a numpy array or a sequence of integers
Ids: TypeAlias = "torch.Tensor | npt.ArrayLike"

log = logging.getLogger(__name__)

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


def as_u64(ids: Ids) -> np.ndarray:
    """Ids as uint64 (int64 read bit for bit, as the embedding store does)."""
    a = ids.detach().cpu().numpy() if hasattr(ids, "detach") else np.asarray(ids)
    if a.dtype == np.uint64:
        return a.ravel()
    if a.dtype.kind == "i":
        return a.astype(np.int64, copy=False).ravel().view(np.uint64)
    if a.dtype.kind == "u":
        return a.astype(np.uint64).ravel()
    if a.size == 0:
        return np.zeros(0, dtype=np.uint64)
    raise InputTypeError(f"image ids must be integers, got dtype {a.dtype}")


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise on uint64 (a fast, well-mixed id hash).

    >>> int(splitmix64(np.array([0], dtype=np.uint64))[0]) != 0
    True
    """
    with np.errstate(over="ignore"):
        z = x + _M1
        z = (z ^ (z >> np.uint64(30))) * _M2
        z = (z ^ (z >> np.uint64(27))) * _M3
        return z ^ (z >> np.uint64(31))


def synthetic_vectors(ids: Ids, dim: int, seed: int = 0) -> np.ndarray:
    """Deterministic float32 vectors ``[len(ids), dim]`` in ``[-1, 1)``: a pure function of
    ``(seed, id, column)``, the same in any order, process or machine.  Synthetic: they stand
    in for CNN image features where a data set has none.

    Example:
        >>> a = synthetic_vectors([3, 4], 8, seed=1); b = synthetic_vectors([4], 8, seed=1)
        >>> bool(np.array_equal(a[1], b[0])), a.dtype.name
        (True, 'float32')
    """
    u = as_u64(ids)
    with np.errstate(over="ignore"):
        base = splitmix64(u ^ splitmix64(np.uint64(seed) + np.zeros(1, dtype=np.uint64)))
        cols = np.arange(dim, dtype=np.uint64) * _M1
        h = splitmix64(base[:, None] + cols[None, :])
    return ((h >> np.uint64(40)).astype(np.float64) / float(1 << 23) - 1.0).astype(np.float32)


class ImageVectorStore:
    """Raw vectors keyed by image id, in RAM or in a memory-mapped file (see module docstring).

    Args:
        ids: the image ids (unique; int64 or uint64).
        vectors: ``[len(ids), dim]`` float32 (a numpy array or an ``np.memmap``).
        default: the vector unknown ids read (zeros when None).

    Thread safety: ``get`` may be called from several threads (the counters are locked).
    """

    def __init__(self, ids: Ids, vectors: np.ndarray, default: np.ndarray | None = None) -> None:
        u = as_u64(ids)
        if vectors.ndim != 2 or vectors.shape[0] != len(u):
            raise ArgumentError(f"ImageVectorStore: {len(u)} ids but vectors of shape {vectors.shape}")
        self.index = pd.Index(u)
        if not self.index.is_unique:
            dup = self.index[self.index.duplicated()][0]
            raise ArgumentError(f"ImageVectorStore: image id {int(dup)} appears more than once")
        self.vectors = vectors
        self.dim = int(vectors.shape[1])
        self.default = (np.zeros(self.dim, dtype=np.float32) if default is None
                        else np.asarray(default, dtype=np.float32).reshape(self.dim))
        self.path: Path | None = None
        self._lock = threading.Lock()
        self.stats = {"lookups": 0, "references": 0, "unknown_lookups": 0, "unknown_references": 0,
                      "bytes_read": 0}

    def __len__(self) -> int:
        return len(self.index)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return int(self.vectors.shape[0]) * self.dim * 4

    @classmethod
    def from_ids(cls, ids: Ids, dim: int, seed: int = 0, path: str | os.PathLike | None = None,
                 chunk_rows: int = 1 << 14) -> "ImageVectorStore":
        """A store of :func:`synthetic_vectors` for the unique ``ids``; on disk under ``path``
        (written in chunks, then memory-mapped) or in RAM when ``path`` is None."""
        u = pd.unique(as_u64(ids))
        if path is None:
            return cls(u, synthetic_vectors(u, dim, seed))
        return cls.create(path, u, dim, lambda chunk: synthetic_vectors(chunk, dim, seed), chunk_rows)

    @classmethod
    def create(cls, path: str | os.PathLike, ids: Ids, dim: int, make: Callable[[np.ndarray], np.ndarray], chunk_rows: int = 1 << 14
               ) -> "ImageVectorStore":
        """Write a disk store under ``path``: ``make(ids_chunk) -> [len(chunk), dim]`` fills
        the memory-mapped ``vectors.npy`` chunk by chunk; returns the opened store."""
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        u = as_u64(ids)
        mm = np.lib.format.open_memmap(d / "vectors.npy", mode="w+", dtype=np.float32, shape=(len(u), dim))
        for s in range(0, len(u), chunk_rows):
            mm[s : s + chunk_rows] = make(u[s : s + chunk_rows])
        mm.flush()
        del mm
        np.save(d / "ids.npy", u)
        (d / "meta.json").write_text(json.dumps({"rows": int(len(u)), "dim": int(dim), "format": 1}))
        return cls.open(d)

    def save(self, path: str | os.PathLike) -> "ImageVectorStore":
        """Write this store to ``path`` (see :meth:`create`); returns the disk-backed copy."""
        ids = self.index.to_numpy()
        pos = {int(i): k for k, i in enumerate(ids)}
        return ImageVectorStore.create(path, ids, self.dim,
                                       lambda c: self.vectors[[pos[int(i)] for i in c]])

    @classmethod
    def open(cls, path: str | os.PathLike, default: np.ndarray | None = None, copy: bool = False) -> "ImageVectorStore":
        """Open a disk store read-only; vectors are paged in from the file as they are read.

        ``copy``: read the vectors into memory instead (a server does, after verifying the
        file: an edit or a truncation of the file afterwards then changes nothing, where a
        mapping would read the new bytes or die of SIGBUS).
        """
        d = Path(path)
        if not (d / "meta.json").exists():
            raise MissingFileError(f"{d} is not an image vector store (no meta.json)")
        meta = json.loads((d / "meta.json").read_text())
        if copy:
            from fbrapids.files.manifest import open_regular

            with open_regular(d / "vectors.npy") as f:
                try:
                    vec = np.lib.format.read_array(f, allow_pickle=False)
                except ValueError as exc:
                    raise ArgumentError(f"{d / 'vectors.npy'}: cannot be read ({exc})") from None
        else:
            vec = np.load(d / "vectors.npy", mmap_mode="r")
        if vec.shape != (meta["rows"], meta["dim"]):
            raise ArgumentError(f"{d / 'vectors.npy'} has shape {vec.shape}, meta.json says "
                             f"{(meta['rows'], meta['dim'])}")
        store = cls(np.load(d / "ids.npy"), vec, default)
        store.path = d
        return store

    def get(self, ids: Ids) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors [n, dim] float32, unknown [n] bool)`` for ``ids``; unknown ids read
        ``default`` and are counted in ``stats``."""
        u = as_u64(ids)
        pos = self.index.get_indexer(u)
        unknown = pos < 0
        n_unknown = int(unknown.sum())
        if n_unknown:
            out = np.empty((len(u), self.dim), dtype=np.float32)
            out[~unknown] = self.vectors[pos[~unknown]]
            out[unknown] = self.default
        else:
            out = np.asarray(self.vectors[pos], dtype=np.float32)
        with self._lock:
            st = self.stats
            st["lookups"] += 1
            st["references"] += len(u)
            st["unknown_references"] += n_unknown
            st["unknown_lookups"] += 1 if n_unknown else 0
            st["bytes_read"] += (len(u) - n_unknown) * self.dim * 4
        if n_unknown:
            log.debug("image vector store: %d of %d ids unknown, read the default vector", n_unknown, len(u))
        return out, unknown
