"""``extract``: feature expressions -> columns, fitted where needed, through meta-kernels.

* pandas frames: the plan's host meta-kernels over the frame's Arrow buffers;
* dask frames: per partition (``map_partitions``), a plan compiled once per worker process;
* cudf / dask-cudf frames: the CUDA meta-kernels (:mod:`fbrapids.kernels.runtime_cuda`).

``categorify`` expressions are fitted over the whole frame first (one dask pass).

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"user_id": [1, 2], "ts": [0, 90000]})
    >>> df.fbx.extract(u=ops.hash_bucket("user_id", 1 << 20), wd=ops.weekday("ts"))[["u", "wd"]].values.tolist()
    [[855009, 3], [753575, 4]]
"""

from __future__ import annotations

from typing import Any, Mapping

from fbrapids.features.fitting import fit, needs_fit
from fbrapids.features.run import run_features
from fbrapids.kernels import as_expr


def extract(obj: Any, features: Mapping[str, Any], fused: bool = True) -> Any:
    """Add the named feature columns to ``obj`` (like ``assign``), computed by meta-kernels.

    Args:
        obj: a pandas, cudf, dask or dask-cudf DataFrame.
        features: output name -> expression (from :mod:`fbrapids.ops`; a column name is an
            expression too), or a :class:`~fbrapids.features.FeatureSet`.
        fused: one kernel per layer (default); False launches one kernel per operator
            (the baseline the benchmark compares against).

    Returns:
        A frame of the same kind with the feature columns added.

    Raises:
        FeatureError: a feature names a missing column, an operator gets a wrong-typed
            column, etc. (the message names the feature and the column).

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> extract(pd.DataFrame({"a": [1.0, None]}), {"b": ops.fill_null("a", 0)})["b"].tolist()
        [1.0, 0.0]
    """
    features = getattr(features, "features", features)  # a FeatureSet
    if not features:
        return obj
    features = {name: as_expr(e) for name, e in features.items()}
    if any(needs_fit(e) for e in features.values()):
        features = fit(obj, features)
    return run_features(obj, features, fused)
