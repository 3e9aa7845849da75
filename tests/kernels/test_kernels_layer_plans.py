"""A layer run on its own: ``Plan.layer_plan`` turns one layer into a plan whose inputs are
the layer's arguments.  The CUDA runtime runs CPU-placed layers this way, through the host
runtime's public ``run``; chaining every layer of a plan like that gives the whole plan's
answers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fbrapids import ops
from fbrapids.features import schema_of
from fbrapids.kernels import to_series
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.runtime_host import HostPlan


def test_layers_run_one_by_one_give_the_whole_plans_answers():
    rng = np.random.default_rng(4)
    n = 3000
    words = np.array(["red", "shoe", "é", "blue"])
    df = pd.DataFrame({"uid": rng.integers(0, 10**6, n), "ts": rng.integers(0, 10**9, n),
                       "q": pd.Series([None if i % 11 == 0 else " ".join(rng.choice(words, rng.integers(0, 5)))
                                       for i in range(n)], dtype="str")})
    feats = {"x": ops.cross(ops.split("q", " ", buckets=97), ops.hour("ts"), "uid", buckets=1 << 20),
             "bi": ops.ngrams(ops.split("q", " "), 2), "len": ops.length(ops.split("q", " ")),
             "lk": ops.lookup(ops.hour("ts"), list(range(0, 24, 3)))}
    plan = build_plan(feats, schema_of(df, {"uid", "ts", "q"}))
    assert len(plan.layers) >= 2
    whole = HostPlan(plan).run(df)
    values = {nid: df[plan.nodes[nid].expr.name] for nid in range(len(plan.nodes)) if plan.nodes[nid].op is None}
    for layer in plan.layers:
        sub = plan.layer_plan(layer)
        assert sub.input_columns() == [f"n{a}" for a in sorted({a for i in layer.nodes for a in plan.nodes[i].args})]
        res = HostPlan(sub).run({name: values[int(name[1:])] for name in sub.input_columns()})
        assert res.stats.launches == 1
        for nid in layer.nodes:
            values[nid] = res.columns[f"n{nid}"]
    for name, nid in plan.outputs.items():
        got = to_series(values[nid], df.index, name)
        assert got.equals(to_series(whole.columns[name], df.index, name)), name
