"""The frame-facing features layer, above the kernel core (:mod:`fbrapids.kernels`):
schemas of pandas / cudf / dask frames, fitted and history operators, running plans over eager
frames and dask partitions, ``explain`` and :class:`FeatureSet`.

* :mod:`~fbrapids.features.schema` -- dtypes -> kernel types;
* :mod:`~fbrapids.features.plans` -- frame -> plan -> compiled runtime;
* :mod:`~fbrapids.features.run` -- eager runs and dask ``map_partitions``;
* :mod:`~fbrapids.features.needs_fit` -- which features need fitting (``needs_fit``);
* :mod:`~fbrapids.features.fitted` -- fit once (one pass), apply everywhere (:class:`Fitted`),
  and the frame-level stage of fitted, history and row operators;
* :mod:`~fbrapids.features.extract`, :mod:`~fbrapids.features.explain`,
  :mod:`~fbrapids.features.featureset` -- the public entry points.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> extract(pd.DataFrame({"ts": [3600]}), {"h": ops.hour("ts")})["h"].tolist()
    [1]
"""

from fbrapids.features.explain import explain
from fbrapids.features.extract import extract
from fbrapids.features.featureset import FeatureSet
from fbrapids.features.fitted import Fitted, fit
from fbrapids.features.needs_fit import needs_fit
from fbrapids.features.plans import compiled_plan, plan_for
from fbrapids.features.run import run_features
from fbrapids.features.schema import column_type, schema_of

__all__ = ["FeatureSet", "Fitted", "column_type", "compiled_plan", "explain", "extract", "fit", "needs_fit",
           "plan_for", "run_features", "schema_of"]
