"""The host runtime sizes each layer's pool from that layer's earlier peak bytes per row:
a first run on a tiny pool overflows, grows and re-runs (still correct); later runs of the
same plan, on bigger partitions too, are presized and never re-run a layer."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from fbrapids import ops
from fbrapids.features import schema_of
from fbrapids.kernels.columns import to_series
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



OUTLIER_TOKENS = 2_000_000
OUTLIER_FEATURES = {"tok": ops.split("q", " "), "h": ops.split("q", " ", buckets=1 << 18)}


def _with_outlier(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with row 0 replaced by a 2M-token text (a 4 MB title)."""
    q = df["q"].tolist()
    q[0] = "t " * OUTLIER_TOKENS
    return df.assign(q=pd.Series(q, dtype="str", index=df.index))


def test_one_outlier_row_does_not_inflate_later_presizes(monkeypatch):
    """A partition with a 2M-token row, then ordinary partitions: the presize
    comes back to what ordinary rows need, and no further pool memory is allocated."""
    monkeypatch.setenv(ENV_INITIAL, str(1 << 20))
    normal = [frame(5000, 10 + i) for i in range(3)]
    schema = schema_of(normal[0], {"uid", "q"})
    reference = HostPlan(build_plan(OUTLIER_FEATURES, schema))
    outlier = HostPlan(build_plan(OUTLIER_FEATURES, schema))

    def runs():
        for df in normal:
            reference.run(df)
        first = outlier.run(_with_outlier(frame(5000, 9)))
        from fbrapids.kernels.runtime_host import thread_pool

        pool = thread_pool()
        allocated = pool.allocated_bytes
        later = [outlier.run(df) for df in normal]
        return first, later, pool.allocated_bytes - allocated, pool.capacity

    first, later, allocated_later, capacity = _in_fresh_thread(runs)
    assert first.stats.regrowths >= 1  # the outlier needed more than any presize: overflow -> grow -> re-run
    assert first.columns["tok"].offsets[1] == OUTLIER_TOKENS  # and was computed in full
    assert allocated_later == 0 and all(r.stats.regrowths == 0 for r in later)
    per_row, ref = outlier.pool_bytes_per_row[0], reference.pool_bytes_per_row[0]
    assert 0 < per_row <= 1.5 * ref, (per_row, ref)
    assert outlier.sizers[0].estimate(5000, 3) <= 1.5 * reference.sizers[0].estimate(5000, 3)
    assert capacity < 4 * OUTLIER_TOKENS * 18  # the pool holds what the outlier needed, not a multiple of rows


def test_single_outlier_request_then_ordinary_requests(monkeypatch):
    """The serving shape of the same outlier: a one-item request with a 2M-token title, then
    requests of 5,000 ordinary items: nothing is presized from the lone outlier, no
    request fails or re-runs, and no pool memory is allocated after the outlier's."""
    monkeypatch.setenv(ENV_INITIAL, str(1 << 20))
    base = frame(5000, 20)
    hp = HostPlan(build_plan(OUTLIER_FEATURES, schema_of(base, {"uid", "q"})))

    def runs():
        from fbrapids.kernels.runtime_host import thread_pool

        one = hp.run(_with_outlier(base.iloc[:1]))
        pool = thread_pool()
        allocated = pool.allocated_bytes
        later = [hp.run(frame(5000, 21 + i)) for i in range(3)]
        return one, later, pool.allocated_bytes - allocated

    one, later, allocated_later = _in_fresh_thread(runs)
    assert one.stats.regrowths >= 1 and one.columns["tok"].offsets[1] == OUTLIER_TOKENS
    assert allocated_later == 0
    assert all(r.stats.regrowths == 0 for r in later)
    assert hp.sizers[0].estimate(5000, 3) < 1 << 22  # back to ordinary rows (a few hundred bytes each)
