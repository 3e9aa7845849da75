"""A newcomer's first hour: every silent or wrong-layer mistake is a one-line
``FbrapidsError`` or a documented warning, found before any work where it can be.

The command-line cases run this checkout's CLI as a real subprocess and check what it
printed, its exit status and which heavy modules it had imported when it refused (pandas,
torch, dask: none), not how long it took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids
from fbrapids import ops
from fbrapids.errors import BatchError, NoMatchWarning, ReplacedColumnWarning, SeparatorWarning
from fbrapids.frames.gpu_probe import gpu_missing
from fbrapids.views.clean import clean

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "torch", "dask", "pyarrow", "numpy")

# runs the CLI's main in a fresh interpreter, then reports its status and the heavy modules it loaded
_PROBE = """
import json, sys
from fbrapids.app.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "loaded": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def _cli_probe(*args: str, env: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """(the probe's report, the stderr lines) of ``fbrapids ARGS`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), [ln for ln in proc.stderr.splitlines() if ln.strip()]


# -- data layer: warnings that name what they guessed or replaced ------------------------------
def test_read_view_sep_that_reads_one_column_warns_naming_the_guess(tmp_path: Path) -> None:
    pd.DataFrame({"label": [1, 0], "I1": [2, 3], "I2": [4, 5]}).to_csv(tmp_path / "a.csv", index=False)
    with pytest.warns(SeparatorWarning, match=r"a\.csv: sep=';' reads one column named 'label,I1,I2'; ',' would "
                                              r"split it into 3 \(label, I1, I2\)"):
        got = fbrapids.read_view(tmp_path / "a.csv", sep=";", eager=True)
    assert list(got.columns) == ["label,I1,I2"]  # the read goes on with the sep given
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(fbrapids.read_view(tmp_path / "a.csv", sep=",", eager=True).columns) == ["label", "I1", "I2"]
        (tmp_path / "one.csv").write_text("q\na,b\n")  # one column whose values hold commas: no guess to offer
        assert list(fbrapids.read_view(tmp_path / "one.csv", sep=";", eager=True).columns) == ["q"]


@pytest.mark.parametrize("lazy", [False, True])
def test_clean_json_path_in_no_document_warns_naming_it(lazy: bool) -> None:
    df = pd.DataFrame({"ctx": ['{"device": {"os": "ios"}}', '{"device": {}}', "{bad", None]})
    frame = dd.from_pandas(df, npartitions=2) if lazy else df
    with pytest.warns(NoMatchWarning, match=r"json path 'device\.\.os' \(column 'os'\) is in none of the documents of "
                                            r"column 'ctx' that parse \(it has an empty key"):
        out = clean(frame, json={"ctx": {"os": "device..os"}})
        out = out.compute() if lazy else out
    assert out["os"].isna().all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = clean(frame, json={"ctx": {"os": "device.os"}})
        assert (ok.compute() if lazy else ok)["os"].tolist()[0] == "ios"


def test_extract_feature_replacing_an_input_column_warns() -> None:
    df = pd.DataFrame({"user_id": [1, 2], "ad": [3, 4]})
    with pytest.warns(ReplacedColumnWarning, match=r"feature 'user_id' replaces the input column 'user_id'"):
        out = df.fbx.extract(user_id=ops.hash_bucket("user_id", 8))
    # the replaced values are the feature's, as documented
    assert out["user_id"].tolist() == df.fbx.extract(h=ops.hash_bucket("user_id", 8))["h"].tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df.fbx.extract(user_id="user_id", u=ops.hash_bucket("user_id", 8))  # the column itself replaces nothing


# -- a null sparse id: at stream time, not from the producer thread ----------------------------
def _ids_frame() -> pd.DataFrame:
    df = pd.DataFrame({"click": np.arange(8) % 2, "d": np.linspace(0, 1, 8),
                       "user": pd.array([1, 2, 3, None, 5, 6, 7, 8], dtype="Int64")})
    return df


def test_null_sparse_id_in_a_pandas_frame_is_refused_when_the_stream_is_made() -> None:
    with pytest.raises(BatchError, match=r"sparse feature 'user': 1 null ids, first at row 3; fill them first"):
        _ids_frame().fbx.stream(label="click", dense=["d"], sparse=["user"], batch_size=4)


def test_null_sparse_id_in_a_dask_partition_names_the_column_without_the_producer_frames() -> None:
    import traceback

    batches = dd.from_pandas(_ids_frame(), npartitions=2).fbx.stream(label="click", dense=["d"], sparse=["user"],
                                                                     batch_size=4)
    with pytest.raises(BatchError, match=r"sparse feature 'user': 1 null ids in partition 0, first at row 3") as info:
        list(batches)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "_produce" not in frames and "sparse_column" not in frames, frames


# -- the command line: refused before heavy imports, on one line -------------------------------
def test_cli_abbreviated_option_is_refused() -> None:
    proc = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "gen", "--row", "1000", "--out", "x"],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unrecognized arguments: --row 1000" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.skipif(not gpu_missing(), reason="the GPU backend runs here")
def test_cli_gpu_backend_unavailable_is_refused_before_heavy_imports() -> None:
    report, err = _cli_probe("demo", "--backend", "gpu")
    assert report == {"rc": 2, "loaded": []} and len(err) == 1, (report, err)
    assert err[0].startswith("fbrapids demo: the GPU backend needs")
    report, err = _cli_probe("demo", env={"FBRAPIDS_BACKEND": "gpu"})
    assert report == {"rc": 2, "loaded": []} and err[0].startswith("fbrapids demo: the GPU backend needs")


def test_cli_data_dir_of_other_files_is_refused_before_heavy_imports(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    report, err = _cli_probe("demo", "--data-dir", str(tmp_path), "--backend", "cpu")
    assert report == {"rc": 2, "loaded": []} and len(err) == 1, (report, err)
    assert f"{tmp_path} holds 1 entries (notes.txt), which the demo did not make" in err[0]
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1


def test_cli_scheduler_where_nothing_listens_is_refused_at_once() -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report, err = _cli_probe("demo", "--backend", "cpu", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert report == {"rc": 2, "loaded": []} and len(err) == 1, (report, err)
    assert f"nothing listens at tcp://127.0.0.1:{port} (connection refused)" in err[0]


def test_library_connect_to_a_refused_port_fails_at_once() -> None:
    import socket

    from fbrapids.errors import ClusterError
    from fbrapids.frames.cluster import probe_scheduler

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClusterError, match=r"nothing listens at tcp://127\.0\.0\.1:\d+ \(connection refused\)"):
        probe_scheduler(f"tcp://127.0.0.1:{port}")


def test_two_gen_into_one_folder_at_once_both_succeed(tmp_path: Path) -> None:
    out = tmp_path / "g"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "fbrapids.app.cli", "gen", "--rows", str(rows), "--out", str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rows in (300, 400)]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    from fbrapids.datasets.synthetic.generate import read_metadata

    meta = read_metadata(out)
    assert meta["rows"] in (300, 400)
    # one whole set (the generators took turns): every file agrees with the metadata's rows
    assert len(pd.read_parquet(out / "impressions.parquet")) == meta["rows"]
    assert sorted(p.name for p in out.iterdir()) == ["ads.parquet", "basic.parquet", "impressions.parquet",
                                                    "users.parquet"]  # no temporary file left


@pytest.mark.skipif(not gpu_missing(), reason="the GPU backend runs here")
def test_torchrun_rank_without_a_gpu_prints_one_line(monkeypatch, capsys) -> None:
    from fbrapids.app.demo_distributed import rank_main

    monkeypatch.setenv("RANK", "3")
    assert rank_main(["--backend", "gpu"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fbrapids.app.demo_distributed rank 3: the GPU backend needs"), err


# -- nothing left behind: the data cache is bounded, and cleared on demand -----------------------
def _fake_set(root: Path, rows: int, size: int, mtime: float) -> Path:
    from fbrapids.runs.data_cache import DEMO_MARK

    d = root / f"default-{rows}-seed0"
    d.mkdir(parents=True)
    (d / DEMO_MARK).write_text("{}")
    (d / "impressions.parquet").write_bytes(b"x" * size)
    os.utime(d, (mtime, mtime))
    return d


def test_data_cache_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    from fbrapids.runs.data_cache import prune

    old, mid, new = (_fake_set(tmp_path, r, 1000, t) for r, t in ((100, 1e9), (200, 2e9), (300, 3e9)))
    (tmp_path / "mine").mkdir()  # not the demo's: never touched
    removed = prune(tmp_path, cap_bytes=2100, keep=old)  # the one in use is kept, however old
    assert removed == [mid] and old.exists() and new.exists() and (tmp_path / "mine").exists()
    assert prune(tmp_path, cap_bytes=0, keep=None) == [old, new]


def test_cli_cache_clear_empties_the_data_cache(tmp_path: Path) -> None:
    for rows in (100, 200):
        _fake_set(tmp_path, rows, 10, 1e9)
    report, _ = _cli_probe("cache", env={"FBRAPIDS_DATA": str(tmp_path)})
    assert report["rc"] == 0
    env = {**os.environ, "PYTHONPATH": str(REPO), "FBRAPIDS_DATA": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "cache", "--clear"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("removed 2 data set(s)"), proc.stderr
    assert list(tmp_path.iterdir()) == []  # lock files too


# -- small things: the install and help() -----------------------------------------------------
def test_help_of_every_model_shows_its_own_init_not_torchs() -> None:
    import pydoc

    from fbrapids.trainers import DIN, DLRM, DeepFM, WideAndDeep

    for model in (DLRM, WideAndDeep, DeepFM, DIN):
        text = pydoc.render_doc(model, renderer=pydoc.plaintext)
        assert "Initialize internal Module state" not in text, model.__name__
        assert f"Build a {model.__name__}: the arguments are described in the class docstring" in text


def test_editable_install_is_a_path_entry_without_the_compat_warning(tmp_path: Path) -> None:
    """The PEP 660 build pip runs for ``pip install -e .``, on a copy of the project: one
    ``.pth`` naming the project's root, no import hook, no deprecation warning."""
    import shutil
    import zipfile

    root = tmp_path / "clone"
    shutil.copytree(REPO / "fbrapids", root / "fbrapids", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    proc = subprocess.run([sys.executable, "-c", "import setuptools.build_meta as b, sys; "
                           f"print(b.build_editable({str(tmp_path)!r}))"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "always"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ompat" not in proc.stdout + proc.stderr and "Deprecat" not in proc.stdout + proc.stderr
    wheel = zipfile.ZipFile(tmp_path / proc.stdout.strip().splitlines()[-1])
    extra = [n for n in wheel.namelist() if ".dist-info/" not in n]
    assert extra == ["__editable__.fbrapids-0.1.0.pth"], extra
    assert wheel.read(extra[0]).decode().strip() == str(root.resolve())


def test_the_suite_removes_its_temporary_files(tmp_path: Path) -> None:
    """A pytest run with the suite's plugin: a test's mkdtemp, a subprocess's, and pytest's
    own tmp_path all land in the run's folder, which is gone when the run ends; the folder
    of a run killed earlier is removed, that of a run still going is kept."""
    base = tmp_path / "machine-tmp"
    base.mkdir()
    (tmp_path / "test_leaves.py").write_text(
        "import subprocess, sys, tempfile\n"
        "def test_makes_files(tmp_path):\n"
        "    open(tempfile.mkdtemp() + '/x', 'w').write('x')\n"
        "    subprocess.run([sys.executable, '-c', 'import tempfile; tempfile.mkdtemp()'], check=True)\n"
        "    (tmp_path / 'y').write_text('y')\n")
    import fcntl

    killed = base / "fbrapids-tests-killed"  # a run killed outright: its lock is free
    killed.mkdir()
    (killed / ".run.lock").write_text("")
    (killed / "left.bin").write_bytes(b"x")
    live = base / "fbrapids-tests-live"  # a run still going: it holds its lock
    live.mkdir()
    held = os.open(live / ".run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    env = {**os.environ, "TMPDIR": str(base), "PYTHONPATH": str(REPO / "tests")}
    env.pop("FBRAPIDS_KEEP_TEST_TMP", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tmp_cleanup", "-p", "no:cacheprovider",
                           str(tmp_path / "test_leaves.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    os.close(held)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(base.iterdir()) == [live]  # its own folder gone, the killed run's removed, the live one kept


def test_a_cold_compile_shows_a_progress_line_once(tmp_path: Path, monkeypatch) -> None:
    """The first use of a kernel on a machine compiles it under a visible line (on a
    terminal), naming the cache; the cached second use compiles nothing and shows none."""
    import io

    from fbrapids.kernels.compile_host import compile_source

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    cache = tmp_path / "kernels"
    monkeypatch.setenv("FBRAPIDS_KERNEL_CACHE", str(cache))
    source = f"int fbx_newcomer_{os.getpid()}(int x) {{ return x + 2; }}\n"
    shown = []
    for _ in range(2):
        err = Terminal()
        monkeypatch.setattr(sys, "stderr", err)
        compile_source(source)
        shown.append([ln for ln in err.getvalue().replace("\r", "\n").splitlines() if "compiling" in ln])
    assert len(shown[0]) >= 1 and f"fbrapids: compiling a meta-kernel (once: cached in {cache})" in shown[0][-1]
    assert shown[1] == []
