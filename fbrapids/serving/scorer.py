"""Score one request against N candidate items; request features once, item features once.

:class:`Scorer` runs a trained model behind a :class:`~fbrapids.serving.spec.ServingSpec`:

1. the request's raw columns become a one-row frame (R rows for :meth:`Scorer.score_batch`)
   and its ``request_features`` are extracted once, through ``df.fbx.extract`` (the same
   compiled meta-kernels as training: each plan layer is one kernel launch, so a plan of
   independent hash buckets is one launch);
2. items are deduplicated by ``item_key``; items missing from the LRU item cache have their
   ``item_features`` extracted together (one extraction for all misses of the call) and
   cached; repeated and cached items cost no extraction;
3. ``pair_features`` (request x item crosses), if any, are extracted per unique pair;
4. :func:`~fbrapids.serving.forward.split_forward` scores the unique rows with the request
   side computed once and broadcast, and scores are scattered back to every position.

``dedup=False`` is the baseline the benchmark compares against: every (request, item) row
is materialised in full and every feature extracted for every row, then ``model(batch)``.

Items are identified by ``item_key``: a cached item's features are reused for the same key
(call :meth:`Scorer.clear_cache` when the catalogue changes).  NaN / null dense values
become 0 and are counted in ``stats["nan_replaced"]``.  For a model with images (DICM),
``stats`` also counts image references, unique images embedded and references to unknown
image ids (they read the vector store's documented default, zeros).  Bad input raises ``ValueError``
naming the record and column.  Calls are serialised by a lock (the embedding stores are
not thread-safe), so a scorer may be shared by the threads of a web server.

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

import copy
import logging
import threading
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

import fbrapids  # noqa: F401  (registers the .fbx accessor)
from fbrapids.kernels import stats as kstats
from fbrapids.kernels.expr import columns_of
from fbrapids.serving.cache import ItemCache
from fbrapids.serving.forward import SideArrays, _t, split_forward
from fbrapids.serving.spec import ServingSpec, records_to_frame
from fbrapids.trainers.batch import Batch, dense_matrix, sparse_column
from fbrapids.trainers.models.base import CTRModel

log = logging.getLogger(__name__)


class Scorer:
    """Scores requests against candidate items (module docstring).

    Args:
        model: a trained CTR model (put in eval mode).
        spec: the serving spec its features and inputs were trained with.
        cache_items: item-cache capacity in items (LRU); 0 disables the cache.
        dedup: compute request / item features once and broadcast (default), or the
            materialise-every-row baseline.
        max_items: refuse requests with more candidate items than this.
    """

    def __init__(self, model: CTRModel, spec: ServingSpec, cache_items: int = 100_000, dedup: bool = True,
                 max_items: int = 100_000) -> None:
        self.model = model.eval()
        self.spec = spec
        self.dedup = dedup
        self.cache_items = int(cache_items)
        self.max_items = int(max_items)
        self._lock = threading.Lock()
        side = {c: spec.side_of(c) for c in [*spec.dense, *spec.sparse]}
        self._dense_of = {s: [c for c in spec.dense if side[c] == s] for s in ("request", "item", "pair")}
        self._sparse_of = {s: [c for c in spec.sparse if side[c] == s] for s in ("request", "item", "pair")}
        # each model dense input as (side, column within that side); item and pair rows are merged
        self._row_dense = self._dense_of["item"] + self._dense_of["pair"]
        self._dense_layout = [("request", self._dense_of["request"].index(c)) if side[c] == "request"
                              else ("item", self._row_dense.index(c)) for c in spec.dense]
        self._cache = (ItemCache(self.cache_items, len(self._dense_of["item"]), self._sparse_of["item"])
                       if self.cache_items > 0 else None)
        pair_cols = set().union(*[columns_of(e) for e in spec.pair_features.values()])
        self._pair_item_columns = [c for c in spec.item_columns if c in pair_cols]
        self._pair_request_columns = [c for c in spec.request_columns if c in pair_cols]
        self._owner_all = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(2, dtype=np.int64)
        self.stats: dict[str, int] = dict.fromkeys(
            ("requests", "items", "unique_items", "item_cache_hits", "item_cache_misses", "items_extracted",
             "requests_extracted", "pairs_extracted", "rows_scored", "kernel_launches", "nan_replaced",
             "image_references", "unique_images_embedded", "unknown_image_references"), 0)

    # -- feature extraction -------------------------------------------------------------------
    def _arrays(self, frame: pd.DataFrame, features: Mapping[str, Any], dense: list[str], sparse: list[str],
                counter: str) -> SideArrays:
        if features and len(frame):
            before = kstats.stats()["launches"]
            frame = frame.fbx.extract(**features)
            self.stats["kernel_launches"] += kstats.stats()["launches"] - before
        self.stats[counter] += len(frame)
        d, replaced = dense_matrix(frame, dense, "zero")
        self.stats["nan_replaced"] += replaced
        return SideArrays(d, {c: sparse_column(frame[c], c) for c in sparse})

    def _items(self, keys: np.ndarray, first: np.ndarray, records: Sequence[Mapping[str, Any]]) -> SideArrays:
        """Item-side arrays of the unique ``keys`` (``first[i]``: a record index holding key i)."""
        spec = self.spec
        dense, sparse = self._dense_of["item"], self._sparse_of["item"]
        klist = keys.tolist()
        if self._cache is None or len(klist) > self._cache.capacity:
            self.stats["item_cache_misses"] += len(klist)
            frame = records_to_frame([records[i] for i in first], spec.schema, spec.item_columns,
                                     lambda i: self._item_label(first[i]))
            return self._arrays(frame, spec.item_features, dense, sparse, "items_extracted")
        slots = self._cache.lookup(klist)
        miss = np.flatnonzero(slots < 0)
        self.stats["item_cache_hits"] += len(klist) - len(miss)
        self.stats["item_cache_misses"] += len(miss)
        if len(miss):
            at = first[miss]
            frame = records_to_frame([records[g] for g in at.tolist()], spec.schema, spec.item_columns,
                                     lambda i: self._item_label(at[i]))
            fresh = self._arrays(frame, spec.item_features, dense, sparse, "items_extracted")
            slots[miss] = self._cache.put([klist[i] for i in miss.tolist()], fresh)
        return self._cache.gather(slots)

    def _item_label(self, g: int) -> str:
        """``"item j"`` (or ``"request r item j"`` in a batch) of the call's g-th item record."""
        r = int(self._owner_all[g])
        j = int(g - self._starts[r])
        return f"item {j}" if len(self._starts) == 2 else f"request {r} item {j}"

    def clear_cache(self) -> None:
        """Forget every cached item's features."""
        with self._lock:
            if self._cache is not None:
                self._cache.clear()

    # -- scoring --------------------------------------------------------------------------------
    @staticmethod
    def _check(entry: Any, i: int) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
        if not isinstance(entry, Mapping) or "request" not in entry or "items" not in entry:
            raise ValueError(f"request {i}: expected an object with 'request' and 'items'")
        if not isinstance(entry["request"], Mapping):
            raise ValueError(f"request {i}: 'request' must be an object of columns")
        if not isinstance(entry["items"], (list, tuple)):
            raise ValueError(f"request {i}: 'items' must be a list of objects")
        return entry["request"], list(entry["items"])

    def score(self, request: Mapping[str, Any], items: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Click probabilities ``[len(items)]`` of ``items`` for ``request`` (JSON-like dicts)."""
        return self.score_batch([{"request": request, "items": items}])[0]

    def score_batch(self, requests: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        """Scores of several ``{"request": {...}, "items": [{...}, ...]}`` entries at once:
        request features extracted together, items deduplicated across all of them."""
        entries = [self._check(e, i) for i, e in enumerate(requests)]
        total = sum(len(it) for _, it in entries)
        if total > self.max_items:
            raise ValueError(f"{total} candidate items in one call, more than max_items={self.max_items}")
        with self._lock, torch.no_grad():
            self.stats["requests"] += len(entries)
            self.stats["items"] += total
            if not entries:
                return []
            images = getattr(self.model, "images", None)
            before = copy.copy(getattr(images, "totals", None))
            if self.dedup:
                probs = self._score_dedup(entries)
            else:
                probs = self._score_full(entries)
            if before is not None:
                after = images.totals
                self.stats["image_references"] += after.references - before.references
                self.stats["unique_images_embedded"] += after.unique_images - before.unique_images
                self.stats["unknown_image_references"] += after.unknown_references - before.unknown_references
        out, s = [], 0
        for _, items in entries:
            out.append(probs[s : s + len(items)])
            s += len(items)
        return out

    def _score_dedup(self, entries: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]) -> np.ndarray:
        spec = self.spec
        req_frame = records_to_frame([r for r, _ in entries], spec.schema, spec.request_columns, "request")
        req = self._arrays(req_frame, spec.request_features, self._dense_of["request"],
                           self._sparse_of["request"], "requests_extracted")
        records = [it for _, items in entries for it in items]
        owner_all = np.repeat(np.arange(len(entries)), [len(items) for _, items in entries])
        if not records:
            return np.zeros(0, dtype=np.float32)
        self._owner_all = owner_all
        self._starts = np.concatenate([[0], np.cumsum([len(items) for _, items in entries])])
        key_col = records_to_frame(records, spec.schema, [spec.item_key], self._item_label)[spec.item_key].to_numpy()
        item_of, keys = pd.factorize(key_col, sort=False)
        first = np.full(len(keys), -1, dtype=np.int64)
        first[item_of[::-1]] = np.arange(len(records))[::-1]
        self.stats["unique_items"] += len(keys)
        items = self._items(np.asarray(keys), first, records)
        pair_of, pairs = pd.factorize(owner_all * len(keys) + item_of, sort=False)
        p_owner, p_item = pairs // len(keys), pairs % len(keys)
        rows = items.take(p_item) if len(pairs) != len(keys) or (p_item != np.arange(len(keys))).any() else items
        if spec.pair_features or self._dense_of["pair"] or self._sparse_of["pair"]:
            at = first[p_item]
            frame = records_to_frame([records[g] for g in at.tolist()], spec.schema, self._pair_item_columns,
                                     lambda i: self._item_label(at[i]))
            for c in self._pair_request_columns:  # the request's columns, broadcast to its pairs
                col = req_frame[c].take(p_owner)
                frame[c] = col.to_numpy() if spec.schema[c] in ("int64", "uint64", "float64") else \
                    col.reset_index(drop=True)
            pair = self._arrays(frame, spec.pair_features, self._dense_of["pair"], self._sparse_of["pair"],
                                "pairs_extracted")
            rows = SideArrays(np.concatenate([rows.dense, pair.dense], axis=1), {**rows.sparse, **pair.sparse})
        self.stats["rows_scored"] += len(pairs)
        logits = split_forward(self.model, req, rows, p_owner, self._dense_layout, spec.sparse)
        probs = torch.sigmoid(logits).float().cpu().numpy()
        return probs[pair_of]

    def _score_full(self, entries: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]) -> np.ndarray:
        spec = self.spec
        parts = []
        for i, (request, items) in enumerate(entries):
            rows = [{**{c: request[c] for c in spec.request_columns if c in request}, **it}
                    if isinstance(it, Mapping) else it for it in items]
            if not rows:
                continue
            records_to_frame([request], spec.schema, spec.request_columns, lambda _, i=i: f"request {i}")
            name = (lambda j: f"item {j}") if len(entries) == 1 else (lambda j, i=i: f"request {i} item {j}")
            frame = records_to_frame(rows, spec.schema, [*spec.request_columns, *spec.item_columns], name)
            arr = self._arrays(frame, spec.features, list(spec.dense), list(spec.sparse), "pairs_extracted")
            self.stats["rows_scored"] += len(frame)
            logits = self.model(_batch(arr))
            parts.append(torch.sigmoid(logits).float().cpu().numpy())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _batch(arr: SideArrays) -> Batch:
    """The training-side batch of full rows (offsets without their final end)."""
    sp = {k: (_t(v), _t(o[:-1])) for k, (v, o) in arr.sparse.items()}
    return Batch(_t(arr.dense), torch.zeros(len(arr)), sp)
