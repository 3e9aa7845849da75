"""Rows moving between a table's tiers: brought up into the cache for a batch (from host
RAM, else the SSD file, else new), evicted down when a tier is full (the eviction policy
picks the victims; dirty rows are written back), and read wherever they are.

Cache and host RAM are exclusive: a row evicted from the cache moves down to host RAM (a
victim cache); a host row asked for by a batch moves up.  The SSD file holds every row
ever written back; rows never written back are created from ``(id, seed)``.

**One RAM tier.**  Where every row fits in RAM, a CPU store has no use for a second RAM
tier: its cache is host RAM already, and moving rows between two arrays of the same memory
is all a second tier would add.  So a store on the CPU whose host tier is unbounded
(``host_rows=None``: every row fits in RAM) keeps every row in its cache, which grows
(to ``cache_rows`` slots first where it started below them, at
:data:`~fbrapids.trainers.sparse.tiers.IN_PLACE_START`, then :data:`GROWTH` times) instead
of evicting; the host tier stays empty.  Moved to a CUDA device, the cache has
``cache_rows`` rows again and the rows beyond them go down to host RAM.

Example:
    >>> import numpy as np, torch
    >>> from fbrapids.trainers.sparse.config import StoreConfig
    >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
    >>> d = RowDirectory(); g = d.admit(np.array([3, 4], dtype=np.uint64))
    >>> t = TierStack(StoreConfig(dim=2, cache_rows=4, optimizer="sgd"), "t", d, torch.device("cpu"))
    >>> slots = t.ensure_cached(g, pin_step=0, step=0)
    >>> t.read_rows(g).shape, t.cache.stats.bytes_in
    ((2, 2), 16)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fbrapids.errors import StoreError, StoreMemoryError
from fbrapids.trainers.sparse.config import StoreConfig
from fbrapids.trainers.sparse.hashmap import PreparedBuffers, cache_slots, init_rows_into, pin_slots, place_new
from fbrapids.trainers.sparse.init import seed_mix
from fbrapids.trainers.sparse.policies import eviction_policy
from fbrapids.trainers.sparse.row_directory import RowDirectory
from fbrapids.trainers.sparse.slot_map import SlotMap, device_maps_available
from fbrapids.trainers.sparse.ssd import SsdTier
from fbrapids.trainers.sparse.tier import SlottedTier, TierStats, host_tier_class
from fbrapids.trainers.sparse.tiers import CacheTier

#: a growable cache grows to this many times its slots (its new rows' memory is touched only as
#: rows are placed in it: fewer, larger growths copy less)
GROWTH = 4


class TierStack:
    """The cache, host and SSD tiers of one table and the moves between them (each tier a
    :class:`~fbrapids.trainers.sparse.tier.Tier`; the host tier the kind ``config.host_tier`` names)."""

    def __init__(self, config: StoreConfig, name: str, directory: RowDirectory, device: torch.device) -> None:
        c = self.config = config
        self.name = name
        self.dir = directory
        self.cache = CacheTier(c.cache_rows, c.width, device, growable=self.one_ram_tier(device))
        self.host: SlottedTier = host_tier_class(c.host_tier)(c.host_rows, c.width)
        self.ssd = SsdTier(Path(c.ssd_dir) / name, c.width) if c.ssd_dir is not None else None
        self.ssd_stats = self.ssd.stats if self.ssd is not None else TierStats()
        self.policy = eviction_policy(c.eviction)
        self.optimizer = c.sparse_optimizer()
        self.new_rows = 0
        self.seed_mix = np.array([seed_mix(s) for s in c.seeds], dtype=np.uint64)  # one per slice of a row
        self.row_bytes = c.width * 4
        state = np.zeros((1, c.width), dtype=np.float32)
        self.optimizer.init_state(state)
        self.initial_state = state[0, c.dim:].copy()  # a new row's optimizer state columns
        self.slot_map: SlotMap | None = None  # a CUDA cache's id -> slot map, kept exact by the moves below
        if self.cache.device.type == "cuda" and device_maps_available():
            self.attach_slot_map()

    def attach_slot_map(self) -> SlotMap:
        """Build the id -> slot map on the cache's device from the rows cached now (done for a
        CUDA cache when cupy is installed; on a CPU cache only tests do it, to check the map's path against the
        directory's).

        Example:
            >>> import numpy as np, torch
            >>> from fbrapids.trainers.sparse.config import StoreConfig
            >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
            >>> d = RowDirectory(); g = d.admit(np.array([3, 4], dtype=np.uint64))
            >>> t = TierStack(StoreConfig(dim=2, cache_rows=4), "t", d, torch.device("cpu"))
            >>> t.slot_map is None, t.ensure_cached(g, 0, 0).tolist()
            (True, [0, 1])
            >>> t.attach_slot_map().probe(torch.tensor([4, 3, 5])).tolist()
            [1, 0, -1]
        """
        cm = self.cache.slots
        occ = cm.occupied()
        self.slot_map = SlotMap(cm.capacity, self.cache.device)
        self.slot_map.insert(self.dir.g2id[cm.owner[occ]], occ)
        return self.slot_map

    def one_ram_tier(self, device: torch.device) -> bool:
        """Whether the cache on ``device`` is the store's one RAM tier (see the module
        docstring): on the CPU with an unbounded host tier."""
        return torch.device(device).type == "cpu" and self.config.host_rows is None

    def to(self, device: torch.device) -> None:
        """Move the cache to ``device``; the id -> slot map exists exactly when it is on cuda
        (and cupy is installed).  Leaving the CPU, a grown cache keeps ``cache_rows`` rows (the
        most recently used) and moves the others down to host RAM; coming to it, the host
        rows move up into the one RAM tier."""
        growable = self.one_ram_tier(device)
        if torch.device(device) != self.cache.device:
            if not growable and self.cache.slots.capacity > self.config.cache_rows:
                self._shrink_cache(self.config.cache_rows)
            elif not growable and self.cache.slots.capacity < self.config.cache_rows:
                self.cache.grow(self.config.cache_rows)  # (a growable cache may start below cache_rows)
            self.cache.to(device)
            self.cache.growable = growable
            if growable:
                self._host_up()
        self.slot_map = None
        if self.cache.device.type == "cuda" and device_maps_available():
            self.attach_slot_map()

    def _shrink_cache(self, rows: int) -> None:
        """Keep at most ``rows`` rows in the cache (the most recently used; nothing may be
        pinned beyond them), the others moved down to host RAM; the cache then has ``rows``
        slots."""
        cache, d = self.cache, self.dir
        occ = cache.slots.occupied()
        if len(occ) > rows:
            order = np.argsort(d.last[cache.slots.owner[occ]], kind="stable")
            out = occ[order[: len(occ) - rows]]
            vg, moved, dirty = cache.slots.owner[out], cache.take(out), cache.slots.dirty[out].copy()
            d.cache_loc[vg] = -1
            cache.evict(out)
            self.host_insert(vg, moved, dirty)
        keep = cache.slots.occupied()
        rows_kept, owners, dirty = cache.take(keep), cache.slots.owner[keep], cache.slots.dirty[keep]
        fresh = CacheTier(rows, cache.width, cache.device)
        fresh.stats = cache.stats
        slots = fresh.slots.pop(len(keep))
        fresh.put(slots, rows_kept)
        fresh.slots.owner[slots], fresh.slots.dirty[slots] = owners, dirty
        d.cache_loc[owners] = slots
        self.cache = fresh

    def _host_up(self) -> None:
        """Move every host row up into the (growable) cache: the one RAM tier."""
        host, d = self.host, self.dir
        occ = host.slots.occupied()
        if not len(occ):
            return
        g = host.slots.owner[occ]
        rows, dirty = host.give_up(occ)
        d.host_loc[g] = -1
        slots = self.cache_alloc(len(g), -1)
        self.cache.put(slots, rows)
        self.cache.slots.owner[slots], self.cache.slots.dirty[slots] = g, dirty
        d.cache_loc[g] = slots

    # -- rows below the cache --------------------------------------------------------------
    def fresh_rows(self, g: np.ndarray) -> np.ndarray:
        """Initial full rows of global rows ``g`` (a function of id and seed)."""
        c = self.config
        rows = np.empty((len(g), c.width), dtype=np.float32)
        init_rows_into(self.dir.g2id[g], rows, c.dim, self.seed_mix, c.scale)  # = init_rows(), in C
        self.optimizer.init_state(rows)
        return rows

    def fetch_below(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows for ``g`` (none of them cached), taken out of host RAM, read from SSD, or new."""
        d = self.dir
        rows = np.empty((len(g), self.config.width), dtype=np.float32)
        dirty = np.zeros(len(g), dtype=bool)
        hs = d.host_loc[g]
        inh = hs >= 0
        hst, sst = self.host.stats, self.ssd_stats
        n_h = int(inh.sum())
        if n_h:
            rows[inh], dirty[inh] = self.host.give_up(hs[inh])
            d.host_loc[g[inh]] = -1
            hst.bytes_out += n_h * self.row_bytes
        hst.hits += n_h
        rest = ~inh
        hst.misses += int(rest.sum())
        if rest.any():
            gr = g[rest]
            on = d.on_ssd[gr]
            idx = np.flatnonzero(rest)
            if on.any():
                order = np.argsort(gr[on])  # read the file in row order
                got = np.empty((int(on.sum()), self.config.width), dtype=np.float32)
                got[order] = self.ssd_file().take(gr[on][order])
                rows[idx[on]] = got
                sst.hits += len(got)
                sst.bytes_out += len(got) * self.row_bytes
            new = ~on
            if new.any():
                rows[idx[new]] = self.fresh_rows(gr[new])
                dirty[idx[new]] = True  # not on SSD yet
                sst.misses += int(new.sum())
                self.new_rows += int(new.sum())
        return rows, dirty

    def ssd_file(self) -> SsdTier:
        """The SSD tier, for rows the directory marks ``on_ssd`` or the host tier lets go of."""
        if self.ssd is None:
            raise StoreError(f"table {self.name!r} has no SSD tier (StoreConfig.ssd_dir is None) but a row was to "
                             "be read from or written to it")
        return self.ssd

    def write_ssd(self, g: np.ndarray, rows: np.ndarray) -> None:
        order = np.argsort(g)
        self.ssd_file().put(g[order], rows[order])
        self.dir.on_ssd[g] = True
        self.ssd_stats.bytes_in += len(g) * self.row_bytes

    def host_insert(self, g: np.ndarray, rows: np.ndarray, dirty: np.ndarray) -> None:
        """Put rows into host RAM; a full bounded tier keeps the rows the eviction policy ranks
        highest among its victims and the incoming rows: the others go to the SSD file
        (written back when dirty), so a cold row leaving the cache never displaces a hotter one.
        It lets go of as many rows as it examined, or, under a policy that ``keeps_ram_full``,
        of only as many as the incoming rows need."""
        k = len(g)
        host, d = self.host, self.dir
        if host.slots.n_free < k:
            if not host.bounded:
                host.grow_for(k)
            else:
                need = k - host.slots.n_free
                used = host.slots.occupied()
                if need > len(used):  # more rows than the whole host tier: straight to SSD
                    self.write_ssd(g[dirty], rows[dirty])
                    return
                kk = min(max(need, int(host.slots.capacity * self.config.evict_fraction)), len(used))
                vic = self.policy.victims(d, host.slots.owner, used, kk, need)
                # drop the len(vic) (keeps_ram_full: need) lowest-ranked rows among the victims and the incoming rows
                keys = np.concatenate([self.policy.keys(d, host.slots.owner[vic]), self.policy.keys(d, g)])
                dropped = np.zeros(len(keys), dtype=bool)
                dropped[np.argsort(keys, kind="stable")[: need if self.policy.keeps_ram_full else len(vic)]] = True
                gone_in = dropped[len(vic):]
                if gone_in.any():
                    self.write_ssd(g[gone_in & dirty], rows[gone_in & dirty])
                    g, rows, dirty = g[~gone_in], rows[~gone_in], dirty[~gone_in]
                vic = vic[dropped[: len(vic)]]
                vg = host.slots.owner[vic]
                wb = host.slots.dirty[vic]
                if wb.any():
                    self.write_ssd(vg[wb], host.take(vic[wb]))
                    host.stats.bytes_out += int(wb.sum()) * self.row_bytes
                d.host_loc[vg] = -1
                host.evict(vic)
                host.stats.evictions += len(vic)
        d.host_loc[g] = host.hold(g, rows, dirty)

    # -- the cache ---------------------------------------------------------------------------
    def _too_small(self, pinned: int, more: int) -> StoreError:
        return StoreError(f"table {self.name!r}: cache_rows={self.config.cache_rows} is too small; the current "
                          f"and prefetched batches pin {pinned} rows and {more} more are needed")

    def cache_alloc(self, m: int, step: int) -> np.ndarray:
        """``m`` free cache slots, evicting unpinned rows down to host RAM when needed."""
        cache = self.cache
        cm = cache.slots
        if cm.n_free < m and cache.growable:
            cache.grow(self._grown_for(m))
        if cm.n_free < m:
            need = m - cm.n_free
            cand = cache.evictable(step)
            if len(cand) < need:
                raise self._too_small(cm.used - len(cand), m)
            k = min(max(need, int(cm.capacity * self.config.evict_fraction)), len(cand))
            vic = self.policy.victims(self.dir, cm.owner, cand, k, need)
            vg = cm.owner[vic]
            rows = cache.take(vic)
            dirty = cm.dirty[vic].copy()
            self.dir.cache_loc[vg] = -1
            cache.evict(vic)
            if self.slot_map is not None:
                self.slot_map.erase(self.dir.g2id[vg])
            cache.stats.evictions += len(vic)
            cache.stats.bytes_out += len(vic) * self.row_bytes
            self.host_insert(vg, rows, dirty)
        return cm.pop(m)

    def ensure_cached(self, g: np.ndarray, pin_step: int, step: int) -> np.ndarray:
        """Cache slots of rows ``g`` (distinct), bringing misses up; all pinned for ``pin_step``."""
        cache, d = self.cache, self.dir
        slots, n_miss = cache_slots(g, d.cache_loc)
        if n_miss > cache.slots.n_free:  # check before moving anything, so a failure loses no row
            hit = slots >= 0
            room = cache.room(step) - int((hit & (cache.pin[np.where(hit, slots, 0)] < step)).sum())
            if n_miss > room:
                raise self._too_small(self.config.cache_rows - room, n_miss)
        pin_slots(slots, cache.pin, pin_step)  # the cached ones
        if n_miss:
            miss = slots < 0
            slots[miss] = self.bring_up(g[miss], pin_step, step, checked=True)
        return slots

    def bring_up(self, gm: np.ndarray, pin_step: int, step: int, checked: bool = False) -> np.ndarray:
        """Cache slots for rows ``gm`` (distinct, none of them cached), brought up from host RAM,
        the SSD file or new, evicting unpinned rows; pinned for ``pin_step``.  The batch's rows
        already cached must be pinned first; unless ``checked``, the room is checked before
        anything moves.

        Example:
            >>> import numpy as np, torch
            >>> from fbrapids.trainers.sparse.config import StoreConfig
            >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
            >>> import tempfile
            >>> d = RowDirectory(); g = d.admit(np.array([3, 4, 5], dtype=np.uint64))
            >>> cfg = StoreConfig(dim=2, cache_rows=2, host_rows=2, ssd_dir=tempfile.mkdtemp())  # a bounded cache
            >>> t = TierStack(cfg, "t", d, torch.device("cpu"))
            >>> t.bring_up(g[:2], 0, 0).tolist(), d.cache_loc[g].tolist()
            ([0, 1], [0, 1, -1])
            >>> t.bring_up(g[2:], 0, 0)
            Traceback (most recent call last):
            ...
            fbrapids.errors.StoreError: table 't': cache_rows=2 is too small; the current and prefetched batches pin 2 rows and 1 more are needed
        """
        cache, d = self.cache, self.dir
        if cache.table is not None and (cache.growable or cache.slots.n_free >= len(gm)):
            placed = self.place_new(gm, pin_step)  # new rows into free slots: no move, no eviction
            if placed is not None:
                return placed
        if not checked and len(gm) > cache.slots.n_free:
            room = cache.room(step)
            if len(gm) > room:
                raise self._too_small(self.config.cache_rows - room, len(gm))
        rows, dirty = self.fetch_below(gm)
        new_slots = self.cache_alloc(len(gm), step)
        cache.put(new_slots, rows)
        cache.slots.owner[new_slots] = gm
        cache.slots.dirty[new_slots] = dirty
        d.cache_loc[gm] = new_slots
        if self.slot_map is not None:
            self.slot_map.insert(d.g2id[gm], new_slots)
        cache.pin[new_slots] = pin_step
        cache.stats.bytes_in += len(gm) * self.row_bytes
        return new_slots

    def hold_in_ram(self, g: np.ndarray, rows: np.ndarray) -> None:
        """Rows ``g`` (none of them held anywhere yet) put into RAM as they are, clean: into a
        growable cache (the one RAM tier), else host RAM (a loaded table with no SSD tier)."""
        if self.cache.growable:
            slots = self.cache_alloc(len(g), -1)
            self.cache.put(slots, rows)
            self.cache.slots.owner[slots] = g
            self.dir.cache_loc[g] = slots
            return
        self.host_insert(g, rows, np.zeros(len(g), dtype=bool))
        self.host.stats.bytes_in = 0

    def _grown_for(self, rows: int) -> int:
        """The slots a growable cache grows to for ``rows`` more: :data:`GROWTH` times its
        slots, and at least ``cache_rows`` (one that started below them, at
        :data:`~fbrapids.trainers.sparse.tiers.IN_PLACE_START`, goes there first: a table that
        outgrows its start grows as from ``cache_rows``)."""
        slots, first = self.cache.slots, self.config.cache_rows
        if slots.capacity < first and slots.used + rows <= first:  # started below cache_rows: there first
            return first
        return max(GROWTH * max(slots.capacity, first), slots.used + rows)

    def reserve(self, rows: int, in_place: bool = False) -> None:
        """A growable cache grown (now, on this thread) to have ``rows`` free slots, so that
        :meth:`place_new` of that many rows moves nothing (it may then run on another thread).
        ``in_place``: only as far as it grows in place (:meth:`CacheTier.in_place_rows
        <fbrapids.trainers.sparse.tiers.CacheTier.in_place_rows>`; another thread may be
        reading its arrays), a :class:`~fbrapids.errors.StoreMemoryError` past that."""
        cache = self.cache
        if not cache.growable or cache.slots.n_free >= rows:
            return
        want = self._grown_for(rows)
        if in_place:
            limit = cache.in_place_rows()
            if cache.slots.used + rows > limit:
                raise StoreMemoryError(f"table {self.name!r}: its cache's address space, reserved for {limit:,} rows, "
                                       f"cannot take {rows:,} more beside its {cache.slots.used:,}")
            want = min(want, limit)
        cache.grow(want)

    def place_new(self, gm: np.ndarray, pin_step: int) -> np.ndarray | None:
        """Cache slots for rows ``gm`` (distinct) that are all new (admitted, in no tier, not
        on the SSD file): their initial rows written straight into free slots of a CPU cache
        (grown if it is growable), pinned for ``pin_step``, in one C pass; None (nothing done)
        when a row is not new or there are too few free slots.

        Example:
            >>> import numpy as np, torch
            >>> from fbrapids.trainers.sparse.config import StoreConfig
            >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
            >>> d = RowDirectory()
            >>> t = TierStack(StoreConfig(dim=2, cache_rows=1), "t", d, torch.device("cpu"))  # grows: one RAM tier
            >>> new = d.admit(np.array([3, 4], dtype=np.uint64))
            >>> t.place_new(new, 0).tolist(), t.cache.slots.capacity, t.read_rows(new)[:, 2].tolist()
            ([0, 1], 4, [0.0, 0.0])
        """
        cache, c, m = self.cache, self.config, len(gm)
        if cache.table is None:
            return None
        self.reserve(m)
        if cache.slots.n_free < m:
            return None
        slots = cache.slots.pop(m)
        if not place_new(gm, slots, self.dir, cache.slots.owner, cache.slots.dirty, cache.pin, pin_step, cache.table,
                         c.dim, self.seed_mix, c.scale, self.initial_state):
            cache.slots.release(slots[::-1])
            return None
        if self.slot_map is not None:
            self.slot_map.insert(self.dir.g2id[gm], slots)
        cache.stats.bytes_in += m * self.row_bytes
        self.host.stats.misses += m
        self.ssd_stats.misses += m
        self.new_rows += m
        return slots

    def ram_tier_words(self, keys: np.ndarray, pin_step: int) -> tuple[list[int], PreparedBuffers]:
        """A batch's ``keys`` in one RAM tier, as one table's row of
        :func:`~fbrapids.trainers.sparse.hashmap.prepare_tables`' descriptors (several tables in
        one C call), and the buffers it fills: their distinct keys, inverse, counts and rows, the
        keys not admitted yet admitted and their initial rows placed in free slots, every row
        booked at ``pin_step`` (:meth:`~fbrapids.trainers.sparse.hashmap.UInt64HashMap.prepare_words`;
        a growable cache's slots are not pinned: it never evicts, nothing reads its pins);
        :meth:`note_placed` after it ran.  The caller has made room for every key
        (:meth:`reserve`, :meth:`RowDirectory.grow <fbrapids.trainers.sparse.row_directory.RowDirectory.grow>`).

        Example:
            >>> import numpy as np, torch
            >>> from fbrapids.trainers.sparse.config import StoreConfig
            >>> from fbrapids.trainers.sparse.hashmap import prepare_tables
            >>> from fbrapids.trainers.sparse.row_directory import RowDirectory
            >>> d = RowDirectory(); t = TierStack(StoreConfig(dim=2, cache_rows=4), "t", d, torch.device("cpu"))
            >>> words, bufs = t.ram_tier_words(np.array([3, 4, 3], dtype=np.uint64), 0)
            >>> prepare_tables(np.array([words])).tolist(), bufs.placed()
            ([0], (2, 3, 2))
            >>> t.note_placed(*bufs.placed()[::2]); bufs.found()[3].tolist(), len(d), d.cache_loc[:2].tolist(), t.new_rows
            ([0, 1], 2, [0, 1], 2)
        """
        d, cache, c = self.dir, self.cache, self.config
        return d.map.prepare_words(keys, len(d), d.g2id, d.cache_loc, cache.slots.free, cache.slots.n_free,
                                   cache.slots.owner, cache.slots.dirty, None if cache.growable else cache.pin, pin_step,
                                   cache.host_table(), c.dim,
                                   self.seed_mix, c.scale, self.initial_state, d.last, d.freq)

    def note_placed(self, new: int, left: int) -> None:
        """Count ``new`` rows a C pass admitted and placed in free slots, ``left`` of them left."""
        cache = self.cache
        cache.slots.n_free = left
        self.dir.note_admitted(new)
        cache.stats.bytes_in += new * self.row_bytes
        self.host.stats.misses += new
        self.ssd_stats.misses += new
        self.new_rows += new

    # -- reading in place --------------------------------------------------------------------
    def read_rows(self, g: np.ndarray) -> np.ndarray:
        """Current full rows of global rows ``g``, wherever they are (nothing moves)."""
        d = self.dir
        out = np.empty((len(g), self.config.width), dtype=np.float32)
        cs = d.cache_loc[g]
        hs = d.host_loc[g]
        inc, inh = cs >= 0, hs >= 0
        if inc.any():
            out[inc] = self.cache.take(cs[inc])
        if inh.any():
            out[inh] = self.host.take(hs[inh])
        rest = ~(inc | inh)
        if rest.any():
            on = np.zeros(len(g), dtype=bool)
            if self.ssd is not None:
                on[rest] = d.on_ssd[g[rest]]
                if on.any():
                    gon = g[on]
                    order = np.argsort(gon)
                    got = np.empty((len(gon), self.config.width), dtype=np.float32)
                    got[order] = self.ssd.take(gon[order])
                    out[on] = got
            fresh = rest & ~on  # admitted, never materialised: still its initial value
            if fresh.any():
                out[fresh] = self.fresh_rows(g[fresh])
        return out

    def read_through(self, g: np.ndarray) -> np.ndarray:
        """Rows ``g`` read from wherever they are, without moving them up; rows never
        materialised are created in host RAM."""
        d = self.dir
        nowhere = (d.cache_loc[g] < 0) & (d.host_loc[g] < 0)
        if self.ssd is not None:
            self.ssd_stats.hits += int((nowhere & d.on_ssd[g]).sum())
            nowhere &= ~d.on_ssd[g]
        if nowhere.any():
            gn = g[nowhere]
            self.host_insert(gn, self.fresh_rows(gn), np.ones(len(gn), dtype=bool))
            self.ssd_stats.misses += len(gn)
            self.new_rows += len(gn)
        return self.read_rows(g)

    def write_back_dirty(self) -> None:
        """Write every dirty row of the cache and host RAM to the SSD file (marked clean)."""
        for tier_slots, rows_of in ((self.cache.slots, self.cache.take),
                                    (self.host.slots, self.host.take)):
            slots = tier_slots.dirty_occupied()
            if len(slots):
                self.write_ssd(tier_slots.owner[slots], rows_of(slots))
                tier_slots.dirty[slots] = False
