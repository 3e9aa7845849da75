"""The tables of a collection looked up, and updated, together: every table's lookup pass
in one C call, its rows written straight into one leaf, and every table's row-wise Adagrad
update in another.

A batch of the demo looks up 25 tables.  One :meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.lookup`
and one :meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.update_rows` per table cost
tens of microseconds of Python each around C passes of about as long: as much again as
the work, and more than fbgemm's TBE spends on all its tables in one call.  Here each
table contributes a row of addresses to one descriptor array
(:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.pass_words`,
:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.adagrad_words`) and one C call
runs every table's pass (:func:`~fbrapids.trainers.sparse.hashmap.lookup_tables`,
:func:`~fbrapids.trainers.sparse.hashmap.rowwise_adagrad_tables`).  What a table's
lookup does around its pass (the distinct ids, admissions, rows brought up from below) is
the store's own, so the rows and their updates are the same bits as one table at a time.

Example:
    >>> import numpy as np, torch
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> stores = [TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"), name=n) for n in "ab"]
    >>> lks, leaf = lookup_together(stores, [np.array([7, 7, 8]), np.array([9])], requires_grad=True)
    >>> leaf.shape, [len(lk.ids) for lk in lks], torch.equal(lks[1].rows, leaf[2:])
    (torch.Size([3, 2]), [2, 1], True)
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol, Sequence, TypeGuard

import numpy as np
import torch

from fbrapids.errors import ArgumentError, RowIndexError
from fbrapids.trainers.sparse.hashmap import (
    ADAGRAD_WORDS,
    LOOKUP_WORDS,
    gather_cols,
    lookup_tables,
    rowwise_adagrad_tables,
)
from fbrapids.trainers.sparse.row_directory import Ids
from fbrapids.trainers.sparse.store import HandedUpdate, Lookup, TieredEmbeddingStore


def on_host(stores: Sequence[object]) -> TypeGuard[Sequence[TieredEmbeddingStore]]:
    """Whether every table is a tiered store whose cache is in host memory (the tables this
    module runs together).

    Example:
        >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
        >>> on_host([TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))])
        True
    """
    return all(isinstance(s, TieredEmbeddingStore) and s.tiers.cache.table is not None for s in stores)


def lookup_together(stores: Sequence[TieredEmbeddingStore], keys: Sequence[Ids],
                    requires_grad: bool, gather: bool = True) -> tuple[list[Lookup], torch.Tensor]:
    """``stores[t].lookup(keys[t], leaf=False)`` for every table (CPU caches, one dim), their
    passes in one C call; returns the lookups and the one leaf ``[sum of distinct ids, dim]``
    their rows are views of, table after table (not yet requiring grad).

    ``gather=False``: a table whose batch a prepare booked ahead (every row admitted and
    cached, its slots known), or whose lookup needs no gradient (``requires_grad=False``: a
    prediction's) and finds every admitted row in the cache, leaves its rows where they lie:
    its lookup's ``gathered`` is False and its ``rows`` are not read from the table (their
    values undefined; their shape holds the gradient).  The caller reads the rows through
    ``places`` from the cache table (:class:`~fbrapids.trainers.sparse.arms_bags.BagEntry`'s
    ``rowmap``; place -1: an id never admitted, the default row, zeros) before anything
    changes the table: nothing does until the next lookup or the update of these rows.  A
    table some of whose rows are below the cache gathers them as with ``gather=True``."""
    # the update of the last step's rows may still run on the prefetch thread: it writes the cached rows only,
    # which the tables' starts do not read; they run beside it, and the pass below waits for it: table by table
    # where one update counts the tables it is done with (each table's pass then waits for its own rows only)
    handed = [s.handed_update() for s in stores]
    updates, progress = _one_progress(handed)
    try:
        begun = [s.start_lookup(k, requires_grad) for s, k in zip(stores, keys)]
    except BaseException:
        _wait_for(updates)
        raise
    if progress is None:
        _wait_for(updates)
    starts = [0]
    for b in begun:
        starts.append(starts[-1] + len(b.g))
    dim = stores[0].config.dim
    if any(s.config.dim != dim for s in stores):
        raise ArgumentError(f"lookup_together: tables of one dim, got {sorted({s.config.dim for s in stores})}")
    rows = np.empty((starts[-1], dim), dtype=np.float32)
    slots = np.empty(len(rows), dtype=np.int64)
    touched = np.zeros((len(stores), 6), dtype=np.int64)
    desc = np.empty((len(stores), LOOKUP_WORDS), dtype=np.int64)
    at_rows, at_slots, at_touched = rows.ctypes.data, slots.ctypes.data, touched.ctypes.data
    # rows left where they lie: booked ahead, or looked up for no gradient (then gathered after all
    # should some lie below the cache: those are brought up into the gathered rows)
    in_place = [not gather and (b.booked is not None or not requires_grad) for b in begun]
    for t, (s, b) in enumerate(zip(stores, begun)):  # each table's outputs: its part of the three buffers
        a = starts[t]
        if b.booked is not None:  # its bookkeeping done ahead: its slots and counters known, its rows to gather
            slots[a : starts[t + 1]] = b.booked[1]
            touched[t] = b.booked[3]
        desc[t] = s.pass_words(b, at_slots + 8 * a, 0 if in_place[t] else at_rows + 4 * dim * a,
                               at_touched + 48 * t, requires_grad)
    if progress is None:
        ret = lookup_tables(desc)
    else:
        try:
            ret = lookup_tables(desc, progress, np.array([0 if h is None else h.need for h in handed], dtype=np.int64))
        finally:
            _wait_for(updates)  # (done with every table by now; its error, if any, raised here)
    out = []
    for t, (s, b) in enumerate(zip(stores, begun)):
        if ret[t] < 0:
            raise RowIndexError(f"table {s.name!r}: its directory points outside its rows or cache ({int(ret[t])})")
        a, z = starts[t], starts[t + 1]
        if in_place[t] and b.booked is None and ret[t] > 0:  # rows below the cache: every row gathered after all
            _gather_cached(s, slots[a:z], rows[a:z])
            in_place[t] = False
        lk = s.finish_lookup(b, slots[a:z], rows[a:z], touched[t], requires_grad, leaf=False)
        lk.gathered = not in_place[t]
        if in_place[t] and b.adm is not None:  # (the lookup's slots are the admitted rows' only)
            lk.in_table = slots[a:z]
        if lk.rows.data_ptr() != at_rows + 4 * dim * a:  # read through: rows of its own
            rows[a:z] = lk.rows.numpy()
            lk.rows = torch.from_numpy(rows[a:z])
        out.append(lk)
    return out, torch.from_numpy(rows)


def _one_progress(handed: Sequence[HandedUpdate | None]) -> tuple[dict[int, Future], np.ndarray | None]:
    """The distinct update jobs handed over, and the one counter of tables done that every
    handed table shares (None where there are several jobs or counters: then the pass waits
    for every update first)."""
    updates = {id(h.job): h.job for h in handed if h is not None}
    progress = next((h.progress for h in handed if h is not None), None)
    if len(updates) != 1 or any(h is not None and h.progress is not progress for h in handed):
        progress = None
    return updates, progress


def _wait_for(updates: dict[int, Future]) -> None:
    """Wait for every update (its error, if any, raised here)."""
    for job in updates.values():
        job.result()


def _gather_cached(store: TieredEmbeddingStore, slots: np.ndarray, rows: np.ndarray) -> None:
    """What the lookup pass gathers, for a pass that gathered nothing: each cached row from the
    cache table, zeros elsewhere (the default row; rows below the cache are the lookup's to
    bring up)."""
    table = store.tiers.cache.table
    assert table is not None  # (a CPU cache)
    cached = slots >= 0
    rows[~cached] = 0.0
    rows[cached] = gather_cols(table, slots[cached], rows.shape[1])


class RowUpdater(Protocol):
    """A table that applies its sparse optimizer to a lookup's rows (any table of a stacked lookup)."""

    def update_rows(self, lookup: Lookup, grad: torch.Tensor) -> None: ...


def update_together(parts: Sequence[tuple[RowUpdater, Lookup, int, int]], grad: torch.Tensor,
                    background: bool = False) -> None:
    """Every table's sparse update of a stacked lookup: ``parts`` holds (store, lookup, start,
    stop) with the lookup's rows at ``grad[start:stop]``; :func:`update_each` of those rows."""
    g = grad.detach().contiguous()
    rows: torch.Tensor | np.ndarray = g.numpy() if g.device.type == "cpu" else g  # (numpy slices: no torch call a table)
    update_each([(store, lk, rows[a:z]) for store, lk, a, z in parts], background)


def update_each(parts: Sequence[tuple[RowUpdater, Lookup, torch.Tensor | np.ndarray]], background: bool = False,
                inline_share: float = 0.0) -> None:
    """Every table's sparse update: ``parts`` holds (store, lookup, the gradient of its rows: a
    tensor, or a C-contiguous float32 numpy array of host rows).
    The row-wise Adagrad updates of CPU caches (one slice or several) run in one C call; any
    other table (another optimizer, a device cache, rows not admitted) through its own
    ``update_rows``.  ``background``: when every table's update is that one C call, it runs on
    the stores' background thread and each store waits for it before it is next used
    (:meth:`~fbrapids.trainers.sparse.TieredEmbeddingStore.update_in_background`); the caller
    goes on (``fit``: the dense optimizer's step, the next batch's bottom MLP).

    ``inline_share`` (with ``background``): about this share of the update's work (rows
    times width, whole tables, the largest first) runs on the calling thread, in a C call of
    its own, while the background thread runs the rest: for a caller whose update outlasts
    the work it has to do meanwhile (a trial's arms: rows as wide as all the arms' slices),
    so that its next lookup waits for less.  Each table is updated by one call either way,
    so its rows are the same bits."""
    desc, hyper, done, grads = [], [], [], []
    for store, lk, g in parts:
        if len(lk.slots) == 0:
            continue
        words, tiered = None, store if isinstance(store, TieredEmbeddingStore) else None
        host = isinstance(g, np.ndarray) or g.device.type == "cpu"
        if host and tiered is not None and lk.admitted.all():
            g_np = g if isinstance(g, np.ndarray) else g.detach().contiguous().numpy()
            grads.append(g_np)
            words = tiered.adagrad_words(lk, g_np)
        if words is None or tiered is None:  # (no words without a tiered store)
            gt = torch.from_numpy(g) if isinstance(g, np.ndarray) else g
            if not lk.admitted.all():
                gt = gt[torch.from_numpy(np.flatnonzero(lk.admitted)).to(gt.device)]
            store.update_rows(lk, gt)
            background = False
            continue
        desc.append(words[0])
        hyper.append(words[1])
        done.append(tiered)
    if not desc:
        return
    table = np.array(desc, dtype=np.int64).reshape(-1, ADAGRAD_WORDS)
    params = np.array(hyper, dtype=np.float32)

    def run(which: np.ndarray, progress: np.ndarray | None = None) -> None:
        try:
            ret = rowwise_adagrad_tables(table[which], params[which], progress)
        finally:
            if progress is not None:  # (done, or failed: a lookup waiting on it goes on, and meets the error)
                progress[0] = len(which)
        keep = (grads, parts)  # the gradients and the slots read above stay alive until the C call is done
        for t, rc in zip(which, ret):
            done[t].updated()
            if rc != 0:
                raise RowIndexError(f"table {done[t].name!r}: a slot outside its cache in the sparse update")
        del keep

    if not background:
        run(np.arange(len(done)))
        return
    here = _inline_tables(table, inline_share)
    away = np.setdiff1d(np.arange(len(done)), here) if len(here) else np.arange(len(done))
    if len(away):
        progress = np.zeros(1, dtype=np.int64)  # the tables of ``away`` updated so far, counted by the C call
        job = done[0].background().submit(run, away, progress)
        for k, t in enumerate(away):
            done[t].update_in_background(job, progress, k + 1)
    if len(here):
        run(here)


def _inline_tables(desc: np.ndarray, share: float) -> np.ndarray:
    """The tables (rows of ``desc``) whose update runs on the calling thread for about
    ``share`` of the work (slots times width, ``FBX_AG_M`` x ``FBX_AG_WIDTH``): whole
    tables, the largest that fit first; none at a share of 0.

    Example:
        >>> d = np.zeros((3, ADAGRAD_WORDS), dtype=np.int64); d[:, 2] = 4; d[:, 4] = [10, 30, 20]
        >>> _inline_tables(d, 0.0).tolist(), _inline_tables(d, 0.4).tolist(), _inline_tables(d, 0.9).tolist()
        ([], [2], [1, 2])
    """
    if share <= 0 or not len(desc):
        return np.zeros(0, dtype=np.int64)
    work = desc[:, 4] * desc[:, 2]
    budget, taken = share * float(work.sum()), []
    for t in np.argsort(-work, kind="stable"):
        if work[t] <= budget:
            taken.append(int(t))
            budget -= float(work[t])
    return np.sort(np.array(taken, dtype=np.int64))
