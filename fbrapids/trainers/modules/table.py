"""The interface an embedding collection needs from one table: :class:`EmbeddingTable`.

Two classes implement it: :class:`~fbrapids.trainers.sparse.TieredEmbeddingStore` (the
tiered store: cache, host RAM, SSD) and
:class:`~fbrapids.trainers.distributed.sharded_store.ShardedTable` (one table of a model
sharded by rows across ranks, its rows fetched from their owners each step).  A collection
(:class:`~fbrapids.trainers.modules.embedding.TieredEmbeddingBagCollection`) calls only
these methods, so a sharded model trains through the same code as a local one.

Per step: ``lookup`` (the rows of a batch's ids, pinned until ``end_step``), the next
batch's ``prefetch`` (or ``prepare``, in the background; ``announce`` ahead when it
``uses_window``), then ``update_rows`` (the sparse optimizer on the rows' gradients)
or ``apply_gradients``, and ``end_step``.  ``load`` restores a checkpoint's copy;
``assign`` and ``weights`` write and read rows by id outside the steps.

Example:
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> from fbrapids.trainers.distributed.sharded_store import ShardedTable
    >>> store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8))
    >>> isinstance(store, EmbeddingTable), isinstance(ShardedTable(store), EmbeddingTable)
    (True, True)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

from fbrapids.trainers.sparse import Lookup, StoreConfig
from fbrapids.trainers.sparse.row_directory import Ids
from fbrapids.trainers.sparse.store import TableStats


@runtime_checkable
class EmbeddingTable(Protocol):
    """One embedding table as a collection uses it (module docstring)."""

    config: StoreConfig
    name: str
    #: whether lookups leave the table as it is (serving: nothing admitted, no sighting counted)
    read_only: bool

    @property
    def device(self) -> torch.device:
        """Where the rows a lookup returns live."""
        ...

    def to(self, device: str | torch.device) -> "EmbeddingTable":
        """Move the rows' working tier to ``device``; returns the table."""
        ...

    def __len__(self) -> int:
        """Rows held (a sharded table: the rows this rank owns)."""
        ...

    def lookup(self, ids: Ids, requires_grad: bool = True, leaf: bool = True) -> Lookup:
        """The rows of ``ids`` (pinned until :meth:`end_step`), with their distinct ids' inverse."""
        ...

    def prefetch(self, ids: Ids) -> int:
        """Bring the next batch's rows into the fast tier; returns the rows moved."""
        ...

    def prepare(self, ids: Ids) -> None:
        """Start finding the next batch's rows in the background (the next lookup takes them)."""
        ...

    def update_rows(self, lookup: Lookup, grad: torch.Tensor) -> None:
        """Apply the sparse optimizer to ``lookup``'s rows with their gradient ``grad``."""
        ...

    def apply_gradients(self, lookup: Lookup, grad: torch.Tensor | None = None) -> None:
        """:meth:`update_rows` with ``grad`` (default: the gradient autograd left on the rows)."""
        ...

    def end_step(self) -> None:
        """Unpin the step's rows."""
        ...

    @property
    def uses_window(self) -> bool:
        """Whether the table's eviction ranks rows by announced upcoming batches (then
        :meth:`announce` is worth calling)."""
        ...

    def announce(self, ids: Ids, ahead: int = 1) -> int:
        """Note the ids of the batch looked up ``ahead`` steps from now; returns the rows noted."""
        ...

    def assign(self, ids: Ids, weights: npt.ArrayLike | torch.Tensor) -> None:
        """Set the rows of ``ids`` to ``weights`` (admitting them), e.g. to import a dense table."""
        ...

    def weights(self, ids: Ids) -> np.ndarray:
        """The rows ``[len(ids), dim]`` of ``ids`` (the default row where not admitted)."""
        ...

    def load(self, directory: str | os.PathLike, read: Callable[[Path], bytes] | None = None) -> None:
        """Replace the table's contents with a copy saved in ``directory`` (``read``: how its
        files are read)."""
        ...

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (id, row) the table holds."""
        ...

    def stats(self) -> TableStats:
        """Counters (hits, misses, evictions...)."""
        ...

    @property
    def unseen_reads(self) -> int:
        """Lookups of ids without a row while read-only (``stats()["unseen_reads"]``)."""
        ...
