"""Running a fitted feature set over a frame: eager frames through the plan's runtime, dask
frames per partition (``map_partitions``; each worker process compiles a plan once).

``categorify`` and other operators that need fitting must be fitted first
(:mod:`fbrapids.features.fitting`); :func:`fbrapids.features.extract` does both.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> run_features(pd.DataFrame({"ts": [3600]}), {"h": ops.hour("ts")})["h"].tolist()
    [1]
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from fbrapids import backend as backends
from fbrapids.features.plans import compiled_plan, plan_for
from fbrapids.views.inputs import prepare
from fbrapids.kernels import Call, Expr, Operator, add_operator, as_expr, empty_series, get_operator, operators, to_series


def is_lazy(obj: Any) -> bool:
    """A dask (or dask-cudf) frame."""
    return hasattr(obj, "map_partitions") and hasattr(obj, "_meta")


def run_eager(df: Any, features: Mapping[str, Any], fused: bool = True) -> Any:
    """``df`` with the feature columns added (pandas or cudf)."""
    src = prepare(df, features)  # timestamps as epoch seconds; unreadable columns are errors
    res = compiled_plan(src, features, fused).run(src)
    if backends.is_gpu_object(df):
        return df.assign(**res.columns)
    return df.assign(**{name: to_series(c, df.index, name) for name, c in res.columns.items()})


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
                  ops_used: dict[str, Operator] | None = None) -> Any:
    """One dask partition.  A worker process has the built-ins but not the operators a user
    registered in the client: they travel with the task and are registered here when
    missing or different."""
    known = operators()
    for name, op in (ops_used or {}).items():
        have = known.get(name)
        if have is None or (have.source, have.inputs) != (op.source, op.inputs):
            add_operator(op, replace=True)
    return run_eager(part, features, fused)


def run_features(obj: Any, features: Mapping[str, Any], fused: bool = True) -> Any:
    """Add the (already fitted) feature columns to a pandas, cudf, dask or dask-cudf frame."""
    features = {name: as_expr(e) for name, e in features.items()}
    if not is_lazy(obj):
        return run_eager(obj, features, fused)
    plan = plan_for(prepare(obj._meta, features), features, fused)  # type errors surface here, before any task runs
    meta = obj._meta.assign(**{name: empty_series(plan.nodes[nid].type, name)
                               for name, nid in plan.outputs.items()})
    if plan.backend == "gpu":
        meta = backends.to_backend(meta, backends.backend_of(obj))
    return obj.map_partitions(run_partition, features, fused, operators_used(features), meta=meta)
