"""benchmarks/extract.py end to end on a small generated folder: the public chain (eager,
dask and op by op) equals idiomatic pandas exactly, every system is timed the same number
of times, the launches are the plan's, and the synthetic launch-bound plan runs fused in
one kernel against one kernel per operator with equal results."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: benchmarks/ is not installed

from benchmarks import extract as bench  # noqa: E402
from fbrapids.datasets.synthetic.generate import generate  # noqa: E402


def test_public_chain_benchmark_json(tmp_path, capsys):
    d = tmp_path / "data"
    generate(3000, d, seed=1)
    saved = tmp_path / "extract.json"
    rc = bench.main(["--data", str(d), "--repeat", "1", "--synthetic-ops", "12", "--synthetic-rows", "300",
                     "--out", str(saved)])
    out = capsys.readouterr().out.strip().splitlines()
    res = json.loads(out[-1])
    assert rc == 0 and res["outputs_equal"] is True
    # every peer, each distinct value hashed once, and the hash-every-row reference line
    assert set(res["rows_per_s"]) == {"cpu eager", "cpu dask", "cpu op-by-op", "pandas", "polars eager",
                                      "polars lazy", "pandas rows"}
    assert res["best"]["best peer"] in res["peers"] and res["vs_best"]["cpu eager / best peer"] > 0
    assert len(res["load_average"]["start"]) == 3
    kept = json.loads(saved.read_text())  # the results file: the same summary, with its command and date
    assert kept["rows_per_s"] == res["rows_per_s"] and kept["command"].startswith("python benchmarks/extract.py")
    assert res["repeat"] == 1 and res["warmup"] == 1 and res["rows_in"] == 3000
    # eager: the JSON-cleaning plan's two layers (json_scan, then json_pick) + one launch per feature
    # layer (3); op by op: the same two, then one per operator
    assert res["launches"]["cpu eager"] == 2 + 3
    assert res["launches"]["cpu op-by-op"] == 2 + 26
    assert res["launches"]["pandas"] == 0 and res["launches"]["polars lazy"] == 0
    # in this order: the inner join with the basic view (merge) comes after extraction, never pushed before it
    assert list(res["steps"]["cpu eager"]) == ["read", "clean", "join", "extract", "merge"]
    syn = res["synthetic"]
    assert syn["cpu fused"]["launches"] == 1 and syn["cpu op-by-op"]["launches"] == 12


def test_synthetic_plan_is_one_layer_of_distinct_operators():
    from fbrapids.features import plan_for

    frame = bench.synthetic_frame(10, "cpu")
    plan = plan_for(frame, bench.synthetic_features(30))
    assert len(plan.layers) == 1
    assert len(plan_for(frame, bench.synthetic_features(30), fused=False).layers) == 30


def test_public_chain_outputs_agree_across_eager_and_dask(gen_dir):
    from benchmarks.workload_pandas import frames_equal

    eager, steps = bench.public_chain(gen_dir, eager=True)
    lazy, lazy_steps = bench.public_chain(gen_dir, eager=False)
    ok, why = frames_equal(eager, lazy)
    assert ok, why
    assert set(steps) == {"read", "clean", "join", "extract", "merge"} and set(lazy_steps) == {"build", "compute"}


def test_every_system_gets_the_same_warm_up_and_timed_runs():
    """run_systems calls each system once to warm up, then ``repeat`` times, interleaved (the
    JSON's "warmup" / "repeat" fields state this; here it is counted)."""
    calls: list[str] = []

    def system(name):
        def run():
            calls.append(name)
            return name, {"step": 0.0}
        return run

    res = bench.run_systems({"a": system("a"), "b": system("b"), "pandas": system("pandas")}, repeat=3)
    assert calls == ["a", "b", "pandas"] + ["a", "b", "pandas"] * 3
    assert {name: r["out"] for name, r in res.items()} == {"a": "a", "b": "b", "pandas": "pandas"}


def test_outputs_are_compared_with_the_first_systems_as_they_are_made():
    """With ``compare``, only the first system's output is kept; each other one is compared
    with it on the last timed run (memory holds two outputs, whatever the systems)."""
    res = bench.run_systems({"a": lambda: (1, {}), "b": lambda: (1, {}), "c": lambda: (2, {})}, repeat=2,
                            compare=lambda x, y: (x == y, f"{x} vs {y}"))
    assert res["a"]["out"] == 1 and res["b"]["out"] is None and res["c"]["out"] is None
    assert res["b"]["equal"] == (True, "1 vs 1") and res["c"]["equal"] == (False, "2 vs 1")
