"""The CLI under real faults: Ctrl-C (exit 130, no partial latest checkpoint) then --resume
(bit-identical final weights), two runs on one work dir, a data folder that is not the demo's,
a truncated parquet file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fbrapids.app.pipeline import DENSE, SPARSE, build_model
from fbrapids.datasets.synthetic.generate import DEMO_MARK, ensure_dataset, generate
from fbrapids.errors import DataDirError
from fbrapids.runs.workdir import LOCK_NAME
from fbrapids.trainers.checkpoint.directory import checkpoints, latest_checkpoint
from fbrapids.trainers.checkpoint.model_state import load_checkpoint, weights_digest
from fbrapids.trainers.sparse import StoreConfig

REPO = Path(__file__).resolve().parents[2]
ROWS = 20_000  # about 66 steps of 256: the Ctrl-C sent at the first checkpoint lands seconds before the end
DEMO = ["demo", "--rows", str(ROWS), "--batch-size", "256", "--checkpoint-every", "2", "--backend", "cpu"]


def _cli(*args: str) -> subprocess.Popen:
    """The CLI in a process of its own, SIGINT's disposition set to the default so that it installs
    its KeyboardInterrupt handler whatever this process inherited (a suite started as a background
    job, ``cmd &``, has SIGINT ignored, and the child would then run through a Ctrl-C to exit 0;
    test_demo_leaves_nothing does the same)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "fbrapids.app.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _refused(capsys, *args: str) -> str:
    """Run a command that must be refused (exit status 2) through the console script's ``main``
    in this process (its imports already done here: ~5 s less than a process of its own);
    returns what it wrote to stderr."""
    from fbrapids.app.cli import main

    capsys.readouterr()
    status = main(list(args))
    err = capsys.readouterr().err
    assert status == 2, err
    return err


def _final_digest(work: Path) -> tuple[str, str]:
    """The final checkpoint's name and the digest of its weights (dense weights, optimizer
    state, step, every table's ids and rows)."""
    final = checkpoints(work / "checkpoints")[0]
    return final.name, weights_digest(final)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gen") / "data"
    proc = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "gen", "--rows", str(ROWS), "--out", str(d)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return d


def test_ctrl_c_then_resume_gives_the_uninterrupted_model_bit_for_bit(data, tmp_path, capsys):
    summary = tmp_path / "summary.json"
    straight = _cli(*DEMO, "--data-dir", str(data), "--work-dir", str(tmp_path / "straight"),
                    "--summary-json", str(summary))
    out, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err
    want = _final_digest(tmp_path / "straight")
    # --summary-json: what the printed summary shows, as JSON (the README's figures come from it)
    import json

    got = json.loads(summary.read_text())
    assert f"AUC {got['metrics']['auc']:.4f}" in out and f"{'trained':<22} {got['rows']['trained']:>12,}" in out
    assert got["data"]["rows"] == ROWS and got["data"]["ctr"] > 0 and "predictions" not in got

    work = tmp_path / "interrupted"
    proc = _cli("-v", *DEMO, "--data-dir", str(data), "--work-dir", str(work))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not checkpoints(work / "checkpoints"):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    done = checkpoints(work / "checkpoints")
    assert done and done[0].name != checkpoints(tmp_path / "straight" / "checkpoints")[0].name  # stopped early
    left = weights_digest(done[0])
    # no partial latest checkpoint: `latest` names a whole one, which loads into a fresh model
    latest = latest_checkpoint(work / "checkpoints")
    assert latest is not None and latest.is_dir() and latest.name == done[0].name
    model = build_model("dlrm", len(DENSE), SPARSE, StoreConfig(cache_rows=1 << 14, ssd_dir=str(tmp_path / "s")))
    assert load_checkpoint(model, None, latest) >= 2

    err = _refused(capsys, *DEMO, "--data-dir", str(data), "--work-dir", str(work))  # no --resume: refused, not mixed
    assert "already holds checkpoints up to" in err and "--resume" in err, err
    assert weights_digest(checkpoints(work / "checkpoints")[0]) == left  # and left as it was

    resumed = _cli("-v", *DEMO, "--data-dir", str(data), "--work-dir", str(work), "--resume", "--summary-json",
                   str(tmp_path / "resumed.json"))
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert f"resumed from {done[0]}" in err
    assert _final_digest(work) == want
    again = json.loads((tmp_path / "resumed.json").read_text())  # the uninterrupted run's figures, rows included
    assert again["metrics"] == got["metrics"] and again["rows"] == got["rows"] and again["steps"] == got["steps"]
    # and the digest can tell: the checkpoint the interrupted run left differs from the final one
    assert left != want[1]


def test_two_runs_on_one_work_dir_the_second_names_the_first(data, tmp_path, capsys):
    work = tmp_path / "w"
    first = _cli(*DEMO, "--data-dir", str(data), "--work-dir", str(work))
    try:
        deadline = time.time() + 300
        while time.time() < deadline and first.poll() is None:
            lock = work / LOCK_NAME
            if lock.exists() and lock.read_text().strip():
                break
            time.sleep(0.05)
        assert first.poll() is None
        err = _refused(capsys, *DEMO, "--data-dir", str(data), "--work-dir", str(work))  # the second run
        assert f"fbrapids demo: {work} is in use by another run: PID {first.pid} on host " \
               f"{socket.gethostname()}" in err
        assert first.poll() is None  # refused while the first still ran
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    # SIGTERM: one line, exit status 128 + 15, no traceback (its work dir and checkpoints stay, to resume)
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "batch/s" not in ln
             and not ln.lstrip().startswith(("fit:", "predict:"))]
    assert first.returncode == 143 and lines == ["fbrapids demo: stopped by SIGTERM"], err[-2000:]


def test_demo_never_overwrites_data_it_did_not_make(data, tmp_path):
    own = tmp_path / "mine"
    own.mkdir()
    (own / "clicks.parquet").write_bytes(b"a user's own file")
    proc = _cli(*DEMO, "--data-dir", str(own), "--work-dir", str(tmp_path / "w"))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "which the demo did not make" in err and "fbrapids gen" in err, err
    assert sorted(p.name for p in own.iterdir()) == ["clicks.parquet"]
    assert (own / "clicks.parquet").read_bytes() == b"a user's own file"

    # data made by `fbrapids gen` with other rows: refused with the --rows that would use it
    before = {p.name: p.stat().st_mtime_ns for p in data.iterdir()}
    with pytest.raises(DataDirError, match=f"generated data of {ROWS:,} rows, seed 0.*--rows {ROWS} --seed 0"):
        ensure_dataset(ROWS + 1, data)
    assert {p.name: p.stat().st_mtime_ns for p in data.iterdir()} == before and not (data / DEMO_MARK).exists()
    assert ensure_dataset(ROWS, data) == data  # the asked-for set: used as it is, untouched
    assert {p.name: p.stat().st_mtime_ns for p in data.iterdir()} == before

    # a folder the demo made is its own to regenerate
    ours = ensure_dataset(300, tmp_path / "ours")
    mark = json.loads((ours / DEMO_MARK).read_text())
    assert (mark["rows"], mark["seed"], sorted(mark["files"])) == (300, 0, ["ads", "basic", "impressions", "users"])
    ensure_dataset(400, ours)
    from fbrapids.datasets.synthetic.generate import read_metadata

    assert read_metadata(ours)["rows"] == 400


def test_gen_writes_page_checksums_and_reads_verify_them(tmp_path):
    from fbrapids.errors import ViewError
    from fbrapids.views.read import read_view

    d = tmp_path / "d"
    generate(3000, d)
    basic = d / "basic.parquet"
    raw = bytearray(basic.read_bytes())
    # flip 256 bytes in the middle of the data pages (the footer stays readable)
    mid = len(raw) // 3
    for i in range(mid, mid + 256):
        raw[i] ^= 0x5A
    basic.write_bytes(bytes(raw))
    with pytest.raises(ViewError, match=f"{basic}.*(CRC|checksum|corrupt)"):
        read_view(basic, eager=True)
    # a truncated file: the error names it
    imp = d / "impressions.parquet"
    imp.write_bytes(imp.read_bytes()[: imp.stat().st_size // 2])
    with pytest.raises(ViewError, match=str(imp)):
        read_view(imp, eager=True)
