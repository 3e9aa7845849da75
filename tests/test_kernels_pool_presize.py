"""The host runtime sizes each layer's pool from that layer's earlier peak bytes per row:
a first run on a tiny pool overflows, grows and re-runs (still correct); later runs of the
same plan, on bigger partitions too, are presized and never re-run a layer."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from fbrapids import ops
from fbrapids.kernels.columns import to_series
from fbrapids.features import schema_of
from fbrapids.kernels.plan import build_plan
from fbrapids.kernels.pool import ENV_INITIAL, HostPool
from fbrapids.kernels.runtime_host import HostPlan


def frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = np.array(["red", "shoe", "blue", "hat", "é", "x", "longer-token"])
    q = [" ".join(rng.choice(words, rng.integers(0, 8))) for _ in range(n)]
    return pd.DataFrame({"uid": rng.integers(0, 10**9, n), "q": pd.Series(q, dtype="str")})


FEATURES = {"tok": ops.split("q", " "), "h": ops.split("q", " ", buckets=1 << 18),
            "x": ops.cross(ops.split("q", " ", buckets=99), "uid", buckets=1 << 20),
            "bi": ops.ngrams(ops.split("q", " "), 2, buckets=1 << 20)}


def _in_fresh_thread(fn):
    """fn() in a new thread (so it gets a fresh per-thread pool); its result."""
    out: dict = {}

    def target():
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["e"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def _reference(hp: HostPlan, df: pd.DataFrame) -> dict[str, pd.Series]:
    res = hp.run(df, pool=HostPool(1 << 26))  # room for everything: no overflow
    assert res.stats.regrowths == 0
    return {k: to_series(c, df.index, k) for k, c in res.columns.items()}


def test_first_run_regrows_later_runs_are_presized(monkeypatch):
    monkeypatch.setenv(ENV_INITIAL, "1024")  # the per-thread pool starts tiny
    small, big = frame(3000, 1), frame(9000, 2)
    plan = build_plan(FEATURES, schema_of(small, {"uid", "q"}))
    hp = HostPlan(plan)
    nlayers = len(hp.layers)

    def runs():
        first = hp.run(small)
        second = hp.run(big)
        third = hp.run(small)
        return first, second, third

    first, second, third = _in_fresh_thread(runs)
    assert first.stats.regrowths >= 1 and first.stats.launches > nlayers  # overflow -> grow -> re-run
    assert first.stats.presizes == 0
    assert second.stats.presizes >= 1  # 3x the rows: grown before the launch ...
    assert second.stats.regrowths == 0 and second.stats.launches == nlayers  # ... so nothing re-ran
    assert third.stats.regrowths == 0 and third.stats.launches == nlayers
    assert all(b > 0 for b in hp.pool_bytes_per_row[:1])
    for res, df in ((first, small), (second, big), (third, small)):
        want = _reference(hp, df)
        for name in FEATURES:
            assert to_series(res.columns[name], df.index, name).equals(want[name]), name


def test_caller_pool_is_not_presized():
    df = frame(2000, 3)
    plan = build_plan(FEATURES, schema_of(df, {"uid", "q"}))
    hp = HostPlan(plan)
    hp.run(df, pool=HostPool(1 << 26))  # history: the layer's bytes per row are known
    pool = HostPool(128)
    res = hp.run(df, pool=pool)
    assert res.stats.presizes == 0 and res.stats.regrowths >= 1 and pool.regrowths >= 1

