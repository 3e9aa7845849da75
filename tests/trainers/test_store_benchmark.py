"""benchmarks/embedding.py runs end to end on a tiny table and ends with its JSON line; its
static-oracle hit rate is the share of the stream's lookups to its most frequent ids, its
best possible Belady's (checked against an independent Belady in test_store_hit_rate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "embedding.py"
KEYS = {"tiered_in_ram_ops_per_s", "torch_embeddingbag_ops_per_s", "torchrec_fused_ops_per_s", "fbgemm_tbe_ops_per_s",
        "tiered_10x_ops_per_s", "upper_tier_hit_rate_10x", "best_possible_hit_rate_10x", "not_measured"}


def test_benchmark_prints_its_figures_as_the_last_json_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--rows", "40000", "--batch", "256", "--pooling", "4",
                          "--batches", "4", "--warmup", "2", "--rounds", "2", "--ssd-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert KEYS <= set(res)
    assert res["tiered_in_ram_ops_per_s"] > 0 and res["tiered_10x_ops_per_s"] > 0
    assert res["ssd_file_rows"] == 40000 and res["ram_tier_rows"] == 4000  # SSD holds 10x the RAM tiers
    assert res["cache_rows_10x"] + res["host_rows_10x"] == 4000 and res["host_rows_10x"] > 0
    assert 0 < res["upper_tier_hit_rate_10x"] <= 1 and 0 < res["best_possible_hit_rate_10x"] <= 1
    assert res["eviction_10x"] == "lfu_window" and res["old_eviction_10x"] == "lfu_full"
    assert res["announced_window_10x"] == 32  # the trainer's window (fit's LOOKAHEAD_BATCHES)
    assert res["ssd_rows_read_per_batch"] > 0 and res["old_ssd_rows_read_per_batch"] > 0
    assert 0 < res["old_upper_tier_hit_rate_10x"] <= res["best_possible_hit_rate_10x"] + 1e-9
    # no cache of the RAM tiers' size can beat Belady's (the best possible) hit rate, and ids
    # spread over 10x the RAM tiers must reach the SSD tier sometimes
    assert res["upper_tier_hit_rate_10x"] <= res["best_possible_hit_rate_10x"] + 1e-9
    assert res["hit_rate_10x_by_tier"]["ssd"] > 0
    assert (tmp_path / "bench10x_f" / "rows.f32").stat().st_size >= 40000 * 17 * 4
    for peer in ("torchrec_fused", "fbgemm_tbe"):  # measured, or the reason it was not
        assert res[f"{peer}_ops_per_s"] or any(w.split(":")[0] in ("fbgemm TBE", "TorchRec FusedEmbeddingBagCollection")
                                               for w in res["not_measured"])


def test_small_rows_leave_a_host_tier() -> None:
    """--rows 200000 with 16k-id batches used to ask for a negative host tier."""
    out = subprocess.run([sys.executable, str(BENCH), "--rows", "200000", "--batch", "2048", "--pooling", "8",
                          "--batches", "1", "--warmup", "1", "--rounds", "1"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["host_rows_10x"] > 0 and res["cache_rows_10x"] + res["host_rows_10x"] == 20000


def test_static_oracle_hit_rate_is_the_top_ids_share() -> None:
    sys.path.insert(0, str(BENCH.parent))
    from embedding import best_hit_rate

    batches = [np.array([5, 5, 5, 1, 2]), np.array([5, 1, 3, 3, 0])]  # counts: 5 x4, 1 x2, 3 x2, 2 x1, 0 x1
    assert best_hit_rate(batches, rows=6, capacity=1) == 0.4
    assert best_hit_rate(batches, rows=6, capacity=3) == 0.8
    assert best_hit_rate(batches, rows=6, capacity=6) == 1.0
