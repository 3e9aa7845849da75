"""benchmarks/inference.py runs end to end on a tiny setting and ends with its JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_inference_benchmark_smoke() -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "inference.py"), "--requests", "2", "--warmup", "1",
           "--sizes", "64,512", "--ads", "200", "--users", "40", "--train-rows", "300", "--http-items", "32",
           "--http-requests", "4", "--http-clients", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["benchmark"] == "inference" and sorted(res["sizes"], key=int) == ["64", "512"]
    for n, r in res["sizes"].items():
        # dedup and the item cache change no score (the same model on the same features)
        assert r["max_score_difference"] < 1e-5, (n, r["max_score_difference"])
        assert r["p50_speedup"] == round(r["dedup_off"]["p50_ms"] / r["dedup_on"]["p50_ms"], 3)
    # 512 Zipf items from a 200-ad catalogue: after the warm-up request nearly every ad is cached
    assert res["sizes"]["512"]["item_cache_hit_rate"] > 0.5
    if res["http"] is not None:  # with the 'serve' extra
        http = res["http"]
        assert http["items_per_request"] == 32 and http["clients_1"]["item_cache_hit_rate"] == 1.0
        assert http["clients_2"]["items_per_s"] == pytest.approx(32 * http["clients_2"]["requests_per_s"], rel=0.01)


def test_inference_benchmark_http_only_smoke() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    cmd = [sys.executable, str(REPO / "benchmarks" / "inference.py"), "--http-only", "--http-requests", "6",
           "--http-clients", "2", "--http-items", "16", "--ads", "300", "--users", "30", "--train-rows", "300"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["sizes"] == {} and res["http"]["items_per_request"] == 16
    assert res["http"]["clients_2"]["requests_per_s"] > 0 and res["http"]["clients_2"]["p99_ms"] > 0
    assert res["http"]["clients_2"]["cpu_ms_per_request"] > 0
    # the catalogue is scored once before the HTTP run: every item then comes from the cache
    assert res["http"]["clients_1"]["item_cache_hit_rate"] == res["http"]["clients_2"]["item_cache_hit_rate"] == 1.0
