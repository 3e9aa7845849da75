"""Building blocks: store-backed embedding bags, interactions, attention pooling."""

from fbrapids.trainers.modules.attention import AttentionPooling
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection, bag_segments
from fbrapids.trainers.modules.interaction import DotInteraction, fm_second_order, mlp, plain_mlp

__all__ = ["TieredEmbeddingBagCollection", "bag_segments", "DotInteraction", "fm_second_order", "mlp",
           "plain_mlp", "AttentionPooling"]
