"""benchmarks/pipeline.py measures the bytes each side writes and reads (/proc io), and the
write-then-train side's measured writes cover the feature files it leaves on disk."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: benchmarks/ is not installed

from benchmarks import pipeline as bench  # noqa: E402


def test_pipeline_benchmark_measures_bytes_on_both_sides(gen_dir, capsys):
    assert bench.main(["--data", str(gen_dir), "--repeat", "1", "--batch-size", "512"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    files = res["baseline_intermediate_file_bytes"]
    assert files > 100_000  # the features of 5,000 impressions, written as parquet
    assert res["baseline_bytes_written"] >= files  # measured writes include those files
    assert res["pipeline_bytes_written"] < res["baseline_bytes_written"] - files // 2
    assert res["baseline_bytes_read"] > res["pipeline_bytes_read"]  # it reads its features back
    assert res["pipeline_auc"] == res["baseline_auc"]  # same model, seed and rows
    assert "cores" in res["machine"]


def test_verify_overhead_pairs_each_round_and_reports_its_own_runs(gen_dir, capsys, monkeypatch):
    monkeypatch.delenv("FBRAPIDS_VERIFY", raising=False)
    # no warm-up rounds (untimed, nothing here reads them)
    assert bench.main(["--data", str(gen_dir), "--verify-overhead", "--repeat", "2", "--batch-size", "512",
                       "--warmup-rows", "0"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(res["runs_on"]) == len(res["runs_off"]) == len(res["cpu_runs_on"]) == 2
    ratios = [100 * (a / b - 1) for a, b in zip(res["runs_on"], res["runs_off"])]
    # the median of the rounds' own ratios (of two: their mean), from the runs themselves; not the
    # ratio of the two medians, which pairs no round
    assert abs(res["overhead_pct"] - round((ratios[0] + ratios[1]) / 2, 2)) < 0.01
    assert res["auc_on"] == res["auc_off"]  # the checks change nothing the model learns
    import statistics
    on, off = res["checkpoint_trip_on_s"], res["checkpoint_trip_off_s"]
    assert len(on) == len(off) == 5  # at least 5 rounds of the checkpoint save + load alone
    share = 100 * (statistics.median(on) - statistics.median(off)) / res["verify_off_s"]
    assert abs(res["checkpoint_overhead_pct_of_run"] - round(share, 2)) < 0.02
    import os
    assert "FBRAPIDS_VERIFY" not in os.environ  # the switch is put back after each run
