"""The command line answers bad input with one line on stderr and exit status 2, never a
traceback (run as a user runs it: a subprocess)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", "import sys; from fbrapids.cli import main; sys.exit(main(sys.argv[1:]))",
                           *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("args,says", [
    (("gen", "--rows", "0", "--out", "OUT"), "fbrapids gen: rows must be at least"),
    (("serve", "/missing/export"), "fbrapids serve: /missing/export"),
])
def test_usage_errors_are_one_line(tmp_path, args, says):
    args = tuple(str(tmp_path / "out") if a == "OUT" else a for a in args)
    res = _cli(*args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written
