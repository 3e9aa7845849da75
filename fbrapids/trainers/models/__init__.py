"""CTR models over tiered embedding stores: DLRM, Wide&Deep, DeepFM, DIN (all registered
in :mod:`fbrapids.trainers.models.registry`, the classes an export may name)."""

from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.din import DIN
from fbrapids.trainers.models.dlrm import DLRM
from fbrapids.trainers.models.registry import model_class, model_name, register_model, registered_models
from fbrapids.trainers.models.wide_deep import DeepFM, WideAndDeep

for _cls in (DLRM, WideAndDeep, DeepFM, DIN):
    register_model(_cls)

__all__ = ["CTRModel", "DLRM", "WideAndDeep", "DeepFM", "DIN", "register_model", "model_class", "model_name",
           "registered_models"]
