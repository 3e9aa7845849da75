"""benchmarks/extract.py end to end on a small generated folder: the three implementations
agree, the last line is the JSON the issue asks for, launches per partition = layers, and
``--busy-cores`` runs (and cleans up) its spinning processes."""
from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks/ is not installed

from benchmarks import extract as bench  # noqa: E402
from fbrapids.datagen import generate  # noqa: E402


def test_benchmark_json_and_busy_cores(tmp_path, capsys):
    d = tmp_path / "data"
    generate(3000, d, seed=1)
    rc = bench.main(["--data", str(d), "--repeat", "1", "--partition-rows", "1024", "--busy-cores", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    res = json.loads(out[-1])
    assert rc == 0 and res["outputs_equal"] is True
    assert set(res) >= {"fused_rows_per_s", "op_by_op_rows_per_s", "pandas_rows_per_s", "outputs_equal",
                        "launches_per_partition"}
    assert res["launches_per_partition"] == 3 and res["op_by_op_launches_per_partition"] == 26
    assert res["busy_cores"] == 1 and res["partition_rows"] == 1024
    assert not multiprocessing.active_children()  # the spinners are gone
