"""The CUDA runtime on a device (marked ``gpu``; skipped cleanly without one): a steady-state
extract of a partition moves no column data between host and device, only each layer's
status bytes (and its pointer table the other way); inputs read in place from sliced cudf
columns with int32 or int64 offsets; JSON fields cleaned on the device with the CPU's
counts; one outlier row does not inflate the device pool's presize."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fbrapids import ops

pytestmark = pytest.mark.gpu


def _cudf():
    from fbrapids.frames.backend import gpu_missing

    if gpu_missing():
        pytest.skip("no GPU backend here: " + "; ".join(gpu_missing()))
    import cudf

    return cudf


def frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = np.array(["red", "shoe", "é", "blue", "x", "longer-token"])
    q = [None if rng.random() < 0.1 else " ".join(rng.choice(words, rng.integers(0, 6))) for _ in range(n)]
    price = rng.random(n) * 100
    price[rng.random(n) < 0.1] = np.nan
    return pd.DataFrame({"ts": rng.integers(0, 10**9, n), "uid": rng.integers(0, 10**6, n),
                         "q": pd.Series(q, dtype="str"), "price": price})


FEATURES = {"h": ops.hour("ts"), "tok": ops.split("q", " "), "th": ops.split("q", " ", buckets=1 << 18),
            "x": ops.cross(ops.split("q", " ", buckets=97), "uid", buckets=1 << 20), "low": ops.lower("q"),
            "p": ops.fill_null(ops.log1p("price"), 0.0), "pn": ops.log1p("price"),
            "lk": ops.lookup("uid", list(range(0, 10**6, 7))), "bi": ops.ngrams(ops.split("q", " "), 2)}


def _same(gpu_series, cpu_series) -> bool:
    from fbrapids.frames.backend import to_host

    g = to_host(gpu_series)
    return [None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else
            (list(v) if hasattr(v, "__len__") and not isinstance(v, str) else v) for v in g.tolist()] == \
        [None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else
         (list(v) if hasattr(v, "__len__") and not isinstance(v, str) else v) for v in cpu_series.tolist()]


def test_steady_state_extract_moves_no_column_data():
    cudf = _cudf()
    from fbrapids.features import compiled_plan
    from fbrapids.kernels.runtime_cuda import status_layout

    parts = [frame(20_000, s) for s in (1, 2)]
    gdfs = [cudf.DataFrame(p) for p in parts]
    runtime = compiled_plan(gdfs[0], FEATURES)
    warm = runtime.run(gdfs[0])  # compiles, uploads the lookup table once, sizes the pool
    assert warm.stats.bytes_to_device > 0
    res = runtime.run(gdfs[1])
    s = res.stats
    gpu = [l for l in runtime.plan.layers if l.placement == "gpu"]
    assert gpu and len(gpu) == len(runtime.plan.layers)
    assert s.column_bytes_to_device == 0 and s.column_bytes_to_host == 0
    assert s.bytes_to_host == sum(8 * status_layout(runtime.abis[l.index])[0] for l in gpu)  # status only
    assert s.bytes_to_device == sum(8 * max(runtime.abis[l.index].nslots, 1) for l in gpu)  # pointer tables only
    assert s.regrowths == 0 and s.launches == len(gpu)
    cpu = parts[1].fbx.extract(**FEATURES)
    for name in FEATURES:
        assert _same(res.columns[name], cpu[name]), name


def test_sliced_and_large_string_inputs_match_the_cpu():
    cudf = _cudf()
    pdf = frame(400, 3)
    gdf = cudf.DataFrame(pdf)
    gdf["q64"] = cudf.Series.from_arrow(pa.array(pdf["q"].tolist(), pa.large_string()))  # INT64 offsets
    feats = {"a": ops.hash_bucket("q", 1000), "b": ops.split("q64", " "), "c": ops.hour("ts"), "d": ops.log1p("price")}
    sliced = gdf.iloc[7:333]  # offset 7: validity bits start mid-byte
    got = sliced.fbx.extract(**feats)
    want = pdf.assign(q64=pdf["q"]).iloc[7:333].fbx.extract(**feats)
    for name in feats:
        assert _same(got[name], want[name]), name


def test_json_fields_run_on_the_device_with_the_cpus_counts():
    cudf = _cudf()
    from fbrapids.views.json_fields import extract_json

    docs = pd.Series(['{"a": {"b": "x"}}', '{"a": 1}', "nope", None, '{"a": {"b": "yy"}}'] * 100, dtype="str")
    paths = {"ab": "a.b", "a": "a"}
    cpu_out, cpu_counts = extract_json(docs, paths)
    gpu_out, gpu_counts = extract_json(cudf.Series(docs), paths)
    assert gpu_counts == cpu_counts and cpu_counts["malformed"] == 100
    for name in paths:
        assert _same(gpu_out[name], cpu_out[name]), name


def test_device_pool_presize_ignores_one_outlier_row():
    cudf = _cudf()
    from fbrapids.features import compiled_plan

    feats = {"tok": ops.split("q", " "), "h": ops.split("q", " ", buckets=1 << 18)}
    normal = [frame(5000, 30 + i) for i in range(3)]
    big = frame(5000, 29)
    big.loc[0, "q"] = "t " * 2_000_000
    runtime = compiled_plan(cudf.DataFrame(big), feats)
    first = runtime.run(cudf.DataFrame(big))
    assert first.stats.regrowths >= 1
    size_after_outlier = int(runtime.pool.size)
    later = [runtime.run(cudf.DataFrame(p)) for p in normal]
    assert all(r.stats.regrowths == 0 for r in later)
    assert int(runtime.pool.size) == size_after_outlier  # nothing allocated after the outlier
    layer = runtime.plan.layers[0].index
    assert runtime.sizers[layer].estimate(5000, 3) < 1 << 22
