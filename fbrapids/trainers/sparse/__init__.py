"""The tiered embedding store: raw uint64 ids, cache / host RAM / SSD tiers, sparse optimizers.

Layout: ``directory`` (id -> row, admission), ``tiers`` / ``ssd`` / ``hierarchy`` (the
tiers and rows moving between them), ``policies`` (eviction: LRU, LFU, LFU keeping RAM
full), ``optim`` (row-wise Adagrad, SGD), ``persistence`` (flush, save, load), ``store`` (lookup, prefetch,
apply_gradients, stats), ``hashmap`` (the C helpers, built by the kernels' compile cache).

Example:
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16)).config.width
    5
"""

from fbrapids.trainers.sparse.config import StoreConfig
from fbrapids.trainers.sparse.row_directory import as_uint64_ids
from fbrapids.trainers.sparse.store import Lookup, TieredEmbeddingStore, sparse_update

__all__ = ["StoreConfig", "TieredEmbeddingStore", "Lookup", "as_uint64_ids", "sparse_update"]
