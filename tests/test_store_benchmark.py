"""benchmarks/embedding.py runs end to end on a tiny table and ends with its JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "embedding.py"
KEYS = {"tiered_in_ram_ops_per_s", "torch_embeddingbag_ops_per_s", "torchrec_ops_per_s", "tiered_10x_ops_per_s",
        "upper_tier_hit_rate_10x"}


def test_benchmark_prints_its_figures_as_the_last_json_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--rows", "40000", "--batch", "256", "--pooling", "4",
                          "--batches", "4", "--warmup", "2", "--rounds", "1", "--ssd-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert KEYS <= set(res)
    assert res["tiered_in_ram_ops_per_s"] > 0 and res["tiered_10x_ops_per_s"] > 0
    assert res["ssd_file_rows"] == 40000 and res["ram_tier_rows"] == 4000  # SSD holds 10x the RAM tiers
    assert 0 < res["upper_tier_hit_rate_10x"] <= 1
    assert abs(sum(res["hit_rate_10x_by_tier"].values()) - 1) < 1e-9
    assert (tmp_path / "bench10x" / "rows.f32").stat().st_size >= 40000 * 17 * 4
