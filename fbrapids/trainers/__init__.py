"""Training: stream batches from frames, tiered embedding stores, CTR models, fit / evaluate.

Example:
    >>> from fbrapids.trainers import stream, fit, evaluate, DLRM, StoreConfig
    >>> callable(stream) and callable(fit)
    True
"""

from fbrapids.trainers.batch import Batch
from fbrapids.trainers.checkpoint.model_state import load_checkpoint, save_checkpoint
from fbrapids.trainers.fit import FitResult, evaluate, fit, predict
from fbrapids.trainers.fit_config import FitConfig
from fbrapids.trainers.metrics import all_metrics, auc, calibration, gauc, logloss, normalized_entropy
from fbrapids.trainers.models import DIN, DLRM, CTRModel, DCNv2, DeepFM, WideAndDeep
from fbrapids.trainers.modules import TieredEmbeddingBagCollection
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
from fbrapids.trainers.stream import BatchStream, stream

__all__ = ["Batch", "BatchStream", "stream", "fit", "evaluate", "predict", "FitConfig", "FitResult", "save_checkpoint",
           "load_checkpoint", "auc", "gauc", "logloss", "normalized_entropy", "calibration", "all_metrics",
           "CTRModel", "DLRM", "WideAndDeep", "DeepFM", "DIN", "DCNv2", "StoreConfig", "TieredEmbeddingStore",
           "TieredEmbeddingBagCollection"]
