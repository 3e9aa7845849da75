"""The tiered embedding store: rows keyed by raw uint64 ids over cache / host RAM / SSD.

One table is four parts, each in its own module:

* :mod:`~fbrapids.trainers.sparse.row_directory` - id -> global row, with the admission gate;
* :mod:`~fbrapids.trainers.sparse.tiers`, :mod:`~fbrapids.trainers.sparse.ssd` and
  :mod:`~fbrapids.trainers.sparse.hierarchy` - the cache (a torch tensor on the
  training device), host RAM (numpy) and the SSD file (a SIGBUS-safe map), and rows
  moving between them;
* :mod:`~fbrapids.trainers.sparse.policies` - which rows a full tier evicts (LRU, LFU, and
  LFU after the rows announced batches use again, :mod:`~fbrapids.trainers.sparse.lookahead`);
* :mod:`~fbrapids.trainers.sparse.optim` - the sparse optimizers (row-wise Adagrad, SGD);
* :mod:`~fbrapids.trainers.sparse.persistence` - flush, save, load.

This module is the per-batch face: :meth:`TieredEmbeddingStore.lookup`,
:meth:`~TieredEmbeddingStore.prefetch`, :meth:`~TieredEmbeddingStore.announce` (upcoming
batches, for the ``lfu_window`` eviction), :meth:`~TieredEmbeddingStore.apply_gradients`
and :meth:`~TieredEmbeddingStore.stats`.

Ids are raw 64-bit keys, never reduced modulo a table size.  Negative int64 ids are read
as uint64 by two's complement (``np.int64(-1)`` is the id ``2**64 - 1``), the same bits as
``arr.view(np.uint64)``; so int64 and uint64 columns holding the same bits share rows.

Per batch, :meth:`~TieredEmbeddingStore.lookup` finds the unique ids and maps them to
global rows with C hash tables (one pass each), admits new ids (after ``admit_after``
sightings; until then they read a shared all-zero default row whose gradient is dropped),
brings missing rows into the cache (from host RAM, else the SSD file, else a fresh row
initialised from ``(id, seed)``), evicting unpinned rows when the cache is full.  Rows of
the current batch and of a batch announced with :meth:`~TieredEmbeddingStore.prefetch`
are pinned and never evicted.  :meth:`~TieredEmbeddingStore.apply_gradients` runs the
sparse optimizer on the cached rows.

On a CUDA cache, the batch's ids are made unique on the device and probed in the
cache's id -> slot map there (:mod:`~fbrapids.trainers.sparse.slot_map`); only the ids it
misses are looked up in the host directory (``stats()["host_directory_lookups"]`` vs
``["device_map_hits"]``).  The rest of the per-batch bookkeeping is the CPU path's, so
both train the same rows.

The cache lives on the store's ``device`` (:func:`fbrapids.trainers.device.resolve_device`
unless ``StoreConfig.device`` says); :meth:`~TieredEmbeddingStore.to` moves it, and a
module owning stores moves them with ``module.to(device)``.  Lookup rows and indices are
on that device.

Example:
    >>> import numpy as np, torch
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, optimizer="sgd", lr=1.0, device="cpu"))
    >>> lk = store.lookup(np.array([2**64 - 1, 5, 5], dtype=np.uint64))
    >>> pooled = torch.nn.functional.embedding_bag(lk.inverse, lk.rows, torch.tensor([0]), mode="sum")
    >>> pooled.sum().backward()
    >>> store.apply_gradients(lk)
    >>> store.stats()["cache"]["misses"], len(store)
    (2, 2)
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence, TypeAlias, TypeVar, Union

import numpy as np
import numpy.typing as npt
import torch

from fbrapids.errors import ArgumentError, InputTypeError, RowIndexError, StoreError, StoreMemoryError
from fbrapids.trainers.device import resolve_device
from fbrapids.trainers.sparse import persistence
from fbrapids.trainers.sparse.config import StoreConfig
from fbrapids.trainers.sparse.hashmap import (
    PreparedBuffers,
    gather_cols,
    lookup_pass,
    pin_slots,
    prepare_tables,
    record_stride,
    store_touch,
    unbook_rows,
)
from fbrapids.trainers.sparse.hierarchy import TierStack
from fbrapids.trainers.sparse.row_directory import Ids, RowDirectory, as_uint64_ids
from fbrapids.trainers.sparse.slot_map import SlotMap

log = logging.getLogger(__name__)

__all__ = ["Lookup", "TieredEmbeddingStore", "as_uint64_ids", "sparse_update"]

#: a batch's ids as compared with a prefetched batch's: a host uint64 array or a device int64 tensor
Keys: TypeAlias = Union[np.ndarray, torch.Tensor]
#: distinct keys (first-occurrence order), the inverse (an array, or a tensor on a device
#: cache), their counts and their global rows (-1: not admitted)
Found: TypeAlias = tuple[np.ndarray, Union[np.ndarray, torch.Tensor], np.ndarray, np.ndarray]
_I = TypeVar("_I", bound=Ids)


#: a table's counters (:meth:`TieredEmbeddingStore.stats`): counts and rates, and each tier's counters
TableStats: TypeAlias = dict[str, Union[int, float, dict[str, int]]]


class ReadOnlyFlag(Protocol):
    """A table that can be made read-only (:func:`read_only`)."""

    read_only: bool


_OPEN_SSD_DIRS: "weakref.WeakValueDictionary[str, TieredEmbeddingStore]" = weakref.WeakValueDictionary()
_PREFETCH: list[ThreadPoolExecutor] = []


def _prefetch_thread() -> ThreadPoolExecutor:
    """The one background thread :meth:`TieredEmbeddingStore.prepare` hashes batches in
    (its C calls release the GIL: it runs beside the training step)."""
    if not _PREFETCH:
        _PREFETCH.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="fbrapids-prefetch"))
    return _PREFETCH[0]


def _n_ids(ids: Ids) -> int:
    """How many ids a batch holds."""
    return ids.numel() if isinstance(ids, torch.Tensor) else int(np.size(ids))


def same_keys(stash: _Stash, keys: Keys) -> bool:
    """Whether a stash was found for ``keys`` (the same ids, in order)."""
    if stash.keys is None or len(stash.keys) != len(keys):
        return False
    if isinstance(keys, torch.Tensor):  # a device cache's stash holds a tensor too
        return isinstance(stash.keys, torch.Tensor) and bool(torch.equal(stash.keys, keys))
    return bool(np.array_equal(stash.keys, keys))


_ALL_ADMITTED = np.ones(0, dtype=bool)


def all_admitted(n: int) -> np.ndarray:
    """A read-only mask of ``n`` True values (a :class:`Lookup`'s ``admitted`` when every row
    is): a view of one shared array, grown as needed, not a new array a table a step.

    Example:
        >>> all_admitted(3).tolist(), all_admitted(3).flags.writeable
        ([True, True, True], False)
    """
    global _ALL_ADMITTED
    mask = _ALL_ADMITTED
    if len(mask) < n:
        mask = np.ones(max(n, 2 * len(mask), 1 << 16), dtype=bool)
        mask.flags.writeable = False
        _ALL_ADMITTED = mask
    return mask[:n]


def prepare_together(stores: Sequence["TieredEmbeddingStore"], ids: Sequence[Ids]) -> None:
    """:meth:`TieredEmbeddingStore.prepare` of ``stores[t]`` with ``ids[t]`` for every t, their
    background work as one job of the prefetch thread: the tables of one RAM tier in one C call
    (:class:`PlaceAhead`), the others after them, in order (a failure is kept for the lookup of
    its own table, the others go on)."""
    done: Future = Future()
    ahead: list[PlaceAhead] = []
    work: list[Callable[[], None]] = []
    try:
        for s, i in zip(stores, ids):
            w = s.prepare_work(i, done)
            if isinstance(w, PlaceAhead):
                ahead.append(w)
            elif w is not None:
                work.append(w)
    except BaseException:
        done.set_result(None)  # the stashes made so far are found empty, never waited for in vain
        raise
    if not work and not ahead:
        done.set_result(None)
        return

    def run() -> None:
        try:
            if ahead:
                place_ahead(ahead)
            for w in work:
                w()
        finally:
            done.set_result(None)

    _prefetch_thread().submit(run)


@dataclass
class PlaceAhead:
    """One table's part of a prepare in one RAM tier (:meth:`TieredEmbeddingStore.prepare`):
    its batch's ids found, the new ones admitted and placed, and its lookup's bookkeeping done
    ahead, with every other such table's in one C call (:func:`place_ahead`)."""

    store: "TieredEmbeddingStore"
    stash: "_Stash"
    pin_step: int
    grows_cache: bool = False  # room in the cache made here, in place (else by the caller, before)

    def words(self) -> tuple[list[int], PreparedBuffers]:
        """The table's row of :func:`~fbrapids.trainers.sparse.hashmap.prepare_tables`' descriptors
        (room made first for every key as a new row: in the directory, and in the cache when
        it ``grows_cache``) and the buffers it fills."""
        self.stash.keys = keys = as_uint64_ids(self.stash.source).ravel()  # (made contiguous by prepare_words)
        d = self.store.directory
        d.grow(len(d) + len(keys))  # room for every key as a new row
        if self.grows_cache:
            self.store.tiers.reserve(len(keys), in_place=True)
        return self.store.tiers.ram_tier_words(keys, self.pin_step)

    def finish(self, bufs: PreparedBuffers, rc: int) -> None:
        """Count what the C call did and fill in the stash (or its error)."""
        if rc == -1:
            raise StoreMemoryError(f"table {self.store.name!r}: out of memory for the id map, admitting a batch of "
                                   f"{len(bufs.keys)} ids")
        if rc in (-2, -4):
            raise RowIndexError(f"table {self.store.name!r}: no room made for the batch's new rows, or a free slot out "
                                "of range")
        new, occ, left = bufs.placed()
        self.store.tiers.note_placed(new, left)
        if rc != 0:
            raise RowIndexError(f"table {self.store.name!r}: a row out of range or not cached, booking a batch ahead")
        st = self.stash
        st.found, st.placed, st.complete = bufs.found(), (new, occ), True
        st.booked = bufs.booked(self.pin_step)
        st.admitted = len(self.store.directory)


def place_ahead(parts: Sequence[PlaceAhead]) -> None:
    """Every part's prepare in one C call (:func:`~fbrapids.trainers.sparse.hashmap.prepare_tables`:
    Python's lock released once for all the tables); an error goes to its own table's stash."""
    ready: list[tuple[PlaceAhead, list[int], PreparedBuffers]] = []
    for p in parts:
        try:
            ready.append((p, *p.words()))
        except BaseException as exc:  # raised by the lookup that waits for it
            p.stash.error = exc
    if not ready:
        return
    ret = prepare_tables(np.array([w for _, w, _ in ready], dtype=np.int64))
    for (p, _, bufs), rc in zip(ready, ret):
        try:
            p.finish(bufs, int(rc))
        except BaseException as exc:
            p.stash.error = exc


class HandedUpdate(NamedTuple):
    """An update of a table's cached rows running on the prefetch thread, as
    :meth:`TieredEmbeddingStore.handed_update` hands it over: the job, and where it counts the
    tables it is done with (``progress``, ``[1]`` int64, or None: wait for the whole job), the
    count at which this table's rows are updated (``need``)."""

    job: Future
    progress: np.ndarray | None
    need: int


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
        gathered: ``rows`` holds the rows' values (False: a lookup that left them where they
            lie in the cache table, :func:`~fbrapids.trainers.sparse.together.lookup_together`
            with ``gather=False``; read them through :attr:`places`).
    """

    rows: torch.Tensor
    inverse: torch.Tensor
    ids: np.ndarray
    admitted: np.ndarray
    slots: np.ndarray
    step: int
    full: torch.Tensor | None = None
    version: int = -1
    gathered: bool = True
    in_table: np.ndarray | None = None  # (see places)

    @property
    def places(self) -> np.ndarray:
        """Each of ``rows``' place in the cache table, -1 for an id not admitted (the default
        row): where a lookup that did not gather (``gathered`` False) left them."""
        return self.in_table if self.in_table is not None else self.slots


@dataclass
class LookupStart:
    """A lookup under way (:meth:`TieredEmbeddingStore.start_lookup`): the distinct ids in
    first-occurrence order, the inverse, their counts, their global rows, which are admitted
    (None: all), how many, and the rows (and occurrences) a prepare placed ahead of it."""

    uniq: np.ndarray
    inverse: np.ndarray | torch.Tensor
    occ: np.ndarray
    g: np.ndarray
    adm: np.ndarray | None
    n_adm: int
    placed: tuple[int, int] = (0, 0)
    booked: tuple | None = None  # its bookkeeping done ahead by a prepare: (step, slots, last steps before, counters)


@dataclass
class _Stash:
    """What :meth:`TieredEmbeddingStore.prefetch` / :meth:`~TieredEmbeddingStore.prepare`
    found for the batch to be looked up next: ``source`` (the ids object it was given: the
    same object looked up needs no comparison), ``keys`` (the ids as compared otherwise),
    ``found`` (distinct keys, inverse, counts, rows), ``admitted`` (the table's rows then: a
    later admission makes it stale) and ``placed`` (new rows a prepare admitted and placed
    ahead, and their occurrences: counted as new by the lookup).  A prepare's thread fills
    them in; ``job`` is its work until :meth:`TieredEmbeddingStore._settle` waits for it."""

    source: Ids
    keys: Keys | None = None
    found: Found | None = None
    admitted: int = -1
    placed: tuple[int, int] = (0, 0)
    job: Future | None = None
    error: BaseException | None = None
    complete: bool = False  # every row of ``found`` admitted (a prepare placed the new ones)
    booked: tuple | None = None  # (step, slots, last steps before, counters): its lookup's bookkeeping, done ahead
    step: int = -1  # the step of the lookup a prepare in one RAM tier booked it for


def sparse_update(rows: torch.Tensor, grad: torch.Tensor, config: StoreConfig) -> torch.Tensor:
    """The sparse optimizer of ``config`` on full rows ``[n, width]`` (embedding, then the
    optimizer state), in place; returns ``rows``.

    Every operation is element-wise or a reduction within a row, so updating several
    tables' rows in one call gives the same bits as one call per table.

    Example:
        >>> import torch
        >>> r = torch.tensor([[1.0, 0.0]]); _ = sparse_update(r, torch.tensor([[2.0]]), StoreConfig(dim=1, lr=0.5))
        >>> r.tolist()
        [[0.5, 4.0]]
    """
    return config.sparse_optimizer().update(rows, grad)


@contextlib.contextmanager
def read_only(stores: Iterable[ReadOnlyFlag]) -> Iterator[None]:
    """``stores`` read-only for the block (:attr:`TieredEmbeddingStore.read_only`), as a
    served model's are, each restored after: held-out rows are predicted as they are served
    (an id no training batch admitted reads the default row; nothing is admitted, no
    sighting counted), so an offline prediction is the served score.

    Example:
        >>> from fbrapids.trainers.sparse import StoreConfig
        >>> s = TieredEmbeddingStore(StoreConfig(cache_rows=8, dim=4))
        >>> with read_only([s]):
        ...     seen = s.read_only
        >>> seen, s.read_only
        (True, False)
    """
    stores = list(stores)
    before = [st.read_only for st in stores]
    for st in stores:
        st.read_only = True
    try:
        yield
    finally:
        for st, was in zip(stores, before):
            st.read_only = was


class TieredEmbeddingStore:
    """One embedding table over the three tiers; see the module docstring.

    Args:
        config: tier sizes, optimizer, initialisation.
        name: table name (the SSD files go to ``config.ssd_dir / name``).
        device: where the cache tier lives when ``config.device`` is None (default: the
            device rule, :func:`fbrapids.trainers.device.resolve_device`).
    """

    def __init__(self, config: StoreConfig, name: str = "table", device: str | torch.device | None = None) -> None:
        self.config = config
        self.name = name
        self.device = resolve_device(config.device or device)
        if config.ssd_dir is not None:
            key = str((Path(config.ssd_dir) / name).resolve())
            if not name or not Path(key).is_relative_to(Path(config.ssd_dir).resolve()) or \
                    Path(key) == Path(config.ssd_dir).resolve():
                raise StoreError(f"table {name!r}: its SSD files would leave {config.ssd_dir} (a table name is a "
                                 "folder inside ssd_dir); refused")
            other = _OPEN_SSD_DIRS.get(key)
            if other is not None and other is not self:
                raise StoreError(f"table {name!r}: SSD directory {key} is already used by another live table; "
                                 "give tables distinct names or ssd_dir")
            _OPEN_SSD_DIRS[key] = self
        self.version = 0  # bumped by every write to cached rows other than moving rows in (never reset)
        self.read_only = False
        try:
            self.reset()
        except BaseException:  # e.g. the SSD folder is held by another process: this table never lived
            if config.ssd_dir is not None and _OPEN_SSD_DIRS.get(key) is self:
                del _OPEN_SSD_DIRS[key]
            raise

    # -- state -------------------------------------------------------------------
    def reset(self) -> None:
        """Empty the table (every tier, the directory, the counters)."""
        c = self.config
        if getattr(self, "_prefetched", None) is not None or getattr(self, "_update", None) is not None or \
                getattr(self, "_ahead", None) is not None:
            self._settle()
        old = getattr(self, "tiers", None)
        if old is not None and old.ssd is not None:
            old.ssd.close()
        self.directory = RowDirectory(c.admit_after)
        self.tiers = TierStack(c, self.name, self.directory, self.device)
        self.optimizer = self.tiers.optimizer
        self._step = 0
        self._prefetched: _Stash | None = None  # what the last prefetch / prepare found
        self._ahead: _Stash | None = None  # a prepare of the batch after that one (two deep: prepare_work)
        self._looked_at = -1  # the step of the last lookup (a prepare is for this step's lookup if none yet)
        self.version += 1
        self._counts = {"lookups": 0, "unique_lookups": 0, "default_reads": 0, "prefetched_rows": 0,
                        "device_map_hits": 0, "host_directory_lookups": 0, "unseen_reads": 0,
                        "announced_rows": 0}
        self._served = {"cache": 0, "host": 0, "ssd": 0, "new": 0, "default": 0}
        # the rows (and occurrences) a prepare placed ahead for the lookup under way: every row of it admitted
        self._placed: tuple[int, int] | None = None
        self._booked: tuple | None = None  # the bookkeeping the stash the lookup under way took had done ahead
        self._words_of: tuple | None = None  # (arrays, their words) of pass_words
        self._addresses: dict[str, tuple[np.ndarray, int]] = {}  # role -> (array, its address): _address
        self._update: Future | None = None  # an update of the cached rows running on the prefetch thread
        self._update_progress: tuple[np.ndarray, int] | None = None  # its counter of tables done, this one's number
        self._default = torch.zeros(c.dim, dtype=torch.float32, device=self.device)

    def __len__(self) -> int:
        """Rows admitted so far."""
        self._settle()
        return len(self.directory)

    @property
    def unseen_reads(self) -> int:
        """``stats()["unseen_reads"]`` without building the whole ``stats()`` (a scorer reads
        it around every slice)."""
        return self._counts["unseen_reads"]

    @property
    def read_only(self) -> bool:
        """Whether lookups leave the table as it is (serving): an id without a row reads the
        default row (zeros) and is counted in ``stats()["unseen_reads"]``; nothing is
        admitted and no sighting is counted toward ``admit_after``, so the rows and the
        admission state stay what the checkpoint holds whatever ids are looked up.

        Example:
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))
            >>> s.read_only = True
            >>> s.lookup(np.array([1, 2, 2]), requires_grad=False).rows.tolist(), len(s), s.stats()["unseen_reads"]
            ([[0.0, 0.0], [0.0, 0.0]], 0, 2)
            >>> s.lookup(np.array([1]))  # training on it: refused, never silently unlearned
            Traceback (most recent call last):
            ...
            fbrapids.errors.StoreError: table ... is read-only (a Scorer serves it): ...
        """
        return self._read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._read_only = bool(value)

    @property
    def step(self) -> int:
        return self._step

    def restore_step(self, step: int) -> None:
        """Continue counting steps from ``step`` (after loading a saved table)."""
        self._step = int(step)

    def to(self, device: str | torch.device) -> "TieredEmbeddingStore":
        """Move the cache tier (and the default row) to ``device``; returns ``self``.

        Example:
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))
            >>> s.to("cpu").device
            device(type='cpu')
        """
        device = torch.device(device)
        self._drop_stashes()  # what the prepares pending found and booked is for the old cache
        self.tiers.to(device)
        self.device = self.tiers.cache.device
        self._default = self._default.to(self.device)
        return self

    # -- the per-batch API -----------------------------------------------------------------
    def lookup(self, ids: Ids, requires_grad: bool = True, leaf: bool = True) -> Lookup:
        """Rows for a batch of ids, pinned in the cache until :meth:`end_step`.

        Args:
            ids: raw ids (uint64, or int64 read as two's-complement uint64), any shape.
            requires_grad: the rows will be trained: make ``rows`` a leaf that collects
                gradients (and never read a batch larger than the cache through).
            leaf: with ``False``, ``rows`` is not made a separate leaf (it may share memory
                with ``full``): for callers that copy the rows into their own leaf and hand
                the gradient to :meth:`apply_gradients` themselves.

        A read-only table (serving) refuses ``requires_grad``: training on it would never
        learn an id it has no row for (a :class:`~fbrapids.errors.StoreError`).
        """
        begun = self.start_lookup(ids, requires_grad)
        if self.tiers.cache.table is not None:
            slots, got, touched = self.host_pass(begun, requires_grad)
            return self.finish_lookup(begun, slots, got, touched, requires_grad, leaf)
        slots, rows, full = self._device_rows(begun, requires_grad, leaf)
        return self._made(begun, slots, rows, full, requires_grad and leaf)

    def start_lookup(self, ids: Ids, requires_grad: bool = True) -> LookupStart:
        """The first part of :meth:`lookup`: the distinct ids and their rows (those of the
        last :meth:`prefetch` / :meth:`prepare` when it saw these ids), the new ones admitted;
        the counters of lookups.  :meth:`host_pass` (or a pass over several tables,
        :func:`fbrapids.trainers.sparse.together.lookup_together`) and :meth:`finish_lookup`
        make it a :class:`Lookup`."""
        if requires_grad and self.read_only:
            raise StoreError(f"table {self.name!r} is read-only (a Scorer serves it): training on it would never learn "
                             "unseen ids; set store.read_only = False on each of model.stores() to train again")
        d, tiers = self.directory, self.tiers
        window = tiers.policy.window
        if window is not None:
            window.begin(self._step)
        self._looked_at = self._step
        if tiers.slot_map is not None:  # unique ids and their cache slots found on the device
            uniq, inverse, occ, g = self._unique_rows_on_device(ids, tiers.slot_map)
        else:
            uniq, inverse, occ, g = self._unique_rows(ids)  # first-occurrence order
        placed, self._placed = self._placed, None
        booked, self._booked = self._booked, None
        # a prepare that placed the new rows leaves every row admitted
        missing = np.flatnonzero(g < 0) if placed is None else ()
        if len(missing) and self.read_only:  # serving: never a new row, never a sighting counted
            self._counts["unseen_reads"] += len(missing)
        elif len(missing):
            g[missing] = d.admit(uniq[missing])
        adm = g >= 0 if len(missing) else None  # None: every row admitted
        n_adm = len(g) if adm is None else int(adm.sum())
        counts = self._counts
        counts["lookups"] += len(inverse)
        counts["unique_lookups"] += len(uniq)
        counts["default_reads"] += len(uniq) - n_adm
        return LookupStart(uniq, inverse, occ, g, adm, n_adm, placed or (0, 0), booked)

    def host_pass(self, begun: LookupStart, requires_grad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A CPU cache's pass over a started lookup's rows (one C call): last / freq, which
        tier serves each occurrence, the cache slots (-1: not cached or not admitted), the
        hits pinned (training) and their embeddings gathered.  Returns ``(slots, rows
        [len(g), dim], counters [6])`` for :meth:`finish_lookup`."""
        cache = self.tiers.cache
        if begun.booked is not None:  # booked ahead: the rows only gathered
            _, slots, _, touched = begun.booked
            return slots.copy(), gather_cols(cache.host_table(), slots, self.config.dim), touched.copy()
        touched = np.zeros(6, dtype=np.int64)
        slots, got, _ = lookup_pass(begun.g, begun.occ, self.directory, cache.pin,
                                    self._step if requires_grad else -1, cache.host_table(), self.config.dim, self._step,
                                    touched)
        return slots, got, touched

    def pass_words(self, begun: LookupStart, slots: int, rows: int, touched: int, requires_grad: bool) -> list[int]:
        """:meth:`host_pass`'s arguments as a row of ``fbx_lookup_tables``' descriptors (see
        :func:`~fbrapids.trainers.sparse.hashmap.lookup_tables`), its outputs written at the
        addresses ``slots`` (``len(begun.g)`` int64), ``rows`` (``[len(begun.g), dim]``
        float32; 0 for a booked lookup: its rows are not gathered) and ``touched`` (6 int64),
        which the caller vouches for; the table's own arrays checked once per reallocation."""
        g, occ = begun.g, begun.occ
        if g.dtype != np.int64 or occ.dtype != np.int64 or len(occ) != len(g) or not g.flags.c_contiguous \
                or not occ.flags.c_contiguous:
            raise ArgumentError(f"table {self.name!r}: pass_words wants contiguous int64 rows and counts")
        step = self._step
        if rows == 0 and begun.booked is None and requires_grad:
            raise ArgumentError(f"table {self.name!r}: only a booked lookup, or one for no gradient, may leave its rows "
                                "ungathered")
        if begun.booked is not None:  # only its rows gathered: the directory's arrays, which a prepare of the
            table = self.tiers.cache.table  # batch after may be growing meanwhile, are not read
            assert table is not None  # (booked: a CPU cache)
            words = [0, 0, 0, 0, 0, 1, 0, 0, table.shape[0], self._address("table", table), table.shape[1]]
        else:
            words = self._table_words()
        return [g.ctypes.data, occ.ctypes.data, len(g), *words, slots, rows, touched, step,
                step if requires_grad else -1, self.config.dim, 0 if begun.booked is None else 1]

    def _table_words(self) -> list[int]:
        """The directory's and the cache's arrays as :meth:`pass_words` passes them (checked
        as :func:`~fbrapids.trainers.sparse.hashmap.lookup_pass` checks them), kept until one
        of them is reallocated."""
        d, cache = self.directory, self.tiers.cache
        key = (d.records, d.on_ssd, cache.pin, cache.table)
        if self._words_of is None or any(a is not b for a, b in zip(key, self._words_of[0])):
            table = cache.table
            rs = record_stride("pass_words", d.cache_loc, d.host_loc, d.last, d.freq)
            if table is None or table.dtype != np.float32 or not table.flags.c_contiguous or \
                    table.shape[1] < self.config.dim or len(cache.pin) < table.shape[0] or \
                    cache.pin.dtype != np.int64 or d.on_ssd.dtype != np.bool_:
                raise ArgumentError(f"table {self.name!r}: a CPU cache's float32 table with a pin per slot")
            n_rows = min(len(d.cache_loc), len(d.on_ssd))
            words = [d.cache_loc.ctypes.data, d.host_loc.ctypes.data, d.on_ssd.ctypes.data, d.last.ctypes.data,
                     d.freq.ctypes.data, rs, n_rows, cache.pin.ctypes.data, table.shape[0], table.ctypes.data,
                     table.shape[1]]
            self._words_of = (key, words)
        return self._words_of[1]

    def adagrad_words(self, lookup: Lookup, grad: np.ndarray) -> tuple[list[int], tuple[float, float]] | None:
        """``lookup``'s row-wise Adagrad update as a row of ``fbx_rowwise_adagrad_tables``'
        descriptors and its (lr, eps), given its gradient ``grad`` ``[len(lookup.slots), dim]``
        (C-contiguous float32); None when the update cannot run there (a device cache, another
        optimizer, weight decay: its gradient is the decayed one): then :meth:`update_rows`.  The caller bumps :attr:`version` after it ran
        (:meth:`updated`)."""
        cache = self.tiers.cache
        if cache.table is None or self.optimizer.name != "adagrad" or self.optimizer.weight_decay:
            return None
        self.check_current(lookup)
        # the table read before its dirty flags: a growth in place on the prefetch thread lengthens the slots'
        # arrays before the rows (CacheTier.grow), so the flags are at least as long as the table read
        table = cache.table
        dirty, slots = cache.slots.dirty, lookup.slots
        if grad.dtype != np.float32 or grad.shape != (len(slots), self.config.dim) or not grad.flags.c_contiguous \
                or slots.dtype != np.int64 or not slots.flags.c_contiguous or len(dirty) < table.shape[0]:
            raise ArgumentError(f"table {self.name!r}: a float32 gradient row per slot")
        words = [self._address("table", table), table.shape[0], table.shape[1], slots.ctypes.data, len(slots),
                 grad.ctypes.data, self._address("dirty", dirty), self.config.slice_dim, self.config.slices]
        return words, (self.optimizer.lr, self.optimizer.eps)

    def _address(self, role: str, array: np.ndarray) -> int:
        """``array.ctypes.data`` of the table's own long-lived array ``role`` (the cache's rows,
        its dirty flags), kept while that is the same array (a growth that replaces it replaces
        the one kept, which is then let go): about a microsecond a call saved, several calls a
        table a step."""
        kept = self._addresses.get(role)
        if kept is None or kept[0] is not array:
            kept = self._addresses[role] = (array, array.ctypes.data)
        return kept[1]

    def updated(self) -> None:
        """Note an update of cached rows made outside :meth:`update_rows` (the gathered
        ``Lookup.full`` of earlier lookups is stale)."""
        self.version += 1

    def handed_update(self) -> HandedUpdate | None:
        """The update of this table's cached rows still running on the prefetch thread
        (:meth:`update_in_background`), handed to the caller, who waits for it before the
        table's cached rows are next read or written; this table no longer does.  For a
        lookup that starts (:meth:`start_lookup`: the directory, the stash of a prepare, the
        counters; none of the cached rows) beside the update and waits only before its pass
        (:func:`~fbrapids.trainers.sparse.together.lookup_together`), or, where the update
        counts the tables it is done with, only until it is done with this one."""
        job, self._update = self._update, None
        progress, self._update_progress = self._update_progress, None
        if job is None:
            return None
        return HandedUpdate(job, None, 0) if progress is None else HandedUpdate(job, *progress)

    def update_in_background(self, job: Future, progress: np.ndarray | None = None, need: int = 0) -> None:
        """``job`` (running on the prefetch thread) updates this table's cached rows: every
        later use of the table (a lookup, a prepare, a save, ...) waits for it first, so the
        caller goes on meanwhile (``fit``'s dense optimizer step, the next batch's bottom MLP).
        ``progress`` (``[1]`` int64): the job counts the tables it is done with there, this
        table's rows being updated once it reaches ``need`` (a lookup's pass of this table may
        then go on while the job updates the tables after it)."""
        if self._update is not None and self._update is not job:
            self._update.result()
            self._update_progress = None
        if progress is not None and self._update_progress is not None and self._update is job:
            need = max(need, self._update_progress[1])  # (a table updated twice by one job: after both)
        self._update = job
        self._update_progress = None if progress is None else (progress, int(need))

    def finish_lookup(self, begun: LookupStart, slots: np.ndarray, got: np.ndarray, touched: np.ndarray,
                      requires_grad: bool, leaf: bool = True) -> Lookup:
        """The last part of a CPU cache's :meth:`lookup`, after its :meth:`host_pass`: the
        counters, the misses brought up (or, for a read-only batch larger than the cache, read
        through), the :class:`Lookup` (its rows are ``got``, not copied)."""
        tiers, dim, step = self.tiers, self.config.dim, self._step
        cache, g, adm = tiers.cache, begun.g, begun.adm
        n_miss = begun.n_adm - self._count_served(touched, begun.n_adm, begun.placed)
        if not requires_grad and n_miss > cache.slots.n_free and n_miss > cache.room(step):
            # a read-only batch larger than the cache can take: read through, cache nothing
            ga = g if adm is None else g[adm]
            rows = torch.from_numpy(np.ascontiguousarray(tiers.read_through(ga)[:, :dim]))
            if adm is not None:
                rows = self._default.expand(len(g), dim).clone().index_copy_(
                    0, torch.from_numpy(np.flatnonzero(adm)), rows)
            return self._made(begun, np.zeros(0, dtype=np.int64), rows, None, requires_grad and leaf)
        if not requires_grad:
            pin_slots(slots, cache.pin, step)
        if n_miss:
            miss = np.flatnonzero(slots < 0) if adm is None else np.flatnonzero((slots < 0) & adm)
            slots[miss] = tiers.bring_up(g[miss], step, step)
            table = tiers.cache.table  # the table as it is now: bring_up may grow it
            assert table is not None  # a CPU cache
            got[miss] = table[slots[miss], :dim]
        return self._made(begun, slots if adm is None else slots[adm], torch.from_numpy(got), None,
                          requires_grad and leaf)

    def _made(self, begun: LookupStart, slots: np.ndarray, rows: torch.Tensor, full: torch.Tensor | None,
              grad: bool) -> Lookup:
        rows.requires_grad_(grad)
        inverse = begun.inverse
        if isinstance(inverse, torch.Tensor):
            inv = inverse
        else:
            inv = torch.from_numpy(inverse)
            if self.device.type != "cpu":
                inv = inv.to(self.device, non_blocking=True)
        return Lookup(rows=rows, inverse=inv, ids=begun.uniq,
                      admitted=all_admitted(len(begun.g)) if begun.adm is None else begun.adm, slots=slots,
                      step=self._step, full=full, version=self.version)

    def _count_served(self, touched: np.ndarray, n_adm: int, placed: tuple[int, int] = (0, 0)) -> int:
        """Add a lookup pass's counters to the tiers' statistics (``placed``: rows, and their
        occurrences, a prepare placed ahead: new at this lookup); returns the admitted rows
        the pass found in the cache."""
        sv = self._served
        new_rows, new_occ = placed
        on_cache, on_host, on_ssd, new, default, cached = touched.tolist()  # (Python ints, one call)
        sv["cache"] += on_cache - new_occ
        sv["host"] += on_host
        sv["ssd"] += on_ssd
        sv["new"] += new + new_occ
        sv["default"] += default
        st = self.tiers.cache.stats
        st.hits += cached - new_rows
        st.misses += n_adm - cached + new_rows
        return cached

    def _device_rows(self, begun: LookupStart, requires_grad: bool,
                     leaf: bool) -> tuple[np.ndarray, torch.Tensor, torch.Tensor | None]:
        """A device cache's part of :meth:`lookup`: the bookkeeping in one C pass, the rows
        brought up and gathered on the device; returns the slots, the rows and the full rows
        gathered (None when read through)."""
        g, occ, adm, n_adm = begun.g, begun.occ, begun.adm, begun.n_adm
        d, tiers, dim = self.directory, self.tiers, self.config.dim
        touched = store_touch(g, occ, d.cache_loc, d.host_loc, d.on_ssd, d.last, d.freq, self._step)
        n_miss = n_adm - self._count_served(touched, n_adm, begun.placed)
        ga = g if adm is None else g[adm]
        full = None
        if not requires_grad and n_miss > tiers.cache.slots.n_free and n_miss > tiers.cache.room(self._step):
            # a read-only batch larger than the cache can take: read through, cache nothing
            slots = np.zeros(0, dtype=np.int64)
            got = torch.from_numpy(tiers.read_through(ga)[:, :dim]).to(self.device)
        else:
            slots = tiers.ensure_cached(ga, self._step, self._step)
            full = tiers.cache.gather(slots)
            got = full[:, :dim]
        if adm is None:
            aliased = full is not None or not got.is_contiguous()
            rows = got.clone() if aliased and (requires_grad and leaf or full is None) else got
        else:
            rows = self._default.expand(len(g), dim).clone()
            rows[torch.from_numpy(np.flatnonzero(adm)).to(self.device)] = got
        return slots, rows, full

    def _unique_rows(self, ids: Ids) -> Found:
        """Distinct keys, inverse, counts and their global rows (-1: not admitted); taken
        from the last :meth:`prefetch` / :meth:`prepare` when it saw the same ids and nothing
        was admitted since (a prefetched batch is not hashed twice)."""
        stash = self._take_prefetched(ids, lambda x: as_uint64_ids(x).ravel())
        if stash is not None:
            return stash
        found = self.directory.unique_rows(as_uint64_ids(ids).ravel())
        self._counts["host_directory_lookups"] += len(found[0])
        return found

    def _take_prefetched(self, ids: _I, keys_of: Callable[[_I], Keys]) -> Found | None:
        """What the last :meth:`prefetch` or :meth:`prepare` found for ``ids`` if it saw the
        same ids (the same object, or equal keys, ``keys_of(ids)``) and nothing was admitted
        since, else None; the stash is used up either way (the rows a prepare placed ahead are
        then counted as this lookup's new rows, the bookkeeping it did as this lookup's)."""
        self._settle(ahead=False)  # a prepare of the batch after this one goes on
        stash, self._prefetched, ahead, self._ahead = self._prefetched, self._ahead, self._ahead, None
        if stash is None or stash.found is None:
            self._prefetched, self._ahead = None, ahead
            self._discard_ahead()
            return None
        # a prepare ahead of this one admitted rows since; every row of this stash was admitted by
        # its own prepare then (only such stashes have one ahead), which later admissions leave as they are
        stale = stash.admitted != len(self.directory) if ahead is None else False
        other_step = stash.booked is not None and stash.booked[0] != self._step
        if stale or (other_step and ahead is not None) or \
                (stash.source is not ids and not same_keys(stash, keys_of(ids))):
            self._prefetched = None
            try:
                if ahead is not None:  # not the batch prepared for: the one prepared after it goes too
                    self._settle_stash(ahead)
            finally:  # the later booking undone first (a failed prepare booked nothing)
                if ahead is not None:
                    self._unbook(ahead)
                self._unbook(stash)  # another batch: as if it had not been looked at
            return None
        if other_step:
            self._unbook(stash)  # looked up at another step than booked for: booked again by the lookup
        self._placed = stash.placed if stash.complete else None
        self._booked = stash.booked
        return stash.found

    def _unbook(self, stash: _Stash) -> None:
        """Undo the bookkeeping a prepare did ahead for ``stash`` (its batch is not looked up next)."""
        if stash.booked is not None and stash.found is not None:  # (booked: found too)
            unbook_rows(stash.found[3], stash.found[2], self.directory, stash.booked[2])
            stash.booked = None

    def _drop_booking(self) -> None:
        """Persist or read the rows' use counts as looked up so far: a booked prepare undone
        (its lookup then books itself)."""
        self._settle()
        for stash in (self._ahead, self._prefetched):  # the later booking undone first
            if stash is not None:
                self._unbook(stash)

    def _rebook(self) -> None:
        """Book again, in order, the batches of the prepares pending that :meth:`_drop_booking`
        unbooked to persist the table (their rows all admitted, found again and booked here, on
        this thread): their lookups then find them as if nothing had happened in between."""
        for stash in (self._prefetched, self._ahead):
            if stash is None or not stash.complete or stash.booked is not None or stash.step < 0:
                continue
            placed = stash.placed  # the rows its prepare placed: new at its lookup (none are placed now)
            place_ahead([PlaceAhead(self, stash, stash.step)])
            if stash.error is not None:
                error, stash.error = stash.error, None
                self._drop_stashes()
                raise error
            stash.placed = placed

    def _drop_stashes(self) -> None:
        """Undo and forget what the prepares pending found (the batches they were for are not
        looked up next)."""
        self._drop_booking()
        self._prefetched = self._ahead = None

    def _settle(self, ahead: bool = True) -> None:
        """Wait for a :meth:`prepare` under way: its thread reads (and may admit into) the
        directory, which nothing else may read or change meanwhile.  Its error, if any, is
        raised here; so is an update still running there (:meth:`update_in_background`).
        ``ahead=False``: leave a prepare of the batch after next running (only the lookup of the
        next batch, whose rows its prepare booked, may go on beside it)."""
        update, self._update = self._update, None
        self._update_progress = None
        if update is not None:
            update.result()
        if self._prefetched is not None:
            try:
                self._settle_stash(self._prefetched)
            except BaseException:
                self._prefetched = None
                self._discard_ahead()  # prepared on top of the one that failed
                raise
        if ahead and self._ahead is not None:
            try:
                self._settle_stash(self._ahead)
            except BaseException:
                self._ahead = None
                raise

    def _discard_ahead(self) -> None:
        """Forget the prepare two deep (waited for, its booking undone; its error, if any, dropped:
        the one it was prepared behind is not looked up)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                self._settle_stash(ahead)
            except BaseException as exc:  # its batch is never looked up: nothing of it is used
                log.debug("table %r: a prepare two deep, discarded, had failed: %s", self.name, exc)
            self._unbook(ahead)

    def _settle_stash(self, stash: _Stash) -> None:
        """Wait for ``stash``'s prepare if it is under way; raise its error."""
        if stash.job is not None:
            job, stash.job = stash.job, None
            job.result()
            if stash.error is not None:
                raise stash.error
            if stash.found is not None:
                self._counts["host_directory_lookups"] += len(stash.found[0])

    def _admits_ahead(self) -> bool:
        """Whether :meth:`prepare` also admits the new ids and places their rows: one RAM
        tier on the CPU (nothing is ever evicted), every id admitted on sight, no window."""
        cache = self.tiers.cache
        return (cache.table is not None and cache.growable and self.config.admit_after == 1 and not self.read_only
                and not self.uses_window and self.tiers.slot_map is None)

    @property
    def prepares_two_deep(self) -> bool:
        """Whether :meth:`prepare` may go two deep (one RAM tier on the CPU, ids admitted on
        sight, no window): a caller may then tell it the batch after next before the next
        lookup.  Elsewhere a prepare is for the next lookup only, told after the one before.

        Example:
            >>> TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu")).prepares_two_deep
            True
            >>> TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, admit_after=2, device="cpu")).prepares_two_deep
            False
        """
        return self._admits_ahead()

    def prepared_next(self) -> bool:
        """Whether a prepare in one RAM tier is pending for the next lookup (whichever batch it
        was told): then a prepare now goes two deep.

        Example:
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))
            >>> s.prepare(np.array([1, 2])); s.prepared_next()
            True
            >>> _ = s.lookup(np.array([1, 2])); s.prepared_next()
            False
        """
        head = self._prefetched
        return head is not None and head.step == self._next_lookup_step()

    def _next_lookup_step(self) -> int:
        """The step of the next lookup: this step's unless it has looked up already."""
        return self._step + 1 if self._looked_at == self._step else self._step

    def prepare(self, ids: Ids) -> None:
        """Find the distinct ids of the batch to be looked up next and their rows, in a
        background thread (one for every store: ``fbrapids-prefetch``) while the caller trains
        on the current batch; the next :meth:`lookup` of the same ids takes what it found
        instead of hashing them again (waiting for it if need be).  In one RAM tier (see
        :mod:`~fbrapids.trainers.sparse.hierarchy`) the thread also admits the new ids and
        writes their initial rows into free slots (grown here first): the lookup then only
        reads the rows, which the current step's update may still change.

        The thread alone reads and changes the directory until it is done: every other use
        of the directory (a lookup, :meth:`assign`, :meth:`state`, :meth:`save`, ...) waits for
        it first.  The rows trained are the same as without it.  On a device cache (its ids
        are made unique on the device) this is :meth:`prefetch`.  Several stores' work goes
        to the thread as one job with :func:`prepare_together`.

        **Two deep.**  In one RAM tier, a batch may be prepared before the lookup of the
        batch prepared last: it is then for the lookup after that one, and its thread runs
        beside that lookup and its whole step (the next lookup only gathers the rows its own
        prepare booked, reading nothing the thread changes).  A lookup of another batch than
        the one prepared undoes both bookings; :meth:`flush` and :meth:`save` persist the
        table without them and book them again.  A prepare is for this step's lookup until
        it has run, then for the next step's.

        Example (two deep):
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))
            >>> s.prepare(np.array([1, 2])); s.prepare(np.array([2, 3]))  # this step's batch, then the next one's
            >>> s.lookup(np.array([1, 2])).ids.tolist(); s.end_step()
            [1, 2]
            >>> s.lookup(np.array([2, 3])).ids.tolist(), s.stats()["served_new"], s.stats()["served_cache"]
            ([2, 3], 3, 1)

        Example:
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, device="cpu"))
            >>> s.prepare(np.array([5, 5, 6])); lk = s.lookup(np.array([5, 5, 6]))
            >>> lk.ids.tolist(), s.stats()["served_new"], s.stats()["cache"]["misses"]
            ([5, 6], 3, 2)
        """
        prepare_together([self], [ids])

    def background(self) -> ThreadPoolExecutor:
        """The thread a store's background work runs on (:meth:`prepare`, updates)."""
        return _prefetch_thread()

    def prepare_work(self, ids: Ids, done: Future) -> Callable[[], None] | PlaceAhead | None:
        """This thread's part of :meth:`prepare` (a device cache: all of it, returning None);
        returns the work for the prefetch thread (in one RAM tier: its part of one C call for
        every such table), which fills in the new stash and is done when ``done`` is."""
        if self.tiers.cache.table is None:
            self.prefetch(ids)
            return None
        head = self._prefetched
        step = self._next_lookup_step()
        n = _n_ids(ids)
        # two deep: the next lookup's rows found and booked by a prepare (perhaps still under way, then this one
        # runs after it on the same thread), this batch is for the lookup after that one
        two_deep = self._admits_ahead() and self._ahead is None and head is not None and head.step == step and \
            (head.job is not None or head.complete and head.booked is not None)
        # a cache that grows in place is grown by the prefetch thread, in the job, when it needs to: a lookup or an
        # update on this thread meanwhile finds its arrays where they were (or longer); else it grows here, first
        cache = self.tiers.cache
        grows_there = cache.growable and cache.in_place_rows() >= cache.slots.capacity + n
        if two_deep and head is not None and head.job is not None and not grows_there and \
                cache.slots.n_free < _n_ids(head.source) + n:
            self._settle()  # the cache must grow for both batches' new rows: not while a prepare writes into it
            two_deep = head.complete and head.booked is not None
        if not two_deep:
            self._settle()
            self._drop_stashes()
        stash = _Stash(ids, job=done)
        if self._admits_ahead():
            if not grows_there:
                self.tiers.reserve(n)  # room in the cache for every key as a new row, made on this thread (the
                # current step updates the cache's rows; the directory is the other's)
            if two_deep:
                self._ahead = stash
                step += 1
            else:
                self._prefetched = stash
            stash.step = step
            return PlaceAhead(self, stash, step, grows_cache=grows_there)

        def work() -> None:
            self._find(stash)
        self._prefetched = stash
        return work

    def _find(self, stash: _Stash) -> None:
        """The prefetch thread's job: the distinct keys and their rows."""
        try:
            stash.keys = as_uint64_ids(stash.source).ravel()
            stash.found = self.directory.unique_rows(stash.keys)
            stash.admitted = len(self.directory)
        except BaseException as exc:  # raised by the lookup that waits for it
            stash.error = exc

    def _device_keys(self, ids: Ids) -> torch.Tensor:
        """Ids as an int64 tensor (the uint64 bits) on the store's device; a tensor already
        there is not copied."""
        if isinstance(ids, torch.Tensor) and ids.device == self.device:
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise InputTypeError(f"embedding ids must be integers (int64 / uint64), got dtype {ids.dtype}")
            t = ids.reshape(-1)
            return t.view(torch.int64) if t.dtype == torch.uint64 else t.to(torch.int64)
        return torch.from_numpy(as_uint64_ids(ids).ravel().view(np.int64)).to(self.device)

    def _unique_rows_on_device(self, ids: Ids,
                               slot_map: SlotMap) -> tuple[np.ndarray, np.ndarray | torch.Tensor, np.ndarray, np.ndarray]:
        """Distinct ids (in first-occurrence order), inverse (a tensor on the device), counts
        and global rows (-1: not admitted), with the distinct ids probed in the cache's id ->
        slot map on the device (``slot_map``, the tiers'): a hit's row is the owner of its slot, and only the misses are
        looked up in the host directory."""
        keys = self._device_keys(ids)
        stash = self._take_prefetched(keys, lambda x: x)
        if stash is not None:
            return stash
        uniq_t, inverse, counts = torch.unique(keys, sorted=True, return_inverse=True, return_counts=True)
        # into first-occurrence order, as the host path's (same rows, same gradient summation order)
        n = keys.numel()
        first = torch.full((len(uniq_t),), n, dtype=torch.int64, device=keys.device)
        first.scatter_reduce_(0, inverse, torch.arange(n, device=keys.device), reduce="amin")
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(len(order), device=keys.device)
        uniq_t, counts, inverse = uniq_t[order], counts[order], rank[inverse]
        slots_t = slot_map.probe(uniq_t)
        host = torch.stack([uniq_t, slots_t, counts]).cpu().numpy()  # one copy of 24 bytes per distinct id
        uniq = np.ascontiguousarray(host[0]).view(np.uint64)
        slots, occ = host[1], np.ascontiguousarray(host[2])
        hit = slots >= 0
        g = np.empty(len(uniq), dtype=np.int64)
        g[hit] = self.tiers.cache.slots.owner[slots[hit]]
        n_hit = int(hit.sum())
        if n_hit < len(uniq):
            miss = np.flatnonzero(~hit)
            g[miss] = self.directory.get(uniq[miss])
        self._counts["device_map_hits"] += n_hit
        self._counts["host_directory_lookups"] += len(uniq) - n_hit
        return uniq, inverse.reshape(-1), occ, g

    def prefetch(self, ids: Ids) -> int:
        """Bring the admitted rows among ``ids`` into the cache and pin them through the next step.

        Ids not yet admitted are left alone (prefetching does not count as a sighting).
        Returns the number of rows that had to be brought up.
        """
        self._drop_stashes()
        if self.tiers.slot_map is not None:
            keys_t = self._device_keys(ids)
            uniq, inverse, occ, g = self._unique_rows_on_device(keys_t, self.tiers.slot_map)
            self._prefetched = _Stash(keys_t, keys_t, (uniq, inverse, occ, g.copy()), len(self))
        else:
            keys = as_uint64_ids(ids).ravel()
            found = self.directory.unique_rows(keys)
            self._counts["host_directory_lookups"] += len(found[0])
            self._prefetched = _Stash(ids, keys, (found[0], found[1], found[2], found[3].copy()), len(self))
            g = found[3]
        g = g[g >= 0]
        moved = int((self.directory.cache_loc[g] < 0).sum())
        self.tiers.ensure_cached(g, self._step + 1, self._step)
        self._counts["prefetched_rows"] += moved
        return moved

    @property
    def uses_window(self) -> bool:
        """Whether the eviction policy ranks rows by announced upcoming batches
        (``lfu_window``): then :meth:`announce` is worth calling."""
        return self.tiers.policy.uses_window

    def announce(self, ids: Ids, ahead: int = 1) -> int:
        """Tell the eviction policy the ids of the batch to be looked up ``ahead`` steps from
        now (0: this step's, before its lookup); returns the admitted rows noted.

        Batches are announced in order; an announcement is a hint only: it moves nothing
        (no row is read ahead) and never changes a row's value.  A policy without a window
        ignores it (0).  Ids not admitted yet are not tracked.

        Example:
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4, eviction="lfu_window", device="cpu"))
            >>> _ = s.lookup(np.array([1, 2]), requires_grad=False); s.end_step()
            >>> s.announce(np.array([2, 2, 3]), ahead=1), s.stats()["announced_rows"]
            (1, 1)
        """
        window = self.tiers.policy.window
        if window is None:
            return 0
        self._settle()
        if ahead < 0:
            raise ArgumentError(f"table {self.name!r}: announce(ahead={ahead}): a batch can only be announced for "
                                "this step or a later one")
        noted = window.announce(self.directory.get(as_uint64_ids(ids).ravel()),
                                 self._step + int(ahead))
        self._counts["announced_rows"] += noted
        return noted

    @torch.no_grad()
    def apply_gradients(self, lookup: Lookup, grad: torch.Tensor | None = None) -> None:
        """Run the sparse optimizer on the rows of ``lookup`` (``grad`` defaults to ``rows.grad``).

        Rows reading the default row are skipped.  Does not end the step.
        """
        self.check_current(lookup)
        if grad is None:
            grad = lookup.rows.grad
        if grad is None or len(lookup.slots) == 0:
            return
        if not lookup.admitted.all():
            grad = grad[torch.from_numpy(np.flatnonzero(lookup.admitted)).to(grad.device)]
        self.update_rows(lookup, grad)

    def check_current(self, lookup: Lookup) -> None:
        if lookup.step != self._step:
            raise StoreError(f"table {self.name!r}: lookup of step {lookup.step} applied at step {self._step}")

    def update_rows(self, lookup: Lookup, grad: torch.Tensor) -> None:
        """The optimizer step on ``lookup``'s cached rows given one gradient row per slot.

        On a CPU cache the rows are updated in place in C (no gather, no scatter); on a
        device the gathered rows are updated with torch and written back.
        """
        grad = grad.to(self.device, torch.float32)
        cache = self.tiers.cache
        if cache.table is not None:
            self.optimizer.update_table_(cache.table, lookup.slots, grad.contiguous(), cache.slots.dirty)
            self.version += 1
            return
        st = cache.slot_tensor(lookup.slots)
        self.write_back(lookup, self.optimizer.update(self.fresh_full(lookup, st), grad), st)

    def fresh_full(self, lookup: Lookup, slots: torch.Tensor | None = None) -> torch.Tensor:
        """The current cached rows ``[len(lookup.slots), width]`` of ``lookup``: the rows it
        gathered when the table was not written since (the caller may update them in
        place), else gathered again."""
        if lookup.full is not None and lookup.version == self.version and lookup.step == self._step:
            return lookup.full
        cache = self.tiers.cache
        if slots is None or cache.table is not None:
            return cache.gather(lookup.slots)
        cache.wait_copies()
        return cache.data.index_select(0, slots)

    def write_back(self, lookup: Lookup, rows: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        """Store updated full rows of ``lookup``'s (pinned) slots into the cache, marked dirty."""
        cache = self.tiers.cache
        if cache.table is not None or slots is None:
            cache.put(lookup.slots, rows)
        else:
            cache.wait_copies()
            cache.data.index_copy_(0, slots, rows)
        cache.slots.dirty[lookup.slots] = True
        self.version += 1

    def end_step(self) -> None:
        """Release this step's pins (rows prefetched for the next step stay pinned)."""
        self._step += 1

    @torch.no_grad()
    def assign(self, ids: Ids, weights: npt.ArrayLike | torch.Tensor) -> None:
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
        self._settle()
        keys = as_uint64_ids(ids).ravel()
        w = np.asarray(weights.detach().cpu() if isinstance(weights, torch.Tensor) else weights, dtype=np.float32)
        if w.shape != (len(keys), self.config.dim):
            raise StoreError(f"table {self.name!r}: weights of shape {w.shape} for {len(keys)} ids of dim "
                             f"{self.config.dim}")
        if len(np.unique(keys)) != len(keys):
            raise StoreError(f"table {self.name!r}: assign() got repeated ids")
        step = max(1, self.config.cache_rows // 2)
        for start in range(0, len(keys), step):
            k, rows = keys[start : start + step], w[start : start + step]
            g = self.directory.get(k)
            new = g < 0
            if new.any():
                g[new] = self.directory.admit(k[new], gate=False)
            slots = self.tiers.ensure_cached(g, self._step, self._step)
            full = np.empty((len(k), self.config.width), dtype=np.float32)
            full[:, : self.config.dim] = rows
            self.optimizer.init_state(full)
            self.tiers.cache.put(slots, full)
            self.tiers.cache.slots.dirty[slots] = True
            self.version += 1
            self.end_step()

    # -- reading everything --------------------------------------------------------------------
    def read_rows(self, g: np.ndarray) -> np.ndarray:
        """Current values (embedding + optimizer state) of global rows ``g``, wherever they are."""
        self._settle()
        return self.tiers.read_rows(g)

    def weights(self, ids: Ids) -> np.ndarray:
        """Embeddings ``[len(ids), dim]`` of ``ids`` (the default row, zeros, where not admitted).

        Example:
            >>> import numpy as np
            >>> s = TieredEmbeddingStore(StoreConfig(dim=2, cache_rows=4))
            >>> s.weights(np.array([1], dtype=np.uint64)).tolist()
            [[0.0, 0.0]]
        """
        self._settle()
        keys = as_uint64_ids(ids).ravel()
        g = self.directory.get(keys)
        out = np.zeros((len(keys), self.config.dim), dtype=np.float32)
        ok = g >= 0
        if ok.any():
            out[ok] = self.read_rows(g[ok])[:, : self.config.dim]
        return out

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """All admitted ids (uint64, by global row) and their full rows ``[n, width]``."""
        g = np.arange(len(self), dtype=np.int64)
        return self.directory.all_ids().copy(), self.read_rows(g)

    # -- persistence (see fbrapids.trainers.sparse.persistence) -----------------------------------
    def flush(self) -> None:
        """Write dirty rows to the SSD file, fsync it and persist the id index (no SSD: a no-op)."""
        self._drop_booking()
        persistence.flush(self)
        self._rebook()

    def save(self, directory: str | os.PathLike, chunk_rows: int = 1 << 16,
             progress: Callable[[Path], object] | None = None,
             check_rows: Callable[[np.ndarray, int], None] | None = None) -> None:
        """Flush, then write a self-contained copy of the table into ``directory``
        (``check_rows(rows, first_row)`` sees each chunk of rows before it is written)."""
        self._drop_booking()
        persistence.save(self, directory, chunk_rows, progress, check_rows)
        self._rebook()

    def load(self, directory: str | os.PathLike, read: Callable[[Path], bytes] | None = None) -> None:
        """Replace this table's contents with a copy saved by :meth:`save` (the cache starts
        cold); ``read``: as :func:`~fbrapids.trainers.sparse.persistence.load`'s."""
        persistence.load(self, directory, read)

    # -- statistics -------------------------------------------------------------------------
    def stats(self) -> TableStats:
        """Per-tier hits / misses / evictions / bytes moved, plus lookup counts.

        Tier hits and misses count unique rows per batch.  ``served_*`` count every id
        occurrence by the tier its row was in when looked up (rows a prefetch brought up
        count as cache), plus ``new`` rows and ``default``-row reads, as ``served_cache``,
        ``served_host``, ``served_ssd``, ``served_new`` and ``served_default``.
        ``upper_tier_hit_rate`` is the share of occurrences of existing rows served by the
        cache or host RAM rather than the SSD file; ``upper_tier_unique_hit_rate`` the same
        over unique rows per batch.

        ``announced_rows`` counts the distinct admitted rows of the batches
        :meth:`announce` told an ``lfu_window`` policy about.

        ``host_directory_lookups`` counts the distinct ids of lookups and prefetches looked
        up in the host directory's hash map; ``device_map_hits`` those found instead in a
        CUDA cache's id -> slot map (:mod:`~fbrapids.trainers.sparse.slot_map`), which
        sends only its misses to the host.  A CPU store has no such map: every distinct id
        goes to the directory (a prefetched batch once).
        """
        self._settle()
        t = self.tiers
        cache, ssd = t.cache.stats.as_dict(), t.ssd_stats.as_dict()
        out: TableStats = {"cache": cache, "host": t.host.stats.as_dict(), "ssd": ssd}
        out.update(self._counts)
        out["admissions"] = self.directory.admissions
        out["new_rows"] = t.new_rows
        out["rows"] = len(self)
        out["cache_used"] = t.cache.slots.used
        out["host_used"] = t.host.slots.used
        sv = dict(self._served)
        out.update({f"served_{k}": v for k, v in sv.items()})
        existing = sv["cache"] + sv["host"] + sv["ssd"]
        out["upper_tier_hit_rate"] = (sv["cache"] + sv["host"]) / existing if existing else 1.0
        unique = cache["hits"] + cache["misses"] - t.new_rows
        out["upper_tier_unique_hit_rate"] = 1.0 - ssd["hits"] / unique if unique > 0 else 1.0
        return out
