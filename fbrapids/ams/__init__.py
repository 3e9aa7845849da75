"""AMS ("Image Matters", Ge et al., 2018): image embedding sub-models trained end to end,
DICM, behaviour aggregators and partial warm-up.

* :class:`ImageVectorStore` - raw image vectors stored once per image id (RAM or memmap);
* :class:`ImageEmbeddingMLP`, :class:`ImageEmbedder` - the trainable sub-model and per-batch
  embedding of each unique image once, with an :class:`ImageBatchReport` of the traffic;
* :func:`sum_pool`, :func:`max_pool`, :class:`MultiQueryAttentivePooling` - aggregators over
  behaviour sequences (besides DIN's attention,
  :class:`~fbrapids.trainers.modules.attention.AttentionPooling`);
* :class:`DICM` - the model; :func:`partial_warm_up` - warm start except id embeddings;
* :func:`read_taobao`, :func:`taobao_image_store` - the Taobao sample with synthetic images;
* :class:`ShardedImageVectors`, :class:`DaskImageEmbedder` - vectors partitioned over a dask
  cluster's workers and embedded where they live (``docs/ams-on-dask.md``).

Example:
    >>> from fbrapids.ams import ImageEmbeddingMLP
    >>> ImageEmbeddingMLP().sizes
    [4096, 256, 64, 12]
"""

from fbrapids.ams.dicm import DICM
from fbrapids.ams.distributed import DaskImageEmbedder, ShardedImageVectors
from fbrapids.ams.embedding import ImageBatchReport, ImageEmbedder, ImageEmbeddingMLP
from fbrapids.ams.pooling import MultiQueryAttentivePooling, max_pool, sum_pool
from fbrapids.ams.taobao import read_taobao, taobao_image_store
from fbrapids.ams.vectors import ImageVectorStore, synthetic_vectors
from fbrapids.ams.warmup import WarmUpReport, partial_warm_up

__all__ = ["DICM", "DaskImageEmbedder", "ShardedImageVectors", "ImageBatchReport", "ImageEmbedder",
           "ImageEmbeddingMLP",
           "MultiQueryAttentivePooling", "max_pool", "sum_pool", "read_taobao",
           "taobao_image_store", "ImageVectorStore", "synthetic_vectors", "WarmUpReport", "partial_warm_up"]
