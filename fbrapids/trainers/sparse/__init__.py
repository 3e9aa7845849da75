"""The tiered embedding store: raw uint64 ids, cache / host RAM / SSD tiers, sparse optimizers.

Example:
    >>> from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
    >>> TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16)).config.width
    5
"""

from fbrapids.trainers.sparse.config import StoreConfig
from fbrapids.trainers.sparse.store import Lookup, TieredEmbeddingStore, as_uint64_ids

__all__ = ["StoreConfig", "TieredEmbeddingStore", "Lookup", "as_uint64_ids"]
