"""A table on disk: :func:`flush` (dirty rows to the SSD file, the id index beside it),
:func:`save` (a self-contained copy: ``rows.f32``, ``index.npz``, ``meta.json``) and
:func:`load` (replace a table's contents with a saved copy).

Example:
    >>> import tempfile, numpy as np
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> a = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4)); a.assign(np.array([9]), np.array([[1.0, 2.0]]))
    >>> d = tempfile.mkdtemp(); save(a, d)
    >>> b = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4)); load(b, d); b.weights(np.array([9])).tolist()
    [[1.0, 2.0]]
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import numpy as np

from fbrapids.errors import StoreError
from fbrapids.files.atomic import write_atomic
from fbrapids.trainers.sparse.config import StoreConfig

if TYPE_CHECKING:  # (annotations only: this module sits below the store's)
    from fbrapids.trainers.sparse.hierarchy import TierStack
    from fbrapids.trainers.sparse.row_directory import RowDirectory


class PersistedStore(Protocol):
    """What persistence needs of a store (``TieredEmbeddingStore`` is one); a protocol, so this
    module sits below store.py instead of importing it back."""

    name: str
    config: StoreConfig
    tiers: TierStack
    directory: RowDirectory

    @property
    def step(self) -> int: ...

    def __len__(self) -> int: ...

    def reset(self) -> None: ...

    def restore_step(self, step: int) -> None: ...


def table_meta(store: PersistedStore) -> dict[str, object]:
    return {"name": store.name, "rows": len(store), "step": store.step, "config": store.config.to_dict()}


def flush(store: PersistedStore) -> None:
    """Write every dirty row of the cache and host tiers to the SSD file, fsync it, and
    persist the id -> row index.  A no-op for a store with no SSD tier."""
    tiers = store.tiers
    if tiers.ssd is None:
        return
    tiers.write_back_dirty()
    tiers.ssd.persist()
    tiers.ssd.write_index(store.directory.all_ids(), table_meta(store))


def save(store: PersistedStore, directory: str | os.PathLike, chunk_rows: int = 1 << 16,
         progress: Callable[[Path], object] | None = None,
         check_rows: Callable[[np.ndarray, int], None] | None = None) -> None:
    """Flush, then write a self-contained copy of the table into ``directory``.

    Files: ``rows.f32`` (row g = the id ``ids[g]``), ``index.npz`` (ids, pending
    admission counts, LRU/LFU state) and ``meta.json``; each written under a temporary
    name, fsynced, then renamed.  ``progress(path)`` is called after each file;
    ``check_rows(rows, first_row)`` sees each chunk of rows (float32, ``[n, width]``) before
    it is written, and may raise to abandon the file (e.g. a non-finite value).
    """

    flush(store)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    n, tiers, dr = len(store), store.tiers, store.directory

    def row_chunks() -> Iterator[bytes]:
        for start in range(0, n, chunk_rows):
            stop = min(n, start + chunk_rows)
            if tiers.ssd is not None:  # flushed: the file holds every row
                rows = tiers.ssd.rows_view(start, stop)
            else:
                rows = tiers.read_rows(np.arange(start, stop, dtype=np.int64))
            if check_rows is not None:
                check_rows(rows, start)
            yield rows.tobytes()

    write_atomic(d / "rows.f32", row_chunks(), size=n * store.config.width * 4)  # float32 rows
    if progress:
        progress(d / "rows.f32")
    pk, pv = dr.pending_items()
    buf = io.BytesIO()
    np.savez(buf, ids=dr.all_ids(), pending_ids=pk, pending_counts=pv, last=dr.last[:n], freq=dr.freq[:n])
    write_atomic(d / "index.npz", [buf.getvalue()])  # its size known: a full disk says how much it needed
    if progress:
        progress(d / "index.npz")
    write_atomic(d / "meta.json", [json.dumps(table_meta(store), indent=1).encode()])
    if progress:
        progress(d / "meta.json")


def load(store: PersistedStore, directory: str | os.PathLike, read: Callable[[Path], bytes] | None = None) -> None:
    """Replace ``store``'s contents with a copy saved by :func:`save`.

    The tier sizes stay the store's own; the cache starts cold.  ``read(path)``: the bytes of
    one of the table's files, read once (a loader that verified them against a manifest
    passes its reader, so what is loaded is what was verified); default: read from disk.
    """
    d = Path(directory)
    meta = json.loads(read(d / "meta.json") if read else (d / "meta.json").read_text())
    saved = StoreConfig(**meta["config"])
    width = store.config.width
    if saved.width != width or saved.dim != store.config.dim:
        raise StoreError(f"table {store.name!r}: checkpoint {d} has rows of width {saved.width}, this store {width}")
    with np.load(io.BytesIO(read(d / "index.npz")) if read else d / "index.npz") as z:
        ids, pk, pv, last, freq = (z[k] for k in ("ids", "pending_ids", "pending_counts", "last", "freq"))
    n = len(ids)
    rows = (np.frombuffer(read(d / "rows.f32"), dtype=np.float32) if read
            else np.fromfile(d / "rows.f32", dtype=np.float32))
    if rows.size != n * width:
        raise StoreError(f"table {store.name!r}: {d / 'rows.f32'} holds {rows.size} floats, expected "
                         f"{n} rows x {width}")
    store.reset()
    store.directory.restore(ids, last, freq, pk, pv)
    store.restore_step(int(meta["step"]))
    g = np.arange(n, dtype=np.int64)
    tiers = store.tiers
    if tiers.ssd is not None:
        tiers.write_ssd(g, rows.reshape(n, width))
        tiers.ssd_stats.bytes_in = 0
    else:
        tiers.hold_in_ram(g, rows.reshape(n, width))
