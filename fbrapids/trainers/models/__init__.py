"""CTR models over tiered embedding stores: DLRM, Wide&Deep, DeepFM, DIN."""

from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.din import DIN
from fbrapids.trainers.models.dlrm import DLRM
from fbrapids.trainers.models.wide_deep import DeepFM, WideAndDeep

__all__ = ["CTRModel", "DLRM", "WideAndDeep", "DeepFM", "DIN"]
