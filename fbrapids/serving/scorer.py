"""Score one request against N candidate items; request features once, item features once.

:class:`Scorer` runs a trained model behind a :class:`~fbrapids.serving.spec.ServingSpec`:

1. the request's raw columns become a one-row frame (R rows for :meth:`Scorer.score_batch`)
   and its ``request_features`` are extracted once, by :func:`fbrapids.features.extract` (the same
   compiled meta-kernels as training: each plan layer is one kernel launch, so a plan of
   independent hash buckets is one launch);
2. every item record is validated (types, ranges), then items are deduplicated by their
   full content (the values of all item columns, ``item_key`` included); contents missing
   from the LRU item cache have their ``item_features`` extracted together (one
   extraction for all misses of the call) and cached under that content; repeated and
   cached items cost no extraction;
3. ``pair_features`` (request x item crosses), if any, are extracted per unique pair;
4. :func:`~fbrapids.serving.forward.split_forward` scores the unique rows with the request
   side computed once and broadcast, and scores are scattered back to every position.

``dedup=False`` is the baseline the benchmark compares against: every (request, item) row
is materialised in full and every feature extracted for every row, then ``model(batch)``.

The cache cannot be poisoned: a cached row is reused only for an item whose every item
column equals the one it was computed from, so one client sending ``ad_id`` 555 with other
features never changes another client's score for 555, and the same id twice in one call
with different features is scored per item.  The cache is bounded in items
(``cache_items``) and in bytes (``cache_bytes``); a call whose new items do not fit is
scored without caching them (``stats["item_cache_bypassed"]``).

Numbers (the policy, counted in ``stats`` and served by ``/health``):

* a raw ``float64`` value must fit float32, the model's dense dtype (``|x| <= 3.4e38``):
  a larger finite value or ``inf`` is a ``RequestError`` naming the record and column;
  a model dense input a feature makes larger than that is refused the same way;
* ``null`` and ``NaN`` are missing values: a feature's ``fill_null`` applies, and a model
  dense input still missing becomes 0 (``stats["nan_replaced"]``);
* negative inputs are valid numbers; a feature undefined at its input (``log1p`` of a
  value below -1 gives NaN or -inf) gives a dense input that becomes 0, counted in
  ``stats["nan_replaced"]`` too;
* rejected calls are counted in ``stats["rejected_bad_input"]`` and
  ``stats["rejected_too_large"]`` (over ``max_requests`` / ``max_items``).

For a model with images (DICM), ``stats`` also counts image references, unique images
embedded and references to unknown image ids (they read the vector store's documented
default, zeros).  Calls are serialised by a lock (the embedding stores are not
thread-safe), so a scorer may be shared by the threads of a web server.

Serving never changes the model: the scorer makes the model's embedding stores read-only
(:attr:`~fbrapids.trainers.sparse.TieredEmbeddingStore.read_only`), so an id no training
batch admitted reads the documented default row (zeros) and is counted in
``stats["unseen_ids"]`` (distinct per call and table), however many new ids clients send;
with ``admit_after > 1`` no lookup counts as a sighting, so one client's calls never change
another client's score.  The table sizes stay those of the checkpoint.

Fairness: a call is scored in slices of at most ``chunk_items`` items (and ``chunk_work``
work, :mod:`fbrapids.serving.cost`), each under a lock taken in turns by client
(:class:`~fbrapids.serving.fairness.FairLock`), so a call that arrives during another's
large one waits for one slice of each other client, not for whole calls, however many
calls one client has in flight.  While another client uses the scorer (it took or asked
for the lock within the last second), slices hold at most ``contended_chunk_items`` items
(and that share of ``chunk_work``): a small call then waits for a small slice, and a client
alone keeps the large slices' throughput.  Then too, a call of several slices pauses its
client between them (all of that client's calls) for :data:`PAUSE_FACTOR` times as long as
its last slice held the scorer: a client that shares the scorer holds it at most a third of
the time, so a small call of another client mostly finds it free (``stats["paused_slices"]``).
After a call of more than ``chunk_items`` items the freed heap is handed back to the
operating system (``malloc_trim``, where the C library has it), and after smaller ones at most
every few seconds (:class:`~fbrapids.runs.heap.PeriodicRelease`), so the RSS plateaus.  A call whose client has gone
(the ``gone`` event the HTTP service hands in is set) waits no longer for its turn and is
dropped before its next slice (``stats["dropped_calls"]``).

A null (or NaN) in a column of ``spec.fill`` becomes its fill value before validation, as
training's cleaning did (``stats["nulls_filled"]``).  A value the model cannot score (its
logit is not finite, or beyond ``max_logit`` = 1e4 where the score is saturated to exactly 0
or 1: a huge dense input overflowing the network) is a
:class:`~fbrapids.errors.ModelInputError` naming the record and the model input, never a
NaN score.  :meth:`Scorer.score_each` answers per request: one bad request of a batch
leaves the others' scores.

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> from fbrapids.trainers import WideAndDeep, StoreConfig
    >>> spec = ServingSpec(schema={"user_id": "int64", "ad_id": "int64", "price": "float64"},
    ...                    request_columns=["user_id"], item_columns=["ad_id", "price"], item_key="ad_id",
    ...                    request_features={"u": ops.hash_bucket("user_id", 1000)},
    ...                    item_features={"a": ops.hash_bucket("ad_id", 1000)}, dense=["price"], sparse=["u", "a"])
    >>> model = WideAndDeep(1, ["u", "a"], embedding_dim=4, deep_mlp=[8], store=StoreConfig(cache_rows=64))
    >>> s = Scorer(model, spec)
    >>> items = [{"ad_id": 1, "price": 2.0}, {"ad_id": 2, "price": 1.0}, {"ad_id": 1, "price": 2.0}]
    >>> p = s.score({"user_id": 3}, items)
    >>> p.shape, bool(p[0] == p[2]), s.stats["items_extracted"], s.stats["unique_items"]
    ((3,), True, 2, 2)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import re
import threading
import time
from typing import Callable, Hashable, Iterator, Mapping, Sequence, TypeAlias, TypedDict

import numpy as np
import pandas as pd
import torch

from fbrapids import kernels as kstats
from fbrapids.errors import (
    ArgumentError,
    CallCancelledError,
    InputTypeError,
    KernelRuntimeError,
    ModelInputError,
    RequestError,
    RequestTooLargeError,
)
from fbrapids.features import extract as extract_features
from fbrapids.kernels import Expr, columns_of
from fbrapids.runs.heap import PeriodicRelease, release_memory
from fbrapids.serving.cache import ItemCache
from fbrapids.serving.cost import CHUNK_WORK, MAX_LIST_LEN, MAX_TEXT_CHARS, MAX_WORK, CallCost
from fbrapids.serving.fairness import FairLock
from fbrapids.serving.forward import SideArrays, split_forward, to_tensor
from fbrapids.serving.spec import (
    F32_MAX,
    Record,
    ServingSpec,
    columns_frame,
    records_to_columns,
    records_to_frame,
    show,
)
from fbrapids.trainers.batch import Batch, dense_matrix, sparse_column
from fbrapids.trainers.calibration import calibrated_logits
from fbrapids.trainers.device import place_model
from fbrapids.trainers.models.base import CTRModel

log = logging.getLogger(__name__)

#: a checked entry of a call: its request record and its item records
_Entry: TypeAlias = tuple[Record, list[Record]]


class ScorerOptions(TypedDict, total=False):
    """:class:`Scorer`'s keyword options, as the loaders and the HTTP service pass them on."""

    cache_items: int
    dedup: bool
    max_items: int
    cache_bytes: int
    max_requests: int
    device: str | torch.device | None
    chunk_items: int
    max_logit: float
    max_list_len: int
    max_text_chars: int
    max_work: int
    chunk_work: int
    contended_chunk_items: int
    contended_window_s: float

#: How far a served score may be from the training-side ``model(batch)`` on the same rows
#: (the promise of docs/ams-and-serving.md).  Scores are float32; scoring a row alone, in a
#: deduplicated batch or in a batch of another size reaches the BLAS kernels with other
#: shapes, which sum in another order (and another vector width per processor), so a score
#: may differ by a few float32 ulps (1.49e-7 seen on an Intel Xeon; an ulp near 0.5 is
#: 6e-8).  The tests hold every served score to this bound.
SCORE_ATOL = 1e-6

#: Candidate items one call may hold by default (all requests of a batch together): at the
#: example model's ~2-10 us per item on one core, a full call costs ~0.1 s of scorer time,
#: and its JSON body (~100-400 bytes per item) fits ``max_body_bytes``.
MAX_ITEMS = 10_000
#: Items per slice: a call arriving during another's large one waits for one slice at most.
CHUNK_ITEMS = 512
#: Items per slice while another client uses the scorer (its small calls wait for less).
CONTENDED_CHUNK_ITEMS = 64
#: While another client uses the scorer, a call of several slices pauses its client this many
#: times as long as its last slice took: such a client holds the scorer at most 1 / (1 + this)
#: of the time, and another client's call that follows its own previous one finds it free.
PAUSE_FACTOR = 2.0
#: The largest |logit| served: beyond it a float32 sigmoid is exactly 0 or 1 many times over.
MAX_LOGIT = 1e4
#: The most times one :meth:`Scorer.score_each` call scores (part of) its batch again after a
#: request failed: a batch costs at most this many more passes, however many requests are bad.
MAX_BATCH_RETRIES = 8
#: The bad requests of one :meth:`Scorer.score_each` batch answered with their full error (the
#: others with a line saying the request was not valid): the answer's size is bounded.
MAX_NAMED_ERRORS = 100


class Scorer:
    """Scores requests against candidate items (module docstring).

    Args:
        model: a trained CTR model (put in eval mode).
        spec: the serving spec its features and inputs were trained with.
        cache_items: item-cache capacity in items (LRU); 0 disables the cache.
        dedup: compute request / item features once and broadcast (default), or the
            materialise-every-row baseline.
        max_items: refuse calls with more candidate items than this (all requests together).
        cache_bytes: bytes the item cache's entries may hold (keys, strings included).
        max_requests: refuse :meth:`score_batch` calls with more requests than this.
        device: where the model scores (:func:`fbrapids.trainers.device.place_model`); every
            batch is built there.
        chunk_items: a call is scored in slices of at most this many items (and requests),
            the lock handed to waiting calls between slices.
        contended_chunk_items: the slices' items while another client uses the scorer.
        contended_window_s: another client "uses the scorer" when it took or asked for its
            lock within this many seconds.
        max_logit: a row whose logit is beyond this (or not finite) is refused, naming the
            record and its largest dense input: no trained CTR model gives such a logit to
            inputs like those it was trained on (the score would be exactly 0 or 1).
        max_list_len, max_text_chars, max_work, chunk_work: the bounds of
            :class:`~fbrapids.serving.cost.CallCost`: every list and text value of a call
            bounded, the call's work (items x features x list lengths) refused over
            ``max_work``, and scored in slices of at most ``chunk_work``.

    The model's embedding stores are made read-only (module docstring).
    """

    def __init__(self, model: CTRModel, spec: ServingSpec, cache_items: int = 100_000, dedup: bool = True,
                 max_items: int = MAX_ITEMS, cache_bytes: int = 256 << 20, max_requests: int = 1024,
                 device: str | torch.device | None = None, chunk_items: int = CHUNK_ITEMS,
                 max_logit: float = MAX_LOGIT, max_list_len: int = MAX_LIST_LEN,
                 max_text_chars: int = MAX_TEXT_CHARS, max_work: int = MAX_WORK,
                 chunk_work: int = CHUNK_WORK, contended_chunk_items: int = CONTENDED_CHUNK_ITEMS,
                 contended_window_s: float = 1.0) -> None:
        for name, v, lo in (("cache_items", cache_items, 0), ("max_items", max_items, 1),
                            ("cache_bytes", cache_bytes, 1), ("max_requests", max_requests, 1),
                            ("chunk_items", chunk_items, 1), ("contended_chunk_items", contended_chunk_items, 1)):
            if type(v) is not int or v < lo:
                raise ArgumentError(f"Scorer: {name} must be an integer >= {lo}, got {v!r}")
        self.device = place_model(model, device)
        self.model = model.eval()
        self.spec = spec
        self.dedup = dedup
        self.cache_items = cache_items
        self.max_items = max_items
        self.max_requests = max_requests
        self.chunk_items = chunk_items
        self.contended_chunk_items = min(contended_chunk_items, chunk_items)
        self.contended_window_s = float(contended_window_s)
        self._resume: dict[Hashable, float] = {}  # client -> when its next slice may start (contended)
        if not isinstance(max_logit, (int, float)) or not max_logit > 0:
            raise ArgumentError(f"Scorer: max_logit must be a number > 0, got {max_logit!r}")
        self.max_logit = float(max_logit)
        self._stores = list(model.stores().values())
        for store in self._stores:  # serving never adds a row nor counts a sighting
            store.read_only = True
        self.cost = CallCost(spec, len(spec.dense) + len(spec.sparse), max_list_len, max_text_chars, max_work,
                             chunk_work)
        self._lock = FairLock()
        self._release = PeriodicRelease()
        self._stats_lock = threading.Lock()
        self._origin: list[tuple[int, int]] = [(0, 0)]
        self._batch_call = False
        side = {c: spec.side_of(c) for c in [*spec.dense, *spec.sparse]}
        self._dense_of = {s: [c for c in spec.dense if side[c] == s] for s in ("request", "item", "pair")}
        self._sparse_of = {s: [c for c in spec.sparse if side[c] == s] for s in ("request", "item", "pair")}
        # each model dense input as (side, column within that side); item and pair rows are merged
        self._row_dense = self._dense_of["item"] + self._dense_of["pair"]
        self._dense_layout = [("request", self._dense_of["request"].index(c)) if side[c] == "request"
                              else ("item", self._row_dense.index(c)) for c in spec.dense]
        self._cache = (ItemCache(self.cache_items, len(self._dense_of["item"]), self._sparse_of["item"], cache_bytes)
                       if self.cache_items > 0 else None)
        pair_cols = set().union(*[columns_of(e) for e in spec.pair_features.values()])
        self._pair_item_columns = [c for c in spec.item_columns if c in pair_cols]
        self._pair_request_columns = [c for c in spec.request_columns if c in pair_cols]
        self._owner_all = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(2, dtype=np.int64)
        self.stats: dict[str, int] = dict.fromkeys(
            ("requests", "items", "unique_items", "item_cache_hits", "item_cache_misses", "items_extracted",
             "requests_extracted", "pairs_extracted", "rows_scored", "kernel_launches", "nan_replaced",
             "image_references", "unique_images_embedded", "unknown_image_references", "item_cache_bypassed",
             "rejected_bad_input", "rejected_too_large", "unseen_ids", "nulls_filled", "rejected_model_input",
             "slices", "batch_retries", "work", "paused_slices", "dropped_calls"), 0)
        self._blamed: int | None = None

    # -- feature extraction -------------------------------------------------------------------
    def _arrays(self, frame: pd.DataFrame, features: Mapping[str, Expr], dense: list[str], sparse: list[str],
                counter: str, what: Callable[[int], str]) -> SideArrays:
        if features and len(frame):
            before = kstats.stats()["launches"]
            extracted = extract_features(frame, features)
            if not isinstance(extracted, pd.DataFrame):  # (a pandas frame's features come in a pandas frame)
                raise InputTypeError(f"feature extraction gave a {type(extracted).__name__} for a pandas frame")
            frame = extracted
            self.stats["kernel_launches"] += kstats.stats()["launches"] - before
        self.stats[counter] += len(frame)
        for c in dense:  # a finite value float32 cannot hold would become inf: the client's to fix
            col = frame[c].to_numpy(dtype=np.float64, na_value=np.nan)
            over = np.flatnonzero(np.isfinite(col) & (np.abs(col) > F32_MAX))
            if len(over):
                raise RequestError(f"{what(int(over[0]))}: model input {c!r} = {col[over[0]]:.6g} does not fit "
                                   f"float32, the model's dense dtype (|x| <= {F32_MAX:.7g})")
        d, replaced = dense_matrix(frame, dense, "zero")
        self.stats["nan_replaced"] += replaced
        return SideArrays(d, {c: sparse_column(frame[c], c) for c in sparse})

    def _items(self, keys: list[tuple], first: np.ndarray, item_values: dict[str, list[object]]) -> SideArrays:
        """Item-side arrays of the unique item contents ``keys`` (``first[i]``: the call's
        item record holding content i; ``item_values``: the call's validated item columns)."""
        spec = self.spec
        dense, sparse = self._dense_of["item"], self._sparse_of["item"]

        def extract(at: np.ndarray) -> SideArrays:
            frame = columns_frame(item_values, spec.frame_schema, at)
            return self._arrays(frame, spec.item_features, dense, sparse, "items_extracted",
                                lambda i: self._item_label(at[i]))

        if self._cache is None:
            self.stats["item_cache_misses"] += len(keys)
            return extract(first)
        slots = self._cache.lookup(keys)
        miss = np.flatnonzero(slots < 0)
        self.stats["item_cache_hits"] += len(keys) - len(miss)
        self.stats["item_cache_misses"] += len(miss)
        if not len(miss):
            return self._cache.gather(slots)
        fresh = extract(first[miss])
        new_keys = [keys[i] for i in miss.tolist()]
        sizes = self._cache.entry_bytes(new_keys, fresh)
        if self._cache.reserve(len(miss), int(sizes.sum())):
            slots[miss] = self._cache.put(new_keys, fresh)
            return self._cache.gather(slots)
        self.stats["item_cache_bypassed"] += len(miss)  # more new bytes or items than the cache holds
        hit = np.flatnonzero(slots >= 0)
        both = SideArrays.concat([self._cache.gather(slots[hit]), fresh]) if len(hit) else fresh
        order = np.empty(len(keys), dtype=np.int64)
        order[np.concatenate([hit, miss])] = np.arange(len(keys))
        return both.take(order)

    def _item_label(self, g: int) -> str:
        """``"item j"`` (or ``"request r item j"`` in a batch) of the slice's g-th item record,
        numbered as in the client's call."""
        r = int(self._owner_all[g])
        origin, offset = self._origin[r]
        self._blamed = origin
        j = int(g - self._starts[r]) + offset
        return f"request {origin} item {j}" if self._batch_call else f"item {j}"

    def _request_label(self, i: int) -> str:
        self._blamed = self._origin[i][0]
        return f"request {self._origin[i][0]}"

    def item_cache_usage(self) -> dict[str, int | None]:
        """The item cache's ``entries``, ``bytes`` held and ``max_bytes`` (zeros without a cache)."""
        c = self._cache
        if c is None:
            return {"entries": 0, "bytes": 0, "max_bytes": 0, "evictions": 0}
        return {"entries": len(c), "bytes": c.bytes, "max_bytes": c.max_bytes, "evictions": c.stats["evictions"]}

    # -- scoring --------------------------------------------------------------------------------
    @staticmethod
    def _check(entry: object, i: int) -> _Entry:
        if not isinstance(entry, Mapping) or "request" not in entry or "items" not in entry:
            raise RequestError(f"request {i}: expected an object with 'request' and 'items'")
        if not isinstance(entry["request"], Mapping):
            raise RequestError(f"request {i}: 'request' must be an object of columns")
        if not isinstance(entry["items"], (list, tuple)):
            raise RequestError(f"request {i}: 'items' must be a list of objects")
        return entry["request"], list(entry["items"])

    def score(self, request: Record, items: Sequence[Record]) -> np.ndarray:
        """Click probabilities ``[len(items)]`` of ``items`` for ``request`` (JSON-like dicts)."""
        return self.score_batch([{"request": request, "items": items}])[0]

    def score_batch(self, requests: Sequence[Record], client: Hashable = None,
                    gone: threading.Event | None = None) -> list[np.ndarray]:
        """Scores of several ``{"request": {...}, "items": [{...}, ...]}`` entries at once:
        request features extracted together, items deduplicated across all of them (within
        each slice of ``chunk_items``).

        Raises :class:`~fbrapids.errors.RequestTooLargeError` over ``max_requests`` or
        ``max_items``, :class:`~fbrapids.errors.RequestError` for bad records (each counted
        in ``stats``; a kernel error the data caused, such as an over-long cross key, is a
        ``RequestError`` too; a value the model cannot score a
        :class:`~fbrapids.errors.ModelInputError`).  ``client``: who asks (the HTTP service
        passes its token's name or its address): slices are scored in turns by client
        (:class:`~fbrapids.serving.fairness.FairLock`).  ``gone``: set when the caller's client
        has hung up: the call is dropped before its next slice
        (:class:`~fbrapids.errors.CallCancelledError`, counted in ``stats["dropped_calls"]``).
        """
        entries, works = self._entries(requests)
        return self._score_checked(entries, list(range(len(entries))), len(entries) > 1, works, client, gone)

    def score_each(self, requests: Sequence[Record], client: Hashable = None,
                   gone: threading.Event | None = None) -> list[np.ndarray | RequestError]:
        """As :meth:`score_batch`, but per request: each entry's scores, or the
        :class:`~fbrapids.errors.RequestError` that entry alone raises (the others are
        scored).  Over ``max_requests`` / ``max_items`` the whole call is refused.

        After the first request that fails, the records of every other request are checked
        at once: each bad one is answered with its own error (the first
        :data:`MAX_NAMED_ERRORS` in full, the rest in a line), the good ones are scored
        together.  An error only scoring finds (a value the model cannot score) costs one
        more pass, at most :data:`MAX_BATCH_RETRIES` in all.

        Example:
            >>> from fbrapids.serving.example import example_spec
            >>> from fbrapids.trainers import WideAndDeep, StoreConfig
            >>> spec = example_spec()
            >>> m = WideAndDeep(len(spec.dense), spec.sparse, embedding_dim=4, deep_mlp=[4],
            ...                 store=StoreConfig(cache_rows=64))
            >>> req = {"user_id": 1, "age": 30.0, "gender": "f", "query": "a", "history": ""}
            >>> good = {"request": req, "items": [{"ad_id": 5, "category": 1, "price": 2.0, "title": "x"}]}
            >>> out = Scorer(m, spec).score_each([good, {"request": req, "items": [{"ad_id": "x"}]}])
            >>> out[0].shape, str(out[1])
            ((1,), "request 1 item 0: column 'ad_id' must be an integer (int64), got 'x'")
        """
        entries, works = self._entries(requests)
        out: list[np.ndarray | RequestError | None] = [None] * len(entries)
        groups = [list(range(len(entries)))]
        passes, checked = 0, False
        while groups:
            group = groups.pop()
            if passes > MAX_BATCH_RETRIES:  # bounded: what is left is answered, not scored again
                for i in group:
                    out[i] = RequestError(f"request {i}: not scored, as other requests of this batch failed "
                                          f"{MAX_BATCH_RETRIES} times; send it again, or alone")
                continue
            passes += 1
            try:
                scored = self._score_checked([entries[i] for i in group], group, len(entries) > 1,
                                             [works[i] for i in group], client, gone)
                for i, scores in zip(group, scored):
                    out[i] = scores
            except RequestTooLargeError:
                raise
            except RequestError as exc:
                if len(entries) == 1:
                    raise
                blamed = exc.entry
                if blamed in group:  # the error names its request: the others are scored again together
                    out[blamed] = exc
                    rest = [i for i in group if i != blamed]
                    if not checked:  # the first failure: every other request's records checked at once
                        rest, checked = self._drop_invalid(entries, rest, out), True
                    groups += [rest] if rest else []
                elif len(group) == 1:
                    out[group[0]] = exc
                else:  # an error that names no request: halve the group
                    groups += [group[len(group) // 2 :], group[: len(group) // 2]]
        self._count(batch_retries=passes - 1)
        return out  # type: ignore[return-value]

    def _drop_invalid(self, entries: list[_Entry], group: list[int],
                      out: list[np.ndarray | RequestError | None]) -> list[int]:
        """The requests of ``group`` whose records pass validation (as scoring validates
        them); each other one's error put in ``out`` (in full for the first
        :data:`MAX_NAMED_ERRORS` bad requests of the batch, in a line after that)."""
        spec, good = self.spec, []
        named = sum(isinstance(r, RequestError) for r in out)
        for i in group:
            request, items = entries[i]
            try:
                records_to_columns([request], spec.schema, spec.request_columns, _fixed_label(f"request {i}"), spec.fill)
                records_to_columns(items, spec.schema, spec.item_columns, functools.partial("request {} item {}".format, i),
                                   spec.fill)
            except RequestError as exc:
                named += 1
                out[i] = exc if named <= MAX_NAMED_ERRORS else RequestError(
                    f"request {i}: a record is not valid (details are given for the first {MAX_NAMED_ERRORS} bad "
                    "requests of a batch)")
                continue
            good.append(i)
        self._count(rejected_bad_input=len(group) - len(good))
        return good

    @contextlib.contextmanager
    def turn(self, client: Hashable = None, gone: threading.Event | None = None) -> Iterator[None]:
        """The scorer's first-come, first-served lock, for work that should not share the
        interpreter with a slice of scoring (the HTTP service parses a body under it): use
        as ``with scorer.turn(client): ...``, never around a scoring call (it is not reentrant).
        ``gone``: as :meth:`score_batch`'s (a call whose client has gone gets no turn)."""
        try:
            if gone is not None and gone.is_set():
                raise CallCancelledError("the client hung up before its call was parsed")
            self._lock.acquire(client, gone)
        except CallCancelledError:
            self._count(dropped_calls=1)
            raise
        try:
            yield
        finally:
            self._lock.release()

    def _count(self, **changes: int) -> None:
        with self._stats_lock:
            for k, v in changes.items():
                self.stats[k] += v

    def _entries(self, requests: Sequence[Record]
                 ) -> tuple[list[_Entry], list[np.ndarray]]:
        """The checked ``(request, items)`` of a call and each item's work, refused over the
        bounds (counted): requests, items, list lengths and work (:mod:`fbrapids.serving.cost`)."""
        try:
            if len(requests) > self.max_requests:
                raise RequestTooLargeError(f"{len(requests)} requests in one call, more than "
                                           f"max_requests={self.max_requests}")
            entries = [self._check(e, i) for i, e in enumerate(requests)]
            total = sum(len(it) for _, it in entries)
            if total > self.max_items:
                raise RequestTooLargeError(f"{total} candidate items in one call, more than "
                                           f"max_items={self.max_items}")
            many = len(entries) > 1
            works = [self.cost.item_work(self.cost.request_size(r, f"request {i}"), items,
                                         functools.partial("request {} item {}".format, i) if many else "item {}".format)
                     for i, (r, items) in enumerate(entries)]
            work = int(sum(int(w.sum()) for w in works))
            if work > self.cost.max_work:
                raise RequestTooLargeError(f"the call asks for {work} units of work (items x features x list "
                                           f"lengths), more than max_work={self.cost.max_work}; send fewer items "
                                           "or shorter lists")
        except RequestTooLargeError:
            self._count(rejected_too_large=1)
            raise
        except RequestError:
            self._count(rejected_bad_input=1)
            raise
        self._count(work=work)
        return entries, works

    def _slices(self, entries: list[_Entry], works: list[np.ndarray] | None = None,
                items: int | None = None, work: int | None = None) -> list[list[tuple[int, int, int]]]:
        """The call cut into slices of at most ``items`` items and requests (default
        ``chunk_items``), and at most ``work`` work (default ``chunk_work``; at least one item
        each): each a list of ``(entry, first item, stop item)``; a request with more items
        is cut across slices."""
        chunk_items = items or self.chunk_items
        chunk_work = work or self.cost.chunk_work
        out: list[list[tuple[int, int, int]]] = [[]]
        room, work_room = chunk_items, chunk_work
        for i, (_, entry_items) in enumerate(entries):
            start, n = 0, len(entry_items)
            cum = np.concatenate([[0], np.cumsum(works[i])]) if works is not None else None
            while True:
                if room <= 0 or work_room <= 0:
                    out.append([])
                    room, work_room = chunk_items, chunk_work
                take = min(n - start, room)
                if cum is not None and take > 1:  # as many items as the slice's work allows, one at least
                    fits = int(np.searchsorted(cum[start + 1 : start + take + 1] - cum[start], work_room, side="right"))
                    take = max(1, min(take, fits))
                out[-1].append((i, start, start + take))
                room -= max(take, 1)
                work_room -= int(cum[start + take] - cum[start]) if cum is not None else 0
                start += take
                if start >= n:
                    break
        return [sl for sl in out if sl]

    def _score_checked(self, entries: list[_Entry], origin: list[int],
                       batch_call: bool, works: list[np.ndarray] | None = None, client: Hashable = None,
                       gone: threading.Event | None = None) -> list[np.ndarray]:
        """Score ``entries`` in slices taken in turns with other clients (each slice under the
        lock; a pause after one while others wait; none once ``gone`` is set); the kernels'
        and the model's refusals counted and raised as request errors.  Returns the
        probabilities per entry."""
        parts: list[list[np.ndarray]] = [[] for _ in entries]
        total = sum(len(it) for _, it in entries)
        self._count(requests=len(entries), items=total)
        units, sizes = self._units(entries, works)
        most = max(1, self.chunk_items // self.contended_chunk_items)  # units in one slice (requests without items too)
        slices = 0
        k = 0
        try:
            while k < len(units):
                wait = self._resume.get(client, 0.0) - time.monotonic()
                if wait > 0:  # this client's pause after a slice while others use the scorer
                    time.sleep(min(wait, 1.0))
                if gone is not None and gone.is_set():
                    raise CallCancelledError(f"the client hung up: its call dropped after {slices} slice(s)")
                with self._lock.turn_of(client, gone), torch.no_grad():
                    started = time.monotonic()
                    stop = self._slice_end(k, sizes, most, client)
                    sl = _merged(units[k:stop])
                    k = stop
                    slices += 1
                    probs = self._score_slice(entries, origin, batch_call, sl)
                    held = time.monotonic() - started
                if k < len(units) and self._lock.others_active(client, self.contended_window_s):
                    self._pause_after_slice(client, held)
                s = 0
                for (i, a, b) in sl:
                    parts[i].append(probs[s : s + b - a])
                    s += b - a
        except CallCancelledError:
            self._count(dropped_calls=1)
            raise
        except ModelInputError:
            self._count(rejected_model_input=1)
            raise
        except RequestError:
            self._count(rejected_bad_input=1)
            raise
        except KernelRuntimeError as exc:
            self._count(rejected_bad_input=1)
            full = str(exc.args[0] if exc.args else exc)
            log.warning("a kernel refused a call's data: %s", full[:1000])  # the plan's details stay here
            raise RequestError(show(re.sub(r"^layer \d+: ", "", full), 500)) from exc
        finally:
            if total > self.chunk_items or slices > 1:
                release_memory()
            else:  # small calls too, now and then: the freed pages they leave would stay resident
                self._release.maybe()
        self._count(slices=slices)
        return [np.concatenate(p) if len(p) > 1 else p[0] if p else np.zeros(0, dtype=np.float32) for p in parts]

    def _units(self, entries: list[_Entry], works: list[np.ndarray] | None
               ) -> tuple[list[list[tuple[int, int, int]]], list[tuple[int, int]]]:
        """The small units a call is scored in (``contended_chunk_items`` items each, or their
        share of ``chunk_work``), merged into larger slices while no other client uses the
        scorer; with each unit's ``(items, work)``."""
        unit_items = self.contended_chunk_items
        unit_work = max(1, self.cost.chunk_work * unit_items // self.chunk_items)
        units = self._slices(entries, works, unit_items, unit_work)
        sizes = [(sum(b - a for _, a, b in u),
                  sum(int(works[i][a:b].sum()) for i, a, b in u) if works is not None else 0) for u in units]
        return units, sizes

    def _slice_end(self, k: int, sizes: list[tuple[int, int]], most: int, client: Hashable) -> int:
        """Where the slice starting at unit ``k`` ends: that unit alone while another client
        is active, else as many units (at most ``most``) as ``chunk_items`` and ``chunk_work`` hold."""
        stop, n_items, n_work = k + 1, *sizes[k]
        if not self._lock.others_active(client, self.contended_window_s):
            while (stop < len(sizes) and stop - k < most and n_items + sizes[stop][0] <= self.chunk_items
                   and n_work + sizes[stop][1] <= self.cost.chunk_work):
                n_items, n_work = n_items + sizes[stop][0], n_work + sizes[stop][1]
                stop += 1
        return stop

    def _score_slice(self, entries: list[_Entry], origin: list[int], batch_call: bool,
                     sl: list[tuple[int, int, int]]) -> np.ndarray:
        """One slice's ``(entry, start, stop)`` item ranges scored (under the lock); a request
        error names the entry it blamed (``score_each`` answers that request alone)."""
        chunk = [(entries[i][0], entries[i][1][a:b]) for i, a, b in sl]
        self._origin = [(origin[i], a) for i, a, _ in sl]
        self._batch_call = batch_call
        self._blamed = None
        try:
            return self._score_entries(chunk)
        except RequestError as exc:  # which request the error named (score_each answers it alone)
            exc.entry = self._blamed
            raise

    def _pause_after_slice(self, client: Hashable, held: float) -> None:
        """``client`` waits ``PAUSE_FACTOR`` times the slice it ``held`` before its next one:
        the others' turn (the pauses kept are bounded: past ones are dropped)."""
        if len(self._resume) >= 256:  # bounded: past pauses are over
            now = time.monotonic()
            self._resume = {c: t for c, t in self._resume.items() if t > now}
        self._resume[client] = time.monotonic() + PAUSE_FACTOR * held  # more slices to come: the others' turn
        self._count(paused_slices=1)

    def _score_entries(self, entries: list[_Entry]) -> np.ndarray:
        """One slice, under the lock."""
        if not entries:
            return np.zeros(0, dtype=np.float32)
        images = getattr(self.model, "images", None)
        before = copy.copy(getattr(images, "totals", None))
        unseen = sum(st.unseen_reads for st in self._stores)
        probs = self._score_dedup(entries) if self.dedup else self._score_full(entries)
        if self._stores:
            self.stats["unseen_ids"] += sum(st.unseen_reads for st in self._stores) - unseen
        if before is not None and images is not None:  # (before: the images' totals)
            after = images.totals
            self.stats["image_references"] += after.references - before.references
            self.stats["unique_images_embedded"] += after.unique_images - before.unique_images
            self.stats["unknown_image_references"] += after.unknown_references - before.unknown_references
        return probs

    def _finite(self, logits: torch.Tensor, label: Callable[[int], str], dense: Callable[[int], list[float]]) -> None:
        """Refuse a slice whose logits are not all finite or beyond ``max_logit``, naming the
        first such row and its largest dense model input (what overflowed the network)."""
        bad = ~torch.isfinite(logits) | (logits.abs() > self.max_logit)
        if not bool(bad.any()):
            return
        k = int(torch.nonzero(bad)[0, 0])
        values = dense(k)
        if values:
            j = int(np.argmax(np.abs(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0))))
            why = f"model input {self.spec.dense[j]!r} = {values[j]:.6g} is beyond what the model tolerates"
        else:
            why = "its inputs are beyond what the model tolerates"
        raise ModelInputError(f"{label(k)}: {why} (its score would be {float(logits[k])}); send a smaller value")

    def _score_dedup(self, entries: list[_Entry]) -> np.ndarray:
        spec = self.spec
        filled: dict[str, int] = {}
        req_frame = records_to_frame([r for r, _ in entries], spec.schema, spec.request_columns, self._request_label,
                                     spec.fill, filled, spec.time)
        req = self._arrays(req_frame, spec.request_features, self._dense_of["request"],
                           self._sparse_of["request"], "requests_extracted", self._request_label)
        records = [it for _, items in entries for it in items]
        owner_all = np.repeat(np.arange(len(entries)), [len(items) for _, items in entries])
        if not records:
            return np.zeros(0, dtype=np.float32)
        self._owner_all = owner_all
        self._starts = np.concatenate([[0], np.cumsum([len(items) for _, items in entries])])
        # every item record validated first; items are identical when all their item columns are
        item_values, contents = records_to_columns(records, spec.schema, spec.item_columns, self._item_label,
                                                   spec.fill, filled, spec.time)
        self.stats["nulls_filled"] += sum(filled.values())
        index: dict[tuple, int] = {}
        item_of = np.fromiter((index.setdefault(k, len(index)) for k in contents), dtype=np.int64,
                              count=len(contents))
        keys = list(index)
        first = np.full(len(keys), -1, dtype=np.int64)
        first[item_of[::-1]] = np.arange(len(records))[::-1]
        self.stats["unique_items"] += len(keys)
        items = self._items(keys, first, item_values)
        pair_of, pairs = pd.factorize(owner_all * len(keys) + item_of, sort=False)
        p_owner, p_item = pairs // len(keys), pairs % len(keys)
        rows = items.take(p_item) if len(pairs) != len(keys) or (p_item != np.arange(len(keys))).any() else items
        if spec.pair_features or self._dense_of["pair"] or self._sparse_of["pair"]:
            at = first[p_item]
            frame = columns_frame({c: item_values[c] for c in self._pair_item_columns}, spec.frame_schema, at)
            for c in self._pair_request_columns:  # the request's columns, broadcast to its pairs
                col = req_frame[c].take(p_owner)
                frame[c] = col.to_numpy() if spec.frame_schema[c] in ("int64", "uint64", "float64") else \
                    col.reset_index(drop=True)
            pair = self._arrays(frame, spec.pair_features, self._dense_of["pair"], self._sparse_of["pair"],
                                "pairs_extracted", lambda i: self._item_label(at[i]))
            rows = SideArrays(np.concatenate([rows.dense, pair.dense], axis=1), {**rows.sparse, **pair.sparse})
        self.stats["rows_scored"] += len(pairs)
        logits = split_forward(self.model, req, rows, p_owner, self._dense_layout, spec.sparse)
        self._finite(logits, lambda k: self._item_label(int(first[p_item[k]])),
                     lambda k: [float(req.dense[p_owner[k], j]) if side == "request" else float(rows.dense[k, j])
                                for side, j in self._dense_layout])
        probs = torch.sigmoid(calibrated_logits(self.model, logits)).float().cpu().numpy()
        return probs[pair_of]

    def _score_full(self, entries: list[_Entry]) -> np.ndarray:
        spec = self.spec
        parts = []
        filled: dict[str, int] = {}
        item_cols = set(spec.item_columns)
        for i, (request, items) in enumerate(entries):
            req = {c: request[c] for c in spec.request_columns if c in request}
            # a row is the request's columns and the item's item columns (an item's other keys are ignored,
            # as on the deduplicated path)
            rows = [{**req, **{c: v for c, v in it.items() if c in item_cols}} if isinstance(it, Mapping) else it
                    for it in items]
            if not rows:
                continue
            origin, offset = self._origin[i]
            records_to_frame([request], spec.schema, spec.request_columns, _fixed_label(f"request {origin}"),
                             spec.fill, time=spec.time)
            name = (lambda j, o=offset: f"item {j + o}") if not self._batch_call else \
                (lambda j, r=origin, o=offset: f"request {r} item {j + o}")
            frame = records_to_frame(rows, spec.schema, [*spec.request_columns, *spec.item_columns], name,
                                     spec.fill, filled, spec.time)
            arr = self._arrays(frame, spec.features, list(spec.dense), list(spec.sparse), "pairs_extracted", name)
            self.stats["rows_scored"] += len(frame)
            logits = self.model(_batch(arr).to(self.device))
            self._finite(logits, name, lambda k: [float(x) for x in arr.dense[k]])
            parts.append(torch.sigmoid(calibrated_logits(self.model, logits)).float().cpu().numpy())
        self.stats["nulls_filled"] += sum(filled.values())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _fixed_label(text: str) -> Callable[[int], str]:
    """A row-label function that names every row ``text`` (one request's records)."""
    return lambda _: text


def _merged(units: list[list[tuple[int, int, int]]]) -> list[tuple[int, int, int]]:
    """Consecutive slices as one: their ``(entry, first, stop)`` ranges, a request cut across
    two of them joined again.

    >>> _merged([[(0, 0, 3), (1, 0, 2)], [(1, 2, 5)], [(2, 0, 1)]])
    [(0, 0, 3), (1, 0, 5), (2, 0, 1)]
    """
    out: list[tuple[int, int, int]] = []
    for unit in units:
        for i, a, b in unit:
            if out and out[-1][0] == i and out[-1][2] == a:
                out[-1] = (i, out[-1][1], b)
            else:
                out.append((i, a, b))
    return out


def _batch(arr: SideArrays) -> Batch:
    """The training-side batch of full rows (offsets without their final end)."""
    sp = {k: (to_tensor(v), to_tensor(o[:-1])) for k, (v, o) in arr.sparse.items()}
    return Batch(to_tensor(arr.dense), torch.zeros(len(arr)), sp)
