"""Building blocks: store-backed embedding bags, interactions, attention pooling, DCN-v2's cross network."""

from fbrapids.trainers.modules.attention import AttentionPooling
from fbrapids.trainers.modules.cross import CrossNetwork
from fbrapids.trainers.modules.embedding import TieredEmbeddingBagCollection, bag_segments
from fbrapids.trainers.modules.interaction import DotInteraction, fm_second_order, mlp, mlp_forward, plain_mlp

__all__ = ["TieredEmbeddingBagCollection", "bag_segments", "DotInteraction", "fm_second_order", "mlp",
           "mlp_forward", "plain_mlp", "AttentionPooling", "CrossNetwork"]
