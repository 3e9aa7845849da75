"""The command line answers bad input with one line on stderr naming the argument, and exit
status 2, before any work is done: never a traceback (run as a user runs it: a subprocess
of ``python -m fbrapids.app.cli``, this checkout's code)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "fbrapids.app.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


# (arguments, environment, the start of the one line): FILE is an existing file, FULL a
# non-empty directory, OUT a path that must stay absent
CASES = [
    (("gen", "--rows", "0", "--out", "OUT"), {}, "fbrapids gen: argument --rows: 0 is out of range"),
    (("gen", "--rows", "many", "--out", "OUT"), {}, "fbrapids gen: argument --rows: 'many' is not an integer"),
    (("gen", "--seed", "-1", "--out", "OUT"), {}, "fbrapids gen: argument --seed: -1 is out of range"),
    (("gen", "--row-group-rows", "0", "--out", "OUT"), {}, "fbrapids gen: argument --row-group-rows: 0 is out"),
    (("gen", "--out", "FILE"), {}, "fbrapids gen: argument --out: FILE is a file, not a directory"),
    (("demo", "--batch-size", "0", "--data-dir", "OUT"), {}, "fbrapids demo: argument --batch-size: 0 is out"),
    (("demo", "--seed", "-1", "--data-dir", "OUT"), {}, "fbrapids demo: argument --seed: -1 is out of range"),
    (("demo", "--rows", "-5", "--data-dir", "OUT"), {}, "fbrapids demo: argument --rows: -5 is out of range"),
    (("demo", "--checkpoint-every", "0", "--data-dir", "OUT"), {}, "fbrapids demo: argument --checkpoint-every: 0"),
    (("demo", "--data-dir", "FILE"), {}, "fbrapids demo: argument --data-dir: FILE is a file, not a directory"),
    (("demo", "--data-dir", "OUT", "--work-dir", "FILE"), {}, "fbrapids demo: argument --work-dir: FILE is a file"),
    (("demo", "--data-dir", "OUT", "--export", "FILE"), {}, "fbrapids demo: argument --export: FILE is a file"),
    (("demo", "--data-dir", "OUT", "--export", "FULL"), {}, "fbrapids demo: argument --export: FULL is not empty"),
    (("demo", "--data-dir", "OUT", "--resume"), {}, "fbrapids demo: argument --resume: needs --work-dir"),
    (("demo", "--data-dir", "OUT", "--model", "gbdt"), {}, "fbrapids demo: argument --model: invalid choice: 'gbdt'"),
    (("demo", "--data-dir", "OUT", "--summary-json", "FULL"), {}, "fbrapids demo: argument --summary-json: FULL is a"),
    (("demo", "--data-dir", "OUT", "--memory-limit", "lots"), {},
     "fbrapids demo: argument --memory-limit: memory limit 'lots': expected bytes, a size such as '8GB'"),
    (("demo", "--data-dir", "OUT", "--nproc", "2", "--memory-limit", "4GB"), {},
     "fbrapids demo: argument --nproc: --memory-limit is not supported with several ranks"),
    (("demo", "--data-dir", "OUT"), {"FBRAPIDS_BACKEND": "cuda"},
     "fbrapids demo: environment variable FBRAPIDS_BACKEND: 'cuda' is not a backend"),
    (("export", "OUT", "OUT2"), {}, "fbrapids export: argument checkpoint: OUT does not exist"),
    (("export", "FULL", "FILE"), {}, "fbrapids export: argument out: FILE is a file, not a directory"),
    (("export", "FULL", "OUT", "--embedding-dim", "0"), {}, "fbrapids export: argument --embedding-dim: 0 is out"),
    (("export", "FULL", "OUT", "--seed", "-1"), {}, "fbrapids export: argument --seed: -1 is out of range"),
    (("trial", "--workload", "FILE", "--candidate", "x=ops.cross('a', 'b')", "--json", "FILE"), {},
     "fbrapids trial: argument --json: FILE already exists (another run's output): pass --force to overwrite it"),
    (("serve", "OUT"), {}, "fbrapids serve: argument export_dir: OUT does not exist"),
    (("serve", "FILE"), {}, "fbrapids serve: argument export_dir: FILE is a file"),
    (("serve", "FULL", "--port", "70000"), {}, "fbrapids serve: argument --port: 70000 is out of range"),
    (("serve", "FULL", "--max-items", "0"), {}, "fbrapids serve: argument --max-items: 0 is out of range"),
    (("serve", "FULL", "--cache-items", "-1"), {}, "fbrapids serve: argument --cache-items: -1 is out of range"),
    (("serve", "FULL", "--cache-bytes", "0"), {}, "fbrapids serve: argument --cache-bytes: 0 is out of range"),
    (("serve", "FULL", "--max-requests", "0"), {}, "fbrapids serve: argument --max-requests: 0 is out of range"),
    (("serve", "FULL", "--max-body-bytes", "0"), {}, "fbrapids serve: argument --max-body-bytes: 0 is out"),
    (("serve", "FULL"), {"FBRAPIDS_BACKEND": "cuda"}, "fbrapids serve: environment variable FBRAPIDS_BACKEND"),
]


@pytest.mark.parametrize("args,env,says", CASES, ids=[" ".join(c[0]) + "".join(f" {k}={v}" for k, v in c[1].items())
                                                      for c in CASES])
def test_usage_errors_are_one_line_naming_the_argument(tmp_path, args, env, says):
    places = {"OUT": tmp_path / "out", "OUT2": tmp_path / "out2", "FILE": tmp_path / "file", "FULL": tmp_path / "full"}
    places["FILE"].write_text("not a directory\n")
    places["FULL"].mkdir()
    (places["FULL"] / "something").write_text("x")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    res = _cli(*(str(places.get(a, a)) for a in args), cwd=tmp_path,
               env={**env, "TMPDIR": str(tmp), "FBRAPIDS_DATA": str(tmp_path / "data-root")})
    assert res.returncode == 2, res.stderr
    for name, p in places.items():
        says = says.replace(name, str(p))
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), res.stderr
    assert res.stdout == ""
    # nothing was done: no output, data or temporary folder made
    assert not places["OUT"].exists() and not places["OUT2"].exists() and not (tmp_path / "data-root").exists()
    assert list(tmp.iterdir()) == []


def test_a_folder_holding_the_clone_does_not_shadow_the_package(tmp_path):
    """Python run from the folder that contains a clone named ``fbrapids``: that folder is a
    namespace package ``fbrapids`` to Python.  Installed as the Makefile installs it (a path
    entry, a plain ``pip install -e .`` with pyproject's ``package-dir``: here PYTHONPATH; the
    build's ``.pth`` is checked in tests/project/test_newcomer_traps.py), the real package still wins, for
    ``python -c`` and ``python -m fbrapids.app.cli`` alike."""
    (tmp_path / "fbrapids" / "fbrapids").mkdir(parents=True)  # a clone's root, without __init__.py
    (tmp_path / "fbrapids" / "README.md").write_text("a clone\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", "import fbrapids; from fbrapids import read_view; "
                          "print(fbrapids.__file__)"], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == str(REPO / "fbrapids" / "__init__.py"), res.stderr
    res = _cli("gen", "--rows", "0", "--out", "x", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("fbrapids gen: argument --rows"), res.stderr
    assert 'package-dir = {"" = "."}' in (REPO / "pyproject.toml").read_text()
    assert "editable_mode" not in (REPO / "Makefile").read_text()


def test_model_choices_are_the_pipeline_models():
    import argparse

    from fbrapids.app.cli import build_parser
    from fbrapids.app.pipeline import MODELS
    from fbrapids.trainers.models import model_for
    from fbrapids.trainers.models.registry import short_names

    # the command line and RunConfig read the registry's short names, in its order (when first
    # used: `--help` imports no model, so no torch)
    assert tuple(MODELS) == short_names() and "dlrm" in MODELS

    sub = {a.dest: a for a in build_parser()._actions}["command"].choices
    # serving has no scorer for the logistic regression (its class says: not exportable): export leaves it out
    servable = tuple(m for m in MODELS if model_for(m).exportable)
    assert "logreg" in MODELS and "logreg" not in servable
    for command, want in (("demo", tuple(MODELS)), ("export", servable)):
        model = {a.dest: a for a in sub[command]._actions}["model"]
        accepted = []
        for name in (*short_names(), "nope"):  # (the default, dlrm, is taken unchecked: RunConfig checks it)
            try:
                accepted.append(model.type(name))
            except argparse.ArgumentTypeError as e:
                assert f"invalid choice: {name!r}" in str(e) and "'dlrm'" in str(e)
        assert tuple(accepted) == want, command


def test_python_dash_m_fbrapids_runs_the_console_script(tmp_path):
    """``python -m fbrapids ...`` (fbrapids/__main__.py) is the ``fbrapids`` console script:
    the same parser, the same one-line refusal and exit status as ``python -m fbrapids.app.cli``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ("gen", "--rows", "0", "--out", str(tmp_path / "out"))
    res = subprocess.run([sys.executable, "-m", "fbrapids", *args], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("fbrapids gen: argument --rows: 0 is out of range"), res.stderr
    assert res.stderr == _cli(*args, cwd=tmp_path).stderr and not (tmp_path / "out").exists()
