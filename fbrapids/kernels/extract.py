"""``extract`` / ``explain``: feature expressions -> columns, through layered meta-kernels.

* pandas frames: the plan's host meta-kernels run over the frame's Arrow buffers;
* dask frames: per partition (``map_partitions``); each worker process compiles a plan
  once and keeps it (a per-process cache keyed by the plan's hash);
* cudf / dask-cudf frames: the CUDA meta-kernels through cupy.RawModule
  (:mod:`fbrapids.kernels.runtime_cuda`).

``categorify`` expressions are fitted over the whole frame first (one dask pass).

Example:
    >>> import pandas as pd, fbrapids
    >>> from fbrapids import ops
    >>> df = pd.DataFrame({"user_id": [1, 2], "ts": [0, 90000]})
    >>> df.fbx.extract(u=ops.hash_bucket("user_id", 1 << 20), wd=ops.weekday("ts"))[["u", "wd"]].values.tolist()
    [[855009, 3], [753575, 4]]
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from fbrapids import backend as _backend
from fbrapids.kernels import types as T
from fbrapids.kernels.columns import empty_series, to_series
from fbrapids.kernels.expr import Call, Col, Expr, as_expr
from fbrapids.kernels.operator import Operator, add_operator, get_operator
from fbrapids.kernels.operator import operators as registered_operators
from fbrapids.kernels.plan import DEVICE_BUDGET_FRACTION, FeatureError, Plan, build_plan
from fbrapids.kernels.render import render_module
from fbrapids.kernels.vocab import Vocabulary

log = logging.getLogger(__name__)

__all__ = ["extract", "explain", "plan_for", "FeatureSet", "column_type"]


# -- schemas -----------------------------------------------------------------------------
def column_type(s: Any) -> str | None:
    """The kernel type name of a pandas / cudf series' dtype (None when unreadable)."""
    dtype = s.dtype
    if isinstance(dtype, pd.ArrowDtype):
        return T.from_arrow(dtype.pyarrow_dtype)
    if isinstance(dtype, pd.StringDtype) or str(dtype) in ("str", "string"):
        return "str"
    if isinstance(dtype, pd.CategoricalDtype):
        return column_type(pd.Series(dtype.categories))
    np_dtype = getattr(dtype, "numpy_dtype", dtype)
    if isinstance(np_dtype, np.dtype) and np_dtype.kind in "biuf":
        return T.from_arrow(pa.from_numpy_dtype(np_dtype))
    if _backend.is_gpu_object(s):  # cudf list / string columns
        try:
            return T.from_arrow(s.dtype.to_arrow()) if hasattr(s.dtype, "to_arrow") else (
                "str" if str(dtype) == "object" else None)
        except Exception:  # noqa: BLE001 - an unreadable dtype is reported by the planner
            return None
    if np_dtype == np.dtype(object):
        sample = s.dropna().head(64)
        try:
            return T.from_arrow(pa.array(sample.tolist()).type) if len(sample) else "str"
        except (pa.ArrowException, TypeError, ValueError):
            return None
    return None


def schema_of(frame: Any, columns: set[str]) -> dict[str, str | None]:
    meta = getattr(frame, "_meta", frame)
    return {c: column_type(meta[c]) for c in meta.columns if c in columns}


def _columns(features: Mapping[str, Any]) -> set[str]:
    from fbrapids.kernels.expr import columns_of

    out: set[str] = set()
    for name, e in features.items():
        try:
            out |= columns_of(as_expr(e))
        except TypeError as exc:
            raise FeatureError(f"feature {name!r}: {exc}") from exc
    return out


# -- categorify fitting ------------------------------------------------------------------
def _has_categorify(e: Expr) -> bool:
    return isinstance(e, Call) and (e.op == "categorify" or any(_has_categorify(a) for a in e.args))


def fit(frame: Any, features: Mapping[str, Any]) -> dict[str, Expr]:
    """``features`` with every ``categorify`` replaced by a ``lookup`` fitted over ``frame``."""
    fitted: dict[tuple, Expr] = {}

    def walk(e: Expr) -> Expr:
        if not isinstance(e, Call):
            return e
        args = tuple(walk(a) for a in e.args)
        if e.op != "categorify":
            return Call(e.op, args, e.params) if args != e.args else e
        key = (args[0].key, e.params)
        if key not in fitted:
            min_freq = int(dict(e.params).get("min_freq", 1))
            values = extract(frame, {"__fbx_fit": args[0]})["__fbx_fit"]
            counts = values.value_counts(dropna=True)
            if hasattr(counts, "compute"):
                counts = counts.compute()
            counts = _backend.to_host(counts)
            plan = plan_for(frame, {"v": args[0]})
            kind = "str" if plan.nodes[plan.outputs["v"]].type == "str" else "int"
            vocab = Vocabulary.from_counts(counts, min_freq=min_freq, kind=kind)
            log.info("categorify(%s): %d values kept of %d (min_freq=%d)", args[0], len(vocab), len(counts), min_freq)
            fitted[key] = Call("lookup", args, (("vocab", vocab), ("oov", 0)))
        return fitted[key]

    return {name: walk(as_expr(e)) for name, e in features.items()}


# -- plans -------------------------------------------------------------------------------
_plans: dict[tuple, Any] = {}
_plans_lock = threading.Lock()
_compilations = 0  #: plans compiled by this process (each plan once per process)


def _device_budget(be: _backend.Backend) -> int | None:
    free = be.free_device_memory()
    return None if free is None else int(free * DEVICE_BUDGET_FRACTION)


def plan_for(frame: Any, features: Mapping[str, Any], fused: bool = True) -> Plan:
    """The plan ``features`` get over ``frame``'s schema (no compilation)."""
    be = _backend.backend_of(frame)
    schema = schema_of(frame, _columns(features))
    return build_plan(dict(features), schema, backend=be.name, fused=fused, device_budget=_device_budget(be))


def _compiled(plan: Plan, target: str) -> Any:
    """The per-process compiled plan for ``plan`` (compiled once per process)."""
    key = (plan.key, target)
    with _plans_lock:
        hit = _plans.get(key)
    if hit is not None:
        return hit
    global _compilations
    if target == "host":
        from fbrapids.kernels.runtime_host import HostPlan

        compiled = HostPlan(plan)
    else:
        from fbrapids.kernels.runtime_cuda import CudaPlan

        compiled = CudaPlan(plan)
    with _plans_lock:
        if key not in _plans:
            _compilations += 1
        return _plans.setdefault(key, compiled)


def compiled_plan(frame: Any, features: Mapping[str, Any], fused: bool = True) -> Any:
    """The compiled plan (HostPlan / CudaPlan) for eager ``frame``; its ``.stats`` count launches."""
    plan = plan_for(frame, features, fused)
    return _compiled(plan, "cuda" if plan.backend == "gpu" else "host")


# -- extract -----------------------------------------------------------------------------
def _extract_eager(df: Any, features: Mapping[str, Any], fused: bool) -> Any:
    from fbrapids.views.inputs import prepare

    src = prepare(df, features)  # timestamps as epoch seconds; unreadable columns are errors
    plan = plan_for(src, features, fused)
    if plan.backend == "gpu":
        res = _compiled(plan, "cuda").run(src)
        return df.assign(**res)
    res = _compiled(plan, "host").run(src)
    new = {name: to_series(c, df.index, name) for name, c in res.columns.items()}
    return df.assign(**new)


def _operators_used(features: Mapping[str, Expr]) -> dict[str, Operator]:
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


def _extract_partition(part: pd.DataFrame, features: dict[str, Expr], fused: bool,
                       operators: dict[str, Operator] | None = None) -> pd.DataFrame:
    # A worker process has the built-ins but not the operators a user registered in the
    # client: they travel with the task and are registered here when missing or different.
    for name, op in (operators or {}).items():
        known = registered_operators().get(name)
        if known is None or (known.source, known.inputs) != (op.source, op.inputs):
            add_operator(op, replace=True)
    return _extract_eager(part, features, fused)


def extract(obj: Any, features: Mapping[str, Any] | "FeatureSet", fused: bool = True) -> Any:
    """Add the named feature columns to ``obj`` (like ``assign``), computed by meta-kernels.

    Args:
        obj: a pandas, cudf, dask or dask-cudf DataFrame.
        features: output name -> expression (from :mod:`fbrapids.ops`; a column name is an
            expression too), or a :class:`FeatureSet`.
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
    if isinstance(features, FeatureSet):
        features = features.features
    if not features:
        return obj
    if any(_has_categorify(as_expr(e)) for e in features.values()):
        features = fit(obj, features)
    features = {name: as_expr(e) for name, e in features.items()}
    if hasattr(obj, "map_partitions") and hasattr(obj, "_meta"):
        from fbrapids.views.inputs import prepare

        plan = plan_for(prepare(obj._meta, features), features, fused)  # type errors surface here, before any task runs
        meta = obj._meta.assign(**{name: empty_series(plan.nodes[nid].type, name)
                                   for name, nid in plan.outputs.items()})
        if plan.backend == "gpu":
            meta = _backend.to_backend(meta, _backend.backend_of(obj))
        return obj.map_partitions(_extract_partition, features, fused, _operators_used(features), meta=meta)
    return _extract_eager(obj, features, fused)


# -- explain -----------------------------------------------------------------------------
def explain(obj: Any, features: Mapping[str, Any] | "FeatureSet", source: bool = False, fused: bool = True) -> str:
    """What ``extract(obj, features)`` runs: layers, operators, placement and reasons, and
    (``source=True``) the generated kernel source.

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> print(explain(pd.DataFrame({"ts": [0]}), {"h": ops.hour("ts")}).splitlines()[0])
        fbrapids plan: 1 feature(s), 1 operator(s) in 1 layer(s) -> 1 kernel launch(es) per partition [cpu backend]
    """
    if isinstance(features, FeatureSet):
        features = features.features
    features = {name: as_expr(e) for name, e in features.items()}
    pending = [n for n, e in features.items() if _has_categorify(e)]
    if pending:
        features = {n: (_unfitted_as_lookup(e) if n in pending else e) for n, e in features.items()}
    from fbrapids.views.inputs import prepare

    plan = plan_for(prepare(getattr(obj, "_meta", obj), features), features, fused)
    shared = sum(1 for n in plan.nodes if n.op is not None and len(n.features) > 1)
    lines = [f"fbrapids plan: {len(plan.outputs)} feature(s), {plan.num_ops} operator(s) in {len(plan.layers)} "
             f"layer(s) -> {len(plan.layers)} kernel launch(es) per partition [{plan.backend} backend]"]
    if shared:
        lines.append(f"common sub-expressions: {shared} operator(s) shared by several features, computed once")
    if pending:
        lines.append(f"categorify in {', '.join(pending)}: fitted over the frame at extract time (shown as lookup)")
    lines.append("inputs: " + ", ".join(f"{n.expr} ({n.type})" for n in plan.nodes if n.op is None))
    for layer in plan.layers:
        target = "CUDA meta-kernel" if layer.placement == "gpu" else "host C meta-kernel (OpenMP)"
        lines.append(f"layer {layer.index} [{layer.placement}] {len(layer.nodes)} op(s), one {target}:")
        for nid in layer.nodes:
            n = plan.nodes[nid]
            lines.append(f"  #{nid} {n.expr} -> {n.type}  [{n.placement}: {n.reason}]  "
                         f"nulls: {n.op.null_rule}; used by: {', '.join(n.features)}")
    lines.append("outputs: " + ", ".join(f"{k} = #{v} ({plan.nodes[v].type})" for k, v in plan.outputs.items()))
    try:
        compiled = _plans.get((plan.key, "cuda" if plan.backend == "gpu" else "host"))
        if compiled is not None:
            lines.append("stats so far: " + ", ".join(f"{k}={v}" for k, v in compiled.stats.as_dict().items()))
    except AttributeError:
        pass
    if source:
        for target in ("host", "cuda"):
            want = "gpu" if target == "cuda" else "cpu"
            if any(l.placement == want for l in plan.layers):
                lines.append(f"---- {target} source ----")
                lines.append(render_module(plan, target))
    return "\n".join(lines)


def _unfitted_as_lookup(e: Expr) -> Expr:
    if not isinstance(e, Call):
        return e
    args = tuple(_unfitted_as_lookup(a) for a in e.args)
    if e.op == "categorify":
        return Call("lookup", args, (("vocab", Vocabulary([], [], kind="str")), ("oov", 0)))
    return Call(e.op, args, e.params)


# -- FeatureSet --------------------------------------------------------------------------
class FeatureSet:
    """A named, reusable collection of feature expressions.

    Example:
        >>> import pandas as pd
        >>> from fbrapids import ops
        >>> fs = FeatureSet("time", hour=ops.hour("ts"), wd=ops.weekday("ts"))
        >>> fs.extract(pd.DataFrame({"ts": [3600]}))[["hour", "wd"]].values.tolist()
        [[1, 3]]
    """

    def __init__(self, name: str = "features", **features: Any) -> None:
        self.name = name
        self.features: dict[str, Expr] = {k: as_expr(v) for k, v in features.items()}

    def add(self, **features: Any) -> "FeatureSet":
        """Add (or replace) features; returns self for chaining."""
        self.features.update({k: as_expr(v) for k, v in features.items()})
        return self

    def fit(self, frame: Any) -> "FeatureSet":
        """A copy whose ``categorify`` features are fitted over ``frame`` (reuse it on other frames)."""
        out = FeatureSet(self.name)
        out.features = fit(frame, self.features)
        return out

    def extract(self, frame: Any, fused: bool = True) -> Any:
        return extract(frame, self.features, fused=fused)

    def explain(self, frame: Any, source: bool = False) -> str:
        return explain(frame, self.features, source=source)

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        return f"FeatureSet({self.name!r}, {', '.join(self.features)})"
