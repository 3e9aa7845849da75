"""benchmarks/inference.py --attack and --unseen-ids run end to end on a tiny setting (the
figures themselves are the benchmark's: timings are never asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "inference.py"), "--train-rows", "300", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == res
    return res


def test_attack_benchmark_smoke(tmp_path) -> None:
    # the phases issue 37 added (flood and stalled run the same driver: each phase costs an
    # attacker process, slow to start at the lowest priority on a loaded machine)
    phases = ("hog64", "batch_fallback")  # amplify's refusal is tests/serving/test_attacks.py's
    res = _run(tmp_path, "--attack", "--attack-requests", "4", "--attack-settle", "0.5", "--hog-items", "500",
               "--batch-requests", "64", "--attack-phases", ",".join(phases))
    for phase in ("unloaded", *phases):
        assert res[phase]["requests"] == 4 and res[phase]["not_200"] == 0, (phase, res[phase])
    # 64 connections of one client: scored, or refused past client_calls (429); never an error
    assert set(res["hog64"]["attackers_got"]) <= {"200", "429", "retried_at_once", "0"}
    assert set(res["batch_fallback"]["attackers_got"]) <= {"200", "429", "retried_at_once", "0"}
    assert res["within_2x"] == all(res[p]["ratio_to_unloaded"] <= 2 for p in phases)
    assert res["health_within_1s"] == all(res[p]["health_max_ms_during"] <= 1000 and
                                          max(res[p]["health_ms_after"]) <= 1000 for p in phases)


def test_unseen_ids_benchmark_smoke(tmp_path) -> None:
    res = _run(tmp_path, "--unseen-ids", "--unseen", "20000")
    assert res["table_rows_export"] == res["table_rows_before"] == res["table_rows_after"] > 0
    assert res["unseen_lookups_counted"] >= 20000 and res["calls"] == 2
