"""``explain``: what ``extract`` runs -- layers, operators, placement and reasons, counters
so far, and optionally the generated kernel source.

Example:
    >>> import pandas as pd
    >>> from fbrapids import ops
    >>> print(explain(pd.DataFrame({"ts": [0]}), {"h": ops.hour("ts")}).splitlines()[0])
    fbrapids plan: 1 feature(s), 1 operator(s) in 1 layer(s) -> 1 kernel launch(es) per partition [cpu backend]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import pandas as pd

from fbrapids.errors import FbrapidsError
from fbrapids.features.fitted import Fitted, frame_calls
from fbrapids.features.plan_graph import Explanation
from fbrapids.features.plans import plan_for
from fbrapids.kernels import Col, as_expr, cached, dictionary_paths as describe_paths, from_series, render_module
from fbrapids.views.inputs import prepare

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.features.feature_map import FeatureMap
    from fbrapids.features.featureset import FeatureSet
    from fbrapids.frames.backend import FrameLike
    from fbrapids.kernels import Plan


def explain(obj: FrameLike, features: FeatureMap | FeatureSet | Fitted, source: bool = False,
            fused: bool = True) -> str:
    """What ``extract(obj, features)`` runs: layers, operators, placement and reasons, the
    counters of its compiled plan so far (launches, pool, bytes moved between host and
    device), and (``source=True``) the generated kernel source.  The text is a ``str``; a
    notebook shows it as the plan's layered graph (:class:`~fbrapids.features.plan_graph.Explanation`)."""
    fitted_text = features.explain() if isinstance(features, Fitted) else None
    named = features if isinstance(features, Mapping) else features.features  # a FeatureSet's or a Fitted's
    exprs = {name: as_expr(e) for name, e in named.items()}
    frame_level = {n: frame_calls(e) for n, e in exprs.items() if frame_calls(e)}
    if frame_level:  # the meta-kernels run the other features and the frame-level calls' inputs
        inputs = {f"{n}:{c.op}.{i}": a for n, calls in frame_level.items() for c in calls
                  for i, a in enumerate(c.args) if not frame_calls(a)}
        exprs = {**{n: e for n, e in exprs.items() if n not in frame_level}, **inputs}
    plan = plan_for(prepare(getattr(obj, "_meta", obj), exprs), exprs, fused)
    shared = sum(1 for n in plan.nodes if n.op is not None and len(n.features) > 1)
    lines = [f"fbrapids plan: {len(plan.outputs)} feature(s), {plan.num_ops} operator(s) in {len(plan.layers)} "
             f"layer(s) -> {len(plan.layers)} kernel launch(es) per partition [{plan.backend} backend]"]
    if shared:
        lines.append(f"common sub-expressions: {shared} operator(s) shared by several features, computed once")
    for n, calls in frame_level.items():
        lines.append(f"frame level: {n} = " + " <- ".join(f"{c.op}" for c in reversed(calls)) +
                     " (fitted / history / row operator, outside the meta-kernels; their inputs below)")
    if fitted_text:
        lines.append(fitted_text)
    joins = (getattr(getattr(obj, "_meta", obj), "attrs", None) or {}).get("fbrapids.joins", [])
    lines += [f"upstream {j}" for j in joins]  # strategy, placement and sizes of the joins that made the frame
    lines.append("inputs: " + ", ".join(f"{n.expr} ({n.type})" for n in plan.nodes if n.op is None))
    paths = dictionary_paths(obj, plan)
    for layer in plan.layers:
        target = "CUDA meta-kernel" if layer.placement == "gpu" else "host C meta-kernel (OpenMP)"
        lines.append(f"layer {layer.index} [{layer.placement}] {len(layer.nodes)} op(s), one {target}:")
        for nid in layer.nodes:
            node = plan.nodes[nid]
            lines.append(f"  #{nid} {node.expr} -> {node.type}  [{node.placement}: {node.reason}]  "
                         f"nulls: {node.operator().null_rule}; used by: {', '.join(node.features)}")
            if nid in paths:
                lines.append(f"      {paths[nid]}")
    lines.append("outputs: " + ", ".join(f"{k} = #{v} ({plan.nodes[v].type})" for k, v in plan.outputs.items()))
    runtime = cached(plan)
    if runtime is not None:
        st = runtime.stats
        lines.append("stats so far: " + ", ".join(f"{k}={v}" for k, v in st.as_dict().items()))
        lines.append(f"host <-> device so far: {st.bytes_to_device:,} B to the device ({st.column_bytes_to_device:,} "
                     f"B of column data), {st.bytes_to_host:,} B to the host ({st.column_bytes_to_host:,} B of column data)")
    if source:
        for target in ("host", "cuda"):
            want = "gpu" if target == "cuda" else "cpu"
            if any(l.placement == want for l in plan.layers):
                lines.append(f"---- {target} source ----")
                lines.append(render_module(plan, target))
    return Explanation("\n".join(lines), plan)


def dictionary_paths(obj: FrameLike, plan: Plan) -> dict[int, str]:
    """Per dictionary-capable operator of ``plan``, the path extracting ``obj`` takes (an
    eager pandas frame: chosen from its columns; dask: per partition)."""
    if not isinstance(obj, pd.DataFrame) or not plan.dictionary_nodes:  # dask or cudf: decided per partition
        return describe_paths(plan, None)
    columns = {a: e.name for n in plan.dictionary_nodes for a in n.args
               if plan.nodes[a].op is None and isinstance(e := plan.nodes[a].expr, Col)}  # the frame's columns
    try:
        inputs = {a: from_series(obj[name], name) for a, name in columns.items()}
    except FbrapidsError:  # a column the kernels read only once prepared: decided when the plan runs
        inputs = {}
    return describe_paths(plan, inputs or None)
