"""``fbrapids demo`` without ``--work-dir`` leaves nothing in the temporary folder: not after a
completed run, a failed one, one interrupted by SIGINT or SIGTERM, nor (from the next run
on) one killed by SIGKILL.  Each run is a subprocess of this checkout's CLI with ``TMPDIR``
pointing at a folder of its own, whose entries and bytes are counted before and after."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = 3000


def usage(folder: Path) -> tuple[int, int]:
    """(entries, bytes of files) under ``folder``, recursively.  A file renamed or removed
    between the listing and its ``lstat`` (a live run's ``.tmp`` files, renamed as each
    write completes) counts 0 bytes."""
    entries = size = 0
    for root, dirs, files in os.walk(folder):
        entries += len(dirs) + len(files)
        size += sum(_bytes(os.path.join(root, f)) for f in files)
    return entries, size


def _bytes(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from fbrapids.datasets.synthetic.generate import generate

    d = tmp_path_factory.mktemp("demo-data")
    generate(ROWS, d)
    return d


def _demo(tmp: Path, data: Path, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), "FBRAPIDS_BACKEND": "cpu"}
    return subprocess.Popen([sys.executable, "-m", "fbrapids.app.cli", "demo", "--rows", str(ROWS), "--data-dir",
                             str(data), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def _wait_for_training(tmp: Path, proc: subprocess.Popen, timeout: float = 300) -> Path:
    """The run's work dir, once training has written a checkpoint into it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for d in tmp.glob("fbrapids-demo-*"):
            if (d / "checkpoints" / "latest").exists():
                return d
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the demo wrote no checkpoint in time")


def test_failed_run_leaves_nothing(tmp_path, data) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()

    def small_files() -> None:  # the preflight refuses: the SSD tier's files would not fit under ulimit -f
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    proc = _demo(tmp, data, "--batch-size", "256", "--tiers", "tiered", preexec_fn=small_files)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 2 and "the file size limit (ulimit -f)" in err, err[-2000:]
    assert f"{tmp}/fbrapids-demo-" in err  # it failed inside its temporary work dir ...
    assert usage(tmp) == (0, 0)  # ... which is gone


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_interrupted_run_leaves_nothing(tmp_path, data, sig, status) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # batches of 4 rows: some 640 steps, so the signal lands mid-training however loaded the machine
    # (with 16-row batches the run's last steps were sometimes reached first under the suite's load);
    # SIGINT's disposition set to the default, so the child installs its own KeyboardInterrupt handler
    # whatever the test runner's worker ignores
    proc = _demo(tmp, data, "--batch-size", "4", "--checkpoint-every", "5", "--tiers", "tiered",
                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    work = _wait_for_training(tmp, proc)
    assert usage(tmp)[1] > 1 << 20  # a run in progress holds megabytes there (the SSD tier's files)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == status, err[-2000:]
    assert "Traceback" not in err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "batch/s" not in ln
             and not ln.lstrip().startswith(("fit:", "predict:"))]
    assert lines[-1:] == ["interrupted" if sig == signal.SIGINT else "fbrapids demo: stopped by SIGTERM"], err[-2000:]
    assert not work.exists() and usage(tmp) == (0, 0)


def test_killed_runs_folder_is_removed_by_the_next_run_which_leaves_nothing(tmp_path, data) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _demo(tmp, data, "--batch-size", "16", "--checkpoint-every", "5")
    work = _wait_for_training(tmp, proc)
    proc.kill()  # SIGKILL: nothing can clean up
    proc.communicate(timeout=60)
    assert work.is_dir()
    before = usage(tmp)
    assert sorted(p.name for p in tmp.iterdir()) == [work.name]  # torch's cache folder too is inside it
    # what other kills leave, each of a process that no longer runs: a demo killed between making its
    # folder and recording itself in it (empty), a trial's work dir, a launch of ranks' folder
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp / f"fbrapids-demo-{dead.pid}-x1").mkdir()
    for kind in ("run", "ranks"):
        (tmp / f"fbrapids-{kind}-{dead.pid}-x2").mkdir()
        (tmp / f"fbrapids-{kind}-{dead.pid}-x2" / ".fbrapids.lock").write_text(
            '{"pid": %d, "host": "%s", "since": "-"}' % (dead.pid, socket.gethostname()))
        (tmp / f"fbrapids-{kind}-{dead.pid}-x2" / "store").mkdir()
    # the next run, a completed one: removes the killed runs' folders, and leaves nothing of its own
    nxt = _demo(tmp, data, "--batch-size", "256", "--export", str(tmp_path / "exp"))
    out, err = nxt.communicate(timeout=600)
    assert nxt.returncode == 0, err[-2000:]
    assert not work.exists() and "work dir(s) of runs that were killed: " in err and str(work) in err
    assert before[1] > 0 and usage(tmp) == (0, 0), list(tmp.iterdir())
    assert " removed (temporary: --work-dir DIR keeps" in out
    assert (tmp_path / "exp" / "serving.json").is_file()  # what was asked for stays


def test_run_pipeline_without_work_dir_leaves_nothing(tmp_path, data, monkeypatch) -> None:
    """The library's rule is the demo's: no ``work_dir``, a temporary one, removed."""
    import tempfile

    from fbrapids.app.pipeline import run_pipeline

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    r = run_pipeline(data, batch_size=512, progress=False, count_clean=False, tiers="tiered")
    assert r.metrics["n"] > 0 and r.work_tree.get("store", 0) > 0  # it did work in a work dir ...
    assert r.removed_work_dir.startswith(f"{tmp}/fbrapids-run-") and r.checkpoint is None
    assert usage(tmp) == (0, 0)  # ... which is gone
