"""Every deliberate error derives from FbrapidsError and names the culprit: the public API
walked with bad arguments (read_view, clean, join, extract, fit, explain, stream, the
trainers' fit / evaluate, export / load_scorer, trial), and no bare ``raise ValueError(``
/ ``KeyError`` / ``TypeError`` / ``RuntimeError`` left in the package."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fbrapids
from fbrapids import errors, ops
from fbrapids.errors import FbrapidsError

PKG = Path(fbrapids.__file__).resolve().parent


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 64
    return pd.DataFrame({"user_id": rng.integers(0, 8, n), "ad_id": rng.integers(0, 5, n),
                         "ts": np.arange(n, dtype=np.int64) * 60, "price": rng.random(n),
                         "click": rng.integers(0, 2, n)})


def _model():
    from fbrapids.trainers import StoreConfig, WideAndDeep

    return WideAndDeep(1, ["user_id"], embedding_dim=4, deep_mlp=[4], store=StoreConfig(cache_rows=64))


def _batches(frame):
    return frame.fbx.stream(label="click", dense=["price"], sparse=["user_id"], batch_size=16)


def _spec():
    from fbrapids.serving import ServingSpec

    return ServingSpec(schema={"u": "int64", "a": "int64"}, request_columns=["u"], item_columns=["a"], item_key="a",
                       sparse=["u", "a"])


def _trial(tmp_path):
    from fbrapids.app.trials import trial

    return trial(tmp_path, {"x": ops.hour("ts")}, kind="both")


CASES = {
    "read_view: no file": (lambda f, t: fbrapids.read_view(t / "nothing-*.parquet"), errors.ViewError, "nothing-"),
    "read_view: unknown column": (
        lambda f, t: (f.to_parquet(t / "v.parquet"), fbrapids.read_view(t / "v.parquet", columns=["tss"]).compute()),
        FbrapidsError, "tss"),
    "clean: fill of a missing column": (lambda f, t: f.fbx.clean(fill={"pricey": 0.0}), errors.CleanError, "pricey"),
    "join: missing key": (lambda f, t: f.fbx.join(f[["ad_id"]].drop_duplicates(), on="advertiser"),
                          errors.JoinError, "advertiser"),
    "extract: missing column": (lambda f, t: f.fbx.extract(h=ops.hour("tss")), errors.FeatureError,
                                "column 'tss' is not in the frame (columns: user_id, ad_id, ts, price, click)"),
    "extract: unknown operator argument": (lambda f, t: f.fbx.extract(h=ops.cross("user_id")), errors.OperatorError,
                                           "cross needs at least 2 inputs"),
    "extract: fitted and features": (lambda f, t: f.fbx.extract(object(), h=ops.hour("ts")), errors.InputTypeError,
                                     "either a fitted object or features"),
    "fit: missing column": (lambda f, t: f.fbx.fit(te=ops.count_encode("shop_id")), errors.FeatureError,
                            "feature 'te': column 'shop_id' is not in the frame (columns: user_id, ad_id"),
    "explain: missing column": (lambda f, t: f.fbx.explain(h=ops.hour("tss")), errors.FeatureError, "tss"),
    "stream: missing column": (lambda f, t: next(iter(f.fbx.stream(label="click", dense=["prize"], sparse=[]))),
                               errors.NotFoundError, "prize"),
    "stream: batch_size 0": (lambda f, t: f.fbx.stream(label="click", dense=["price"], sparse=[], batch_size=0),
                             errors.ArgumentError, "batch_size must be >= 1, got 0"),
    "stream: bad nan policy": (lambda f, t: f.fbx.stream(label="click", dense=["price"], sparse=[], nan="drop"),
                               errors.ArgumentError, "'drop'"),
    "stream: null ids": (lambda f, t: next(iter(f.assign(user_id=f["user_id"].astype("Int64").mask(f.index == 3))
                                                 .fbx.stream(label="click", dense=[], sparse=["user_id"]))),
                         errors.BatchError, "sparse feature 'user_id'"),
    "stream: string ids": (lambda f, t: next(iter(f.assign(user_id=f["user_id"].astype(str))
                                                   .fbx.stream(label="click", dense=[], sparse=["user_id"]))),
                           errors.ColumnTypeError, "sparse feature 'user_id'"),
    "trainers.fit: bad nan policy": (lambda f, t: __import__("fbrapids.trainers", fromlist=["fit"]).fit(
        _model(), _batches(f), nan="ignore", progress=False), errors.ArgumentError, "'ignore'"),
    "trainers.fit: batch without the model's feature": (
        lambda f, t: __import__("fbrapids.trainers", fromlist=["fit"]).fit(
            _model(), f.fbx.stream(label="click", dense=["price"], sparse=["ad_id"], batch_size=16), progress=False),
        errors.ModelStreamError, "reads sparse feature 'user_id', which the stream does not carry"),  # before training
    "trainers.evaluate: one class": (lambda f, t: __import__("fbrapids.trainers", fromlist=["evaluate"]).evaluate(
        _model(), [], progress=False), FbrapidsError, "empty"),
    "StoreConfig: cache_rows 0": (lambda f, t: __import__("fbrapids.trainers", fromlist=["StoreConfig"]).StoreConfig(
        cache_rows=0), errors.ArgumentError, "cache_rows"),
    "export_model: unregistered model": (
        lambda f, t: __import__("fbrapids.serving", fromlist=["export_model"]).export_model(
            t / "exp", torch.nn.Linear(1, 1), _spec(), {}), errors.ExportError, "Linear is not a registered model"),
    "load_scorer: not an export": (lambda f, t: __import__("fbrapids.serving", fromlist=["load_scorer"]).load_scorer(t),
                                   errors.NotAnExportError, "not a serving export"),
    "Scorer: max_items 0": (lambda f, t: __import__("fbrapids.serving", fromlist=["Scorer"]).Scorer(
        _model(), None, max_items=0), errors.ArgumentError, "max_items"),
    "ServingSpec: item_key": (lambda f, t: __import__("fbrapids.serving", fromlist=["ServingSpec"]).ServingSpec(
        schema={"u": "int64", "a": "int64"}, request_columns=["u"], item_columns=["a"], item_key="b"),
        errors.SpecError, "item_key 'b'"),
    "trial: bad kind": (lambda f, t: _trial(t), errors.ArgumentError, "kind must be 'sparse' or 'dense', got 'both'"),
    "run_pipeline: unknown model": (lambda f, t: __import__("fbrapids.app.pipeline", fromlist=["build_model"]).build_model(
        "gbdt", 1, ["a"], None), errors.ArgumentError, "'gbdt'"),
    "get_backend: unknown name": (lambda f, t: fbrapids.get_backend("cuda"), errors.BackendNameError, "'cuda'"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_argument_raises_an_fbrapids_error_naming_it(name, frame, tmp_path) -> None:
    call, cls, culprit = CASES[name]
    with pytest.raises(FbrapidsError) as info:
        call(frame.copy(), tmp_path)
    assert isinstance(info.value, cls), f"{name}: {type(info.value).__mro__}"
    assert culprit in str(info.value), f"{name}: {info.value}"
    assert not str(info.value).startswith(("'", '"'))  # a plain message, not a quoted KeyError repr


def test_every_error_class_keeps_its_standard_base() -> None:
    """``except ValueError`` (KeyError, TypeError, ...) keeps catching what it caught before."""
    std = (ValueError, TypeError, LookupError, RuntimeError, OSError, ImportError, FloatingPointError)
    for obj in vars(errors).values():
        if isinstance(obj, type) and issubclass(obj, FbrapidsError) and obj is not FbrapidsError:
            assert issubclass(obj, std), obj


def test_no_bare_standard_raise_left() -> None:
    """Deliberate errors raise an FbrapidsError subclass; the only bare ones left are caught
    and re-raised as one right where they are raised (listed here)."""
    internal = {("manifest.py", "algorithm"), ("manifest.py", "entry"), ("expr_json.py", "arguments must be")}
    found = []
    for path in PKG.rglob("*.py"):
        for line in path.read_text().splitlines():
            m = re.search(r"raise (ValueError|KeyError|TypeError|RuntimeError|FileNotFoundError|IndexError|OSError)"
                          r"\((f?[\"'])(.{0,20})", line)
            if m and not any(path.name == f and m.group(3).startswith(w) for f, w in internal):
                found.append(f"{path.relative_to(PKG)}: {line.strip()}")
    assert not found, "\n".join(found)
