"""Inference: export a feature plan and a trained model, score a request against N items
with request features computed once per request and item features once per item (cached),
a batch-scoring API, and an optional HTTP service (``pip install fbrapids[serve]``).

Example:
    >>> from fbrapids.serving import Scorer, ServingSpec, export_model, load_scorer
    >>> callable(export_model) and callable(load_scorer)
    True
"""

from fbrapids.serving.export import export_model, load_model, load_scorer
from fbrapids.serving.forward import SideArrays, broadcast_batch, split_forward, supports_split
from fbrapids.serving.scorer import Scorer
from fbrapids.serving.spec import ServingSpec, records_to_frame

__all__ = ["export_model", "load_model", "load_scorer", "Scorer", "ServingSpec", "records_to_frame", "SideArrays",
           "broadcast_batch", "split_forward", "supports_split"]
