"""Crafted and tampered exports, each refused by a real ``fbrapids serve``
(in-process, on a thread: a regression would start serving, and the test fails after a
bounded wait instead of hanging) or by :func:`fbrapids.serving.export.load_model`, with one
line naming the file; and signed exports."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

from fbrapids.ams import ImageVectorStore  # noqa: E402
from fbrapids.app.cli import main as cli_main  # noqa: E402
from fbrapids.errors import ManifestError, StoreError, UnsafeFileError  # noqa: E402
from fbrapids.files.manifest import write_manifest  # noqa: E402
from fbrapids.serving import export_model, load_model  # noqa: E402
from fbrapids.serving.example import example_spec  # noqa: E402
from fbrapids.serving.signing import KEY_ENV  # noqa: E402

KEY = b"export-signing-key-0123456789abcdef"


@pytest.fixture
def export(model_and_kwargs, tmp_path):
    model, kwargs = model_and_kwargs
    return export_model(tmp_path / "exp", model, example_spec(), kwargs)


def _step(export: Path) -> Path:
    return next((export / "model").glob("step-*"))


def _reseal(export: Path) -> None:
    """What anyone who can write the folder can do: recompute both manifests."""
    write_manifest(_step(export))
    write_manifest(export)


def serve_refused(export: Path, capsys, *extra: str) -> str:
    """``fbrapids serve EXPORT`` must exit 2 before serving; returns its one stderr line."""
    out: dict[str, int] = {}
    t = threading.Thread(target=lambda: out.setdefault("rc", cli_main(["serve", str(export), "--port", "0",
                                                                        *extra])), daemon=True)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "fbrapids serve started serving (or hung) on a crafted export"
    err = capsys.readouterr().err
    assert out.get("rc") == 2 and err.count("\n") == 1, (out, err)
    return err


def test_fifo_in_an_export_is_refused_not_read(export, capsys) -> None:
    fifo = export / "notes.bin"
    os.mkfifo(fifo)
    manifest = json.loads((export / "MANIFEST.json").read_text())  # listed, as a forger would
    manifest["files"]["notes.bin"] = {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    (export / "MANIFEST.json").write_text(json.dumps(manifest))
    err = serve_refused(export, capsys)
    assert "notes.bin: not a regular file" in err


def test_manifest_verified_before_serving_json_is_parsed(export, capsys) -> None:
    (export / "serving.json").write_text('{"format": 2, "model": ' + "[" * 100_000)
    err = serve_refused(export, capsys)
    assert "serving.json: " in err and "in the manifest" in err  # the size / digest check, not the parser


@pytest.mark.parametrize("edit, match", [
    ({"store": {"StoreConfig": {"dim": 4, "cache_rows": 1 << 34}}}, None),  # 1.1 TB of cache asked: sized by the tables
    ({"store": {"StoreConfig": {"dim": 1 << 28, "cache_rows": 8}}}, None),  # the model sets the dim it uses
    ({"deep_mlp": [1 << 17, 1 << 17]}, "dense weights, the export's dense.pt holds"),
    ({"embedding_dim": 1 << 26}, "dense weights|rows of"),
])
def test_serving_json_cannot_ask_for_memory_the_export_does_not_hold(export, edit, match) -> None:
    meta = json.loads((export / "serving.json").read_text())
    for k, v in edit.items():
        if isinstance(v, dict):
            meta["model_kwargs"][k]["StoreConfig"].update(v["StoreConfig"])
        else:
            meta["model_kwargs"][k] = v
    (export / "serving.json").write_text(json.dumps(meta))
    write_manifest(export)
    if match is None:
        model, _ = load_model(export)
        assert all(s.config.cache_rows <= 4096 for s in model.stores().values())
    else:
        with pytest.raises(UnsafeFileError, match=match) as exc:
            load_model(export)
        assert "serving.json" in str(exc.value) and "\n" not in str(exc.value)


def _npy(array_header: dict, payload: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, array_header)
    return buf.getvalue() + payload


def test_decompression_bombs_are_refused_before_expanding(export, capsys) -> None:
    table = next(_step(export).glob("tables/*"))
    index = table / "index.npz"
    with zipfile.ZipFile(index) as z:
        members = {m: z.read(m) for m in z.namelist()}
    bomb = {**members, "ids.npy": members["ids.npy"] + bytes(8 << 20)}  # 8 MiB of zeros: ~8 KiB deflated
    with zipfile.ZipFile(index, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in bomb.items():
            z.writestr(name, data)
    _reseal(export)
    assert index.stat().st_size < 100_000
    err = serve_refused(export, capsys)
    assert "index.npz: member 'ids.npy' is compressed" in err
    # stored, but its header claims 4 GiB
    huge = _npy({"descr": "<u8", "fortran_order": False, "shape": (1 << 29,)}, b"")
    with zipfile.ZipFile(index, "w", zipfile.ZIP_STORED) as z:
        for name, data in {**members, "ids.npy": huge}.items():
            z.writestr(name, data)
    _reseal(export)
    assert "describes 4294967296 bytes" in serve_refused(export, capsys)


def test_compressed_dense_pt_is_refused(export) -> None:
    dense = _step(export) / "dense.pt"
    with zipfile.ZipFile(dense) as z:
        members = [(m, z.read(m)) for m in z.infolist()]
    with zipfile.ZipFile(dense, "w", zipfile.ZIP_DEFLATED) as z:
        for m, data in members:
            z.writestr(m.filename, data)
    _reseal(export)
    with pytest.raises(UnsafeFileError, match=r"dense\.pt: member .* is compressed"):
        load_model(export)


@pytest.mark.parametrize("where", ["dense", "table"])
def test_nan_weights_are_refused(export, where) -> None:
    step = _step(export)
    assert json.loads((step / "meta.json").read_text()).get("finite") is True
    if where == "dense":
        state = torch.load(step / "dense.pt", weights_only=True)
        next(v for k, v in state["model"].items() if k.endswith("weight"))[0, 0] = float("nan")
        torch.save(state, step / "dense.pt")
    else:
        rows = next(step.glob("tables/*/rows.f32"))
        data = np.fromfile(rows, dtype=np.float32)
        data[3] = np.inf
        data.tofile(rows)
    _reseal(export)
    with pytest.raises(UnsafeFileError, match="non-finite weights in (dense|table)") as exc:
        load_model(export)
    assert str(exc.value).startswith(str(export / "model"))


def test_feature_names_cannot_leave_the_ssd_folder(model_and_kwargs, tmp_path) -> None:
    """``keep_ssd=True`` with ``../`` in a feature name: refused, and nothing outside written."""
    model, kwargs = model_and_kwargs
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    exp = export_model(tmp_path / "exp", model, example_spec(), kwargs)
    meta = json.loads((exp / "serving.json").read_text())
    meta["model_kwargs"]["sparse_features"][0] = "../../../../../../" + str(victim.with_suffix(""))
    meta["model_kwargs"]["store"]["StoreConfig"].update(host_rows=64, ssd_dir=str(tmp_path / "ssd"))
    (exp / "serving.json").write_text(json.dumps(meta))
    write_manifest(exp)
    with pytest.raises((StoreError, UnsafeFileError), match="leave"):
        load_model(exp, keep_ssd=True)
    assert victim.read_text() == "precious" and not (tmp_path / "ssd").exists()


def test_dicm_vectors_are_copied_not_trusted_as_a_mapping(tmp_path) -> None:
    vectors = np.random.default_rng(0).standard_normal((50, 6)).astype(np.float32)
    ids = np.arange(100, 150, dtype=np.uint64)
    ImageVectorStore.create(tmp_path / "img", ids, 6, lambda c: vectors[(np.asarray(c) - 100).astype(int)])
    store = ImageVectorStore.open(tmp_path / "img", copy=True)
    npy = tmp_path / "img" / "vectors.npy"
    npy.write_bytes(npy.read_bytes()[:200])  # truncated after it was opened (a mapping would SIGBUS)
    got, unknown = store.get(ids)
    assert not unknown.any() and np.array_equal(got, vectors)
    with pytest.raises(Exception, match="vectors.npy"):
        ImageVectorStore.open(tmp_path / "img", copy=True)


# -- A7: signed exports ----------------------------------------------------------------------
def test_signed_export_refuses_any_edit_without_the_key(model_and_kwargs, tmp_path, monkeypatch, capsys) -> None:
    model, kwargs = model_and_kwargs
    exp = export_model(tmp_path / "signed", model, example_spec(), kwargs, signing_key=KEY)
    load_model(exp, signing_key=KEY)  # verifies
    load_model(exp)  # sha256 mode still reads it
    spec = json.loads((exp / "spec.json").read_text())
    spec["dense"] = list(reversed(spec["dense"]))
    (exp / "spec.json").write_text(json.dumps(spec))
    write_manifest(exp)  # regenerated by whoever edited the spec: unsigned
    load_model(exp)  # the sha256 manifest alone cannot tell (corruption only)
    with pytest.raises(ManifestError, match="not signed"):
        load_model(exp, signing_key=KEY)
    write_manifest(exp, key=b"another-key-of-the-attacker-000")
    with pytest.raises(ManifestError, match="signature does not match"):
        load_model(exp, signing_key=KEY)
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY + b"\n")
    assert "signature does not match" in serve_refused(exp, capsys, "--signing-key-file", str(key_file))
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    assert "signature does not match" in serve_refused(exp, capsys)
    monkeypatch.setenv(KEY_ENV, "short")
    assert "at least 16 bytes" in serve_refused(exp, capsys)
