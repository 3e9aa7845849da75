"""A machine's first run compiles its C libraries and says so: the model's are built ahead,
beside the plan (each compiled once, by the build ahead, then loaded from the cache by the
model), the summary names how many each stage compiled, and the training rate says what it
includes of them; a second run on the same kernel cache compiles nothing and says nothing.

Each run is a subprocess of this checkout's CLI on an empty kernel cache of its own, with
the cache's lookup log (:data:`fbrapids.kernels.cache.ENV_LOG`) read back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = 3000


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from fbrapids.datasets.synthetic.generate import generate

    d = tmp_path_factory.mktemp("first-run-data")
    generate(ROWS, d)
    return d


def _demo(data: Path, cache: Path, log: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FBRAPIDS_BACKEND": "cpu", "FBRAPIDS_KERNEL_CACHE": str(cache),
           "FBRAPIDS_KERNEL_CACHE_LOG": str(log)}
    got = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "demo", "--rows", str(ROWS), "--data-dir",
                          str(data)], env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    return got.stdout


def _lookups(log: Path) -> list[tuple[str, str]]:
    return [(r["key"], r["outcome"]) for r in map(json.loads, log.read_text().splitlines())]


def test_a_first_run_builds_the_models_libraries_ahead_and_says_what_it_compiled(tmp_path, data) -> None:
    from fbrapids.kernels.compile_host import library_key
    from fbrapids.trainers.models import DLRM

    cache = tmp_path / "kernels"
    first = _demo(data, cache, tmp_path / "first.jsonl")
    lookups = _lookups(tmp_path / "first.jsonl")
    builds = [k for k, outcome in lookups if outcome != "hit"]
    assert len(builds) == len(set(builds))  # no library compiled twice
    for source in DLRM.cpu_sources():  # the store's and the dots': built ahead, then loaded from the cache
        key = library_key(source)
        assert [o for k, o in lookups if k == key][:2] == ["build", "hit"], key
    line = re.search(r"C libraries compiled +(\d+) +\(plan (\d+)(?:, extract\+train (\d+))?[,:]", first)
    assert line is not None, first
    assert int(line[1]) == len(builds) and int(line[2]) >= len(DLRM.cpu_sources())
    trained = re.search(r"samples per second +[\d,]+(.*)", first)
    assert trained is not None and ("includes" in trained[1]) == (line[3] is not None)

    second = _demo(data, cache, tmp_path / "second.jsonl")
    assert all(o == "hit" for _, o in _lookups(tmp_path / "second.jsonl"))
    assert "C libraries compiled" not in second and "of compiling" not in second
