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
    # the attacks of clients that hold connections or bytes, briefly (each phase costs an attacker process, slow to start at the
    # lowest priority on a loaded machine; the others run the same drivers): idle sockets over
    # two addresses, then clients of three addresses that hang up after sending their calls
    phases = ("idle", "hangup")
    res = _run(tmp_path, "--attack", "--attack-requests", "4", "--attack-settle", "0.5", "--attack-seconds", "0.5",
               "--idle-sockets", "40", "--idle-addresses", "2", "--address-items", "100", "--hog-items", "100",
               "--batch-requests", "4", "--attack-phases", ",".join(phases))
    assert res["unloaded"]["requests"] >= 3 and res["unloaded"]["not_200"] == 0
    for phase in phases:  # the victim's calls: each answered or counted as not
        r = res[phase]
        assert r["requests"] >= 1 and r["answered"] + r["not_200"] == r["requests"], (phase, r)
        assert r["health_asked_during"] >= 1 and r["health_answered_during"] <= r["health_asked_during"]
    assert res["idle"]["attackers_got"]["opened"] >= 40
    assert res["hangup"]["attackers_got"].get("sent_and_hung_up", 0) >= 1 and res["hangup"]["after"]["requests"] >= 1
    assert set(res["holding_targets_met"]) == set(phases)
    assert res["holding_targets_met"]["idle"] == (res["idle"]["answered_share"] >= 0.9 and
                                                   res["idle"]["health_answered_during"] == res["idle"]["health_asked_during"])


def test_unseen_ids_benchmark_smoke(tmp_path) -> None:
    res = _run(tmp_path, "--unseen-ids", "--unseen", "20000")
    assert res["table_rows_export"] == res["table_rows_before"] == res["table_rows_after"] > 0
    assert res["unseen_lookups_counted"] >= 20000 and res["calls"] == 2
