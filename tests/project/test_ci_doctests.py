"""CI collects the package's docstring examples: a plain ``pytest`` (what ``.ci/run`` runs,
through ``make test``) gathers ``fbrapids``' doctests by the project's own configuration,
with no option on the command line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())  # wherever tests/ sorts it


def _collected_by_a_plain_pytest(session: pytest.Session) -> list[str]:
    """The node ids a plain ``pytest`` collects: this session's own, when it ran the whole
    configured suite (CI's ``make test``: each xdist worker collects everything), else a
    ``--collect-only`` run in a subprocess."""
    cfg = session.config
    ran = {(cfg.rootpath / a).resolve() for a in cfg.args}
    if ran == {(cfg.rootpath / a).resolve() for a in cfg.getini("testpaths")}:  # no paths given: the configured ones
        return [item.nodeid for item in session.items]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout.splitlines()


def test_a_plain_pytest_collects_the_package_doctests(request: pytest.FixtureRequest):
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), flags=re.M)
    # make test: pytest with the project's configuration; only xdist's worker options added
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\n\t\$\(PY\) -m pytest \$\(TEST_OPTS\) \$\(ARGS\)$", makefile, flags=re.M)
    assert re.search(r"^TEST_OPTS = -q -n \$\(TEST_WORKERS\) --dist loadfile$", makefile, flags=re.M)
    items = _collected_by_a_plain_pytest(request.session)
    doctests = [i for i in items if i.startswith("fbrapids/") and "::fbrapids." in i]
    # e.g. fbrapids/trainers/stream.py::fbrapids.trainers.stream.stream
    assert "fbrapids/trainers/stream.py::fbrapids.trainers.stream.stream" in items
    modules = {i.split("::")[0] for i in doctests}
    assert len(modules) >= 100, sorted(modules)  # 114 modules with examples today, not a handful
