"""The frame-facing features layer, above the kernel core (:mod:`fbrapids.kernels`):
schemas of pandas / cudf / dask frames, fitting (``categorify``), running plans over eager
frames and dask partitions, ``explain`` and :class:`FeatureSet`.

* :mod:`~fbrapids.features.schema` -- dtypes -> kernel types;
* :mod:`~fbrapids.features.plans` -- frame -> plan -> compiled runtime;
* :mod:`~fbrapids.features.run` -- eager runs and dask ``map_partitions``;
* :mod:`~fbrapids.features.fitting` -- operators flagged ``needs_fit`` and their fitters;
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
from fbrapids.features.fitting import fit, needs_fit, register_fitter
from fbrapids.features.plans import compiled_plan, plan_for
from fbrapids.features.run import run_features
from fbrapids.features.schema import column_type, schema_of

__all__ = ["FeatureSet", "column_type", "compiled_plan", "explain", "extract", "fit", "needs_fit", "plan_for",
           "register_fitter", "run_features", "schema_of"]
