"""Loading an export or a checkpoint runs no code from it: each crafted file below would
create a marker file if anything in it ran; loading fails with a clear error and the
marker never appears."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from fbrapids.ams.warmup import partial_warm_up
from fbrapids.errors import ManifestError, UnsafeFileError
from fbrapids.files.manifest import write_manifest
from fbrapids.serving import export_model, load_model
from fbrapids.serving.example import example_spec
from fbrapids.trainers import WideAndDeep, fit
from fbrapids.trainers.sparse import StoreConfig


class Payload:
    """Pickled, this object calls ``Path.touch(marker)`` when it is unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _kwargs() -> dict:
    spec = example_spec()
    return dict(dense_dim=len(spec.dense), sparse_features=list(spec.sparse), embedding_dim=4, deep_mlp=[4],
                store=StoreConfig(cache_rows=64))


@pytest.fixture
def export(tmp_path):
    kw = _kwargs()
    return export_model(tmp_path / "exp", WideAndDeep(**kw), example_spec(), kw)


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "PWNED"
    yield m
    assert not m.exists(), "a payload ran"


def _evil_pt(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save({"model": Payload(marker), "step": 0}, buf)
    return buf.getvalue()


def test_a_clean_export_loads_and_verifies(export):
    model, spec = load_model(export)
    assert type(model).__name__ == "WideAndDeep" and spec.item_key == "ad_id"
    assert not (export / "spec.pkl").exists() and json.loads((export / "spec.json").read_text())["item_key"] == "ad_id"


def test_pickled_spec_of_format_1_is_refused(export, marker):
    meta = json.loads((export / "serving.json").read_text())
    (export / "serving.json").write_text(json.dumps({**meta, "format": 1}))
    (export / "spec.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ManifestError, match="manifest"):  # the manifest is verified before serving.json is read
        load_model(export)
    write_manifest(export)  # an attacker can rewrite the manifest too: format 1 is still refused
    with pytest.raises(UnsafeFileError, match="format 1.*pickled spec"):
        load_model(export)


def test_a_pickle_added_to_a_format_2_export_is_not_in_the_manifest(export, marker):
    (export / "spec.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ManifestError, match=r"spec\.pkl: not in the manifest"):
        load_model(export)


def test_weights_only_bypass_in_dense_pt(export, marker):
    dense = export / "model" / "step-0000000000" / "dense.pt"
    dense.write_bytes(_evil_pt(marker))
    with pytest.raises(ManifestError, match=r"dense\.pt: \d+ bytes in the manifest"):
        load_model(export)
    write_manifest(dense.parent)  # an attacker can rewrite the manifests too: weights_only still refuses
    write_manifest(export)
    with pytest.raises(UnsafeFileError, match=r"dense\.pt: refused by torch.load\(weights_only=True\)"):
        load_model(export)


def test_fit_resume_and_partial_warm_up_refuse_the_same_file(tmp_path, marker):
    ckpt = tmp_path / "ckpt" / "step-0000000001"
    ckpt.mkdir(parents=True)
    (ckpt / "dense.pt").write_bytes(_evil_pt(marker))
    (ckpt / "meta.json").write_text(json.dumps({"step": 1, "tables": []}))
    (tmp_path / "ckpt" / "latest").write_text("step-0000000001")
    write_manifest(ckpt)  # the checkpoint's own manifest rewritten too: weights_only still refuses
    model = WideAndDeep(**_kwargs())
    with pytest.raises(UnsafeFileError, match="weights_only"):
        fit(model, [], checkpoint_dir=tmp_path / "ckpt", resume=True, progress=False)
    with pytest.raises(UnsafeFileError, match="weights_only"):
        partial_warm_up(WideAndDeep(**_kwargs()), tmp_path / "ckpt")
    with pytest.raises(UnsafeFileError, match="weights_only"):
        partial_warm_up(WideAndDeep(**_kwargs()), ckpt / "dense.pt")


@pytest.mark.parametrize("meta", [
    {"model": "subprocess:run", "model_kwargs": {"args": ["touch", "MARKER"]}},
    {"model": "run", "model_kwargs": {"args": ["touch", "MARKER"]}},
    {"model_class": "subprocess:run", "model_kwargs": {"args": ["touch", "MARKER"]}},
])
def test_model_class_outside_the_registry_is_refused(export, marker, meta):
    meta = json.loads(json.dumps(meta).replace("MARKER", str(marker)))
    (export / "serving.json").write_text(json.dumps({"format": 2, **meta}))
    write_manifest(export)
    with pytest.raises(UnsafeFileError, match="registered model|needs 'model'"):
        load_model(export)


@pytest.mark.parametrize("pointer", ["absolute", "../outside", "symlink"])
def test_latest_pointing_outside_the_export_is_refused(export, marker, tmp_path, pointer):
    outside = tmp_path / "outside" / "step-0000000000"
    shutil.copytree(export / "model" / "step-0000000000", outside)
    (outside / "dense.pt").write_bytes(_evil_pt(marker))
    latest = export / "model" / "latest"
    if pointer == "absolute":
        latest.write_text(str(outside))
    elif pointer == "../outside":
        latest.write_text(os.path.relpath(outside, export / "model"))
    else:
        os.symlink(outside, export / "model" / "step-0000000009")
        latest.write_text("step-0000000009")
    with pytest.raises(ManifestError):
        load_model(export)
    if pointer == "symlink":
        with pytest.raises(UnsafeFileError, match="leaves"):
            load_model(export, verify=False)
    else:
        write_manifest(export)
        with pytest.raises(UnsafeFileError, match="checkpoint .* leaves"):
            load_model(export)


def test_fit_resume_refuses_a_latest_pointer_outside(tmp_path, marker):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "latest").write_text("/etc")
    with pytest.raises(UnsafeFileError, match="leaves"):
        fit(WideAndDeep(**_kwargs()), [], checkpoint_dir=tmp_path / "ckpt", resume=True, progress=False)


@pytest.mark.parametrize("feature, match", [
    ({"call": "no_such_op", "args": [{"col": "ad_id"}], "params": []}, "unknown operator 'no_such_op'"),
    ({"pickle": "gASV..."}, "unknown tag 'pickle'"),
    ({"call": "hash_bucket", "args": [{"col": "ad_id"}], "params": [["buckets", {"ndarray": {
        "dtype": "O", "shape": [1], "base64": ""}}]]}, "not a numeric dtype"),
])
def test_spec_json_builds_data_only(export, feature, match):
    spec = json.loads((export / "spec.json").read_text())
    spec["item_features"]["ad_h"] = feature
    (export / "spec.json").write_text(json.dumps(spec))
    write_manifest(export)
    with pytest.raises(UnsafeFileError, match=match):
        load_model(export)


def test_serving_a_checkpoint_says_to_export_it(tmp_path, capsys) -> None:
    from fbrapids.app.cli import main as cli_main
    from fbrapids.trainers.checkpoint.model_state import save_checkpoint

    save_checkpoint(WideAndDeep(**_kwargs()), None, tmp_path / "ckpt", step=1)
    assert cli_main(["serve", str(tmp_path / "ckpt")]) == 2
    assert "is a fit checkpoint; export it first with `fbrapids export" in capsys.readouterr().err
