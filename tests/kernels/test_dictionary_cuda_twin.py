"""The CUDA dictionary path and its CPU twin: an operator run once per category of
a categorical column (the operator's own one-operator plan over the categories) and gathered to
the rows by the codes (``runtime_cuda.gather_coded``, xp-generic: numpy here, cupy on the
device) equals the row path bit for bit, nulls included; the hashes it saves are counted.
On a device (``gpu``) the CudaPlan's own run is compared with the CPU's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops
from fbrapids.kernels.columns import from_series
from fbrapids.kernels.dictionary import dictionary_mode
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.runtime_cuda import dictionary_eligible, gather_coded
from fbrapids.kernels.runtime_host import HostPlan


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(37)] + ["", "ünï"], dtype=object)
    s = pd.Series(words[rng.integers(0, len(words), n)], dtype=object)
    s[rng.random(n) < 0.1] = None
    k = pd.Series(rng.integers(-5, 2**31 - 1, 11)[rng.integers(0, 11, n)]).astype("Int32")
    k[rng.random(n) < 0.1] = pd.NA
    return pd.DataFrame({"c": pd.Categorical(s), "k": pd.Categorical(k)})


FEATURES = {"hs": ops.hash("c"), "bs": ops.hash_bucket("c", 1000), "hi": ops.hash("k"), "bi": ops.hash_bucket("k", 97)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_twin_equals_the_row_path_bit_for_bit(seed):
    df = _frame(3000, seed)
    plan = build_plan(FEATURES, {"c": "str", "k": "i32"})
    ids = {n.expr.name: n.id for n in plan.nodes if n.op is None}
    with dictionary_mode("off"):
        rows = HostPlan(plan).run({c: from_series(df[c].astype(df[c].cat.categories.dtype), c) for c in ("c", "k")})
    for name, nid in plan.outputs.items():
        node = plan.nodes[nid]
        assert dictionary_eligible(node, set(ids.values()))
        col = df[node.expr.args[0].name]
        cats = from_series(pd.Series(col.cat.categories), "a0")
        distinct = HostPlan(plan.node_plan(nid)).run({"a0": cats})
        out = distinct.columns["out"]
        codes = col.cat.codes.to_numpy()
        data, valid = gather_coded(np, codes, codes >= 0, out.data[: out.n], out.validity_bool())
        want = rows.columns[name]
        assert np.array_equal(valid, want.validity_bool()), name
        assert np.array_equal(data[valid], want.data[: want.n][valid]), name  # bit for bit
        made = int(out.validity_bool().sum())  # counted as the CUDA path counts: fingerprints made
        saved = (len(df) - want.null_count()) - made  # and those the row path made beyond them
        assert made == len(col.cat.categories) and saved > 0.75 * len(df), (made, saved)


def test_only_single_input_hashing_operators_are_eligible():
    plan = build_plan({"x": ops.cross("c", "k", buckets=8), "l": ops.lookup("c", {"a": 1}), "s": ops.split("c", " ")},
                      {"c": "str", "k": "i32"}, backend="gpu")
    coded = {n.id for n in plan.nodes if n.op is None}
    assert not any(dictionary_eligible(n, coded) for n in plan.nodes if n.op is not None)


@pytest.mark.gpu
def test_the_cuda_dictionary_path_equals_the_cpu_and_counts_its_saved_hashes():
    import cudf

    from fbrapids.kernels import counters

    df = _frame(40_000, 5)
    want = df.fbx.extract(**FEATURES)
    before = counters.stats()
    got = cudf.DataFrame(df).fbx.extract(**FEATURES).to_pandas()
    after = counters.stats()
    for c in FEATURES:
        assert got[c].isna().tolist() == want[c].isna().tolist(), c
        assert got[c].dropna().tolist() == want[c].dropna().tolist(), c
    assert after["dictionary_runs"] - before["dictionary_runs"] == 4
    assert after["hashes_saved"] - before["hashes_saved"] >= 4 * 30_000
