"""Plans, launch counts, the pool, bad input, compile errors, NVRTC, dask, and the workload."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids import kernels as S, ops
from fbrapids.errors import FeatureError, KernelCompileError
from fbrapids.features import compiled_plan, explain, extract, plan_for
from fbrapids.kernels import register_operator
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.pool import HostPool


def frame(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    words = np.array(["red", "shoe", "blue", "hat", "é", "x"])
    q = [" ".join(rng.choice(words, rng.integers(0, 6))) for _ in range(n)]
    return pd.DataFrame({"ts": rng.integers(1.6e9, 1.7e9, n), "uid": rng.integers(0, 10**9, n),
                         "age": rng.integers(-1, 90, n).astype(np.int32), "q": pd.Series(q, dtype="str"),
                         "price": rng.random(n) * 100})


def thirty_ops():
    f = {}
    for i in range(10):
        f[f"h{i}"] = ops.hash_bucket("uid", 1000 + i)
    for i in range(6):
        f[f"c{i}"] = ops.cross("uid", "age", buckets=100 + i)
    f["tok"] = ops.split("q", " ", buckets=1 << 18)
    f["hr"] = ops.hour("ts")
    f["wd"] = ops.weekday("ts")
    f["dy"] = ops.day("ts")
    f["ab"] = ops.bucketize("age", [0, 18, 30])
    f["lp"] = ops.log1p("price")
    f["pb"] = ops.bucketize(ops.log1p("price"), [1, 2, 3])
    f["x"] = ops.cross(ops.split("q", " ", buckets=1 << 18), ops.hour("ts"), buckets=1 << 20, cap=8)
    f["bg"] = ops.ngrams(ops.split("q", " "), 2, buckets=1 << 20)
    f["ln"] = ops.length(ops.split("q", " "))
    f["lo"] = ops.lower("q")
    f["su"] = ops.substring(ops.lower("q"), 0, 3)
    f["f3"] = ops.first_k(ops.split("q", " "), 3)
    f["l3"] = ops.last_k(ops.split("q", " ", buckets=1 << 18), 3)
    f["hc"] = ops.cross(ops.hour("ts"), ops.weekday("ts"), buckets=50)
    f["k"] = ops.cast(ops.clip("age", 0, 99), "i8")
    return f


def test_cse_and_layering():
    p = plan_for(frame(10), thirty_ops())
    assert p.num_ops >= 30 and len(p.layers) <= 5
    labels = [str(n.expr) for n in p.nodes]
    assert len(labels) == len(set(labels))  # every identical sub-expression once
    split_node = next(n for n in p.nodes if str(n.expr) == "split(q, sep=' ', buckets=None)")
    assert set(split_node.features) == {"bg", "ln", "f3"}


def test_launches_equal_layers_per_partition():
    df = frame()
    feats = thirty_ops()
    cp = compiled_plan(df, feats)
    assert cp.plan.num_ops >= 30 and len(cp.layers) <= 5
    before = cp.stats.launches
    extract(df, feats)
    assert cp.stats.launches - before == len(cp.layers)
    obo = compiled_plan(df, feats, fused=False)
    before = obo.stats.launches
    b = extract(df, feats, fused=False)
    assert obo.stats.launches - before == obo.plan.num_ops
    a = extract(df, feats)
    for c in feats:
        assert a[c].equals(b[c]), c


def test_tiny_pool_overflows_regrows_and_stays_correct():
    df = frame(3000)
    feats = {"tok": ops.split("q", " "), "x": ops.cross(ops.split("q", " ", buckets=99), "age", buckets=1 << 20)}
    ref = extract(df, feats)
    cp = compiled_plan(df, feats)
    pool = HostPool(128)
    res = cp.run(df, pool=pool)
    assert res.stats.regrowths >= 1 and pool.regrowths >= 1
    assert res.stats.launches > len(cp.layers)  # the overflowed layer was run again
    from fbrapids.kernels.columns import to_series
    for name in feats:
        assert to_series(res.columns[name], df.index, name).equals(ref[name])
    assert S.stats()["regrowths"] >= 1


def test_wrong_typed_column_names_feature_and_column():
    df = pd.DataFrame({"price": [1.5, 2.0], "q": pd.Series(["a", "b"], dtype="str")})
    with pytest.raises(FeatureError, match=r"feature 'bad'.*column 'price'.*f64"):
        extract(df, {"bad": ops.split("price", " ")})
    with pytest.raises(FeatureError, match=r"feature 'm'.*column 'nope' is not in the frame"):
        extract(df, {"m": ops.hour("nope")})
    with pytest.raises(FeatureError, match="unknown operator 'no_such_op'"):
        extract(df, {"u": ops.call("no_such_op", "q")})
    with pytest.raises(FeatureError, match="takes 1 input"):
        extract(df, {"a": ops.call("hour", "price", "price")})


def test_null_rules():
    df = pd.DataFrame({"s": pd.Series(["a", None], dtype="str"), "x": [1.0, np.nan],
                       "i": pd.Series([3, 4], dtype="Int64")})
    out = extract(df, {"h": ops.hash_bucket("s", 10), "f": ops.fill_null("s", "z"), "l": ops.lookup("s", ["a"], oov=-3),
                       "c": ops.cross("i", "s", buckets=5), "fx": ops.fill_null("x", 0)})
    assert out["h"].isna().tolist() == [False, True]
    assert out["f"].tolist() == ["a", "z"]
    assert out["l"].tolist() == [1, -3]
    assert out["c"].isna().tolist() == [False, True]
    assert out["c"][0] == __import__("farmhash").fingerprint64("3_a") % 5
    assert out["fx"].tolist() == [1.0, 0.0]


def test_user_operator_and_compile_error():
    register_operator("affine_demo", "i64 x", "f64 y", "y = x * 0.5 + 1;", replace=True)
    df = pd.DataFrame({"a": np.array([2, 4], dtype=np.int64)})
    assert extract(df, {"y": ops.call("affine_demo", "a")})["y"].tolist() == [2.0, 3.0]
    register_operator("broken_demo", "i64 x", "i64 y", "y = x +* ;", replace=True)
    with pytest.raises(KernelCompileError) as info:
        extract(df, {"y": ops.call("broken_demo", "a")})
    msg = str(info.value)
    assert "error" in msg and "y = x +* ;" in msg and "broken_demo" in msg


def test_explain_shows_layers_placement_and_source():
    text = explain(frame(5), thirty_ops(), source=True)
    assert "layer 0 [cpu]" in text and "CPU backend" in text and "kernel launch(es) per partition" in text
    assert "fbx_layer_0" in text and "omp parallel for" in text


def test_gpu_placement_puts_big_lookup_on_cpu():
    vocab = list(range(100_000))
    p = build_plan({"l": ops.lookup("uid", vocab), "h": ops.hour("ts")}, {"uid": "i64", "ts": "i64"},
                   backend="gpu", device_budget=1 << 20)
    place = {str(n.expr).split("(")[0]: (n.placement, n.reason) for n in p.nodes if n.op is not None}
    assert place["lookup"][0] == "cpu" and "device budget" in place["lookup"][1]
    assert place["hour"][0] == "gpu"
    assert {l.placement for l in p.layers} == {"cpu", "gpu"}
