"""Embedding bags backed by tiered stores, with autograd.

Per batch and per table, the unique ids' rows are gathered from the store into one leaf
tensor; ``torch.nn.functional.embedding_bag`` pools from it.  After ``backward()``,
:meth:`TieredEmbeddingBagCollection.apply_gradients` hands each leaf's gradient (one row
per unique id, already summed over its occurrences) to the store's sparse optimizer.
Several features may share a table (e.g. DIN's behaviour sequence and its target ad);
they are looked up together, once per batch.

Example:
    >>> import torch
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> ebc = TieredEmbeddingBagCollection(["ad", "toks"], StoreConfig(dim=4, cache_rows=64))
    >>> sparse = {"ad": (torch.tensor([7, 8]), torch.tensor([0, 1])),
    ...           "toks": (torch.tensor([1, 2, 3]), torch.tensor([0, 2]))}
    >>> out = ebc(sparse)
    >>> out["toks"].shape, len(ebc.stores["ad"])
    (torch.Size([2, 4]), 2)
    >>> sum(o.sum() for o in out.values()).backward(); ebc.apply_gradients()
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fbrapids.trainers.sparse import Lookup, StoreConfig, TieredEmbeddingStore

log = logging.getLogger(__name__)

Sparse = Mapping[str, tuple[torch.Tensor, torch.Tensor]]


class TieredEmbeddingBagCollection(nn.Module):
    """One tiered table per feature (or per shared table name); pooled lookups.

    Args:
        features: sparse feature names, in the order outputs are listed.
        config: one :class:`StoreConfig` for every table, or a dict table name -> config.
        tables: feature -> table name, for features that share a table (default: own table).
        mode: ``"sum"`` or ``"mean"`` pooling.
        prefix: prepended to table names (store names, and their SSD sub-directories), so
            that two collections of one model keep separate files.
    """

    def __init__(self, features: Sequence[str], config: StoreConfig | Mapping[str, StoreConfig],
                 tables: Mapping[str, str] | None = None, mode: str = "sum", prefix: str = "") -> None:
        super().__init__()
        self.features = list(features)
        self.table_of = {f: (tables or {}).get(f, f) for f in self.features}
        self.mode = mode
        self.stores: dict[str, TieredEmbeddingStore] = {}
        for t in dict.fromkeys(self.table_of.values()):
            cfg = config[t] if isinstance(config, Mapping) else config
            self.stores[t] = TieredEmbeddingStore(cfg, name=prefix + t)
        dims = {s.config.dim for s in self.stores.values()}
        if len(dims) != 1:
            raise ValueError(f"tables of one collection must share a dim, got {sorted(dims)}")
        self.dim = dims.pop()
        self._pending: list[tuple[TieredEmbeddingStore, Lookup]] = []

    def _by_table(self, sparse: Sparse, names: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in names:
            if f not in sparse:
                raise KeyError(f"sparse feature {f!r} is not in the batch (it has {sorted(sparse)})")
            out.setdefault(self.table_of[f], []).append(f)
        return out

    def _drop_stale(self) -> None:
        if self._pending:
            log.debug("dropping %d lookups whose gradients were never applied", len(self._pending))
            for store in {id(s): s for s, _ in self._pending}.values():
                store.end_step()
            self._pending = []

    def lookup(self, sparse: Sparse) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """feature -> (rows ``[U, dim]`` leaf of its table, index of each id into rows)."""
        train = self.training and torch.is_grad_enabled()
        self._drop_stale()
        out = {}
        for table, feats in self._by_table(sparse, self.features).items():
            store = self.stores[table]
            vals = [sparse[f][0] for f in feats]
            lk = store.lookup(torch.cat(vals) if len(vals) > 1 else vals[0], requires_grad=train)
            self._pending.append((store, lk))
            start = 0
            for f, v in zip(feats, vals):
                out[f] = (lk.rows, lk.inverse[start : start + len(v)])
                start += len(v)
        if not train:  # nothing will be applied: release the pins now
            self._drop_stale()
        return out

    def forward(self, sparse: Sparse) -> dict[str, torch.Tensor]:
        """feature -> pooled ``[B, dim]``."""
        looked = self.lookup(sparse)
        return {f: self.pool(looked[f], sparse[f][1]) for f in self.features}

    def pool(self, looked: tuple[torch.Tensor, torch.Tensor], offsets: torch.Tensor) -> torch.Tensor:
        rows, inv = looked
        return F.embedding_bag(inv, rows, offsets.to(rows.device), mode=self.mode)

    @torch.no_grad()
    def apply_gradients(self) -> None:
        """Run each table's sparse optimizer on this batch's rows, then end the step."""
        for store, lk in self._pending:
            store.apply_gradients(lk)
        for store in {id(s): s for s, _ in self._pending}.values():
            store.end_step()
        self._pending = []

    def prefetch(self, sparse: Sparse) -> int:
        """Pin the next batch's rows in the caches; returns rows brought up."""
        moved = 0
        for table, feats in self._by_table(sparse, [f for f in self.features if f in sparse]).items():
            moved += self.stores[table].prefetch(torch.cat([sparse[f][0] for f in feats]))
        return moved

    def stats(self) -> dict[str, dict]:
        return {t: s.stats() for t, s in self.stores.items()}


def bag_segments(offsets: torch.Tensor, n_values: int) -> torch.Tensor:
    """The bag (row) index of each value, from EmbeddingBag-style start offsets.

    Example:
        >>> import torch
        >>> bag_segments(torch.tensor([0, 2, 2]), 3).tolist()
        [0, 0, 2]
    """
    ends = torch.cat([offsets[1:], torch.tensor([n_values], device=offsets.device)])
    return torch.repeat_interleave(torch.arange(len(offsets), device=offsets.device), ends - offsets)


def ids_numpy(values: torch.Tensor) -> np.ndarray:
    return values.detach().cpu().numpy()
