"""Training state under faults (issue 25 B): a resume with other settings is refused up
front naming them; a same-step re-checkpoint killed between its renames keeps a complete
copy; a non-regular ``latest`` pointer is a one-line error, never a hang; the SSD tier's
folder is locked across processes and its rows carry page checksums."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from _trainer_helpers import FEATURES, ctr_frame, same_bits, small_model, snapshot, tiered
from fbrapids.datagen import generate
from fbrapids.errors import CheckpointError, CheckpointMismatchError, FbrapidsError
from fbrapids.trainers import DLRM, StoreConfig, fit, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _stream(df, batch_size=32, seed=7, dense=("d0", "d1"), sparse=tuple(FEATURES)):
    return df.fbx.stream(label="click", dense=list(dense), sparse=list(sparse), batch_size=batch_size,
                         shuffle_window=256, seed=seed, group="user")


# -- B3: a resume with other settings ---------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A checkpoint root of 4 steps of the small DLRM (batch 32, seed 7, dense d0, d1)."""
    root = tmp_path_factory.mktemp("b3") / "ckpt"
    torch.set_num_threads(1)
    fit(small_model(tiered(root.parent / "ssd")), _stream(ctr_frame()), max_steps=4, checkpoint_dir=root,
        progress=False)
    return root


@pytest.mark.parametrize("change, named", [
    (dict(batch_size=16), "batch_size: 32 in the checkpoint, 16 in this run"),
    (dict(seed=8), "seed: 7 in the checkpoint, 8 in this run"),
    (dict(dense=("d1", "d0")), "dense: the same 2 names in another order (position 0: 'd0' in the checkpoint"),
    (dict(sparse=("user", "ad", "toks")), "sparse: the same 3 names in another order"),
])
def test_a_resume_with_other_stream_settings_is_refused_before_anything_is_loaded(trained, tmp_path, change,
                                                                                     named) -> None:
    model = small_model(tiered(tmp_path / "ssd"), seed=5)
    before = snapshot(model)
    with pytest.raises(CheckpointMismatchError) as err:
        fit(model, _stream(ctr_frame(), **change), max_steps=8, checkpoint_dir=trained, progress=False)
    msg = str(err.value)
    assert named in msg and str(trained) in msg and "\n" not in msg
    assert same_bits(before, snapshot(model)) == []  # nothing was loaded, nothing trained
    assert sorted(p.name for p in trained.iterdir() if p.name.startswith("step-")) == ["step-0000000004"]


def test_another_model_or_embedding_dim_is_refused_naming_it_not_a_torch_traceback(trained, tmp_path) -> None:
    torch.manual_seed(0)
    wider = DLRM(2, FEATURES, embedding_dim=4, bottom_mlp=[16], top_mlp=[16], store=tiered(tmp_path / "a"))
    with pytest.raises(CheckpointMismatchError, match=r"tables: 'emb_l/ad' 8 in the checkpoint, 4 in this run"):
        fit(wider, _stream(ctr_frame()), max_steps=8, checkpoint_dir=trained, progress=False)
    with pytest.raises(CheckpointMismatchError, match=r"tables: 'emb_l/ad' 8 in the checkpoint, 4 in this run"):
        load_checkpoint(wider, None, trained)  # the API load (export's) too
    other = DLRM(2, FEATURES[:2], embedding_dim=8, bottom_mlp=[16], top_mlp=[16], store=tiered(tmp_path / "b"))
    with pytest.raises(CheckpointMismatchError, match=r"'emb_l/toks' 8 in the checkpoint, absent in this run"):
        load_checkpoint(other, None, trained)


def test_the_same_settings_resume(trained, tmp_path) -> None:
    model = small_model(tiered(tmp_path / "ssd"), seed=5)
    shutil.copytree(trained, tmp_path / "ckpt")
    res = fit(model, _stream(ctr_frame()), max_steps=6, checkpoint_dir=tmp_path / "ckpt", progress=False)
    assert res.resumed_from is not None and res.resumed_from.name == "step-0000000004" and len(res.losses) == 2


def _cli(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **({"FBRAPIDS_KERNEL_CACHE": str(cache)} if cache else {}))
    return subprocess.run([sys.executable, "-m", "fbrapids.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_demo_resume_with_other_settings_exits_2_with_one_line_before_any_work(tmp_path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    common = ["--rows", "300", "--data-dir", str(data), "--work-dir", str(work)]
    first = _cli("demo", *common, "--batch-size", "64")  # the usual kernel cache
    assert first.returncode == 0, first.stderr
    generate(300, tmp_path / "data1", seed=1, progress=None)  # other data
    fresh = tmp_path / "fresh-kernel-cache"  # a refused run compiles nothing: no planning, no extraction
    cases = [(["--batch-size", "32"], ["batch_size: 64 in the checkpoint, 32 in this run"]),
             (["--batch-size", "64", "--model", "wide_deep"], ["model: 'dlrm' in the checkpoint, 'wide_deep'"]),
             (["--batch-size", "64", "--seed", "1", "--data-dir", str(tmp_path / "data1")],
              ["seed: 0 in the checkpoint, 1 in this run", "data: fingerprint "])]
    for extra, named in cases:
        got = _cli("demo", *common, *extra, "--resume", cache=fresh)
        lines = got.stderr.strip().splitlines()
        assert got.returncode == 2 and len(lines) == 1, got.stderr
        assert lines[0].startswith("fbrapids demo: cannot resume from ") and all(n in lines[0] for n in named), lines
        assert not list(fresh.glob("*.so"))


# -- B5: a same-step re-checkpoint killed between its renames --------------------------------
_RECHECKPOINT = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
import torch
from _trainer_helpers import small_model, tiered
from fbrapids.trainers import save_checkpoint
from fbrapids.trainers.fit import weights_digest
root, point = sys.argv[1], sys.argv[2]
model = small_model(tiered(root + "-ssd"))
save_checkpoint(model, None, root, step=2)
print("FIRST", weights_digest(os.path.join(root, "step-0000000002")), flush=True)
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.5)
print("SECOND", weights_digest(save_checkpoint(model, None, root + "-copy", 2)), flush=True)

def kill_at(event, args):  # a real SIGKILL at the chosen point of save_checkpoint's replacement of step-2
    name = lambda p: os.path.basename(str(p))
    hit = {"before-first-rename": event == "os.rename" and name(args[0]) == "step-0000000002",
           "between-renames": event == "os.rename" and name(args[0]).startswith(".tmp-step-0000000002")
                              and name(args[1]) == "step-0000000002",
           "removing-old": event == "shutil.rmtree" and name(args[0]).startswith(".old-step-0000000002")}[point]
    if hit:
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(kill_at)
save_checkpoint(model, None, root, step=2)
print("UNREACHABLE", flush=True)
"""


def _killed_recheckpoint(root: Path, point: str) -> dict[str, str]:
    got = subprocess.run([sys.executable, "-c", _RECHECKPOINT, str(root), point, str(ROOT / "tests")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert got.returncode == -9 and "UNREACHABLE" not in got.stdout, got.stderr[-2000:]
    return dict(line.split() for line in got.stdout.splitlines())


@pytest.mark.parametrize("point, leftovers, kept", [
    ("before-first-rename", {"step-0000000002", ".tmp-"}, "FIRST"),
    ("between-renames", {".old-", ".tmp-"}, "SECOND"),  # step-2 itself is gone: both copies must not be lost
    ("removing-old", {"step-0000000002", ".old-"}, "SECOND"),
])
def test_a_recheckpoint_killed_at_each_point_keeps_a_complete_copy(tmp_path, point, leftovers, kept) -> None:
    from fbrapids.trainers.checkpoint import clean_partial, newest_verified
    from fbrapids.trainers.fit import weights_digest

    root = tmp_path / "ckpt"
    digests = _killed_recheckpoint(root, point)
    on_disk = {p.name if p.name.startswith("step-") else p.name[:5] for p in root.iterdir() if p.is_dir()}
    assert on_disk == leftovers  # exactly the state a kill there leaves
    if point == "between-renames":  # the same state with the new copy incomplete: the previous copy returns
        other = tmp_path / "other"
        shutil.copytree(root, other)
        [tmp] = other.glob(".tmp-step-*")
        (tmp / "MANIFEST.json").unlink()
        clean_partial(other)
        assert newest_verified(other).name == "step-0000000002"
        assert weights_digest(other / "step-0000000002") == digests["FIRST"]
        assert not list(other.glob(".*-step-*"))
    res = fit(small_model(tiered(tmp_path / "ssd")), _stream(ctr_frame()), max_steps=2, checkpoint_dir=root,
              progress=False)  # the next run: its cleanup, then the resume
    assert res.resumed_from == root / "step-0000000002" and not list(root.glob(".*-step-*"))
    assert weights_digest(root / "step-0000000002") == digests[kept]


# -- B7: only regular files are read as pointers ------------------------------------------------
def _in_thread(fn, timeout: float = 60.0):
    """``fn()`` on a thread: its result or exception, failing the test if it blocks."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} blocked for {timeout} s"
    return out


@pytest.mark.parametrize("kind", ["FIFO", "directory", "device"])
def test_a_non_regular_latest_pointer_is_named_and_never_read(trained, tmp_path, kind, caplog) -> None:
    from fbrapids.trainers.checkpoint import latest_checkpoint

    root = tmp_path / "ckpt"
    shutil.copytree(trained, root)
    (root / "latest").unlink()
    {"FIFO": lambda p: os.mkfifo(p), "directory": lambda p: p.mkdir(),
     "device": lambda p: p.symlink_to("/dev/zero")}[kind](root / "latest")
    got = _in_thread(lambda: latest_checkpoint(root))
    what = {"FIFO": "a FIFO", "directory": "a directory", "device": "a device"}[kind]
    assert isinstance(got.get("error"), CheckpointError)
    assert str(got["error"]).startswith(f"{root / 'latest'} is {what}, not a regular file")
    run = _in_thread(lambda: fit(small_model(tiered(tmp_path / "ssd")), _stream(ctr_frame()), max_steps=5,
                                 checkpoint_dir=root, progress=False))
    if kind == "directory":  # no pointer can be renamed over it: refused before training, naming it
        assert isinstance(run.get("error"), CheckpointError) and "\n" not in str(run["error"])
        assert str(run["error"]).startswith(f"{root / 'latest'} is a directory") and not (root / "step-0000000005").exists()
        return
    res = run["value"]
    assert res.resumed_from == root / "step-0000000004" and res.steps == 5  # the newest verified one, logged
    assert f"{root / 'latest'} is {what}" in caplog.text
    assert (root / "latest").is_file() and latest_checkpoint(root).name == "step-0000000005"  # a regular one again


def test_a_fifo_inside_a_checkpoint_is_refused_unread(trained, tmp_path, monkeypatch) -> None:
    from fbrapids.errors import ManifestError
    from fbrapids.trainers.checkpoint import verify_checkpoint

    root = tmp_path / "ckpt"
    shutil.copytree(trained, root)
    [meta] = (root / "step-0000000004" / "tables").glob("*ad/meta.json")
    meta.unlink()
    os.mkfifo(meta)
    for verify in ("1", "0"):  # also with verification off
        monkeypatch.setenv("FBRAPIDS_VERIFY", verify)
        got = _in_thread(lambda: verify_checkpoint(root / "step-0000000004"))
        assert isinstance(got.get("error"), ManifestError) and f"{meta} is a FIFO" in str(got["error"])
        got = _in_thread(lambda: load_checkpoint(small_model(tiered(tmp_path / f"s{verify}")), None,
                                                 root / "step-0000000004"))
        assert isinstance(got.get("error"), ManifestError)
