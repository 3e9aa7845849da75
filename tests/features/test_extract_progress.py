"""An eager extract of a large pandas frame shows progress (rows done, a total, time left):
it runs in row chunks under a bar, with the output of one whole run; small frames (the
serving path) run whole, one launch per layer, as before; a dask frame's progress is
``fbrapids.progress()`` around its compute."""
from __future__ import annotations

import re

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import fbrapids
from fbrapids import kernels, ops
from fbrapids.errors import FeatureError
from fbrapids.features import run

FEATURES = {
    "h": ops.hour("ts"),
    "u": ops.hash_bucket("user", 1 << 20),
    "x": ops.cross("user", "slot"),
    "first_tags": ops.first_k("tags", 2),  # list output: offsets rebased per chunk
    "s": ops.lower(ops.fill_null("name", "None")),  # string output, and a second operator on the first
}


def _frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    tags = pa.array([[int(v) for v in rng.integers(0, 9, int(k))] for k in rng.integers(0, 4, rows)],
                    type=pa.list_(pa.int64()))
    names = pd.Series(rng.choice(["a", "bb", None, "ccc"], rows), dtype="str")
    # a repeated index: the chunks' columns must land on their own rows, not be aligned by label
    index = pd.Index(np.repeat(np.arange(rows // 2 + 1), 2)[:rows])
    return pd.DataFrame({"ts": rng.integers(0, 10**9, rows), "user": rng.integers(0, 10**6, rows),
                         "slot": rng.integers(0, 20, rows), "tags": pd.Series(tags, dtype=pd.ArrowDtype(tags.type)),
                         "name": names}).set_index(index)


def _launches(frame: pd.DataFrame, **kw) -> tuple[pd.DataFrame, int]:
    kernels.reset_stats()
    out = frame.fbx.extract(**FEATURES, **kw)
    return out, kernels.stats()["launches"]


def test_progress_bar_over_row_chunks_same_output(capsys):
    rows = 2 * run.EXTRACT_CHUNK_ROWS + 1000  # three chunks
    frame = _frame(rows)
    whole, whole_launches = _launches(frame, progress=False)
    assert capsys.readouterr().err == ""
    chunked, chunked_launches = _launches(frame, progress=True)
    pd.testing.assert_frame_equal(chunked, whole)
    assert chunked_launches == 3 * whole_launches  # really run chunk by chunk
    err = capsys.readouterr().err
    total = f"{rows / 1000:.0f}k"
    # tqdm's line with a total and a time left, ending complete
    assert re.search(rf"extract: 100%\|[^|]*\| {total}/{total} \[[0-9:]+<[0-9:]+", err), err[-500:]


def test_threshold_small_frames_run_whole_without_a_bar(capsys, monkeypatch):
    small = _frame(64)  # the serving path: one launch per layer, no bar object
    _, layers = _launches(small, progress=False)
    _, launches = _launches(small)
    assert launches == layers
    monkeypatch.setattr(run, "EXTRACT_PROGRESS_ROWS", 5000)
    monkeypatch.setattr(run, "EXTRACT_CHUNK_ROWS", 2000)
    big = _frame(5000)
    out, launches = _launches(big)  # at the threshold: chunked by default
    assert launches == 3 * layers
    pd.testing.assert_frame_equal(out, big.fbx.extract(**FEATURES, progress=False))
    assert "extract" not in capsys.readouterr().err  # not a terminal, and under a second: no bar drawn
    _, launches = _launches(_frame(4999))
    assert launches == layers


def test_fitted_extract_shows_progress(capsys, monkeypatch):
    monkeypatch.setattr(run, "EXTRACT_CHUNK_ROWS", 1500)
    frame = _frame(3000)
    fitted = frame.fbx.fit(n=ops.count_encode("user"), h=ops.hour("ts"))
    out = frame.fbx.extract(fitted, progress=True)
    pd.testing.assert_frame_equal(out, frame.fbx.extract(fitted, progress=False))
    assert re.search(r"extract: 100%\|[^|]*\| 3\.00k/3\.00k \[", capsys.readouterr().err)


def test_dask_extract_progress_is_the_compute_bar(capsys):
    lazy_in = dd.from_pandas(_frame(4000), npartitions=4)
    with pytest.raises(FeatureError, match=r"with fbrapids.progress\(\): frame.compute\(\)"):
        lazy_in.fbx.extract(**FEATURES, progress=True)
    lazy = lazy_in.fbx.extract(**FEATURES)  # default: no error, nothing drawn per partition
    with fbrapids.progress() as bar:
        out = lazy.compute()
    assert len(out) == 4000 and bar.tasks_done >= 4
    err = capsys.readouterr().err
    assert f"{bar.tasks_done}/{bar.tasks_done}" in err and "extract:" not in err
