"""benchmarks/inference.py runs end to end on a tiny setting and ends with its JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_inference_benchmark_smoke() -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "inference.py"), "--requests", "3", "--warmup", "1",
           "--ads", "400", "--users", "40", "--train-rows", "400", "--http-items", "32"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["benchmark"] == "inference" and sorted(res["sizes"], key=int) == ["64", "256", "1024", "4096"]
    for n, r in res["sizes"].items():
        for mode in ("dedup_on", "dedup_on_no_cache", "dedup_off"):
            assert r[mode]["p99_ms"] >= r[mode]["p50_ms"] > 0 and r[mode]["items_per_s"] > 0
        assert r["p50_speedup"] > 0 and 0.0 <= r["item_cache_hit_rate"] <= 1.0
    if res["http"] is not None:  # with the 'serve' extra
        assert res["http"]["clients_1"]["items_per_s"] > 0 and res["http"]["clients_4"]["p99_ms"] > 0
