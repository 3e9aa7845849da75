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

from fbrapids.errors import ArgumentError, NotFoundError
from fbrapids.trainers.modules.table import EmbeddingTable
from fbrapids.trainers.sparse import Lookup, StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.sparse.hashmap import bag_sum, bag_sum_backward, group_by_row
from fbrapids.trainers.sparse.store import prepare_together
from fbrapids.trainers.sparse.together import lookup_together, on_host, update_together

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

    The stores' cache tiers start on the CPU, like the module's parameters (unless a
    config names a device), and follow the module: ``module.to(device)`` moves them.
    """

    def __init__(self, features: Sequence[str], config: StoreConfig | Mapping[str, StoreConfig],
                 tables: Mapping[str, str] | None = None, mode: str = "sum", prefix: str = "") -> None:
        super().__init__()
        self.features = list(features)
        self.table_of = {f: (tables or {}).get(f, f) for f in self.features}
        if mode not in ("sum", "mean"):
            raise ArgumentError(f"pooling mode must be 'sum' or 'mean', got {mode!r}")
        self.mode = mode
        self.stores: dict[str, EmbeddingTable] = {}  # a TieredEmbeddingStore each; a ShardedTable once sharded
        for t in dict.fromkeys(self.table_of.values()):
            cfg = config[t] if isinstance(config, Mapping) else config
            self.stores[t] = TieredEmbeddingStore(cfg, name=prefix + t, device="cpu")
        dims = {s.config.dim for s in self.stores.values()}
        if len(dims) != 1:
            raise ArgumentError(f"tables of one collection must share a dim, got {sorted(dims)}")
        self.dim = dims.pop()
        self._pending: list[tuple[EmbeddingTable, Lookup]] = []
        # the leaf of the last stacked lookup and, per table, its rows' range in the leaf
        self._stacked: tuple[torch.Tensor, list[tuple[EmbeddingTable, Lookup, int, int]]] | None = None

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        """``to`` / ``cuda`` / ``cpu`` on the module also move every store's cache tier."""
        out = super()._apply(fn, recurse)
        for store in self.stores.values():
            store.to(fn(torch.empty(0, device=store.device)).device)
        return out

    @property
    def device(self) -> torch.device:
        """Where the stores' cache tiers (and so lookups and pooled outputs) are."""
        return next(iter(self.stores.values())).device

    def _by_table(self, sparse: Sparse, names: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in names:
            if f not in sparse:
                raise NotFoundError(f"sparse feature {f!r} is not in the batch (it has {sorted(sparse)})")
            out.setdefault(self.table_of[f], []).append(f)
        return out

    def _drop_stale(self) -> None:
        if self._pending:
            log.debug("dropping %d lookups whose gradients were never applied", len(self._pending))
            for store in {id(s): s for s, _ in self._pending}.values():
                store.end_step()
            self._pending = []
        self._stacked = None

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
        if len({len(sparse[f][1]) for f in self.features if f in sparse}) == 1:
            stacked = self.pooled_stack(sparse)
            return {f: stacked[:, k] for k, f in enumerate(self.features)}
        looked = self.lookup(sparse)
        return {f: self.pool(looked[f], sparse[f][1]) for f in self.features}

    def pooled_stack(self, sparse: Sparse) -> torch.Tensor:
        """Every feature pooled, stacked ``[B, n_features, dim]`` (in ``features`` order).

        One leaf holds the batch's rows of every table; one ``embedding_bag`` call pools
        all features (each table's rows at an offset in the leaf); with sum pooling its
        backward is one more ``embedding_bag`` over the output gradient, the occurrences
        grouped by row in C (:func:`~fbrapids.trainers.sparse.hashmap.group_by_row`),
        rather than ``embedding_bag``'s sort-based backward per feature.
        :meth:`apply_gradients` then runs the sparse optimizer once over all tables' rows.

        Example:
            >>> import torch
            >>> from fbrapids.trainers.sparse import StoreConfig
            >>> ebc = TieredEmbeddingBagCollection(["a", "b"], StoreConfig(dim=2, cache_rows=8))
            >>> out = ebc.pooled_stack({"a": (torch.tensor([1, 2]), torch.tensor([0, 1])),
            ...                         "b": (torch.tensor([3, 3, 4]), torch.tensor([0, 2]))})
            >>> out.shape
            torch.Size([2, 2, 2])
        """
        train = self.training and torch.is_grad_enabled()
        self._drop_stale()
        groups = self._by_table(sparse, self.features)
        n_bags = {len(sparse[f][1]) for f in self.features}
        if len(n_bags) != 1:
            raise ArgumentError(f"features of one batch must have the same number of bags, got {sorted(n_bags)}")
        b = n_bags.pop()
        parts: list[tuple[EmbeddingTable, Lookup, int, int]] = []
        inv_of, base = {}, 0
        stores = [self.stores[t] for t in groups]
        values = {t: [sparse[f][0] for f in feats] for t, feats in groups.items()}
        keys = [torch.cat(v) if len(v) > 1 else v[0] for v in values.values()]
        if on_host(stores):  # every table's lookup pass in one C call, the rows written into one leaf
            lookups, leaf = lookup_together(stores, keys, train)
        else:
            lookups = [s.lookup(k, requires_grad=train, leaf=False) for s, k in zip(stores, keys)]
            leaf = None
        for store, lk, (table, feats) in zip(stores, lookups, groups.items()):
            self._pending.append((store, lk))
            parts.append((store, lk, base, base + len(lk.ids)))
            inv = lk.inverse.numpy() if lk.inverse.device.type == "cpu" else lk.inverse.cpu().numpy()
            start = 0
            for f, v in zip(feats, values[table]):
                inv_of[f] = (inv[start : start + len(v)], base)
                start += len(v)
            base += len(lk.ids)
        rows = [lk.rows for lk in lookups]
        dev = rows[0].device
        cpu = dev.type == "cpu"
        if leaf is None:
            leaf = torch.cat(rows) if len(rows) > 1 else (rows[0] if cpu and rows[0].is_contiguous()
                                                          else rows[0].clone())
        idx, off = self._bag_index(inv_of, sparse, b)
        if cpu and self.mode in ("sum", "mean"):  # pooling and its backward in C, one pass each
            mean = self.mode == "mean"  # the sum over the bag's size (an empty bag stays 0)
            fields = len(self.features)  # each row's pooled fields written side by side: [B, F, dim] as it lies
            if train:
                leaf.requires_grad_(True)
                self._stacked = (leaf, parts)
                pooled = _HostSumBags.apply(leaf, idx, off, mean, fields)
            else:
                self._drop_stale()
                pooled = torch.from_numpy(bag_sum(leaf.detach().numpy(), idx, off, mean, fields))
            return pooled.view(b, fields, self.dim)
        idx_t, off_t = torch.from_numpy(idx).to(dev), torch.from_numpy(off[:-1]).to(dev)
        if not train:
            self._drop_stale()
            pooled = F.embedding_bag(idx_t, leaf, off_t, mode=self.mode)
        else:
            leaf.requires_grad_(True)
            self._stacked = (leaf, parts)
            if self.mode == "sum":
                starts, bags = group_by_row(idx, len(leaf), off)
                pooled = _SumBags.apply(leaf, idx_t, off_t, torch.from_numpy(starts[:-1]).to(dev),
                                        torch.from_numpy(bags).to(dev))
            else:
                pooled = F.embedding_bag(idx_t, leaf, off_t, mode=self.mode)
        return pooled.view(len(self.features), b, self.dim).transpose(0, 1)

    def _bag_index(self, inv_of: dict[str, tuple[np.ndarray, int]], sparse: Sparse,
                   b: int) -> tuple[np.ndarray, np.ndarray]:
        """Every feature's bags as one index into the stacked leaf and its offsets (``[F * b + 1]``,
        ending with the number of ids): feature ``f``'s ids read ``inv_of[f][0]`` (positions in
        its table's rows) plus its table's first row in the leaf, ``inv_of[f][1]``."""
        if len(self.features) == 1:  # one feature of one table: its inverse is the index as it is
            f = self.features[0]
            idx = inv_of[f][0]
            off = np.empty(b + 1, dtype=np.int64)
            off[:b] = sparse[f][1].cpu().numpy()
            off[-1] = len(idx)
            return idx, off
        n = sum(len(inv_of[f][0]) for f in self.features)
        idx = np.empty(n, dtype=np.int64)
        off = np.empty(len(self.features) * b + 1, dtype=np.int64)
        at = 0
        for k, f in enumerate(self.features):
            inv, tbase = inv_of[f]
            np.add(inv, tbase, out=idx[at : at + len(inv)])
            np.add(sparse[f][1].cpu().numpy(), at, out=off[k * b : (k + 1) * b])
            at += len(inv)
        off[-1] = n
        return idx, off

    def pool(self, looked: tuple[torch.Tensor, torch.Tensor], offsets: torch.Tensor) -> torch.Tensor:
        rows, inv = looked
        return F.embedding_bag(inv, rows, offsets.to(rows.device), mode=self.mode)

    @torch.no_grad()
    def apply_gradients(self, background: bool = False) -> None:
        """Run each table's sparse optimizer on this batch's rows, then end the step.

        ``background``: the row-wise Adagrad of CPU caches runs on the stores' background
        thread while the caller goes on, each table waiting for it when next used
        (:func:`~fbrapids.trainers.sparse.together.update_together`).  Worth it for a caller
        with work of its own to do meanwhile (``fit``: the dense optimizer's step); without
        such work the next lookup would only wait for it, after a hop between threads."""
        stacked = {id(lk) for _, lk, _, _ in self._stacked[1]} if self._stacked is not None else set()
        if self._stacked is not None:
            self._apply_stacked(*self._stacked, background=background)
        for store, lk in self._pending:
            if id(lk) not in stacked:
                store.apply_gradients(lk)
        for store in {id(s): s for s, _ in self._pending}.values():
            store.end_step()
        self._pending = []
        self._stacked = None

    @staticmethod
    def _apply_stacked(leaf: torch.Tensor, parts: list[tuple[EmbeddingTable, Lookup, int, int]],
                       background: bool) -> None:
        """The sparse optimizer over every table's rows of a stacked lookup (on CPU caches: in
        place, in C, every table in one call: :func:`~fbrapids.trainers.sparse.together.update_together`)."""
        if leaf.grad is not None:
            update_together(parts, leaf.grad, background=background)

    def prefetch(self, sparse: Sparse) -> int:
        """Pin the next batch's rows in the caches; returns rows brought up."""
        moved = 0
        for table, feats in self._by_table(sparse, [f for f in self.features if f in sparse]).items():
            moved += self.stores[table].prefetch(torch.cat([sparse[f][0] for f in feats]))
        return moved

    def prepare(self, sparse: Sparse) -> None:
        """Have every table find the next batch's rows in the background while this one
        trains (:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepare`).  Called
        before this batch's lookup (which was prepared the step before), it prepares two deep:
        the background thread then has the whole step."""
        groups = self._by_table(sparse, [f for f in self.features if f in sparse])
        keys = [torch.cat(v) if len(v) > 1 else v[0] for v in ([sparse[f][0] for f in fs] for fs in groups.values())]
        stores = [self.stores[t] for t in groups]
        tiered = [s for s in stores if isinstance(s, TieredEmbeddingStore)]
        if len(tiered) == len(stores):
            prepare_together(tiered, keys)  # one job of the prefetch thread for every table
        else:
            for s, k in zip(stores, keys):
                s.prepare(k)

    @property
    def prepares_two_deep(self) -> bool:
        """Whether every table's :meth:`prepare` may go two deep
        (:attr:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepares_two_deep`)."""
        return all(isinstance(s, TieredEmbeddingStore) and s.prepares_two_deep for s in self.stores.values())

    def prepared_next(self) -> bool:
        """Whether every table has a prepare pending for its next lookup
        (:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepared_next`)."""
        return all(isinstance(s, TieredEmbeddingStore) and s.prepared_next() for s in self.stores.values())

    def announce(self, sparse: Sparse, ahead: int) -> int:
        """Announce a batch looked up ``ahead`` steps from now to the tables whose eviction
        uses upcoming batches (``lfu_window``); returns the rows noted."""
        noted = 0
        for table, feats in self._by_table(sparse, [f for f in self.features if f in sparse]).items():
            store = self.stores[table]
            if store.uses_window:
                noted += store.announce(torch.cat([sparse[f][0] for f in feats]), ahead)
        return noted

    def stats(self) -> dict[str, dict]:
        return {t: s.stats() for t, s in self.stores.items()}


class _HostSumBags(torch.autograd.Function):
    """Sum- (or mean-) pooled bags on the CPU, forward and backward in C
    (:func:`~fbrapids.trainers.sparse.hashmap.bag_sum`): ``idx`` / ``offsets`` are numpy
    (``offsets`` ends with ``len(idx)``); ``fields``: the bags are that many features' runs,
    pooled into ``[bags per feature, fields, dim]`` rows (``bag_sum``'s ``fields``)."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, idx: np.ndarray,  # type: ignore[override]
                offsets: np.ndarray, mean: bool = False, fields: int = 1) -> torch.Tensor:
        ctx.idx, ctx.offsets, ctx.m, ctx.mean, ctx.fields = idx, offsets, rows.shape[0], mean, fields
        return torch.from_numpy(bag_sum(rows.detach().numpy(), idx, offsets, mean, fields))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        g = bag_sum_backward(grad.detach().contiguous().numpy(), ctx.idx, ctx.offsets, ctx.m, ctx.mean, ctx.fields)
        return torch.from_numpy(g), None, None, None, None


class _SumBags(torch.autograd.Function):
    """Sum-pooled bags whose backward is itself a sum-pooled bag over the output gradient.

    ``rows_of`` / ``bags`` group the occurrences by row (see
    :func:`~fbrapids.trainers.sparse.hashmap.group_by_row`): row ``r``'s gradient is the
    sum of the output gradients of the bags ``bags[rows_of[r]:rows_of[r + 1]]``.
    """

    @staticmethod
    def forward(ctx, rows: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor, rows_of: torch.Tensor,
                bags: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(rows_of, bags)
        return F.embedding_bag(idx, rows, offsets, mode="sum")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        rows_of, bags = ctx.saved_tensors
        return F.embedding_bag(bags, grad.contiguous(), rows_of, mode="sum"), None, None, None, None


def bag_segments(offsets: torch.Tensor, n_values: int) -> torch.Tensor:
    """The bag (row) index of each value, from EmbeddingBag-style start offsets.

    Example:
        >>> import torch
        >>> bag_segments(torch.tensor([0, 2, 2]), 3).tolist()
        [0, 0, 2]
    """
    ends = torch.cat([offsets[1:], torch.tensor([n_values], device=offsets.device)])
    return torch.repeat_interleave(torch.arange(len(offsets), device=offsets.device), ends - offsets)

