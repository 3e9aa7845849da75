"""A data set added in one file (``tests/_toy_dataset.py``): registered when imported, named by a
workload file (``features.dataset = "toy"``) and used through its own workload, each through
to a real extraction compared with pandas reading the same file.  The workloads' floor finds
it by name, never by importing the data sets' floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fbrapids.errors import WorkloadError
from fbrapids.workloads import Dataset, dataset, load_workload, register_dataset, registered_datasets
from fbrapids.workloads.frames import feature_frame

import _toy_dataset

ROWS = 40


def _write_toy(folder: Path) -> Path:
    rng = np.random.default_rng(7)
    prices = [("" if i % 7 == 0 else f"{v:.3f}") for i, v in enumerate(rng.uniform(-5, 500, ROWS))]
    words = ["Red Shoe", "blue HAT", "Green socks for KIDS", "x", "A Long Title Of Nine Words In Mixed Case"]
    lines = ["click,user,price,title"] + [f"{int(rng.integers(0, 2))},{int(rng.integers(1, 9))},{p},{words[i % 5]}"
                                          for i, p in enumerate(prices)]
    path = folder / _toy_dataset.FILE
    path.write_text("\n".join(lines) + "\n")
    return path


def _expected(path: Path) -> pd.DataFrame:
    """The toy features computed by pandas from the file itself (the reference)."""
    raw = pd.read_csv(path, dtype={"title": str})
    return pd.DataFrame({"price_log": np.log1p(raw["price"].fillna(0.0).clip(lower=0.0)),
                         "title_len": raw["title"].str.len(), "title_lc": raw["title"].str.lower(),
                         "user": raw["user"], "click": raw["click"]})


def _check_rows(frame, path: Path) -> None:
    got = frame.compute() if hasattr(frame, "compute") else frame
    got = got.reset_index(drop=True)
    want = _expected(path)
    assert len(got) == ROWS
    np.testing.assert_allclose(got["price_log"].to_numpy(np.float64), want["price_log"].to_numpy(), rtol=1e-6)
    assert got["title_len"].astype("int64").tolist() == want["title_len"].tolist()
    assert got["title_lc"].astype(str).tolist() == want["title_lc"].tolist()
    assert got["user"].astype("int64").tolist() == want["user"].tolist()
    assert got["click"].astype("int64").tolist() == want["click"].tolist()


def test_the_toy_data_set_is_registered_by_importing_its_one_file() -> None:
    assert "toy" in registered_datasets()
    assert dataset("toy") is _toy_dataset.DATASET
    assert {"criteo", "synthetic"} <= set(registered_datasets())  # the built-in ones, loaded on first lookup


def test_a_workload_file_names_the_toy_data_set_and_extracts_its_features(tmp_path: Path) -> None:
    path = _write_toy(tmp_path)
    (tmp_path / "toy.toml").write_text(
        'label = "click"\nsplit = {rule = "fraction", fraction = 0.25}\n'
        '[[views]]\nname = "log"\npath = "toy.csv"\noptions = { dtype = { title = "str" } }\n'
        '[features]\ndataset = "toy"\nsparse = ["user"]\ndense = ["price_log", "title_len"]\n')
    w = load_workload(tmp_path / "toy.toml")
    assert sorted(w.features) == sorted(_toy_dataset.features())
    frame, _ = feature_frame(w, backend="cpu")
    _check_rows(frame, path)


def test_the_toy_data_sets_own_workload_extracts_the_same_rows(tmp_path: Path) -> None:
    path = _write_toy(tmp_path)
    w = dataset("toy").workload(tmp_path)
    frame, _ = feature_frame(w, backend="cpu")
    _check_rows(frame, path)


def test_an_unknown_data_set_names_the_file_and_the_known_ones(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text('label = "click"\n[[views]]\nname = "log"\npath = "l.csv"\n'
                                     '[features]\ndataset = "toyy"\n')
    with pytest.raises(WorkloadError, match=r"w\.toml: features\.dataset: no data set 'toyy' is registered; "
                                            r"known: \[.*'criteo'.*'toy'.*\]"):
        load_workload(tmp_path / "w.toml")


def test_a_second_data_set_of_a_registered_name_is_refused() -> None:
    with pytest.raises(WorkloadError, match="a data set named 'toy' is already registered"):
        register_dataset(Dataset("toy", _toy_dataset.features))
    assert dataset("toy") is _toy_dataset.DATASET
