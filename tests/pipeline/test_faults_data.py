"""Fault suite, data (corrupt and missing files, a corrupt parquet footer): demo data folders under
concurrent first runs and a kill -9 between renames; inputs replaced while a run reads
them; a flipped bit in a footer's row-group statistics; a footer that aborts pyarrow.

Every fault is real: real processes (``python -c`` children of this checkout), real files
with real bytes flipped, real SIGKILLs.  The oracles are pyarrow / pandas reads of the
files the generator writes (``generate`` into a folder of the test's own)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from fbrapids.datasets.synthetic.generate import DEMO_MARK, ensure_dataset, generate
from fbrapids.errors import InputChangedError, ViewError

REPO = Path(__file__).resolve().parents[2]
ROWS = 300


def _py(code: str, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def _frames(folder: Path) -> dict[str, pd.DataFrame]:
    return {n: pq.read_table(folder / f"{n}.parquet").to_pandas() for n in ("impressions", "users", "ads", "basic")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, dict[str, pd.DataFrame]]:
    """What ``generate`` writes for ROWS and ROWS + 100 rows (seed 0), read back by pyarrow."""
    out = {}
    for rows in (ROWS, ROWS + 100):
        d = tmp_path_factory.mktemp(f"ref{rows}")
        generate(rows, d)
        out[rows] = _frames(d)
    return out


def _assert_is(folder: Path, expected: dict[str, pd.DataFrame], rows: int) -> None:
    got = _frames(folder)
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(got[name], frame, obj=name)
    mark = json.loads((folder / DEMO_MARK).read_text())
    assert (mark["rows"], mark["seed"]) == (rows, 0)


# -- B1: demo data folders -------------------------------------------------------------------
ENSURE = """
import sys
from fbrapids.datasets.synthetic.generate import ensure_dataset
ensure_dataset(int(sys.argv[2]), sys.argv[1])
"""


def test_two_first_runs_on_one_fresh_folder_both_get_the_complete_data(tmp_path, reference):
    data = tmp_path / "default-300-seed0"
    procs = [_py(ENSURE, str(data), str(ROWS)) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    _assert_is(data, reference[ROWS], ROWS)
    # nothing of the two generations is left beside it but the lock file
    assert sorted(p.name for p in tmp_path.iterdir()) == [".default-300-seed0.lock", "default-300-seed0"]


# the child regenerates for other rows and kills itself (SIGKILL) just before the rename
# that puts the new folder in place: the old one has been renamed aside, the new is complete
KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from fbrapids.datasets.synthetic.generate import ensure_dataset
target = Path(sys.argv[1])

def hook(event, args):
    if event == "os.rename" and Path(os.fsdecode(args[1])) == target and ".tmp-" in os.fsdecode(args[0]):
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
ensure_dataset(int(sys.argv[2]), target)
"""


def test_a_regeneration_killed_between_its_renames_is_never_used_half_made(tmp_path, reference):
    data = tmp_path / "d"
    ensure_dataset(ROWS, data)
    killed = _py(KILLED_BETWEEN_RENAMES, str(data), str(ROWS + 100))
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    assert not data.exists() and len(list(tmp_path.glob(".d.old-*"))) == 1 and list(tmp_path.glob(".d.tmp-*"))
    # the next run for the new size: the debris removed, the data complete and of one generation
    assert ensure_dataset(ROWS + 100, data) == data
    _assert_is(data, reference[ROWS + 100], ROWS + 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".d.lock", "d"]


def test_a_marked_folder_that_does_not_match_or_cannot_be_read_is_regenerated(tmp_path, reference):
    data = ensure_dataset(ROWS, tmp_path / "d")
    # a file of another generation (what the old code left after a kill between its renames)
    other = tmp_path / "other"
    generate(ROWS, other, seed=7)
    os.replace(other / "basic.parquet", data / "basic.parquet")
    assert ensure_dataset(ROWS, data) == data
    _assert_is(data, reference[ROWS], ROWS)
    # a truncated file
    path = data / "users.parquet"
    path.write_bytes(path.read_bytes()[:-100])
    ensure_dataset(ROWS, data)
    _assert_is(data, reference[ROWS], ROWS)
    # a marker from before completion markers (written before the files): not trusted
    (data / DEMO_MARK).write_text(json.dumps({"rows": ROWS, "seed": 0}))
    ensure_dataset(ROWS, data)
    assert "files" in json.loads((data / DEMO_MARK).read_text())


# -- B8: a corrupt footer that aborts pyarrow --------------------------------------------------
def abort_footer(path: Path) -> None:
    """Give the first definition-level histogram of ``path``'s footer one entry too many
    (thrift compact bytes: field header 0x19, list of 2 i64 0x26 -> 3 entries 0x36)."""
    data = path.read_bytes()
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = data[start:-8]
    i = footer.index(b"\x19\x26")
    j = i + 2
    for _ in range(2):  # past the two varints
        while footer[j] & 0x80:
            j += 1
        j += 1
    footer = footer[:i] + b"\x19\x36" + footer[i + 2:j] + b"\x00" + footer[j:]
    path.write_bytes(data[:start] + footer + struct.pack("<I", len(footer)) + b"PAR1")


def test_a_footer_that_aborts_pyarrow_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "v.parquet"
    pd.DataFrame({"k": np.arange(50), "x": np.arange(50.0)}).to_parquet(path)
    abort_footer(path)
    probe = _py("import sys, pyarrow.parquet as pq; pq.ParquetFile(sys.argv[1]).metadata.row_group(0).column(0)",
                str(path))
    _, err = probe.communicate(timeout=60)
    assert probe.returncode == -6, err  # what pyarrow does with it: SIGABRT, no file named
    from fbrapids.views.read import read_view

    for eager in (True, False):
        with pytest.raises(ViewError, match=r"v\.parquet is not a readable parquet file \(corrupt footer\): row group "
                                            r"0 column 'k': its definition level histogram has 3 entries"):
            read_view(path, eager=eager)


# -- B2: inputs that change under a run ----------------------------------------------------------
def test_a_file_replaced_while_a_view_is_read_is_an_error_naming_it(tmp_path):
    from fbrapids.frames.partition_pass import iter_partitions
    from fbrapids.views.read import read_view

    for i in range(3):
        pd.DataFrame({"k": np.arange(i * 10, i * 10 + 10)}).to_parquet(tmp_path / f"p{i}.parquet")
    view = read_view(tmp_path / "*.parquet")
    parts = iter_partitions(view, window=1)
    assert next(parts)["k"].tolist() == list(range(10))
    # replaced with other rows of the same size (a rewrite by another job): a new mtime
    replacement = tmp_path / "new.parquet.tmp"
    pd.DataFrame({"k": np.arange(100, 110)}).to_parquet(replacement)
    os.replace(replacement, tmp_path / "p2.parquet")
    assert next(parts)["k"].tolist() == list(range(10, 20))  # untouched: read as planned
    with pytest.raises(InputChangedError, match=r"p2\.parquet changed since the run planned it"):
        next(parts)
    # the same bytes written again (same size and footer): the modification time says so
    view = read_view(tmp_path / "p0.parquet")
    data = (tmp_path / "p0.parquet").read_bytes()
    os.utime(tmp_path / "p0.parquet", ns=(1, 1))
    (tmp_path / "p0.parquet").write_bytes(data)
    with pytest.raises(InputChangedError, match=r"p0\.parquet changed .*modification time"):
        view.compute()


def _flip_statistics(path: Path, column: str, group: int, shift: int) -> int:
    """Raise the min statistic of ``column`` in row group ``group`` by ``shift`` keys, in the
    footer's bytes (its length kept); returns the rows the shifted division would exclude."""
    meta = pq.ParquetFile(path).metadata
    col = [meta.schema.column(i).name for i in range(meta.num_columns)].index(column)
    old = meta.row_group(group).column(col).statistics.min
    keys = pq.read_table(path, columns=[column]).column(0).to_numpy()
    new = int(np.sort(keys[keys >= old])[shift])
    data = bytearray(path.read_bytes())
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = bytes(data[start:-8])
    assert footer.count(struct.pack("<q", old)) >= 1
    data[start:-8] = footer.replace(struct.pack("<q", old), struct.pack("<q", new))
    path.write_bytes(bytes(data))
    return int(((keys >= old) & (keys < new)).sum())


def _sorted_views(d: Path) -> dict[str, object]:
    """impressions and basic as the pipeline reads them (indexed by instance_id with the
    divisions of their statistics), one row group per partition."""
    from fbrapids.views.divisions import index_by_sorted_key
    from fbrapids.views.read import read_view

    out = {}
    for name in ("impressions", "basic"):
        path = d / f"{name}.parquet"
        out[name] = index_by_sorted_key(read_view(path, row_groups_per_partition=1), path, "instance_id", 1)
    return out


def test_a_flipped_statistics_bit_never_drops_rows_of_the_partitionwise_merge(tmp_path):
    d = tmp_path / "d"
    generate(3000, d, row_group_rows=500)
    expected = pd.merge(pq.read_table(d / "impressions.parquet", columns=["instance_id", "ts"]).to_pandas(),
                        pq.read_table(d / "basic.parquet", columns=["instance_id", "d0"]).to_pandas(),
                        on="instance_id")
    assert len(expected) > 2900  # the oracle: every basic row has its impression
    views = _sorted_views(d)
    merged = views["impressions"][["ts"]].join(views["basic"][["d0"]], how="inner").compute()
    assert len(merged) == len(expected)  # the untouched files merge to the oracle's rows

    lost = _flip_statistics(d / "basic.parquet", "instance_id", 2, 40)
    assert lost == 40  # rows the shifted division puts in the wrong partition
    views = _sorted_views(d)
    assert views["basic"].npartitions == 6 and views["basic"].known_divisions  # merged partition by partition
    merged = views["impressions"][["ts"]].join(views["basic"][["d0"]], how="inner")
    with pytest.raises(ViewError, match=r"basic\.parquet: partition 2 holds instance_id .* but the file's row-group "
                                        r"statistics put it in"):
        merged.compute()
