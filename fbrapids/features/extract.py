"""``extract``: feature expressions -> columns, fitted where needed, through meta-kernels.

* pandas frames: the plan's host meta-kernels over the frame's Arrow buffers;
* dask frames: per partition (``map_partitions``), a plan compiled once per worker process;
* cudf / dask-cudf frames: the CUDA meta-kernels (:mod:`fbrapids.kernels.runtime_cuda`).

Fitted operators (``categorify``, ``target_encode``, ...) apply the states of a
:class:`~fbrapids.features.Fitted` and are never refitted; history and row operators run at
frame level first (:mod:`fbrapids.features.fitted`).

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"user_id": [1, 2], "ts": [0, 90000]})
    >>> df.fbx.extract(u=ops.hash_bucket("user_id", 1 << 20), wd=ops.weekday("ts"))[["u", "wd"]].values.tolist()
    [[855009, 3], [753575, 4]]
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Mapping

from fbrapids.errors import ReplacedColumnWarning
from fbrapids.features.fitted import Fitted, extract_frame, has_frame_ops
from fbrapids.features.run import run_features
from fbrapids.frames.backend import FrameLike
from fbrapids.kernels import Col, as_expr

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.features.featureset import FeatureSet


def extract(obj: FrameLike, features: FeatureMap | FeatureSet | Fitted, fused: bool = True, training: bool = False,
            allow_unfitted: bool = False, progress: bool | None = None) -> FrameLike:
    """Add the named feature columns to ``obj`` (like ``assign``), computed by meta-kernels.

    Args:
        obj: a pandas, cudf, dask or dask-cudf DataFrame.
        features: output name -> expression (from :mod:`fbrapids.ops`; a column name is an
            expression too), a :class:`~fbrapids.features.FeatureSet`, or a
            :class:`~fbrapids.features.Fitted` (fitted states applied, never refitted).
        fused: one kernel per layer (default); False launches one kernel per operator
            (the baseline the benchmark compares against).
        training: ``obj`` is the frame the states were fitted on (out-of-fold target encodings).
        allow_unfitted: fit operators that have no state on ``obj`` itself (explicit opt-in).
        progress: a pandas frame's bar (rows done, time left): None (default) shows one
            from ``EXTRACT_PROGRESS_ROWS`` (2^21) rows on, once the call has run a second,
            on a terminal or in a notebook; True always; False never.  Such a frame runs
            in chunks of ``EXTRACT_CHUNK_ROWS`` (2^18) rows, with the same output.  A dask
            frame's work runs when it is computed: wrap that in ``with fbrapids.progress():``
            (``progress=True`` on a dask frame is a ``FeatureError`` saying so).  cudf frames
            run whole, without a bar.

    Returns:
        A frame of the same kind with the feature columns added.  A feature named like
        an input column replaces it (like ``assign``), with a
        :class:`~fbrapids.errors.ReplacedColumnWarning` naming it, unless the feature is
        that column itself.

    Raises:
        FeatureError: a feature names a missing column, an operator gets a wrong-typed
            column, etc. (the message names the feature and the column).
        NotFittedError: a fitted operator without a state (names the feature, says how to fit).

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> extract(pd.DataFrame({"a": [1.0, None]}), {"b": ops.fill_null("a", 0)})["b"].tolist()
        [1.0, 0.0]
    """
    if isinstance(features, Fitted):
        warn_replaced(obj, features.features)
        return extract_frame(obj, features, training=training, fused=fused, progress=progress)
    named = features if isinstance(features, Mapping) else features.features  # a FeatureSet's
    if not named:
        return obj
    exprs = {name: as_expr(e) for name, e in named.items()}
    warn_replaced(obj, exprs)
    if has_frame_ops(exprs):  # fitted, history and row operators: frame-level stage first
        return extract_frame(obj, exprs, training=training, allow_unfitted=allow_unfitted, fused=fused,
                             progress=progress)
    return run_features(obj, exprs, fused, progress)


def warn_replaced(obj: FrameLike, features: FeatureMap) -> None:
    """A :class:`~fbrapids.errors.ReplacedColumnWarning` naming the features that replace an
    input column of ``obj`` (a feature that is the column itself replaces nothing).

    Example:
        >>> import pandas as pd, warnings
        >>> from fbrapids import ops
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     warn_replaced(pd.DataFrame({"user_id": [1]}), {"user_id": ops.hash_bucket("user_id", 8)})
        >>> str(seen[0].message)[:58]
        "extract: feature 'user_id' replaces the input column 'user"
    """
    columns = set(getattr(obj, "columns", ()))
    replaced = [n for n, e in features.items() if n in columns and as_expr(e) != Col(n)]
    if replaced:
        names = ", ".join(map(repr, replaced))
        warnings.warn(f"extract: feature{'s' if len(replaced) > 1 else ''} {names} replace{'' if len(replaced) > 1 else 's'}"
                      f" the input column{'s' if len(replaced) > 1 else ''} {names}; name "
                      f"{'them' if len(replaced) > 1 else 'it'} differently to keep both", ReplacedColumnWarning,
                      stacklevel=3)
