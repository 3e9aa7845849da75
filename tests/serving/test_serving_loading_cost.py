"""An export's sizes are checked before anything is allocated (a crafted
``serving.json`` of 200,000 features is refused in one line under an address-space limit), a
signed export's JSON is read once and what was verified is what is used (a swap after the
check is refused, never served), and :func:`load_model` is read-only like the server (its
scores equal the server's on unseen ids, and no table grows)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

from fbrapids.errors import ManifestError  # noqa: E402
from fbrapids.files.manifest import write_manifest  # noqa: E402
from fbrapids.serving import export as export_module, export_model, load_model  # noqa: E402
from fbrapids.serving.example import example_spec  # noqa: E402
from fbrapids.trainers import WideAndDeep  # noqa: E402
from fbrapids.trainers.sparse import StoreConfig  # noqa: E402

checkpoint_module = importlib.import_module("fbrapids.trainers.checkpoint.model_state")  # where load_checkpoint looks newest_verified up
KEY = b"export-signing-key-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


def tiny_export(path: Path, signing_key: bytes | None = None) -> Path:
    """A two-table export (few files: each manifest check is quick)."""
    from fbrapids import ops
    from fbrapids.serving.spec import ServingSpec

    spec = ServingSpec(schema={"u": "int64", "a": "int64", "p": "float64"}, request_columns=["u"],
                       item_columns=["a", "p"], item_key="a", request_features={"uh": ops.hash_bucket("u", 100)},
                       dense=["p"], sparse=["uh", "a"])
    kw = dict(dense_dim=1, sparse_features=["uh", "a"], embedding_dim=4, deep_mlp=[4], store=StoreConfig(cache_rows=32))
    torch.manual_seed(0)
    model = WideAndDeep(**kw)
    for store in model.stores().values():  # a few rows in every table
        store.lookup(np.arange(20), requires_grad=False)
    return export_model(path, model.eval(), spec, kw, signing_key=signing_key)


def test_a_spec_of_200000_features_is_refused_in_one_line_under_an_address_space_limit(tmp_path):
    """The loader runs in a subprocess whose address space is capped at what its imports
    mapped plus 1 GiB (``RLIMIT_AS``): sizing 200,000 stores took 19 GB before the fix."""
    d = tiny_export(tmp_path / "exp")
    meta = json.loads((d / "serving.json").read_text())
    meta["model_kwargs"]["sparse_features"] = [f"f{i}" for i in range(200_000)]
    (d / "serving.json").write_text(json.dumps(meta))
    write_manifest(d)  # resealed, as anyone who can write the folder can
    script = textwrap.dedent(f"""
        import json, resource, sys
        from fbrapids.serving import load_model
        from fbrapids.errors import FbrapidsError
        def vm(field):
            return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith(field))
        base = vm("VmSize:")
        resource.setrlimit(resource.RLIMIT_AS, (base + (1 << 30), resource.RLIM_INFINITY))
        try:
            load_model({str(d)!r})
            out = {{"error": None}}
        except FbrapidsError as exc:
            out = {{"error": str(exc), "type": type(exc).__name__}}
        except MemoryError:
            out = {{"error": "MemoryError"}}
        out["peak_over_base"] = vm("VmPeak:") - base
        print(json.dumps(out))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["type"] == "UnsafeFileError", out
    assert "\n" not in out["error"] and "serving.json" in out["error"] and "200000" in out["error"], out
    assert out["peak_over_base"] < 1 << 30, out


def _edited(d: Path, rel: str) -> bytes:
    """An edit of export file ``rel`` that still parses (a local attacker's version)."""
    path = d / rel
    if rel == "spec.json":
        spec = json.loads(path.read_bytes())
        return json.dumps({**spec, "dense": list(reversed(spec["dense"]))}).encode()
    if rel.endswith("dense.pt"):
        import io

        state = torch.load(path, weights_only=True)
        state["model"] = {k: (v + 1 if v.is_floating_point() else v) for k, v in state["model"].items()}
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()
    return (np.frombuffer(path.read_bytes(), dtype=np.float32) + 1).tobytes()  # rows.f32: every weight moved


@pytest.mark.parametrize("target", ["spec.json", "dense.pt", "rows.f32"])
def test_a_file_swapped_after_the_check_is_refused_never_loaded(tmp_path, monkeypatch, target):
    """The attacker's best moment, every time: ``spec.json``, the checkpoint's ``dense.pt``
    or a table's ``rows.f32`` is replaced by an atomic rename right after the last check
    before it is read (the signed manifest's; the checkpoint's own).  200 tries for the spec,
    25 for each checkpoint file: each is refused naming the file, none loads the
    edited file (the checkpoint was read again by path after the check before the
    fix); without the swap the export loads its own files."""
    d = tiny_export(tmp_path / "exp", signing_key=KEY)
    rel = (target if target == "spec.json" else
           max((p.relative_to(d).as_posix() for p in (d / "model").rglob(target)), key=lambda r: (d / r).stat().st_size))
    original = (d / rel).read_bytes()
    edited = _edited(d, rel)
    assert edited != original
    # the last check before the file is read: the export's manifest for spec.json, the
    # checkpoint's own manifest (load_checkpoint's newest_verified) for the checkpoint's files
    module, name = (export_module, "checked_manifest") if target == "spec.json" else (checkpoint_module, "newest_verified")
    real = getattr(module, name)
    tries = {"n": 0}

    def check_then_swap(*args, **kwargs):
        checked = real(*args, **kwargs)
        tries["n"] += 1
        (d / "swap.tmp").write_bytes(edited)
        os.replace(d / "swap.tmp", d / rel)  # atomic, as a local attacker would
        return checked

    monkeypatch.setattr(module, name, check_then_swap)
    n = 200 if target == "spec.json" else 25  # the swap is at the worst moment every time: deterministic
    for _ in range(n):
        (d / rel).write_bytes(original)
        with pytest.raises(ManifestError, match=f"{Path(rel).name}: changed since its manifest was checked"):
            load_model(d, signing_key=KEY)
    assert tries["n"] == n
    monkeypatch.setattr(module, name, real)
    (d / rel).write_bytes(original)
    model, spec = load_model(d, signing_key=KEY)
    assert spec.dense == json.loads((d / "spec.json").read_bytes())["dense"]


def test_load_model_is_read_only_and_scores_as_the_server(model_and_kwargs, training_side, tmp_path):
    """Offline scoring of unseen ids (the training-side ``model.predict``) with the loaded
    model adds no table row and equals the served scores within the documented 1e-6;
    ``admit_new_ids=True`` is the explicit way to admit them."""
    from fbrapids.serving import load_scorer
    from fbrapids.serving.example import example_catalogue, request_records

    model, kwargs = model_and_kwargs
    d = export_model(tmp_path / "exp", model, example_spec(), kwargs)
    offline, spec = load_model(d)
    server = load_scorer(d)
    rows_before = {k: len(s) for k, s in offline.stores().items()}
    users, ads = example_catalogue(n_users=50, n_ads=300, seed=3)
    for seed in range(4):
        request, items = request_records(users, ads, 30, seed=seed)
        request = {**request, "user_id": 10**9 + seed}  # ids no training batch admitted
        items = [{**it, "ad_id": 10**9 + 7 * j + seed} for j, it in enumerate(items)]
        off = training_side(offline, spec, request, items)  # the training side's model.predict
        np.testing.assert_allclose(off, server.score(request, items), atol=1e-6, rtol=0)
    assert {k: len(s) for k, s in offline.stores().items()} == rows_before
    admitting, _ = load_model(d, admit_new_ids=True)
    assert not any(s.read_only for s in admitting.stores().values())
