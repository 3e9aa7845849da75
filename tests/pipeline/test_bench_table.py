"""The README's benchmark table is exactly what scripts/bench.py makes of the benchmarks'
own JSON results (benchmarks/results/*.json): no figure is typed in by hand."""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench  # noqa: E402


def test_readme_table_is_generated_from_the_results():
    text = (REPO / "README.md").read_text()
    assert bench.fill_readme(text) == text, "README table out of date: run python scripts/bench.py --table-only"


def test_every_result_names_its_machine_and_command():
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        if path.name == "reference_rates.json":  # the machines' reference rates (benchmarks/machine.py)
            continue
        r = json.loads(path.read_text())
        assert "cores" in r["machine"] and r["command"].startswith("python benchmarks/"), path
        assert path.stem in bench.BENCHMARKS
