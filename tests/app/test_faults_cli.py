"""Fault suite, command line (a corrupt footer, a frozen worker): every failure ``fbrapids
demo`` can meet is one line on stderr naming the file, column or address, with exit
status 2, found before training where it can be.

Each case is a real subprocess of this checkout's CLI on a real data folder that
``fbrapids gen`` wrote and the test then damaged (pyarrow rewrites of one view, the
generator's footer metadata kept); full and read-only disks are real tmpfs mounts
(skipped where this user cannot mount one); the frozen worker is a real worker process of
a LocalCluster stopped with SIGSTOP."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = 3000


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FBRAPIDS_BACKEND": "cpu", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "fbrapids.app.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _reported(line: str) -> bool:
    """Whether ``line`` is the split a run reports before training (``split of ...:``, then its
    training and held-out rows): what a failure during training follows."""
    return line.startswith(("split of ", "  training ", "  held out "))


def _one_line(proc: subprocess.Popen, timeout: float = 180) -> str:
    """The single stderr line of a run that failed with status 2 (tqdm's bars and the split
    reported before training left out)."""
    _, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "batch/s" not in ln
             and not ln.lstrip().startswith(("fit:", "predict:")) and not _reported(ln)]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, err)
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gen") / "data"
    proc = _cli("gen", "--rows", str(ROWS), "--out", str(d))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return d


def _damaged(data: Path, dest: Path, view: str, change: Callable[[pa.Table], pa.Table]) -> Path:
    """A copy of ``data`` with ``view`` rewritten by ``change`` (its footer metadata kept)."""
    shutil.copytree(data, dest)
    path = dest / f"{view}.parquet"
    kv = pq.ParquetFile(path).metadata.metadata
    table = change(pq.read_table(path))
    pq.write_table(table.replace_schema_metadata(kv), path, row_group_size=1 << 15)
    return dest


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _held_out_dropped(table: pa.Table) -> pa.Table:
    from fbrapids.datasets.synthetic.generate import DAYS, TS0

    return table.filter(pc.less(table["ts"], TS0 + (DAYS - 1) * 86400))


BAD_DATA = {
    "a basic view missing a column": (
        "basic", lambda t: t.drop(["d4"]),
        "dense feature 'd4' is neither a column of the views in {d} nor an extracted feature"),
    "a string dense column": (
        "basic", lambda t: _set(t, "d2", pa.array([str(v) for v in t["d2"].to_pylist()])),
        "dense feature 'd2' is of dtype str in the views of {d}; it must be numeric"),
    "an empty held-out day": (
        "impressions", _held_out_dropped,
        "{d}/impressions.parquet holds no row with ts >= 1700352000"),
    "NaN in a dense input": (
        "basic", lambda t: _set(t, "d3", pa.array(np.where(np.arange(len(t)) == 5, np.nan,
                                                           t["d3"].to_numpy()).astype(np.float32))),
        "dense feature 'd3': 1 NaN/inf/null values in partition 0, first at row 5; clean them, or pass --nan zero"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_inputs_are_one_line_naming_the_column(data, tmp_path, capsys, case):
    # the CLI's own entry point in this process (the subprocess cases above and below show
    # the same main() as a user runs it): the import and start-up costs are paid once
    from fbrapids.app.cli import main

    view, change, says = BAD_DATA[case]
    d = _damaged(data, tmp_path / "d", view, change)
    capsys.readouterr()
    assert main(["demo", "--rows", str(ROWS), "--data-dir", str(d), "--backend", "cpu"]) == 2
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.replace("\r", "\n").splitlines() if ln.strip() and "batch/s" not in ln
             and not ln.lstrip().startswith(("fit:", "predict:")) and not _reported(ln)]
    assert len(lines) == 1 and lines[0].startswith(f"fbrapids demo: {says.format(d=d)}"), captured.err
    assert captured.out == ""


def test_a_footer_that_aborts_pyarrow_is_one_line_naming_the_file(data, tmp_path):
    from tests.pipeline.test_faults_data import abort_footer

    d = tmp_path / "d"
    shutil.copytree(data, d)
    abort_footer(d / "basic.parquet")
    line = _one_line(_cli("demo", "--rows", str(ROWS), "--data-dir", str(d)))
    assert f"{d}/basic.parquet is not a readable parquet file (corrupt footer): row group 0 column" in line, line


@pytest.mark.parametrize("address,says", [
    ("inproc://10.1.1.1/77/1", "inproc://10.1.1.1/77/1 is an in-process address"),
    ("tls://127.0.0.1:8786", "tls://127.0.0.1:8786 needs TLS settings, and none are set"),
    ("ucx://127.0.0.1:8786", "ucx://127.0.0.1:8786: ucx:// needs the distributed-ucxx package"),
    ("ftp://127.0.0.1:8786", "ftp://127.0.0.1:8786 has scheme ftp://, expected one of tcp://, tls://, ws://"),
])
def test_scheduler_addresses_this_process_cannot_use_are_one_line(tmp_path, address, says):
    line = _one_line(_cli("demo", "--data-dir", str(tmp_path / "d"), "--scheduler", address), timeout=60)
    assert line.startswith(f"fbrapids demo: argument --scheduler: {says}"), line
    assert not (tmp_path / "d").exists()  # refused before any work


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    path.mkdir()
    opts = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_read_only_work_or_data_dir_is_one_line(data, tmp_path):
    with _tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        line = _one_line(_cli("demo", "--rows", str(ROWS), "--data-dir", str(data), "--work-dir", str(ro / "w")))
        assert line.startswith(f"fbrapids demo: argument --work-dir: {ro} is on a read-only file system"), line
        # the data dir is written only when the data must be generated: found then, naming the path
        line = _one_line(_cli("demo", "--rows", str(ROWS), "--data-dir", str(ro / "data")))
        assert line.startswith(f"fbrapids demo: {ro}/.data.tmp-") and line.endswith(": Read-only file system "
                                                                                     "(a read-only file system: "
                                                                                     "choose a writable --work-dir "
                                                                                     "/ --data-dir)"), line
    # data on a read-only disk is read as it is (no lock file can be made beside it)
    from fbrapids.datasets.synthetic.generate import using_dataset

    with _tmpfs(tmp_path / "ro2", "16m") as disk:
        shutil.copytree(data, disk / "data")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        with using_dataset(ROWS, disk / "data") as d:
            assert d == disk / "data"


def test_a_disk_filling_up_during_training_is_one_line_saying_what_could_be_freed(data, tmp_path, capsys):
    with _tmpfs(tmp_path / "disk", "48m") as disk:
        work = disk / "w"
        proc = _cli("demo", "--rows", str(ROWS), "--data-dir", str(data), "--work-dir", str(work),
                    "--batch-size", "32", "--checkpoint-every", "1", "--tiers", "tiered")  # an SSD tier to free too
        end = time.monotonic() + 180
        while len(list((work / "checkpoints").glob("step-*"))) < 2:  # two checkpoints written
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.02)
        with open(disk / "filler", "wb") as f:  # another job takes the rest of the disk
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        line = _one_line(proc)
        assert "No space left on device" in line and "; could be freed: " in line, line
        # the file it failed on and the bytes: a checkpoint's file, or the SSD tier's growth
        w = re.escape(str(work))
        assert re.match(rf"fbrapids demo: {w}/\S+: No space left on device writing [\d,]+ bytes \([\d,]+ written; "
                        r"[\d,]+ bytes free there\); could be freed: ", line) or \
            re.search(rf"cannot grow the SSD tier file {w}/\S+ to \d+ rows \(\d+ bytes\)", line), line
        assert f"the SSD tier {work}/store (" in line and "the kernel cache " in line, line

        # resuming with 2 MiB free: the preflight refuses before training, saying what could go
        from fbrapids.app.cli import main  # in this process: the CLI's entry point

        filler = disk / "filler"
        os.truncate(filler, filler.stat().st_size - (2 << 20))

        capsys.readouterr()
        assert main(["demo", "--rows", str(ROWS), "--data-dir", str(data), "--work-dir", str(work), "--resume",
                     "--batch-size", "32", "--backend", "cpu"]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"fbrapids demo: the work dir {work} has ") and "free; this run needs about" in line
        # no --checkpoint-every: the final checkpoint beside those there (none pruned); the rows in
        # one RAM tier: the older run's store folder is not reused, so not subtracted
        assert "(the final checkpoint " in line and "; could be freed: " in line, line
        assert "less what" not in line, line
        assert f"older checkpoints in {work}/checkpoints (" in line and f"the SSD tier {work}/store (" in line, line


def _nan_on_the_last_day(table: pa.Table) -> pa.Table:
    d3 = table["d3"].to_numpy().copy()
    d3[-1] = np.nan  # the last row: held out
    return _set(table, "d3", pa.array(d3))


def test_a_run_killed_in_evaluation_exports_on_resume_and_nan_zero_counts(data, tmp_path, capsys):
    d = _damaged(data, tmp_path / "d", "basic", _nan_on_the_last_day)
    work, export = tmp_path / "w", tmp_path / "export"
    demo = ["demo", "--rows", str(ROWS), "--data-dir", str(d), "--work-dir", str(work), "--nan", "zero"]
    proc = _cli(*demo)
    end = time.monotonic() + 180
    while not (work / "checkpoints" / "latest").exists():  # written once, when training ends
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # dies in evaluation
    proc.communicate(timeout=60)
    assert proc.returncode == -9
    from fbrapids.app.cli import main  # resumed in this process (the CLI's entry point)

    capsys.readouterr()
    status = main([*demo, "--backend", "cpu", "--resume", "--export", str(export)])
    out = capsys.readouterr().out
    assert status == 0
    assert f"export                 {export}" in out and (export / "serving.json").is_file()
    # the held-out NaN was evaluated as 0, and counted
    assert [ln.split() for ln in out.splitlines() if "NaN/inf/null -> 0" in ln] == [
        ["dense", "NaN/inf/null", "->", "0", "1"]]


def test_a_frozen_worker_is_named_not_a_silent_stall(caplog):
    import dask
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    from fbrapids.errors import ClusterError
    from fbrapids.frames.partition_pass import iter_partitions

    def slow(part: pd.DataFrame) -> pd.DataFrame:
        time.sleep(0.5)
        return part

    frame = dd.from_pandas(pd.DataFrame({"a": range(40)}), npartitions=4).map_partitions(slow)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        pids = client.run(os.getpid)
        stopped: list[str] = []

        def freeze_the_busy_worker() -> None:
            for _ in range(200):
                busy = [a for a, tasks in client.processing().items() if tasks]
                if busy:
                    stopped.append(busy[0])
                    os.kill(pids[busy[0]], signal.SIGSTOP)
                    return
                time.sleep(0.01)

        import threading

        try:
            with dask.config.set({"fbrapids.partition-warn": 1.0, "fbrapids.partition-deadline": 4.0}), \
                    caplog.at_level(logging.WARNING, logger="fbrapids.frames.cluster"):
                parts = iter_partitions(frame, window=1)
                freezer = threading.Thread(target=freeze_the_busy_worker)
                freezer.start()
                with pytest.raises(ClusterError) as raised:
                    for _ in parts:
                        pass
                freezer.join()
        finally:
            for addr in stopped:
                os.kill(pids[addr], signal.SIGCONT)
        assert stopped, "no worker was found busy"
        assert "not computed within 4 s (dask config fbrapids.partition-deadline)" in str(raised.value)
        assert stopped[0] in str(raised.value) and "last heard" in str(raised.value)
        warnings = [r.getMessage() for r in caplog.records if "still computing after" in r.getMessage()]
        assert warnings and all(stopped[0] in w for w in warnings), warnings
