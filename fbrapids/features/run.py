"""Running a fitted feature set over a frame: eager frames through the plan's runtime, dask
frames per partition (``map_partitions``; each worker process compiles a plan once).

``categorify`` and other operators that need fitting must be fitted first
(:mod:`fbrapids.features.needs_fit`); :func:`fbrapids.features.extract` does both.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> run_features(pd.DataFrame({"ts": [3600]}), {"h": ops.hour("ts")})["h"].tolist()
    [1]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import pandas as pd

from fbrapids.errors import FeatureError
from fbrapids.features.plans import compiled_plan, plan_for
from fbrapids.features.schema import columns_used, nullable_columns
from fbrapids.frames import backend as backends
from fbrapids.kernels import (
    Call,
    Expr,
    Operator,
    add_operator,
    as_expr,
    empty_series,
    get_operator,
    operators,
    to_series,
)
from fbrapids.ui.progressbar import row_chunks
from fbrapids.views.inputs import prepare

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.frames.backend import EagerFrame, EagerSeries, FrameLike


#: an eager pandas ``extract`` of at least this many rows shows a progress bar by default
EXTRACT_PROGRESS_ROWS = 1 << 21
#: rows per chunk of an eager pandas ``extract`` that shows progress (the bar advances per chunk)
EXTRACT_CHUNK_ROWS = 1 << 18


def run_eager(df: EagerFrame, features: FeatureMap, fused: bool = True, progress: bool | None = False) -> EagerFrame:
    """``df`` with the feature columns added (pandas or cudf).

    ``progress``: True runs a pandas frame in chunks of ``EXTRACT_CHUNK_ROWS`` rows under a
    bar; None does so from ``EXTRACT_PROGRESS_ROWS`` rows on (the bar then appears after a
    second, on a terminal or in a notebook); False (the default here) runs it whole.  The
    output is the same either way.
    """
    if progress is not False and (progress or len(df) >= EXTRACT_PROGRESS_ROWS) and not backends.is_gpu_object(df):
        return df.assign(**_chunked_columns(df, features, fused, progress))
    return df.assign(**_feature_columns(df, features, fused))


def _feature_columns(df: EagerFrame, features: FeatureMap, fused: bool) -> dict[str, EagerSeries]:
    src = prepare(df, features)  # timestamps as epoch seconds; unreadable columns are errors
    runtime = compiled_plan(src, features, fused)
    res = runtime.run(src)
    if backends.is_gpu_object(df):
        return dict(res.columns)
    # dtypes from the input's dtypes (before prepare), never from the rows: the same on every partition
    nullable = runtime.plan.nullable_outputs(nullable_columns(df, columns_used(features)))
    return {name: to_series(c, df.index, name, nullable[name]) for name, c in res.columns.items()}


def _chunked_columns(df: pd.DataFrame, features: FeatureMap, fused: bool,
                     progress: bool | None) -> dict[str, EagerSeries]:
    """The feature columns of ``df``, computed chunk by chunk under a progress bar."""
    parts = [_feature_columns(df.iloc[a:b], features, fused)
             for a, b in row_chunks(len(df), EXTRACT_CHUNK_ROWS, "extract", show=True if progress else None,
                                    delay=0.0 if progress else 1.0)]
    if not parts:  # no rows
        return _feature_columns(df, features, fused)
    # feature by feature, each chunk's piece dropped once joined: memory peaks at the output
    # plus one feature's pieces, not twice the output
    return {name: pd.concat([p.pop(name) for p in parts]) for name in list(parts[0])}


def operators_used(features: Mapping[str, Expr]) -> dict[str, Operator]:
    """The registered operators ``features`` call, by name (user-defined ones included)."""
    used: dict[str, Operator] = {}
    stack = list(features.values())
    while stack:
        e = stack.pop()
        if isinstance(e, Call):
            if e.op not in used:
                used[e.op] = get_operator(e.op)
            stack.extend(e.args)
    return used


def run_partition(part: pd.DataFrame, features: dict[str, Expr], fused: bool,
                  ops_used: dict[str, Operator] | None = None) -> EagerFrame:
    """One dask partition.  A worker process has the built-ins but not the operators a user
    registered in the client: they travel with the task and are registered here when
    missing or different."""
    known = operators()
    for name, op in (ops_used or {}).items():
        have = known.get(name)
        if have is None or (have.source, have.inputs) != (op.source, op.inputs):
            add_operator(op, replace=True)
    return run_eager(part, features, fused)


def run_features(obj: FrameLike, features: FeatureMap, fused: bool = True, progress: bool | None = False) -> FrameLike:
    """Add the (already fitted) feature columns to a pandas, cudf, dask or dask-cudf frame
    (``progress``: see :func:`run_eager`; a dask frame's progress shows when it is computed,
    under :func:`fbrapids.progress`)."""
    exprs = {name: as_expr(e) for name, e in features.items()}
    if not backends.is_dask(obj):
        return run_eager(obj, exprs, fused, progress)
    if progress:
        raise FeatureError("extract(progress=True) on a dask frame: its work runs when it is computed; show that "
                           "with `with fbrapids.progress(): frame.compute()` (or a distributed Client's dashboard)")
    plan = plan_for(prepare(obj._meta, exprs), exprs, fused)  # type errors surface here, before any task runs
    nullable = plan.nullable_outputs(nullable_columns(obj, columns_used(exprs)) if plan.backend != "gpu" else set())
    meta = obj._meta.assign(**{name: empty_series(plan.nodes[nid].type, name, nullable[name])
                               for name, nid in plan.outputs.items()})
    if plan.backend == "gpu":
        meta = backends.to_backend(meta, backends.backend_of(obj))
    return obj.map_partitions(run_partition, exprs, fused, operators_used(exprs), meta=meta)
