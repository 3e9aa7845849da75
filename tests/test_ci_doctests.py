"""CI collects the package's docstring examples: a plain ``pytest`` (what ``.ci/run`` runs,
through ``make test``) gathers ``fbrapids``' doctests by the project's own configuration,
with no option on the command line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())  # wherever tests/ sorts it


def test_a_plain_pytest_collects_the_package_doctests():
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), flags=re.M)
    assert re.search(r"^test:.*\n\t\$\(PY\) -m pytest -q \$\(ARGS\)$", (ROOT / "Makefile").read_text(), flags=re.M)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    items = res.stdout.splitlines()
    doctests = [i for i in items if i.startswith("fbrapids/") and "::fbrapids." in i]
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    # e.g. fbrapids/trainers/stream.py::fbrapids.trainers.stream.stream
    assert "fbrapids/trainers/stream.py::fbrapids.trainers.stream.stream" in items
    modules = {i.split("::")[0] for i in doctests}
    assert len(modules) >= 100, sorted(modules)  # 114 modules with examples today, not a handful
