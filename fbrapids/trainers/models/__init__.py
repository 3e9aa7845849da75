"""CTR models over tiered embedding stores: DLRM, Wide&Deep, DeepFM, DIN, DCN-v2, logistic regression (all
registered in :mod:`fbrapids.trainers.models.registry`, the classes an export may name)."""

from fbrapids.trainers.models.base import CTRModel
from fbrapids.trainers.models.dcn import DCNv2
from fbrapids.trainers.models.din import DIN
from fbrapids.trainers.models.dlrm import DLRM
from fbrapids.trainers.models.logreg import LogisticRegression
from fbrapids.trainers.models.registry import (model_class, model_for, model_name, register_model, registered_models,
                                               short_names)
from fbrapids.trainers.models.wide_deep import DeepFM, WideAndDeep

for _cls, _short in ((DLRM, "dlrm"), (WideAndDeep, "wide_deep"), (DeepFM, "deepfm"), (DIN, "din"),
                     (LogisticRegression, "logreg"), (DCNv2, "dcn")):
    register_model(_cls, short=_short)

__all__ = ["CTRModel", "DLRM", "WideAndDeep", "DeepFM", "DIN", "DCNv2", "LogisticRegression", "register_model",
           "model_class", "model_name",
           "registered_models", "model_for", "short_names"]
