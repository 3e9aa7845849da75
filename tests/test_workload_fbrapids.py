"""The fbrapids workload (fused and op by op) equals the idiomatic pandas one exactly."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks/ is not installed

from benchmarks.workload_fbrapids import run_fbrapids
from benchmarks.workload_pandas import frames_equal, load_tables, run_pandas
from fbrapids.datagen import generate


def test_workload_equals_pandas(tmp_path):
    generate(3000, tmp_path, seed=3)
    tables = load_tables(tmp_path)
    ref, _ = run_pandas(tables)
    fused, _, launches = run_fbrapids(load_tables(tmp_path), fused=True)
    ok, why = frames_equal(fused, ref)
    assert ok, why
    obo, _, obo_launches = run_fbrapids(load_tables(tmp_path), fused=False)
    ok, why = frames_equal(obo, ref)
    assert ok, why
    assert launches == 3 and obo_launches > 20
