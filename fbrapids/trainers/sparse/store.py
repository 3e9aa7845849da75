"""The tiered embedding store: rows keyed by raw uint64 ids over cache / host RAM / SSD.

Tiers (top to bottom):

* **cache** - ``cache_rows`` rows in a torch tensor on the training device (GPU memory
  with a GPU; a host-RAM cache without one).  Gathers and the sparse optimizer run here.
* **host** - ``host_rows`` rows in host RAM (numpy).  Cache and host are exclusive: a row
  evicted from the cache moves down to host RAM (a victim cache), a host row asked for by
  a batch moves up.  With ``host_rows=None`` the host tier is unbounded and there is no
  SSD tier.
* **ssd** - every row ever admitted, in a memory-mapped file (``rows.f32``) indexed by a
  global row number, with the id -> row index persisted as ``index.npz`` on
  :meth:`flush`.  Rows evicted dirty from host RAM are written back here.

Ids are raw 64-bit keys, never reduced modulo a table size.  Negative int64 ids are read
as uint64 by two's complement (``np.int64(-1)`` is the id ``2**64 - 1``), the same bits as
``arr.view(np.uint64)``; so int64 and uint64 columns holding the same bits share rows.

Per batch, :meth:`lookup` finds the unique ids and maps them to global rows with C hash
tables (one pass each), admits new ids (after ``admit_after`` sightings; until then they
read a shared all-zero default row whose gradient is dropped), brings missing rows into
the cache (from host RAM, else the SSD file, else a fresh row initialised from
``(id, seed)``), evicting unpinned LRU / LFU rows when the cache is full.  Rows of the
current batch and of a batch announced with :meth:`prefetch` are pinned and never
evicted.  :meth:`apply_gradients` runs the sparse optimizer on the cached rows: SGD or
row-wise Adagrad whose accumulator is one extra float stored in the row.

Example:
    >>> import numpy as np, torch
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, optimizer="sgd", lr=1.0))
    >>> lk = store.lookup(np.array([2**64 - 1, 5, 5], dtype=np.uint64))
    >>> pooled = torch.nn.functional.embedding_bag(lk.inverse, lk.rows, torch.tensor([0]), mode="sum")
    >>> pooled.sum().backward()
    >>> store.apply_gradients(lk)
    >>> store.stats()["cache"]["misses"], len(store)
    (2, 2)
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fbrapids.trainers.sparse.config import StoreConfig
from fbrapids.trainers.sparse.hashmap import UInt64HashMap, cache_slots, init_rows_into, pin_slots, store_touch
from fbrapids.trainers.sparse.init import seed_mix
from fbrapids.trainers.sparse.tiers import Slots, SsdFile, TierStats
from fbrapids.errors import StoreError

log = logging.getLogger(__name__)

_OPEN_SSD_DIRS: "weakref.WeakValueDictionary[str, TieredEmbeddingStore]" = weakref.WeakValueDictionary()


def as_uint64_ids(ids: Any) -> np.ndarray:
    """Raw ids as a uint64 numpy array; int64 (also negative) is reinterpreted bit for bit.

    Example:
        >>> import numpy as np
        >>> as_uint64_ids(np.array([-1, 3])).tolist()
        [18446744073709551615, 3]
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    raise TypeError(f"embedding ids must be integers (int64 / uint64), got dtype {arr.dtype}")


@dataclass
class Lookup:
    """One batch's view of a table.

    Attributes:
        rows: ``[n_unique, dim]`` leaf tensor (requires grad when asked) to pool from.
        inverse: ``[n_ids]`` int64 tensor, position of each input id in ``rows``.
        ids: the unique ids (uint64, in order of first occurrence in the batch).
        admitted: bool mask over ``ids``: False rows read the default row.
        slots: cache slots of the admitted rows.
        step: the store step the slots are pinned for.
        full: ``[len(slots), width]`` the cached rows (embedding + optimizer state) of the
            admitted ids as gathered, reused by :meth:`TieredEmbeddingStore.apply_gradients`
            while the table was not written since (``version``).
        version: the table's write counter when ``full`` was gathered.
    """

    rows: torch.Tensor
    inverse: torch.Tensor
    ids: np.ndarray
    admitted: np.ndarray
    slots: np.ndarray
    step: int
    full: torch.Tensor | None = None
    version: int = -1


def sparse_update(rows: torch.Tensor, grad: torch.Tensor, config: StoreConfig) -> torch.Tensor:
    """The sparse optimizer on full rows ``[n, width]`` (embedding, then the Adagrad
    accumulator), in place; returns ``rows``.

    SGD: ``w -= lr * g``.  Row-wise Adagrad: ``acc += mean(g * g)``,
    ``w -= lr * g / (sqrt(acc) + eps)``.  Every operation is element-wise or a reduction
    within a row, so updating several tables' rows in one call gives the same bits as
    one call per table.

    Example:
        >>> import torch
        >>> r = torch.tensor([[1.0, 0.0]]); _ = sparse_update(r, torch.tensor([[2.0]]), StoreConfig(dim=1, lr=0.5))
        >>> r.tolist()
        [[0.5, 4.0]]
    """
    c = config
    w = rows[:, : c.dim]
    if c.optimizer == "sgd":
        w.sub_(grad * c.lr)
    else:
        acc = rows[:, c.dim] + (grad * grad).mean(dim=1)
        rows[:, c.dim] = acc
        w.sub_(grad * c.lr / (acc.sqrt() + c.eps).unsqueeze(1))
    return rows


class TieredEmbeddingStore:
    """One embedding table over the three tiers; see the module docstring.

    Args:
        config: tier sizes, optimizer, initialisation.
        name: table name (the SSD files go to ``config.ssd_dir / name``).
    """

    def __init__(self, config: StoreConfig, name: str = "table") -> None:
        self.config = config
        self.name = name
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if config.ssd_dir is not None:
            key = str((Path(config.ssd_dir) / name).resolve())
            other = _OPEN_SSD_DIRS.get(key)
            if other is not None and other is not self:
                raise ValueError(f"table {name!r}: SSD directory {key} is already used by another live table; "
                                 "give tables distinct names or ssd_dir")
            _OPEN_SSD_DIRS[key] = self
        self._reset()

    # -- state -------------------------------------------------------------------
    def _reset(self) -> None:
        c = self.config
        w = c.width
        self._dir = UInt64HashMap(1024)
        self._pending = UInt64HashMap(1024) if c.admit_after > 1 else None
        self._n = 0
        cap = 1024
        self._g2id = np.zeros(cap, dtype=np.uint64)
        self._cache_loc = np.full(cap, -1, dtype=np.int64)
        self._host_loc = np.full(cap, -1, dtype=np.int64)
        self._on_ssd = np.zeros(cap, dtype=bool)
        self._last = np.zeros(cap, dtype=np.int64)
        self._freq = np.zeros(cap, dtype=np.int64)
        self._cache = torch.zeros((c.cache_rows, w), dtype=torch.float32, device=self.device)
        # on the CPU the cache's memory as numpy: its row gathers / scatters are cheaper
        self._cache_np = self._cache.numpy() if self._cache.device.type == "cpu" else None
        self._cmeta = Slots(c.cache_rows)
        self._pin = np.full(c.cache_rows, -1, dtype=np.int64)
        self._bounded_host = c.host_rows is not None
        host_cap = c.host_rows if self._bounded_host else 1024
        self._host = np.zeros((host_cap, w), dtype=np.float32)
        self._hmeta = Slots(host_cap)
        self._ssd = SsdFile(Path(c.ssd_dir) / self.name, w) if c.ssd_dir is not None else None
        self._step = 0
        self._prefetched: tuple | None = None  # (keys, rows admitted, unique_get of keys) of the last prefetch
        # bumped by every write to cached rows other than moving rows in (never reset)
        self._version = getattr(self, "_version", 0) + 1
        self._stats = {t: TierStats() for t in ("cache", "host", "ssd")}
        self._counts = {"lookups": 0, "unique_lookups": 0, "default_reads": 0, "admissions": 0,
                        "new_rows": 0, "prefetched_rows": 0}
        self._served = {"cache": 0, "host": 0, "ssd": 0, "new": 0, "default": 0}
        self._default = torch.zeros(c.dim, dtype=torch.float32, device=self.device)
        self._seed_mix = seed_mix(c.seed)

    def __len__(self) -> int:
        """Rows admitted so far."""
        return self._n

    @property
    def step(self) -> int:
        return self._step

    def _grow_by_g(self, n: int) -> None:
        cap = len(self._g2id)
        if n <= cap:
            return
        new = max(n, 2 * cap)

        def ext(a: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full(new, fill, dtype=a.dtype)
            out[:cap] = a
            return out

        self._g2id = ext(self._g2id, 0)
        self._cache_loc = ext(self._cache_loc, -1)
        self._host_loc = ext(self._host_loc, -1)
        self._on_ssd = ext(self._on_ssd, False)
        self._last = ext(self._last, 0)
        self._freq = ext(self._freq, 0)

    # -- admission -----------------------------------------------------------------
    def _admit(self, keys: np.ndarray) -> np.ndarray:
        """Global rows for ids not yet in the directory; -1 where still waiting for admission."""
        out = np.full(len(keys), -1, dtype=np.int64)
        if self._pending is not None:
            ok = self._pending.incr(keys) >= self.config.admit_after
        else:
            ok = np.ones(len(keys), dtype=bool)
        m = int(ok.sum())
        if m:
            g = np.arange(self._n, self._n + m, dtype=np.int64)
            self._grow_by_g(self._n + m)
            self._dir.put(keys[ok], g)
            self._g2id[g] = keys[ok]
            self._n += m
            out[ok] = g
            self._counts["admissions"] += m
        return out

    # -- moving rows -----------------------------------------------------------------
    def _fresh_rows(self, g: np.ndarray) -> np.ndarray:
        c = self.config
        rows = np.empty((len(g), c.width), dtype=np.float32)
        init_rows_into(self._g2id[g], rows, c.dim, self._seed_mix, c.scale)  # = init_rows(), in C
        if c.optimizer == "adagrad":
            rows[:, c.dim] = c.initial_accumulator
        return rows

    def _fetch_below(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows for ``g`` (none of them cached), taken out of host RAM, read from SSD, or new."""
        w4 = self.config.width * 4
        rows = np.empty((len(g), self.config.width), dtype=np.float32)
        dirty = np.zeros(len(g), dtype=bool)
        hs = self._host_loc[g]
        inh = hs >= 0
        hst, sst = self._stats["host"], self._stats["ssd"]
        n_h = int(inh.sum())
        if n_h:
            slots = hs[inh]
            rows[inh] = self._host[slots]
            dirty[inh] = self._hmeta.dirty[slots]
            self._hmeta.release(slots)
            self._host_loc[g[inh]] = -1
            hst.bytes_out += n_h * w4
        hst.hits += n_h
        rest = ~inh
        hst.misses += int(rest.sum())
        if rest.any():
            gr = g[rest]
            on = self._on_ssd[gr]
            idx = np.flatnonzero(rest)
            if on.any():
                order = np.argsort(gr[on])  # read the file in row order
                got = np.empty((int(on.sum()), self.config.width), dtype=np.float32)
                got[order] = self._ssd.read(gr[on][order])
                rows[idx[on]] = got
                sst.hits += len(got)
                sst.bytes_out += len(got) * w4
            new = ~on
            if new.any():
                rows[idx[new]] = self._fresh_rows(gr[new])
                dirty[idx[new]] = True  # not on SSD yet
                sst.misses += int(new.sum())
                self._counts["new_rows"] += int(new.sum())
        return rows, dirty

    def _victims(self, owner: np.ndarray, candidates: np.ndarray, k: int, need: int) -> np.ndarray:
        """About ``k`` (at least ``need``) least recently / least frequently used candidates.

        The cut-off is the k-th smallest key of a fixed strided sample of the candidates, so
        a large tier is not fully partitioned on every eviction; exact when few candidates.
        """
        if k >= len(candidates):
            return candidates
        key = (self._freq if self.config.eviction == "lfu" else self._last)[owner[candidates]]
        n = len(candidates)
        if n > 16384:
            sample = key[:: n // 4096]
            j = min(len(sample) - 1, int(len(sample) * k / n))
            sel = np.flatnonzero(key <= np.partition(sample, j)[j])
            if need <= len(sel) <= 2 * k:
                return candidates[sel]
            if len(sel) > 2 * k:  # many ties at the cut-off: the exact k among them
                return candidates[sel[np.argpartition(key[sel], k - 1)[:k]]]
        return candidates[np.argpartition(key, k - 1)[:k]]

    def _write_ssd(self, g: np.ndarray, rows: np.ndarray) -> None:
        order = np.argsort(g)
        self._ssd.write(g[order], rows[order])
        self._on_ssd[g] = True
        self._stats["ssd"].bytes_in += len(g) * self.config.width * 4

    def _host_insert(self, g: np.ndarray, rows: np.ndarray, dirty: np.ndarray) -> None:
        k = len(g)
        hm = self._hmeta
        if hm.n_free < k:
            if not self._bounded_host:
                cap = max(hm.capacity * 2, hm.used + k)
                hm.grow(cap)
                grown = np.zeros((cap, self.config.width), dtype=np.float32)
                grown[: len(self._host)] = self._host
                self._host = grown
            else:
                need = k - hm.n_free
                used = np.flatnonzero(hm.owner >= 0)
                kk = min(max(need, int(hm.capacity * self.config.evict_fraction)), len(used))
                if need > len(used):  # more rows than the whole host tier: straight to SSD
                    wb = dirty
                    self._write_ssd(g[wb], rows[wb])
                    return
                vic = self._victims(hm.owner, used, kk, need)
                vg = hm.owner[vic]
                wb = hm.dirty[vic]
                if wb.any():
                    self._write_ssd(vg[wb], self._host[vic[wb]])
                    self._stats["host"].bytes_out += int(wb.sum()) * self.config.width * 4
                self._host_loc[vg] = -1
                hm.release(vic)
                self._stats["host"].evictions += len(vic)
        slots = hm.pop(k)
        self._host[slots] = rows
        hm.owner[slots] = g
        hm.dirty[slots] = dirty
        self._host_loc[g] = slots
        self._stats["host"].bytes_in += k * self.config.width * 4

    def _cache_alloc(self, m: int) -> np.ndarray:
        cm = self._cmeta
        if cm.n_free < m:
            need = m - cm.n_free
            cand = np.flatnonzero((cm.owner >= 0) & (self._pin < self._step))
            if len(cand) < need:
                raise StoreError(
                    f"table {self.name!r}: cache_rows={self.config.cache_rows} is too small; the current "
                    f"and prefetched batches pin {cm.used - len(cand)} rows and {m} more are needed"
                )
            k = min(max(need, int(cm.capacity * self.config.evict_fraction)), len(cand))
            vic = self._victims(cm.owner, cand, k, need)
            vg = cm.owner[vic]
            rows = self._cache_rows_np(vic)
            dirty = cm.dirty[vic].copy()
            self._cache_loc[vg] = -1
            cm.release(vic)
            st = self._stats["cache"]
            st.evictions += len(vic)
            st.bytes_out += len(vic) * self.config.width * 4
            self._host_insert(vg, rows, dirty)
        return cm.pop(m)

    def _room(self) -> int:
        """Rows the cache can take now: free slots plus unpinned occupied ones."""
        cm = self._cmeta
        return cm.n_free + int(((cm.owner >= 0) & (self._pin < self._step)).sum())

    def _ensure_cached(self, g: np.ndarray, pin_step: int) -> np.ndarray:
        """Cache slots of rows ``g`` (distinct), bringing misses up; all pinned for ``pin_step``."""
        slots, n_miss = cache_slots(g, self._cache_loc)
        if n_miss > self._cmeta.n_free:  # check before moving anything, so a failure loses no row
            hit = slots >= 0
            room = self._room() - int((hit & (self._pin[np.where(hit, slots, 0)] < self._step)).sum())
            if n_miss > room:
                raise StoreError(
                    f"table {self.name!r}: cache_rows={self.config.cache_rows} is too small; the current and "
                    f"prefetched batches pin {self.config.cache_rows - room} rows and "
                    f"{n_miss} more are needed")
        pin_slots(slots, self._pin, pin_step)  # the cached ones
        if n_miss:
            miss = slots < 0
            gm = g[miss]
            rows, dirty = self._fetch_below(gm)
            new_slots = self._cache_alloc(len(gm))
            if self._cache_np is not None:
                self._cache_np[new_slots] = rows
            else:
                self._cache[torch.from_numpy(new_slots).to(self.device)] = torch.from_numpy(rows).to(self.device)
            self._cmeta.owner[new_slots] = gm
            self._cmeta.dirty[new_slots] = dirty
            self._cache_loc[gm] = new_slots
            self._pin[new_slots] = pin_step
            self._stats["cache"].bytes_in += len(gm) * self.config.width * 4
            slots[miss] = new_slots
        return slots

    # -- the per-batch API -----------------------------------------------------------------
    def lookup(self, ids: Any, requires_grad: bool = True, leaf: bool = True) -> Lookup:
        """Rows for a batch of ids, pinned in the cache until :meth:`end_step`.

        Args:
            ids: raw ids (uint64, or int64 read as two's-complement uint64), any shape.
            requires_grad: the rows will be trained: make ``rows`` a leaf that collects
                gradients (and never read a batch larger than the cache through).
            leaf: with ``False``, ``rows`` is not made a separate leaf (it may share memory
                with ``full``): for callers that copy the rows into their own leaf and hand
                the gradient to :meth:`apply_gradients` themselves.
        """
        keys = as_uint64_ids(ids).ravel()
        full = None
        uniq, inverse, occ, g = self._unique_rows(keys)  # first-occurrence order: deterministic
        missing = np.flatnonzero(g < 0)
        if len(missing):
            g[missing] = self._admit(uniq[missing])
        # last / freq of the admitted rows, and which tier serves each occurrence (one C pass)
        touched = store_touch(g, occ, self._cache_loc, self._host_loc, self._on_ssd, self._last, self._freq,
                              self._step)
        sv = self._served
        for k, tier in enumerate(("cache", "host", "ssd", "new", "default")):
            sv[tier] += int(touched[k])
        if len(missing):
            adm = g >= 0
            ga = g[adm]
        else:
            adm = np.ones(len(g), dtype=bool)
            ga = g
        st = self._stats["cache"]
        n_hit = int(touched[5])
        st.hits += n_hit
        st.misses += len(ga) - n_hit
        self._counts["lookups"] += len(keys)
        self._counts["unique_lookups"] += len(uniq)
        self._counts["default_reads"] += len(uniq) - len(ga)
        dim = self.config.dim
        n_miss = len(ga) - n_hit
        if not requires_grad and n_miss > self._cmeta.n_free and n_miss > self._room():
            # a read-only batch larger than the cache can take: read through, cache nothing
            slots = np.zeros(0, dtype=np.int64)
            got = torch.from_numpy(self._read_through(ga)[:, :dim]).to(self.device)
        else:
            slots = self._ensure_cached(ga, self._step)
            full = self._gather(slots)
            got = full[:, :dim]
        if adm.all():
            rows = got.clone() if (requires_grad and leaf) or full is None else got
        else:
            rows = self._default.expand(len(uniq), dim).clone()
            rows[torch.from_numpy(np.flatnonzero(adm)).to(self.device)] = got
        rows.requires_grad_(requires_grad and leaf)
        inv = torch.from_numpy(inverse.astype(np.int64, copy=False)).to(self.device)
        return Lookup(rows=rows, inverse=inv, ids=uniq, admitted=adm, slots=slots, step=self._step, full=full,
                      version=self._version)

    def _unique_rows(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct keys, inverse, counts and their global rows (-1: not admitted); taken
        from the last :meth:`prefetch` when it saw the same keys and nothing was admitted
        since (a prefetched batch is not hashed twice)."""
        stash, self._prefetched = self._prefetched, None
        if stash is not None and stash[1] == self._n and len(stash[0]) == len(keys) and (
                stash[0] is keys or np.array_equal(stash[0], keys)):
            return stash[2]
        return self._dir.unique_get(keys)

    def _read_through(self, g: np.ndarray) -> np.ndarray:
        """Rows ``g`` read from wherever they are, without moving them up; rows never
        materialised are created in host RAM."""
        nowhere = (self._cache_loc[g] < 0) & (self._host_loc[g] < 0)
        if self._ssd is not None:
            st = self._stats["ssd"]
            st.hits += int((nowhere & self._on_ssd[g]).sum())
            nowhere &= ~self._on_ssd[g]
        if nowhere.any():
            gn = g[nowhere]
            self._host_insert(gn, self._fresh_rows(gn), np.ones(len(gn), dtype=bool))
            self._stats["ssd"].misses += len(gn)
            self._counts["new_rows"] += len(gn)
        return self.read_rows(g)

    def prefetch(self, ids: Any) -> int:
        """Bring the admitted rows among ``ids`` into the cache and pin them through the next step.

        Ids not yet admitted are left alone (prefetching does not count as a sighting).
        Returns the number of rows that had to be brought up.
        """
        keys = as_uint64_ids(ids).ravel()
        found = self._dir.unique_get(keys)
        self._prefetched = (keys, self._n, (found[0], found[1], found[2], found[3].copy()))
        g = found[3]
        g = g[g >= 0]
        moved = int((self._cache_loc[g] < 0).sum())
        self._ensure_cached(g, self._step + 1)
        self._counts["prefetched_rows"] += moved
        return moved

    @torch.no_grad()
    def apply_gradients(self, lookup: Lookup, grad: torch.Tensor | None = None) -> None:
        """Run the sparse optimizer on the rows of ``lookup`` (``grad`` defaults to ``rows.grad``).

        Rows reading the default row are skipped.  Does not end the step.
        """
        if lookup.step != self._step:
            raise StoreError(f"table {self.name!r}: lookup of step {lookup.step} applied at step {self._step}")
        if grad is None:
            grad = lookup.rows.grad
        if grad is None or len(lookup.slots) == 0:
            return
        if not lookup.admitted.all():
            grad = grad[torch.from_numpy(np.flatnonzero(lookup.admitted)).to(grad.device)]
        grad = grad.to(self.device, torch.float32)
        st = torch.from_numpy(lookup.slots).to(self.device)
        rows = self.fresh_full(lookup, st)
        self.write_back(lookup, sparse_update(rows, grad, self.config), st)

    def fresh_full(self, lookup: Lookup, slots: torch.Tensor | None = None) -> torch.Tensor:
        """The current cached rows ``[len(lookup.slots), width]`` of ``lookup``: the rows it
        gathered when the table was not written since (the caller may update them in
        place), else gathered again."""
        if lookup.full is not None and lookup.version == self._version and lookup.step == self._step:
            return lookup.full
        if slots is None or self._cache_np is not None:
            return self._gather(lookup.slots)
        return self._cache.index_select(0, slots)

    def _gather(self, slots: np.ndarray) -> torch.Tensor:
        """Full cached rows ``[len(slots), width]`` (a new tensor)."""
        if self._cache_np is not None:
            return torch.from_numpy(self._cache_np.take(slots, axis=0))
        return self._cache.index_select(0, torch.from_numpy(slots).to(self.device))

    def write_back(self, lookup: Lookup, rows: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        """Store updated full rows of ``lookup``'s (pinned) slots into the cache, marked dirty."""
        if self._cache_np is not None:
            self._cache_np[lookup.slots] = rows.detach().numpy()
        else:
            if slots is None:
                slots = torch.from_numpy(lookup.slots).to(self.device)
            self._cache.index_copy_(0, slots, rows)
        self._cmeta.dirty[lookup.slots] = True
        self._version += 1

    def end_step(self) -> None:
        """Release this step's pins (rows prefetched for the next step stay pinned)."""
        self._step += 1

    @torch.no_grad()
    def assign(self, ids: Any, weights: Any) -> None:
        """Set the embeddings of ``ids`` (admitting them, past any admission gate), e.g. to
        import a dense table: row ``i`` of an ``nn.EmbeddingBag`` is the id ``i``.

        The optimizer state of assigned rows is reset to its initial value.

        Example:
            >>> import numpy as np
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4))
            >>> s.assign(np.array([9]), np.array([[1.0, 2.0]]))
            >>> s.weights(np.array([9])).tolist()
            [[1.0, 2.0]]
        """
        keys = as_uint64_ids(ids).ravel()
        w = np.asarray(weights.detach().cpu() if isinstance(weights, torch.Tensor) else weights, dtype=np.float32)
        if w.shape != (len(keys), self.config.dim):
            raise ValueError(f"table {self.name!r}: weights of shape {w.shape} for {len(keys)} ids of dim "
                             f"{self.config.dim}")
        if len(np.unique(keys)) != len(keys):
            raise ValueError(f"table {self.name!r}: assign() got repeated ids")
        step = max(1, self.config.cache_rows // 2)
        for start in range(0, len(keys), step):
            k, rows = keys[start : start + step], w[start : start + step]
            g = self._dir.get(k)
            new = g < 0
            if new.any():
                pending, self._pending = self._pending, None
                g[new] = self._admit(k[new])
                self._pending = pending
            slots = self._ensure_cached(g, self._step)
            full = np.empty((len(k), self.config.width), dtype=np.float32)
            full[:, : self.config.dim] = rows
            if self.config.optimizer == "adagrad":
                full[:, self.config.dim] = self.config.initial_accumulator
            self._cache[torch.from_numpy(slots).to(self.device)] = torch.from_numpy(full).to(self.device)
            self._cmeta.dirty[slots] = True
            self._version += 1
            self.end_step()

    # -- reading everything, flush, checkpoint ----------------------------------------------
    def read_rows(self, g: np.ndarray) -> np.ndarray:
        """Current values (embedding + optimizer state) of global rows ``g``, wherever they are."""
        out = np.empty((len(g), self.config.width), dtype=np.float32)
        cs = self._cache_loc[g]
        hs = self._host_loc[g]
        inc, inh = cs >= 0, hs >= 0
        if inc.any():
            out[inc] = self._cache.index_select(0, torch.from_numpy(cs[inc]).to(self.device)).cpu().numpy()
        if inh.any():
            out[inh] = self._host[hs[inh]]
        rest = ~(inc | inh)
        if rest.any():
            on = np.zeros(len(g), dtype=bool)
            if self._ssd is not None:
                on[rest] = self._on_ssd[g[rest]]
                if on.any():
                    out[on] = self._ssd.read(g[on])
            fresh = rest & ~on  # admitted, never materialised: still its initial value
            if fresh.any():
                out[fresh] = self._fresh_rows(g[fresh])
        return out

    def weights(self, ids: Any) -> np.ndarray:
        """Embeddings ``[len(ids), dim]`` of ``ids`` (the default row, zeros, where not admitted).

        Example:
            >>> import numpy as np
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4))
            >>> s.weights(np.array([1], dtype=np.uint64)).tolist()
            [[0.0, 0.0]]
        """
        keys = as_uint64_ids(ids).ravel()
        g = self._dir.get(keys)
        out = np.zeros((len(keys), self.config.dim), dtype=np.float32)
        ok = g >= 0
        if ok.any():
            out[ok] = self.read_rows(g[ok])[:, : self.config.dim]
        return out

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """All admitted ids (uint64, by global row) and their full rows ``[n, width]``."""
        g = np.arange(self._n, dtype=np.int64)
        return self._g2id[: self._n].copy(), self.read_rows(g)

    def _meta(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self._n, "step": self._step, "config": self.config.to_dict()}

    def flush(self) -> None:
        """Write every dirty row of the cache and host tiers to the SSD file, fsync it, and
        persist the id -> row index.  A no-op for a store with no SSD tier."""
        if self._ssd is None:
            return
        for meta, rows_of in ((self._cmeta, self._cache_rows_np), (self._hmeta, lambda s: self._host[s])):
            slots = np.flatnonzero(meta.dirty & (meta.owner >= 0))
            if len(slots):
                self._write_ssd(meta.owner[slots], rows_of(slots))
                meta.dirty[slots] = False
        self._ssd.sync()
        self._ssd.write_index(self._g2id[: self._n], self._meta())

    def _cache_rows_np(self, slots: np.ndarray) -> np.ndarray:
        if self._cache_np is not None:
            return self._cache_np.take(slots, axis=0)
        return self._cache.index_select(0, torch.from_numpy(slots).to(self.device)).cpu().numpy()

    def save(self, directory: str | os.PathLike, chunk_rows: int = 1 << 16, progress: Any = None) -> None:
        """Flush, then write a self-contained copy of the table into ``directory``.

        Files: ``rows.f32`` (row g = the id ``ids[g]``), ``index.npz`` (ids, pending
        admission counts, LRU/LFU state) and ``meta.json``; each written under a temporary
        name, fsynced, then renamed.  ``progress(path)`` is called after each file.
        """
        from fbrapids.trainers.checkpoint import write_atomic

        self.flush()
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)

        def row_chunks():
            for start in range(0, self._n, chunk_rows):
                stop = min(self._n, start + chunk_rows)
                if self._ssd is not None:  # flushed: the file holds every row
                    yield np.ascontiguousarray(self._ssd.rows_view(start, stop)).tobytes()
                else:
                    yield self.read_rows(np.arange(start, stop, dtype=np.int64)).tobytes()

        write_atomic(d / "rows.f32", row_chunks())
        if progress:
            progress(d / "rows.f32")
        pk, pv = self._pending.items() if self._pending is not None else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        arrays = {"ids": self._g2id[: self._n], "pending_ids": pk, "pending_counts": pv,
                  "last": self._last[: self._n], "freq": self._freq[: self._n]}

        def npz_bytes():
            import io

            buf = io.BytesIO()
            np.savez(buf, **arrays)
            yield buf.getvalue()

        write_atomic(d / "index.npz", npz_bytes())
        if progress:
            progress(d / "index.npz")
        write_atomic(d / "meta.json", [json.dumps(self._meta(), indent=1).encode()])
        if progress:
            progress(d / "meta.json")

    def load(self, directory: str | os.PathLike) -> None:
        """Replace this table's contents with a copy saved by :meth:`save`.

        The tier sizes stay this store's own; the cache starts cold.
        """
        d = Path(directory)
        meta = json.loads((d / "meta.json").read_text())
        saved = StoreConfig(**meta["config"])
        if saved.width != self.config.width or saved.dim != self.config.dim:
            raise ValueError(f"table {self.name!r}: checkpoint {d} has rows of width {saved.width}, "
                             f"this store {self.config.width}")
        with np.load(d / "index.npz") as z:
            ids, pk, pv, last, freq = (z[k] for k in ("ids", "pending_ids", "pending_counts", "last", "freq"))
        n = len(ids)
        rows = np.fromfile(d / "rows.f32", dtype=np.float32)
        if rows.size != n * self.config.width:
            raise ValueError(f"table {self.name!r}: {d / 'rows.f32'} holds {rows.size} floats, expected "
                             f"{n} rows x {self.config.width}")
        rows = rows.reshape(n, self.config.width)
        self._reset()
        self._grow_by_g(n)
        g = np.arange(n, dtype=np.int64)
        self._dir.put(ids, g)
        self._g2id[:n] = ids
        self._last[:n], self._freq[:n] = last, freq
        self._n = n
        if self._pending is not None and len(pk):
            self._pending.put(pk, pv)
        self._step = int(meta["step"])
        if self._ssd is not None:
            self._write_ssd(g, rows)
            self._stats["ssd"].bytes_in = 0
        else:
            self._host_insert(g, rows, np.zeros(n, dtype=bool))
            self._stats["host"].bytes_in = 0

    # -- statistics -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Per-tier hits / misses / evictions / bytes moved, plus lookup counts.

        Tier hits and misses count unique rows per batch.  ``served_*`` count every id
        occurrence by the tier its row was in when looked up (rows a prefetch brought up
        count as cache), plus ``new`` rows and ``default``-row reads, as ``served_cache``,
        ``served_host``, ``served_ssd``, ``served_new`` and ``served_default``.
        ``upper_tier_hit_rate`` is the share of occurrences of existing rows served by the
        cache or host RAM rather than the SSD file; ``upper_tier_unique_hit_rate`` the same
        over unique rows per batch.
        """
        out: dict[str, Any] = {t: s.as_dict() for t, s in self._stats.items()}
        out.update(self._counts)
        out["rows"] = self._n
        out["cache_used"] = self._cmeta.used
        out["host_used"] = self._hmeta.used
        sv = dict(self._served)
        out.update({f"served_{k}": v for k, v in sv.items()})
        existing = sv["cache"] + sv["host"] + sv["ssd"]
        out["upper_tier_hit_rate"] = (sv["cache"] + sv["host"]) / existing if existing else 1.0
        unique = out["cache"]["hits"] + out["cache"]["misses"] - self._counts["new_rows"]
        out["upper_tier_unique_hit_rate"] = 1.0 - out["ssd"]["hits"] / unique if unique > 0 else 1.0
        return out
