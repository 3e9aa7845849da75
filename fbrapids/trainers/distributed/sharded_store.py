"""Embedding tables sharded by rows across ranks.

:func:`shard_model` replaces every table of a model's embedding collections with a
:class:`ShardedTable`: the collection still calls ``lookup`` / ``update_rows`` /
``end_step`` on it, but the rows come from the ranks that own them.  Each rank keeps a
today's :class:`~fbrapids.trainers.sparse.TieredEmbeddingStore` (``local``) for the ids
its bucket table (:mod:`~fbrapids.trainers.distributed.buckets`) gives it.

One step over all tables (:class:`ShardedEmbeddings`):

1. :meth:`~ShardedEmbeddings.begin`, a lookup in four named stages (TorchRec's input
   dist, lookup, output dist):

   * **route** (``_route``): each rank finds, per table, the distinct ids of its local
     batch (first-occurrence order, with occurrence counts) and their owners; one
     ``all_gather`` shares every rank's per-(destination, table) counts, its row count
     and a *done* flag (a rank out of data still takes part, with an empty batch, until
     every rank is done; then ``begin`` returns None everywhere), and one
     ``all_to_all_single`` sends (id, count) pairs to the owners;
   * **owner lookup** (``_lookup_owned``): each owner looks the union of what it received
     up in its local store once (the ids repeated by their counts, so admission, LRU /
     LFU state and the statistics are those of one lookup of the union batch);
   * **exchange** (``_exchange_rows``): one more ``all_to_all_single`` sends the rows back;
   * **gather** (``_gather``): each requester puts its rows in its ids' order and installs
     them in its :class:`ShardedTable` for the step.
2. forward / backward run on the local batch; each :class:`ShardedTable` collects its rows'
   gradients.
3. :meth:`~ShardedEmbeddings.finish`: one ``all_to_all_single`` sends the row gradients
   (divided by W, as DDP divides the dense ones: a rank's loss is W times its share of the
   union's mean) to the owners; an owner sums an id's gradients over the ranks (in rank
   order) and applies the row-wise optimizer once: synchronous SGD on the union batch.

Overlap (:meth:`ShardedEmbeddings.prepare`, TorchRec's pipelining): step ``k+1``'s
**route** - distinct ids, the ``all_gather`` and the (id, count) ``all_to_all_single`` -
reads no table, so it runs in a thread, on a gloo group of its
own, while step ``k`` computes; ``begin`` then only waits for it, looks the rows up (after
step ``k``'s updates) and sends them.  The same collectives, bytes and results.

Every buffer is fused across tables: per step one ``all_gather`` and three
``all_to_all_single`` whatever the number of tables (evaluation: one and two).  Per
distinct id and step: 16 bytes of (id, count) and ``4 * dim`` bytes each way of row and
gradient.

With one rank this is today's trainer step for step: the same rows in the same order, the
same optimizer calls, bit for bit.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import numpy.typing as npt
import torch

from fbrapids.errors import CheckpointError, StoreError
from fbrapids.trainers.batch import Batch
from fbrapids.trainers.distributed.buckets import BucketTable
from fbrapids.trainers.distributed.exchange import Exchange
from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import Lookup, StoreConfig, TieredEmbeddingStore, as_uint64_ids
from fbrapids.trainers.sparse.hashmap import unique_u64
from fbrapids.trainers.sparse.row_directory import Ids
from fbrapids.trainers.sparse.store import TableStats
from fbrapids.trainers.sparse.together import lookup_together, on_host, update_each

if TYPE_CHECKING:  # (annotations only: torch.distributed is imported where a process group is made)
    import torch.distributed as dist

log = logging.getLogger(__name__)

__all__ = ["ShardedTable", "ShardedEmbeddings", "shard_model", "rank_store_config", "first_occurrence_unique"]


def rank_store_config(config: StoreConfig, rank: int) -> StoreConfig:
    """``config`` for rank ``rank``: its SSD files in a folder of its own (``ssd_dir/rank-<r>``).

    Example:
        >>> rank_store_config(StoreConfig(ssd_dir="/data/emb", host_rows=10), 3).ssd_dir
        '/data/emb/rank-3'
        >>> rank_store_config(StoreConfig(), 3).ssd_dir is None
        True
    """
    if config.ssd_dir is None:
        return config
    return config.with_(ssd_dir=os.path.join(config.ssd_dir, f"rank-{rank}"))


def first_occurrence_unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct ``keys`` in order of first occurrence, the inverse, and the counts.

    Example:
        >>> u, inv, c = first_occurrence_unique(np.array([5, 3, 5, 9], dtype=np.uint64))
        >>> u.tolist(), inv.tolist(), c.tolist()
        ([5, 3, 9], [0, 1, 0, 2], [2, 1, 1])
    """
    return unique_u64(as_uint64_ids(keys).ravel())


class ShardedTable:
    """One table as its collection sees it during a sharded step (an
    :class:`~fbrapids.trainers.modules.table.EmbeddingTable`, as the tiered store is); the
    rows of the step's distinct ids were fetched from their owners by
    :meth:`ShardedEmbeddings.begin`.

    ``local`` is this rank's shard (a :class:`TieredEmbeddingStore` holding the ids this
    rank owns).  ``lookup`` serves any ids among the step's; ``update_rows`` collects their
    gradients for :meth:`ShardedEmbeddings.finish`.
    """

    def __init__(self, local: TieredEmbeddingStore) -> None:
        self.local = local
        self.config: StoreConfig = local.config
        self.name = local.name
        self._keys: np.ndarray | None = None  # the step's ids as the collection will ask for them
        self._inverse = np.zeros(0, dtype=np.int64)  # position of each of ``_keys`` in ``ids``
        self.ids = np.zeros(0, dtype=np.uint64)
        self.rows = torch.zeros(0, local.config.dim)
        self.grad: torch.Tensor | None = None
        #: a Scorer's flag; the rows come from the owners' stores (their own read_only: ShardedEmbeddings.local_stores)
        self.read_only = False
        self._lookups = 0
        self._step = 0

    @property
    def device(self) -> torch.device:
        return self.local.device

    def to(self, device: str | torch.device) -> "ShardedTable":
        self.local.to(device)
        return self

    def __len__(self) -> int:
        """Rows this rank owns."""
        return len(self.local)

    def install(self, keys: np.ndarray, ids: np.ndarray, inverse: np.ndarray, rows: torch.Tensor) -> None:
        """The step's keys (as the collection will look them up), their distinct ids, the
        position of each key among them, and the distinct ids' rows."""
        self._keys, self.ids, self._inverse, self.rows = keys, ids, inverse, rows
        self.grad = None
        self._lookups = 0

    def lookup(self, ids: Ids, requires_grad: bool = True, leaf: bool = True) -> Lookup:
        """Rows of ``ids`` (all among the step's); ``slots`` are their positions in the step's rows."""
        keys = as_uint64_ids(ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else ids).ravel()
        if self._keys is not None and len(keys) == len(self._keys) and np.array_equal(keys, self._keys):
            uniq, inverse = self.ids, self._inverse
            pos = np.arange(len(uniq), dtype=np.int64)
            rows = self.rows if self._lookups == 0 else self.rows.clone()
        else:
            uniq, inverse, _ = first_occurrence_unique(keys)
            order = np.argsort(self.ids, kind="stable")
            at = np.searchsorted(self.ids, uniq, sorter=order)
            at = np.minimum(at, max(len(order) - 1, 0))
            pos = order[at] if len(order) else np.zeros(0, dtype=np.int64)
            if len(uniq) and (not len(order) or not np.array_equal(self.ids[pos], uniq)):
                raise StoreError(f"table {self.name!r} is sharded across ranks: it serves only the ids of a step of "
                                 "fit_distributed / predict_distributed (this lookup asks for others)")
            rows = self.rows[torch.from_numpy(pos)]
        self._lookups += 1
        rows.requires_grad_(requires_grad and leaf)
        return Lookup(rows=rows, inverse=torch.from_numpy(np.asarray(inverse, dtype=np.int64)).to(rows.device),
                      ids=uniq, admitted=np.ones(len(uniq), dtype=bool), slots=pos, step=self._step)

    @torch.no_grad()
    def update_rows(self, lookup: Lookup, grad: torch.Tensor) -> None:
        """Collect the gradient of ``lookup``'s rows (applied by the owners in :meth:`ShardedEmbeddings.finish`)."""
        grad = grad.detach().to("cpu", torch.float32)
        if self.grad is None and len(lookup.slots) == len(self.ids) and np.array_equal(
                lookup.slots, np.arange(len(self.ids))):
            self.grad = grad
            return
        if self.grad is None:
            self.grad = torch.zeros(len(self.ids), self.config.dim)
        self.grad.index_add_(0, torch.from_numpy(lookup.slots), grad)

    def apply_gradients(self, lookup: Lookup, grad: torch.Tensor | None = None) -> None:
        grad = lookup.rows.grad if grad is None else grad
        if grad is not None:
            self.update_rows(lookup, grad)

    #: announced upcoming batches are not forwarded to the owners' stores
    uses_window = False

    def announce(self, ids: Ids, ahead: int = 1) -> int:
        """A no-op (:attr:`uses_window` is False): no row noted."""
        return 0

    def assign(self, ids: Ids, weights: npt.ArrayLike | torch.Tensor) -> None:
        """Refused: the rows of a sharded table live on their owners."""
        raise StoreError(f"table {self.name!r} is sharded: its rows live on their owning ranks; assign rows to "
                         "the model before it is sharded")

    def weights(self, ids: Ids) -> np.ndarray:
        """Refused: the rows of a sharded table live on their owners."""
        raise StoreError(f"table {self.name!r} is sharded: its rows live on their owning ranks; read them from "
                         "each rank's local store (ShardedEmbeddings.local_stores())")

    def load(self, directory: str | os.PathLike, read: Callable[[Path], bytes] | None = None) -> None:
        """Refused: a sharded table's rows are restored shard by shard
        (:func:`~fbrapids.trainers.distributed.checkpoint.restore_sharded`)."""
        raise CheckpointError(f"table {self.name!r} is sharded: restore it with "
                              f"fbrapids.trainers.distributed.checkpoint.restore_sharded, not from {directory}")

    def prefetch(self, ids: Ids) -> int:
        """A no-op: rows come with the step's exchange."""
        return 0

    def prepare(self, ids: Ids) -> None:
        """A no-op: the next batch's ids are exchanged ahead by the ranks' own thread."""

    def end_step(self) -> None:
        self._step += 1

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.local.state()

    def stats(self) -> TableStats:
        return self.local.stats()

    @property
    def unseen_reads(self) -> int:
        return self.local.unseen_reads


@dataclass
class _TablePlan:
    """One table's part of a step on this rank (requester and owner sides)."""

    ids: np.ndarray  # distinct ids of the local batch, first-occurrence order
    order: np.ndarray  # positions in ``ids`` grouped by destination rank (stable)
    sent: np.ndarray  # [world] ids sent to each owner
    recv: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [world] ids received
    positions: list[np.ndarray] = field(default_factory=list)  # per source: positions in the owner lookup
    lookup: Lookup | None = None

    def owned(self) -> Lookup:
        """The owner's lookup of the ids routed to this rank (:meth:`ShardedEmbeddings.begin`'s stage 2)."""
        if self.lookup is None:
            raise StoreError("a sharded table's rows were used before their owner looked them up")
        return self.lookup


@dataclass
class StepPlan:
    """What :meth:`ShardedEmbeddings.begin` agreed with the other ranks."""

    rows: np.ndarray  # [world] rows of each rank's local batch
    done: np.ndarray  # [world] ranks out of data
    tables: list[_TablePlan]
    train: bool


@dataclass
class _Ids:
    """The outcome of a step's id exchange (:meth:`ShardedEmbeddings._route`)."""

    keys: list[np.ndarray]
    plans: list[_TablePlan]
    uniq_info: list[tuple[np.ndarray, np.ndarray]]
    counts: np.ndarray
    got: np.ndarray
    buf: np.ndarray | None = None


class _Prepared:
    """A step's id exchange running in a thread (:meth:`ShardedEmbeddings.prepare`)."""

    def __init__(self, owner: "ShardedEmbeddings", batch: Batch | None, ex: Exchange) -> None:
        self.batch = batch
        self._out: list[_Ids | BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(owner, ex), daemon=True, name="fbrapids-id-exchange")
        self._thread.start()

    def _run(self, owner: "ShardedEmbeddings", ex: Exchange) -> None:
        try:
            self._out.append(owner._route(self.batch, ex))
        except BaseException as exc:  # handed to the training thread by result()
            self._out.append(exc)

    def result(self) -> _Ids:
        self._thread.join()
        got = self._out[0]
        if isinstance(got, BaseException):
            raise got
        return got


class ShardedEmbeddings:
    """Every table of ``model`` sharded over the ranks of ``exchange`` (see the module docstring)."""

    def __init__(self, model: CTRModel, exchange: Exchange, buckets: BucketTable) -> None:
        if buckets.world != exchange.world:
            raise StoreError(f"bucket table for {buckets.world} ranks in a world of {exchange.world}")
        self.exchange, self.buckets = exchange, buckets
        self.collections: list[TieredEmbeddingBagCollection] = [c for _, c in model.collections()]
        self.keys: list[str] = []
        self.tables: list[ShardedTable] = []
        for cname, c in model.collections():
            for t in list(c.stores):
                store = c.stores[t]
                if isinstance(store, ShardedTable):
                    table = store
                elif isinstance(store, TieredEmbeddingStore):
                    table = ShardedTable(store)
                else:
                    raise StoreError(f"table {t!r}: a {type(store).__name__} cannot be sharded (a tiered store can)")
                c.stores[t] = table
                self.keys.append(f"{cname or 'root'}/{t}")
                self.tables.append(table)
        self._by_store = {id(t): k for k, t in enumerate(self.tables)}
        self.plan: StepPlan | None = None
        self.id_exchange: Exchange | None = None  # the prepared id exchanges' group (made at the first prepare)
        self.id_timeout = datetime.timedelta(seconds=120)
        self._pending: _Prepared | None = None
        self.steps = 0
        self.distinct_ids = 0  # distinct (table, id) pairs over the ranks' local batches, summed over steps

    def local_stores(self) -> dict[str, TieredEmbeddingStore]:
        """This rank's shards, keyed as ``model.stores()`` keys tables."""
        return {k: t.local for k, t in zip(self.keys, self.tables)}

    def _batch_keys(self, batch: Batch | None) -> list[np.ndarray]:
        """Per table, the ids the collections will look up, in the order they will."""
        per: list[list[np.ndarray]] = [[] for _ in self.tables]
        if batch is not None:
            for c in self.collections:
                for f in c.features:
                    if f in batch.sparse:
                        k = self._by_store[id(c.stores[c.table_of[f]])]
                        per[k].append(batch.sparse[f][0].detach().cpu().numpy())
        return [as_uint64_ids(np.concatenate(p)).ravel() if p else np.zeros(0, dtype=np.uint64) for p in per]

    def _route(self, batch: Batch | None, ex: Exchange, count_only: bool = False) -> _Ids:
        """Stage 1 of a step's lookup (route, owner lookup, exchange of rows, gather), which
        reads no table: this rank's distinct ids per table routed to the ranks owning them
        (the ``all_gather`` of counts and the ``all_to_all_single`` of (id, count) pairs)."""
        world, me = ex.world, ex.rank
        n_tables = len(self.tables)
        keys = self._batch_keys(None if count_only else batch)
        plans: list[_TablePlan] = []
        counts = np.zeros((world, n_tables), dtype=np.int64)  # [destination, table]
        uniq_info = []
        for k, kk in enumerate(keys):
            uniq, inverse, occ = first_occurrence_unique(kk)
            owner = self.buckets.owner_of(uniq)
            order = np.argsort(owner, kind="stable")
            sent = np.bincount(owner, minlength=world).astype(np.int64)
            counts[:, k] = sent
            plans.append(_TablePlan(uniq, order, sent))
            uniq_info.append((inverse, occ))
        n_rows = 0 if batch is None else len(batch)
        row = np.concatenate([[int(batch is None), n_rows], counts.ravel()])
        got = ex.all_gather_counts(row)  # [source, 2 + world * tables]
        ids = _Ids(keys, plans, uniq_info, counts, got)
        if got[:, 0].astype(bool).all() or count_only:
            return ids
        allc = got[:, 2:].reshape(world, world, n_tables)  # [source, destination, table]
        for k, p in enumerate(plans):
            p.recv = allc[:, me, k].copy()
        # 1. (id, count) pairs to their owners, every table in one buffer
        send = []
        for d in range(world):
            for k, p in enumerate(plans):
                a = int(p.sent[:d].sum())
                sel = p.order[a : a + int(p.sent[d])]
                send.append(p.ids[sel].view(np.int64))
                send.append(uniq_info[k][1][sel].astype(np.int64))
        send_splits = [2 * int(counts[d].sum()) for d in range(world)]
        recv_splits = [2 * int(allc[s, me].sum()) for s in range(world)]
        ids.buf = ex.all_to_all(torch.from_numpy(np.concatenate(send) if send else np.zeros(0, np.int64)),
                                send_splits, recv_splits).numpy()
        return ids

    def prepare(self, batch: Batch | None) -> None:
        """Start the next step's id exchange (:meth:`_route`) in a thread, on a process
        group of its own, while this step computes; the next :meth:`begin` waits for it.
        Every rank calls it at the same point of each step (TorchRec's pipelining)."""
        if self.id_exchange is None:
            self.id_exchange = Exchange(id_group(self.exchange.group, self.id_timeout), shares=self.exchange,
                                        seconds_key="seconds_overlapped")
        self._pending = _Prepared(self, batch, self.id_exchange)

    def begin(self, batch: Batch | None, train: bool = True, count_only: bool = False) -> StepPlan | None:
        """Agree on the step with every rank and fetch this rank's rows (see the module
        docstring); None when every rank is out of data.  ``batch`` None: this rank is out
        of data.  ``count_only``: only the ``all_gather`` (a step skipped on resume).  After
        :meth:`prepare` of this batch, its id exchange is already under way or done."""
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending.batch is not batch:
                raise StoreError("begin() of another batch than the one prepare() announced")
            t0 = time.perf_counter()
            ids = pending.result()
            self.exchange.stats["waited_for_ids_s"] = self.exchange.stats.get("waited_for_ids_s", 0.0) + (
                time.perf_counter() - t0)
        else:
            ids = self._route(batch, self.exchange, count_only)  # stage 1: the ids to their owners
        plans, got = ids.plans, ids.got
        done, rows = got[:, 0].astype(bool), got[:, 1]
        if done.all():
            self.plan = None
            return None
        if count_only:
            return StepPlan(rows, done, [], train)
        self.distinct_ids += int(got[:, 2:].sum())
        self._lookup_owned(ids, train)  # the owner: one lookup per table of what it received
        rbuf = self._exchange_rows(ids)  # the rows back to the requesters
        if not train:  # nothing will be applied: the owners' lookups end now
            for table in self.tables:
                table.local.end_step()
        self._gather(ids, rbuf)  # the requester: each table's rows in its ids' order
        self.plan = StepPlan(rows, done, plans, train)
        self.steps += 1
        return self.plan

    def _lookup_owned(self, ids: _Ids, train: bool) -> None:
        """Stage 2 (the owner): one lookup per table of the union of the ids every rank
        routed here (with their counts), and where each requester's ids sit in its rows."""
        world = self.exchange.world
        assert ids.buf is not None  # (stage 1 received it)
        at = 0
        got_ids: list[list[np.ndarray]] = [[] for _ in ids.plans]
        got_occ: list[list[np.ndarray]] = [[] for _ in ids.plans]
        for s in range(world):
            for k, p in enumerate(ids.plans):
                n = int(p.recv[s])
                got_ids[k].append(ids.buf[at : at + n].view(np.uint64))
                got_occ[k].append(ids.buf[at + n : at + 2 * n])
                at += 2 * n
        occs = [np.concatenate(o) for o in got_occ]
        keys = [np.repeat(np.concatenate(i), o) for i, o in zip(got_ids, occs)]
        stores = [table.local for table in self.tables]
        if on_host(stores) and len({s.config.dim for s in stores}) == 1:  # every table's pass in one C call
            lookups, _ = lookup_together(stores, keys, train)  # (one process's path: the same rows, bit for bit)
        else:
            lookups = [s.lookup(k, requires_grad=train, leaf=False) for s, k in zip(stores, keys)]
        for k, (p, lk, occ_k) in enumerate(zip(ids.plans, lookups, occs)):
            inv = lk.inverse.cpu().numpy()
            starts = np.cumsum(occ_k) - occ_k
            pos = inv[starts] if len(starts) else np.zeros(0, dtype=np.int64)
            bounds = np.concatenate([[0], np.cumsum(p.recv)])
            p.positions = [pos[bounds[s] : bounds[s + 1]] for s in range(world)]
            p.lookup = lk

    def _exchange_rows(self, ids: _Ids) -> torch.Tensor:
        """Stage 3: the owners' rows back to the ranks that asked, every table in one
        ``all_to_all``; returns what this rank received."""
        ex, world, me = self.exchange, self.exchange.world, self.exchange.rank
        n_tables = len(self.tables)
        allc = ids.got[:, 2:].reshape(world, world, n_tables)  # [source, destination, table]
        out = []
        for s in range(world):
            for k, p in enumerate(ids.plans):
                rows = p.owned().rows
                out.append(rows.detach()[torch.from_numpy(p.positions[s]).to(rows.device)]
                           .to("cpu", torch.float32).reshape(-1))
        dims = [t.config.dim for t in self.tables]
        send_splits = [sum(int(allc[s, me, k]) * dims[k] for k in range(n_tables)) for s in range(world)]
        recv_splits = [sum(int(ids.counts[d, k]) * dims[k] for k in range(n_tables)) for d in range(world)]
        return ex.all_to_all(torch.cat(out) if out else torch.zeros(0), send_splits, recv_splits)

    def _gather(self, ids: _Ids, rbuf: torch.Tensor) -> None:
        """Stage 4 (the requester): each table's received rows put in its distinct ids'
        order and installed for the collections' lookups of this step."""
        dims = [t.config.dim for t in self.tables]
        at = 0
        filled = [torch.empty(len(p.ids), d) for p, d in zip(ids.plans, dims)]
        for d in range(self.exchange.world):
            for k, p in enumerate(ids.plans):
                n = int(p.sent[d])
                a = int(p.sent[:d].sum())
                filled[k][torch.from_numpy(p.order[a : a + n])] = rbuf[at : at + n * dims[k]].view(n, dims[k])
                at += n * dims[k]
        dev = self.tables[0].device if self.tables else torch.device("cpu")
        for k, (p, table) in enumerate(zip(ids.plans, self.tables)):
            table.install(ids.keys[k], p.ids, ids.uniq_info[k][0], filled[k].to(dev))

    @torch.no_grad()
    def finish(self) -> None:
        """Send the step's row gradients to their owners, who sum them over the ranks and
        apply the sparse optimizer once; then end the owners' step."""
        plan, self.plan = self.plan, None
        if plan is None or not plan.train:
            return
        ex, world = self.exchange, self.exchange.world
        dims = [t.config.dim for t in self.tables]
        out = []
        for d in range(world):
            for k, (p, table) in enumerate(zip(plan.tables, self.tables)):
                a = int(p.sent[:d].sum())
                sel = torch.from_numpy(p.order[a : a + int(p.sent[d])])
                g = table.grad if table.grad is not None else torch.zeros(len(p.ids), dims[k])
                g = g[sel].reshape(-1)
                # each rank's loss is its share of the union's mean times W (DDP averages the dense
                # gradients over the ranks): the rows' gradients are averaged the same way
                out.append(g / world if world > 1 else g)
        send_splits = [sum(int(p.sent[d]) * dims[k] for k, p in enumerate(plan.tables)) for d in range(world)]
        recv_splits = [sum(int(p.recv[s]) * dims[k] for k, p in enumerate(plan.tables)) for s in range(world)]
        gbuf = ex.all_to_all(torch.cat(out) if out else torch.zeros(0), send_splits, recv_splits)
        at = 0
        parts: list[list[torch.Tensor]] = [[] for _ in plan.tables]
        for s in range(world):
            for k, p in enumerate(plan.tables):
                n = int(p.recv[s])
                parts[k].append(gbuf[at : at + n * dims[k]].view(n, dims[k]))
                at += n * dims[k]
        updates = []
        for k, (p, table) in enumerate(zip(plan.tables, self.tables)):
            lk = p.owned()
            acc = torch.zeros(len(lk.ids), dims[k])
            seen = np.zeros(len(lk.ids), dtype=np.bool_)
            for s in range(world):  # rank order: the same sum on every run
                pos, g = p.positions[s], parts[k][s]
                if not len(pos):
                    continue
                first = ~seen[pos]
                if first.all():
                    acc[torch.from_numpy(pos)] = g
                else:
                    fi = torch.from_numpy(np.flatnonzero(first))
                    acc[torch.from_numpy(pos[first])] = g[fi]
                    rest = torch.from_numpy(np.flatnonzero(~first))
                    acc[torch.from_numpy(pos[~first])] += g[rest]
                seen[pos] = True
            if len(lk.ids):
                table.local.check_current(lk)
                updates.append((table.local, lk, acc.to(table.local.device)))
        update_each(updates)  # the row-wise Adagrad of CPU caches in one C call (one process's), others table by table
        for table in self.tables:
            table.local.end_step()
            table.grad = None

    def abandon(self) -> None:
        """End a step whose update is dropped: the owners end their step without applying."""
        plan, self.plan = self.plan, None
        if plan is not None and plan.train:
            for table in self.tables:
                table.local.end_step()
                table.grad = None


_ID_GROUPS: dict[tuple[int, ...], dist.ProcessGroup] = {}


def id_group(group: dist.ProcessGroup | None, timeout: datetime.timedelta) -> dist.ProcessGroup:
    """The gloo group on which the ranks of ``group`` (default: the world) exchange the
    next step's ids: made once per set of ranks and process group world, by its members
    only (a subgroup's trainer is built on its ranks alone)."""
    import torch.distributed as dist

    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
    got = _ID_GROUPS.get(ranks)
    if got is not None:
        try:
            dist.get_process_group_ranks(got)  # still of this world (not destroyed since)
            return got
        except (ValueError, KeyError, RuntimeError):
            pass
    _ID_GROUPS[ranks] = dist.new_group(list(ranks), backend="gloo", timeout=timeout, use_local_synchronization=True)
    return _ID_GROUPS[ranks]


def shard_model(model: CTRModel, exchange: Exchange, buckets: BucketTable | None = None) -> ShardedEmbeddings:
    """Shard every table of ``model`` over ``exchange``'s ranks (in place); returns the
    coordinator of the steps.  The stores the model holds become this rank's shards."""
    return ShardedEmbeddings(model, exchange, buckets or BucketTable.default(exchange.world))


def ssd_folders(model: CTRModel) -> list[str]:
    """The resolved SSD folders of ``model``'s tables (for the start-up check that ranks do not share one)."""
    out = []
    for s in model.stores().values():
        local = s.local if isinstance(s, ShardedTable) else s
        if local.config.ssd_dir is not None:
            out.append(str((Path(local.config.ssd_dir) / local.name).resolve()))
    return out
