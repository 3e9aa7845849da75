"""A trial's arms side by side, sharing what they can: shared tables, batched dense parts.

A trial trains M models of one architecture on the same batches (arms x seeds,
:mod:`fbrapids.trainers.arms`).  Trained one after another, each looks up the same ids in
tables of the same shape, each in its own store, and runs its own small matmuls.  Here:

* **Shared tables.**  For every table, the arms that read the same ids (their views say so:
  :func:`sources`) share **one store whose row holds each arm's vector**
  (:class:`~fbrapids.trainers.sparse.StoreConfig` ``slices``): one id lookup, one tier
  movement and one eviction decision for all of them.  Each slice is initialised as that
  arm's own table would be (its seed), each arm pools its slice, and row-wise Adagrad keeps
  its accumulator per slice, so each arm's rows move as in a table of its own.  Arms that
  read other ids in a table (a candidate's slot: its values, the placebo, a shuffled copy)
  get a store of their own for it.
* **Batched dense parts.**  The arms' dense parameters are held stacked while they train
  (:class:`~fbrapids.trainers.models.trial_parts.StackedParameters`: one ``[M, out, in]``
  tensor per weight, each model's a view of its slice, a chunk of arms reading a slice)
  and every layer runs once for all arms (``baddbmm``); parameter-free parts (DLRM's dot
  interactions) run on the arms' rows folded into one batch.  A model class's ``batched_logits`` is its batched forward
  (DLRM, Wide&Deep and DeepFM have one); a model without one (DIN, the logistic regression)
  trains arm after arm
  (:class:`~fbrapids.trainers.strategy.Arms`), as before.
* **Independent models.**  Each arm's loss is its own mean over the batch and the losses
  are summed, so each arm's gradient is its own; the dense optimizer (Adam) is elementwise;
  the sparse one is per slice.  An arm's parameters after a step equal those of its model
  trained alone, to float rounding (``tests/trainers/test_arms_batched.py``).

Example (three seeds of one DLRM, their table one store of three slices):
    >>> from fbrapids.trainers.fit import fit
    >>> from fbrapids.trainers.models import DLRM
    >>> from fbrapids.trainers.sparse import StoreConfig
    >>> g = torch.Generator().manual_seed(0)
    >>> batches = [Batch(torch.rand(16, 1, generator=g), torch.randint(0, 2, (16,), generator=g).float(),
    ...                  {"ad": (torch.randint(0, 9, (16,), generator=g), torch.arange(16))}) for _ in range(4)]
    >>> models = []
    >>> for s in (0, 1, 2):
    ...     _ = torch.manual_seed(s)
    ...     models.append(DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[8], top_mlp=[8],
    ...                        store=StoreConfig(cache_rows=64, seed=s)))
    >>> arms = BatchedArms(models)
    >>> fit(arms, batches, progress=False).steps, [g.store.config.slices for g in arms.tables.groups]
    (4, [3])
    >>> arms.predict(next(iter(batches))).shape
    torch.Size([3, 16])
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from fbrapids.errors import ArgumentError, NonFiniteError
from fbrapids.trainers.batch import Batch, piece_bounds
from fbrapids.trainers.calibration import HeldBack
from fbrapids.trainers.chunk_threads import map_on_cores
from fbrapids.trainers.fit_config import FitConfig, FitResult
from fbrapids.trainers.sparse.arms_bags import MAX_DIM as MAX_BAG_DIM
from fbrapids.trainers.sparse.store import prepare_together
from fbrapids.trainers.sparse.together import lookup_together, on_host, update_each
from fbrapids.trainers.strategy import Item, Strategy, arms_start, lookahead_items, prepare_before_lookup

if TYPE_CHECKING:  # (annotations only: the models and the store are imported where used)
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.models.trial_parts import StackedParameters
    from fbrapids.trainers.sparse import Lookup, StoreConfig, TieredEmbeddingStore
    from fbrapids.trainers.sparse.arms_bags import BagEntry

log = logging.getLogger(__name__)

View = Callable[[Batch], Batch]

#: the rows a chunk of arms' dense parts computes at once (:meth:`BatchedArms.chunks`): eight
#: arms of a 2,048-row batch, measured fastest on a 2-core CPU once the bags and the dots ran
#: in C (trials at 200k rows, alternated: K = 3 with A/A, 9 arms, 10.5-10.7 s against
#: 11.1-11.7 s in chunks of three arms, the size before, and 10.5-10.6 s all at once; a pass of
#: 22 arms 34.2-34.9 s against 38.8 s in threes and 42.6 s all at once; three arms' batched
#: matmuls also split badly over two threads)
CHUNK_ROWS = 16384


def arm_chunks(arms: int, rows: int, workers: int = 1) -> list[slice]:
    """``arms`` arms in as few groups of at most :data:`CHUNK_ROWS` rows (``rows`` a batch's)
    as hold them, of sizes that differ by one at most: each group's dense part runs as one
    computation (one group of every arm costs more on a CPU: its temporaries leave the
    caches).  Even groups, not full ones and a remainder (``numpy.array_split``'s sizes): a
    group of one to three arms splits its batched matmuls badly over two threads.  Measured on
    the DLRM head's forward and backward of 2,048 rows (2-core AMD EPYC, a noisy machine, the
    two alternated 14 times, median / best): 11 arms in 6 + 5 122.5 / 95.3 ms a step against
    138.2 / 104.0 ms in 8 + 3; 9 arms in 5 + 4 84.5 / 69.8 ms against 94.7 / 69.0 ms in 8 + 1;
    22 arms in 8 + 7 + 7 no different from 8 + 8 + 6.  Each arm's numbers are its own in any
    grouping, to float rounding (the 10-candidate trial's report after the change from full
    groups: one candidate's logloss moved in the 11th digit; every delta, interval and verdict
    the same bits).

    ``workers`` > 1: the groups run side by side, one a thread
    (:func:`~fbrapids.trainers.chunk_threads.map_on_cores`), so their number is rounded up to a
    multiple of the threads the arms can keep busy (``min(workers, arms)``), each thread taking
    as many groups of about one size: 22 arms on two cores in 6 + 6 + 5 + 5 rather than
    8 + 7 + 7 (two groups on one thread, one on the other), 6 arms in 3 + 3.

    Example:
        >>> [(c.start, c.stop) for c in arm_chunks(11, 2048)], len(arm_chunks(22, 2048)), arm_chunks(3, 2048)
        ([(0, 6), (6, 11)], 3, [slice(0, 3, None)])
        >>> [c.stop - c.start for c in arm_chunks(22, 2048)], [c.stop - c.start for c in arm_chunks(22, 2048, 2)]
        ([8, 7, 7], [6, 6, 5, 5])
        >>> [c.stop - c.start for c in arm_chunks(6, 2048, 2)], len(arm_chunks(1, 2048, 2)), len(arm_chunks(3, 1 << 20, 8))
        ([3, 3], 1, 3)
    """
    per = max(1, CHUNK_ROWS // max(1, rows))
    groups = -(-arms // per)
    busy = max(1, min(int(workers), arms))
    groups = min(arms, -(-groups // busy) * busy)
    return [slice(*piece_bounds(arms, k, groups)) for k in range(groups)]


def sources(view: View | None, features: Sequence[str], arm: int) -> dict[str, str]:
    """What an arm reads in each sparse input, as a key: arms with equal keys for a table read
    the same ids there and share its store.  A view says it with ``view.sources(features)``
    (:class:`fbrapids.app.trial_training.ArmView`: the stream's feature, ``"placebo"``, or a
    key of its own for a shuffled copy); no view reads the stream as it is; a view that does
    not say reads inputs of its own.

    Example:
        >>> sources(None, ["a", "b"], 0), sources(lambda b: b, ["a"], 3)
        ({'a': 'a', 'b': 'b'}, {'a': 'a@arm3'})
    """
    if view is None:
        return {f: f for f in features}
    said = getattr(view, "sources", None)
    return dict(said(features)) if callable(said) else {f: f"{f}@arm{arm}" for f in features}


@dataclass
class _Group:
    """One shared store: table ``table`` of the collection ``collection``, read (features
    ``features``) by the arms ``members``, one slice each, in that order."""

    collection: str
    table: str
    features: list[str]
    members: list[int]
    store: TieredEmbeddingStore
    lookup: Lookup | None = None


#: the share of the shared stores' sparse update run on the training thread while the
#: background thread runs the rest (:func:`~fbrapids.trainers.sparse.together.update_each`):
#: a row holds every arm's slice, so the update outlasts the dense step it overlapped alone
#: (measured on the 10-candidate trial, 2 cores: the training thread's waits for the stores
#: 4.0-4.1 s at 0, 1.3-1.4 s at 0.35, 1.0-1.3 s at 0.5)
INLINE_UPDATE_SHARE = 0.35


class SharedTables:
    """The arms' tables as shared stores (module docstring): built from the M models (each
    the model its arm would train alone; their own tables are replaced by empty ones of one
    row, the shared stores holding their rows) and their views; per batch :meth:`pooled`
    gives every arm's pooled bags of every collection, ``[M, B, F, dim]``."""

    def __init__(self, models: Sequence[CTRModel], views: Sequence[View | None]) -> None:
        from fbrapids.trainers.sparse import TieredEmbeddingStore

        self.m = len(models)
        self.collections = [name for name, _ in models[0].collections()]
        self.groups: list[_Group] = []
        for cname in self.collections:
            cols = [dict(m.collections())[cname] for m in models]
            feats = cols[0].features
            keys = [sources(v, feats, k) for k, v in enumerate(views)]
            by_table: dict[str, list[str]] = {}
            for f in feats:
                by_table.setdefault(cols[0].table_of[f], []).append(f)
            for table, fs in by_table.items():
                groups: dict[tuple[str, ...], list[int]] = {}
                for k in range(self.m):
                    groups.setdefault(tuple(keys[k][f] for f in fs), []).append(k)
                for members in groups.values():
                    cfg = _shared_config([cols[k].stores[table].config for k in members], table)
                    store = TieredEmbeddingStore(cfg, name=f"{cname}.{table}.{members[0]}", device="cpu")
                    self.groups.append(_Group(cname, table, fs, members, store))
                for col in cols:  # each arm's rows live in the shared store: its own is left empty and small
                    own = col.stores[table]
                    col.stores[table] = TieredEmbeddingStore(own.config.with_(cache_rows=1, host_rows=None, ssd_dir=None),
                                                             name=own.name, device=own.device)
        self.device = torch.device("cpu")  # the stores' caches (:meth:`to`)
        self._stacked: list[tuple[TieredEmbeddingStore, Lookup]] = []  # the lookups made together
        self._entries: dict[str, list[tuple[_Group, BagEntry]]] = {}  # each collection's bags pooled in C, by store
        self._autograd: dict[str, torch.Tensor] = {}  # or through autograd: each collection's [M, B, F, dim]
        self._split_groups()
        self.mode = {cname: dict(models[0].collections())[cname].mode for cname in self.collections}
        self.features = {cname: dict(models[0].collections())[cname].features for cname in self.collections}

    def pooled(self, inputs: Sequence[Batch], train: bool, chunks: Sequence[slice]) -> list[dict[str, torch.Tensor]]:
        """Each chunk of arms' pooled bags per collection ``[arms, B, F, dim]`` (features in
        the collection's order) from the arms' views of one batch, one lookup per shared store
        (stores in host memory of one width: every lookup pass in one C call, their rows one
        leaf, :func:`~fbrapids.trainers.sparse.together.lookup_together`).  Stores in host
        memory pooling by sum or mean: every bag of every arm in one C pass, written into its
        chunk's block, as the heads take them
        (:func:`~fbrapids.trainers.sparse.arms_bags.arms_bags`); else ``embedding_bag`` per
        feature and store, through autograd.  The gradient goes back through :meth:`backward`."""
        host = self._pools_in_c()
        self._look_up(inputs, train, gather=not host)  # the C pass reads booked rows where they lie
        out = self._pool_host(inputs, train, chunks) if host else self._pool_torch(inputs, train, chunks)
        if not train:
            for g in self.groups:
                g.store.end_step()
                g.lookup = None
            self._stacked = []
        return out

    def _pools_in_c(self) -> bool:
        """Whether :meth:`pooled` runs the C pass: every store in host memory, pooling by sum or
        mean, slices no wider than the pass holds in registers."""
        return not self._alone and all(mode in ("sum", "mean") for mode in self.mode.values()) \
            and all(g.store.config.dim // len(g.members) <= MAX_BAG_DIM for g in self.groups)

    def _look_up(self, inputs: Sequence[Batch], train: bool, gather: bool = True) -> None:
        """Every shared store's lookup of the batch (``g.lookup``); ``gather=False``: rows a
        prepare booked are left where they lie in the cache table (``lookup.gathered``)."""
        keys = self._keys(inputs)
        self._stacked = []
        self._entries = {}
        for idx in self._together:  # groups of one width in host memory: their passes in one call
            lookups, _ = lookup_together([self.groups[i].store for i in idx], [keys[i] for i in idx], train, gather)
            for i, lk in zip(idx, lookups):  # each store's rows a leaf of its own (one buffer under them all):
                self.groups[i].lookup = lk  # a gradient lands in its own rows only, not in a copy of the whole
                self._stacked.append((self.groups[i].store, lk))
        for i in self._alone:
            self.groups[i].lookup = self.groups[i].store.lookup(keys[i], requires_grad=train)

    def _pool_host(self, inputs: Sequence[Batch], train: bool, chunks: Sequence[slice]) -> list[dict[str, torch.Tensor]]:
        """:meth:`pooled` in C."""
        from fbrapids.trainers.sparse.arms_bags import BagEntry, arms_bags

        out: list[dict[str, torch.Tensor]] = [{} for _ in chunks]
        for cname in self.collections:
            feats = self.features[cname]
            place = {f: k for k, f in enumerate(feats)}
            entries, dim = [], 0
            for g in self.groups:
                if g.collection != cname:
                    continue
                assert g.lookup is not None
                sparse, start = inputs[g.members[0]].sparse, 0
                dim = g.store.config.dim // len(g.members)
                lk, table = g.lookup, g.store.tiers.cache.table
                if lk.gathered:
                    rows, rowmap, table_width = lk.rows.detach(), None, 0
                else:  # left in the cache table by the lookup: read there through its places, no copy
                    assert table is not None  # (only a CPU cache's lookup leaves its rows in place)
                    rows, rowmap, table_width = torch.from_numpy(table), lk.places, g.store.config.dim
                for f in g.features:
                    n = len(sparse[f][0])
                    entries.append((g, BagEntry(rows, lk.inverse[start : start + n], sparse[f][1], place[f], g.members,
                                                rowmap=rowmap, table_width=table_width)))
                    start += n
            nbags = len(inputs[0].sparse[feats[0]][1])
            arms: list[torch.Tensor | None] = []
            for k, c in enumerate(chunks):
                out[k][cname] = torch.empty(_arms_in(c, self.m), nbags, len(feats), dim)
                arms += list(out[k][cname])
            arms_bags([e for _, e in entries], arms, mean=self.mode[cname] == "mean")
            if train:
                self._entries[cname] = entries
        return out

    def _pool_torch(self, inputs: Sequence[Batch], train: bool, chunks: Sequence[slice]) -> list[dict[str, torch.Tensor]]:
        """:meth:`pooled` through ``embedding_bag`` per feature and store, and autograd."""
        out: dict[str, dict[str, list[tuple[list[int], torch.Tensor]]]] = {c: {} for c in self.collections}
        for _, lk in self._stacked:
            assert lk.gathered  # (its lookup gathered the rows: gather=True off the C path)
            lk.rows.requires_grad_(train)
        for g in self.groups:
            assert g.lookup is not None
            sparse = inputs[g.members[0]].sparse
            rows, inverse, start = g.lookup.rows, g.lookup.inverse, 0
            for f in g.features:
                n = len(sparse[f][0])
                bags = torch.nn.functional.embedding_bag(inverse[start:start + n], rows,
                                                         sparse[f][1].to(rows.device), mode=self.mode[g.collection])
                start += n
                out[g.collection].setdefault(f, []).append((g.members, bags))  # [B, members * dim]
        # each feature's bags side by side, [B, F, M * dim] (a row's copy is one run of memory),
        # then seen arm first, [M, B, F, dim], without a copy: the arms' heads copy their part once
        whole = {c: _arms_first(torch.stack([_in_arm_order(parts[f], self.m) for f in self.features[c]], dim=1), self.m)
                 for c, parts in out.items()}
        self._autograd = whole if train else {}  # (kept for the backward only)
        return [{c: p[ch] for c, p in whole.items()} for ch in chunks]

    def backward(self, grads: dict[str, list[torch.Tensor | None]], chunks: Sequence[slice]) -> None:
        """The gradient of :meth:`pooled`'s bags into the shared stores' rows (``rows.grad``):
        ``grads[c]`` the gradient of each chunk's bags of collection ``c`` (None: no loss
        reached that chunk)."""
        from fbrapids.trainers.sparse.arms_bags import arms_bags_backward

        for cname, parts in grads.items():
            if cname not in self._entries:  # pooled through autograd
                whole = self._autograd[cname]
                given = [g if g is not None else torch.zeros_like(whole[c]) for g, c in zip(parts, chunks)]
                whole.backward(given[0] if len(given) == 1 else torch.cat(given))
                continue
            per_arm: list[torch.Tensor | None] = []
            for g, c in zip(parts, chunks):
                per_arm += [None] * _arms_in(c, self.m) if g is None else list(g.contiguous())
            for group, e in self._entries[cname]:
                lk = group.lookup
                assert lk is not None
                if lk.rows.grad is None:  # one gradient per store, written by the C pass (from zero, row by row)
                    lk.rows.grad = torch.empty_like(lk.rows)
                e.grad = lk.rows.grad
            arms_bags_backward([e for _, e in self._entries[cname]], per_arm, mean=self.mode[cname] == "mean")

    def _keys(self, inputs: Sequence[Batch]) -> list[torch.Tensor]:
        """Each shared store's ids of a batch: its features' values (its first arm's view), side by side."""
        keys = []
        for g in self.groups:
            vals = [inputs[g.members[0]].sparse[f][0] for f in g.features]
            keys.append(torch.cat(vals) if len(vals) > 1 else vals[0])
        return keys

    def _split_groups(self) -> None:
        """Which shared stores look up together (host memory, grouped by width) and which alone."""
        by_dim: dict[int, list[int]] = {}
        self._alone = []
        for i, g in enumerate(self.groups):
            if on_host([g.store]):
                by_dim.setdefault(g.store.config.dim, []).append(i)
            else:
                self._alone.append(i)
        self._together = list(by_dim.values())

    def apply_gradients(self) -> None:
        """Each shared store's sparse step on its rows' gradient (every arm's slice): those
        looked up together in one C call on the stores' background thread, about
        :data:`INLINE_UPDATE_SHARE` of it on this thread meanwhile
        (:func:`~fbrapids.trainers.sparse.together.update_each`), then each store's step ends."""
        parts = [(store, lk, lk.rows.grad) for store, lk in self._stacked if lk.rows.grad is not None]
        if parts:
            update_each(parts, background=True, inline_share=INLINE_UPDATE_SHARE)
        self._stacked = []
        for i in self._alone:
            g = self.groups[i]
            if g.lookup is not None:
                g.store.apply_gradients(g.lookup)
        for g in self.groups:
            if g.lookup is not None:
                g.store.end_step()
                g.lookup = None

    def to(self, device: torch.device) -> None:
        """Every shared store's cache on ``device`` (the arms' models')."""
        for g in self.groups:
            g.store.to(device)
        self.device = device
        self._split_groups()

    def end_step(self) -> None:
        """End every shared store's step without an update (a skipped batch)."""
        self._stacked = []
        for g in self.groups:
            if g.lookup is not None:
                g.store.end_step()
                g.lookup = None

    @property
    def prepares_two_deep(self) -> bool:
        """Whether every shared store's prepare may go two deep
        (:attr:`~fbrapids.trainers.sparse.TieredEmbeddingStore.prepares_two_deep`)."""
        return all(g.store.prepares_two_deep for g in self.groups)

    def prepared_next(self) -> bool:
        """Whether every shared store has a prepare pending for its next lookup."""
        return all(g.store.prepared_next() for g in self.groups)

    def prepare(self, inputs: Sequence[Batch]) -> None:
        """Find the next batch's rows in the stores' background thread while this one trains."""
        prepare_together([g.store for g in self.groups], self._keys(inputs))  # one job of the background thread


def _arms_in(chunk: slice, m: int) -> int:
    """How many of ``m`` arms ``chunk`` holds."""
    return len(range(*chunk.indices(m)))


def _in_arm_order(parts: list[tuple[list[int], torch.Tensor]], m: int) -> torch.Tensor:
    """``[B, M * dim]`` from the groups' ``[B, members * dim]``, the arms in order (one group
    of every arm in order: itself, no copy)."""
    if len(parts) == 1 and parts[0][0] == list(range(m)):
        return parts[0][1]
    order = [k for members, _ in parts for k in members]
    side = torch.cat([p for _, p in parts], dim=1)
    rows = side.view(len(side), m, -1)
    return rows.index_select(1, torch.tensor(np.argsort(order), device=side.device)).reshape(len(side), -1)


def _arms_first(wide: torch.Tensor, m: int) -> torch.Tensor:
    """``[M, B, F, dim]`` viewing ``wide`` ``[B, F, M * dim]``."""
    b, f, width = wide.shape
    return wide.view(b, f, m, width // m).permute(2, 0, 1, 3)


def _shared_config(configs: Sequence[StoreConfig], table: str) -> StoreConfig:
    """One store config for the arms sharing ``table``: their own, one slice each (its seed),
    ``dim`` their total width.  Their configs must differ in the seed alone (and the SSD
    directory, which becomes the first arm's)."""
    first = configs[0]
    plain = [c.with_(seed=0, ssd_dir=first.ssd_dir) for c in configs]
    if any(p != plain[0] for p in plain):
        raise ArgumentError(f"arms sharing table {table!r}: their store configs differ beyond the seed")
    if first.slices != 1:
        raise ArgumentError(f"arms sharing table {table!r}: a sliced table is not an arm's own")
    return first.with_(dim=first.dim * len(configs), slices=len(configs), slice_seeds=tuple(c.seed for c in configs))


# -- batched dense parts ---------------------------------------------------------------------
def batched_head(models: Sequence[CTRModel]) -> Callable[..., torch.Tensor] | None:
    """The batched forward of ``models`` (their class's ``batched_logits``,
    :attr:`~fbrapids.trainers.models.base.CTRModel.batched_logits`) when they are of one
    class that has one, the same shapes of every parameter and the same tables; else None
    (they train arm after arm).

    Example:
        >>> from fbrapids.trainers.models import DLRM
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> a, b = (DLRM(1, ["x"], embedding_dim=2, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=8))
        ...         for _ in range(2))
        >>> batched_head([a, b]) is DLRM.batched_logits, batched_head([a, DLRM(2, ["x"], embedding_dim=2,
        ...     bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=8))])
        (True, None)
    """
    from fbrapids.trainers.models.base import batched_logits_of

    cls = type(models[0])
    head = batched_logits_of(cls)
    if head is None or any(type(m) is not cls for m in models):
        return None
    shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in models]
    tables = [{k: (s.config.dim, s.config.slices) for k, s in m.stores().items()} for m in models]
    if any(s != shapes[0] for s in shapes) or any(t != tables[0] for t in tables):
        return None
    return head


class BatchedArms(Strategy):
    """``fit``'s strategy for a trial's arms side by side (module docstring):
    ``models`` (one architecture with a batched head, :func:`batched_head`), each read
    through ``views[k]`` (None: the batch itself).  Each step: every arm's view of the batch,
    one lookup per shared store, the arms' dense parts batched, each arm's loss (summed),
    one backward, the dense optimizer over the arms' stacked parameters (Adam: elementwise,
    so each arm's own), each shared store's sparse step.  No checkpoints, no calibration: a
    trial keeps finished seeds (:mod:`fbrapids.app.trial_workdir`), not steps.  A NaN / inf
    loss names the arm."""

    name = "batched arms"

    def __init__(self, models: Sequence[CTRModel], views: Sequence[View | None] | None = None) -> None:
        self.models = list(models)
        self.views = list(views) if views is not None else [None] * len(self.models)
        if len(self.views) != len(self.models):
            raise ArgumentError(f"arms: {len(self.models)} models but {len(self.views)} views")
        head = batched_head(self.models)
        if head is None:
            raise ArgumentError(f"BatchedArms: no batched form of these {len(self.models)} models (one class "
                                "with a batched_logits, the same shapes); train them with Arms")
        self.head = head
        self.tables = SharedTables(self.models, self.views)
        self.optimizer: torch.optim.Optimizer | None = None
        self.stacked: StackedParameters | None = None  # the arms' parameters while a session trains them
        self.nan, self.prefetch = "error", True
        self.result: FitResult | None = None
        self._viewed: tuple[Batch, list[Batch]] | None = None

    def inputs(self, batch: Batch) -> list[Batch]:
        """Every arm's view of ``batch``, made once per batch (a view that shuffles draws its
        permutation once: the lookahead's prefetch and the step read the same)."""
        if self._viewed is not None and self._viewed[0] is batch:
            return self._viewed[1]
        out = [batch if v is None else v(batch) for v in self.views]
        self._viewed = (batch, out)
        return out

    def threads(self) -> int:
        """The threads the chunks' dense parts run on side by side: torch's intra-op count
        where the arms compute on the CPU, one elsewhere (a device's kernels queue on one
        stream)."""
        return torch.get_num_threads() if self.tables.device.type == "cpu" else 1

    def chunks(self, rows: int) -> list[slice]:
        """The arms in groups of about :data:`CHUNK_ROWS` rows (``rows`` a batch's), as
        :func:`arm_chunks` makes them for :meth:`threads`."""
        return arm_chunks(len(self.models), rows, self.threads())

    def logits(self, batch: Batch, train: bool) -> torch.Tensor:
        """Every arm's logits ``[M, B]`` on ``batch`` (its view of it), read-only."""
        inputs = self.inputs(batch)
        dense = torch.stack([b.dense for b in inputs]).to(self.tables.device, torch.float32)
        chunks = self.chunks(len(batch))
        pooled = self.tables.pooled(inputs, train, chunks)

        def head(piece: tuple[slice, dict[str, torch.Tensor]]) -> torch.Tensor:
            return self.head(self.models[piece[0]], dense[piece[0]], piece[1])

        return torch.cat(map_on_cores(head, list(zip(chunks, pooled)), self.threads()))

    @torch.no_grad()
    def predict(self, batch: Batch) -> torch.Tensor:
        """Every arm's click probabilities ``[M, B]`` (its model's calibration applied), read-only."""
        z = self.logits(batch, train=False).double()
        return torch.sigmoid(torch.stack([m.calibrated(z[k]) for k, m in enumerate(self.models)]))

    @contextlib.contextmanager
    def session(self, batches: Iterable[Batch], cfg: FitConfig,
                result: FitResult) -> Iterator[tuple[int, HeldBack | None]]:
        from fbrapids.trainers.dense_optim import default_optimizer
        from fbrapids.trainers.models.trial_parts import StackedParameters

        self.tables.to(arms_start(self, self.models, cfg))
        self.stacked = StackedParameters(self.models)  # (once placed: each model's parameters views of the stacks)
        self.optimizer = default_optimizer(list(self.stacked.stacks))
        self.nan, self.result, self.prefetch = cfg.nan, result, cfg.prefetch_rows
        try:
            yield 0, None
        finally:
            self.stacked.release()
            self.stacked = None

    def items(self, batches: Iterable[Batch]) -> Iterator[Item]:
        return lookahead_items(batches, 1)

    def train(self, batch: Batch | None, step: int, ahead: list[Batch], next_held: bool) -> bool:
        assert batch is not None and self.optimizer is not None and self.result is not None
        self.optimizer.zero_grad(set_to_none=True)
        inputs = self.inputs(batch)
        dense = torch.stack([b.dense for b in inputs]).to(self.tables.device, torch.float32)
        # the next batch's rows found beside this step (a batch to be held back stays unseen, as in fit): told
        # before this one's lookup where the shared stores prepare two deep, after it otherwise
        nxt = self.inputs(ahead[0]) if self.prefetch and ahead and not next_held else None
        told = prepare_before_lookup(self.tables, inputs, nxt)
        chunks = self.chunks(len(batch))
        pooled = self.tables.pooled(inputs, train=True, chunks=chunks)
        if nxt is not None and not told:
            self.tables.prepare(nxt)
        # each chunk's bags a leaf of its own, its gradient landing there
        leaves = [{k: p.detach().requires_grad_() for k, p in part.items()} for part in pooled]

        def forward_backward(piece: tuple[slice, dict[str, torch.Tensor]]) -> list[float]:
            """One chunk's losses, and its gradients where they are finite (or ``nan="warn"``):
            only gradients, nothing moves before every chunk's losses are seen."""
            c, bags = piece
            logits = self.head(self.models[c], dense[c], bags)
            label = batch.label.to(logits.device, logits.dtype)
            losses = [torch.nn.functional.binary_cross_entropy_with_logits(z, label) for z in logits]
            own = [float(v.detach()) for v in losses]
            if self.nan == "warn" or all(math.isfinite(v) for v in own):
                torch.stack(losses).sum().backward()
            return own

        # the chunks side by side, one a core (their graphs share nothing): their losses in the arms' order
        values = [v for own in map_on_cores(forward_backward, list(zip(chunks, leaves)), self.threads()) for v in own]
        bad = [k for k, v in enumerate(values) if not math.isfinite(v)]
        assert self.stacked is not None
        if bad and not self._nonfinite(bad, values, step):
            self.tables.end_step()
            self.stacked.forget()
            return True
        self.tables.backward({k: [bags[k].grad for bags in leaves] for k in leaves[0]}, chunks)  # into the stores' rows
        self.tables.apply_gradients()  # first: on CPU caches it runs in the background, beside the dense step
        self.stacked.gather_grads()  # the chunks' slices' gradients, one per stack
        self.optimizer.step()
        self.result.losses.append(float(np.mean(values)))
        return True

    def _nonfinite(self, bad: list[int], values: list[float], step: int) -> bool:
        """A non-finite loss of the arms ``bad``, by ``nan``: an error naming the first,
        skipped (False: no update of any arm, the step listed) or logged and applied (True)."""
        k = bad[0]
        what = f"model {k} ({type(self.models[k]).__name__}): step {step}: loss is {values[k]}"
        if self.nan == "error":
            raise NonFiniteError(f"{what}; the side-by-side training stopped before this update")
        log.warning("%s (nan=%r)", what, self.nan)
        if self.nan == "skip":
            assert self.result is not None and self.optimizer is not None
            self.optimizer.zero_grad(set_to_none=True)
            self.result.skipped.append(step)
            return False
        return True
