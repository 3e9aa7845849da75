"""CTR models over tiered embedding stores: DLRM, Wide&Deep, DeepFM, DIN, DCN-v2, logistic regression.

Each model registers itself in its own file (``@register_model(short=...)``,
:mod:`fbrapids.trainers.models.registry`); importing this package imports every module of
it, so a model added as one new file here is registered (and in every list of models)
without a line elsewhere.  What varies from model to model (its split forward for serving,
its trial zero-start, its batched forward, its pipeline architecture, its inputs from a
workload) is the model class's own (:class:`~fbrapids.trainers.models.base.CTRModel`).
"""

import importlib
import pkgutil

from fbrapids.trainers.models.base import CTRModel

# isort: off
# the order the built-in models register in, kept out of the import sorting: short_names(),
# and with it the command line's --model choices and RunConfig's list, reads the registry in
# registration order (dlrm, the default, first)
from fbrapids.trainers.models.dlrm import DLRM
from fbrapids.trainers.models.wide_deep import DeepFM, WideAndDeep
from fbrapids.trainers.models.din import DIN
from fbrapids.trainers.models.logreg import LogisticRegression
from fbrapids.trainers.models.dcn import DCNv2
# isort: on
from fbrapids.trainers.models.registry import (
    model_class,
    model_for,
    model_name,
    register_model,
    registered_models,
    short_names,
)

for _module in pkgutil.iter_modules(__path__):  # the models added as a file of their own register themselves
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CTRModel", "DLRM", "WideAndDeep", "DeepFM", "DIN", "DCNv2", "LogisticRegression", "register_model",
           "model_class", "model_name",
           "registered_models", "model_for", "short_names"]
