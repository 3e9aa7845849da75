"""compiled_plan remembers the runtime per (features, schema, backend, fused, budget): repeated
eager extracts over frames of one schema build one plan; a different schema or a different
parameter builds another (a stale runtime would compute the wrong feature)."""
from __future__ import annotations

import numpy as np
import pandas as pd

import fbrapids  # noqa: F401  (the .fbx accessor)
from fbrapids import ops
from fbrapids.features.plans import memo_stats


def _frame(n: int, seed: int, narrow_ids: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 10**6, n)
    return pd.DataFrame({"u": ids.astype(np.int32) if narrow_ids else ids,
                         "q": pd.Series([" ".join(map(str, rng.integers(0, 50, 3))) for _ in range(n)], dtype="str")})


def test_one_plan_per_schema_and_parameters() -> None:
    feats = {"hu": ops.hash_bucket("u", 1 << 20), "tq": ops.split("q", " ", buckets=1 << 16)}
    first = _frame(64, 0).fbx.extract(**feats)
    before = memo_stats()
    outs = [_frame(n, s).fbx.extract(**feats) for n, s in ((1, 1), (64, 2), (200, 3))]
    after = memo_stats()
    assert after["plans_built"] == before["plans_built"] and after["memo_hits"] == before["memo_hits"] + 3
    assert first["hu"].between(0, (1 << 20) - 1).all() and all(len(o) == n for o, n in zip(outs, (1, 64, 200)))

    _frame(8, 4, narrow_ids=True).fbx.extract(**feats)  # u is int32 now: another schema, another plan
    assert memo_stats()["plans_built"] == after["plans_built"] + 1

    df = _frame(500, 5)
    small = df.fbx.extract(hu=ops.hash_bucket("u", 7))  # same expression shape, other parameter
    assert memo_stats()["plans_built"] == after["plans_built"] + 2
    big = df.fbx.extract(hu=ops.hash_bucket("u", 1 << 20))
    assert small["hu"].max() < 7 <= big["hu"].max()
    assert (small["hu"].to_numpy() == big["hu"].to_numpy() % 7).mean() < 0.5  # not the same hash reduced


def test_a_redefined_operator_is_never_served_its_old_runtime() -> None:
    from fbrapids.kernels import register_operator

    df = pd.DataFrame({"x": np.arange(5, dtype=np.int64)})
    register_operator("memo_shift_demo", "i64 x", "i64 y", "y = x + 1;", replace=True)
    assert df.fbx.extract(y=ops.call("memo_shift_demo", "x"))["y"].tolist() == [1, 2, 3, 4, 5]
    register_operator("memo_shift_demo", "i64 x", "i64 y", "y = x + 100;", replace=True)
    assert df.fbx.extract(y=ops.call("memo_shift_demo", "x"))["y"].tolist() == [100, 101, 102, 103, 104]


def test_the_device_budget_in_the_memo_key_does_not_move_with_every_allocation():
    """The GPU memo key held the exact free device bytes (half of them), so it
    missed on nearly every partition; the budget is now rounded down to a power of two."""
    from fbrapids.features.plans import device_budget

    class Device:
        def __init__(self, free):
            self.free = free

        def free_device_memory(self):
            return self.free

    budgets = {device_budget(Device(free)) for free in range(40 << 30, 33 << 30, -(97 << 20))}
    assert budgets == {16 << 30}
    assert device_budget(Device(None)) is None and device_budget(Device(0)) == 0
    assert device_budget(Device(3 << 20)) <= 3 << 19 < 2 * device_budget(Device(3 << 20))
