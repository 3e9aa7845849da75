"""Training state under faults: a resume with other settings is refused up
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

from fbrapids.datasets.synthetic.generate import generate
from fbrapids.errors import CheckpointError, CheckpointMismatchError, FbrapidsError
from fbrapids.trainers import DLRM, StoreConfig, fit, load_checkpoint

from _trainer_helpers import FEATURES, ctr_frame, same_bits, small_model, snapshot, tiered

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _stream(df, batch_size=32, seed=7, dense=("d0", "d1"), sparse=tuple(FEATURES)):
    return df.fbx.stream(label="click", dense=list(dense), sparse=list(sparse), batch_size=batch_size,
                         shuffle_buffer=256, seed=seed, group="user")


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
    return subprocess.run([sys.executable, "-m", "fbrapids.app.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_demo_resume_with_other_settings_exits_2_with_one_line_before_any_work(tmp_path) -> None:
    from fbrapids.app.demo import run_demo

    data, work = tmp_path / "data", tmp_path / "work"
    run_demo(rows=300, data_dir=data, work_dir=work, batch_size=64, progress=False)  # the run to continue
    generate(300, tmp_path / "data1", seed=1, progress=None)  # other data
    with pytest.raises(CheckpointMismatchError, match="model: 'dlrm' in the checkpoint, 'wide_deep' in this run"):
        run_demo(rows=300, data_dir=data, work_dir=work, batch_size=64, model="wide_deep", resume=True,
                 progress=False)
    fresh = tmp_path / "fresh-kernel-cache"  # a refused run compiles nothing: no planning, no extraction
    common = ["--rows", "300", "--work-dir", str(work), "--resume"]
    cases = [(["--data-dir", str(data), "--batch-size", "32"], ["batch_size: 64 in the checkpoint, 32 in this run"]),
             (["--data-dir", str(tmp_path / "data1"), "--batch-size", "64", "--seed", "1"],
              ["seed: 0 in the checkpoint, 1 in this run", "data: fingerprint "])]
    for extra, named in cases:
        got = _cli("demo", *common, *extra, cache=fresh)
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
from fbrapids.trainers.checkpoint.model_state import weights_digest
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
    from fbrapids.trainers.checkpoint.directory import clean_partial, newest_verified
    from fbrapids.trainers.checkpoint.model_state import weights_digest

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
    from fbrapids.trainers.checkpoint.directory import latest_checkpoint

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
        assert str(run["error"]).startswith(f"{root / 'latest'} is a directory")
        assert not (root / "step-0000000005").exists()
        return
    res = run["value"]
    assert res.resumed_from == root / "step-0000000004" and res.steps == 5  # the newest verified one, logged
    assert f"{root / 'latest'} is {what}" in caplog.text
    assert (root / "latest").is_file() and latest_checkpoint(root).name == "step-0000000005"  # a regular one again


def test_a_fifo_inside_a_checkpoint_is_refused_unread(trained, tmp_path, monkeypatch) -> None:
    from fbrapids.errors import ManifestError
    from fbrapids.trainers.checkpoint.directory import verify_checkpoint

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


@pytest.mark.parametrize("content, named", [
    ([torch.ones(2)], "holds a list, not the dict of a checkpoint's dense state"),
    ({"model": {}, "torch_rng": torch.get_rng_state()}, "has no 'step' entry"),
])
def test_a_dense_file_of_another_shape_is_a_checkpoint_error_naming_it(trained, tmp_path, monkeypatch, content,
                                                                       named) -> None:
    """(mypy's index check found it: ``state["model"]`` on whatever ``torch.load`` returned was a
    TypeError or KeyError with no file named)"""
    root = tmp_path / "ckpt"
    shutil.copytree(trained, root)
    dense = root / "step-0000000004" / "dense.pt"
    torch.save(content, dense)
    monkeypatch.setenv("FBRAPIDS_VERIFY", "0")  # (verification would name the changed file first)
    with pytest.raises(CheckpointError, match=named) as err:
        load_checkpoint(small_model(tiered(tmp_path / "ssd")), None, root / "step-0000000004")
    assert str(dense) in str(err.value) and "\n" not in str(err.value)


# -- B4: the SSD tier's folder is one process's, and its rows are checked on the way back -------
_HOLD_SSD = """
import sys
import numpy as np
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore
s = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16, host_rows=16, ssd_dir=sys.argv[1], device="cpu"), "t")
ids = np.arange(200, dtype=np.uint64)
s.assign(ids, np.arange(800, dtype=np.float32).reshape(200, 4))
print("READY", flush=True)
sys.stdin.readline()
print("SAME" if np.array_equal(s.weights(ids), np.arange(800, dtype=np.float32).reshape(200, 4)) else "CHANGED",
      flush=True)
"""


def _tiered_store(ssd: Path, name: str = "t"):
    from fbrapids.trainers.sparse import TieredEmbeddingStore

    return TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=16, host_rows=16, ssd_dir=str(ssd), device="cpu"), name)


def test_a_second_process_on_the_same_ssd_folder_is_refused_naming_it(tmp_path) -> None:
    from fbrapids.errors import SsdDirLockedError

    proc = subprocess.Popen([sys.executable, "-c", _HOLD_SSD, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert proc.stdout.readline().strip() == "READY"
        with pytest.raises(SsdDirLockedError) as err:
            _tiered_store(tmp_path)
        assert str(tmp_path / "t") in str(err.value) and f"PID {proc.pid}" in str(err.value)
        assert err.value.pid == proc.pid and isinstance(err.value, FbrapidsError)
        other = _tiered_store(tmp_path, "u")  # another table's folder (e.g. another rank's): no conflict
        other.assign(np.arange(40, dtype=np.uint64), np.ones((40, 4), np.float32))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "SAME"  # the holder's live file was not touched
    finally:
        proc.kill()
        proc.wait()
    _tiered_store(tmp_path).assign(np.arange(3, dtype=np.uint64), np.ones((3, 4), np.float32))  # released on exit


def _hashes_oracle(rows: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The page-checksum row hash as the ssd docstring defines it, in Python integers."""
    out = []
    for row, gi in zip(rows, g):
        words = [int(w) for w in row.astype(np.float32).view(np.uint32)]
        a = sum(w * ((((j + 1) * 0x9E3779B1) % 2**32) | 1) for j, w in enumerate(words)) % 2**32
        b = sum(w * ((((j + 1) * 0x85EBCA77) % 2**32) | 1) for j, w in enumerate(words)) % 2**32
        out.append((b * 2**32 + a) * (2 * int(gi) + 1) % 2**64)
    return np.array(out, dtype=np.uint64)


def test_the_row_hash_matches_its_definition() -> None:
    from fbrapids.trainers.sparse.hashmap import row_hashes

    rng = np.random.default_rng(1)
    rows = rng.normal(size=(7, 5)).astype(np.float32)
    g = rng.integers(0, 2**40, 7)
    assert row_hashes(rows, g).tolist() == _hashes_oracle(rows, g).tolist()


def test_rows_written_from_outside_are_caught_on_the_way_back_naming_file_and_page(tmp_path) -> None:
    from fbrapids.errors import TierFileError
    from fbrapids.trainers.sparse.ssd import SsdTier

    tier = SsdTier(tmp_path, width=4)
    page_rows = tier.page_rows
    assert page_rows == 1024 // 16
    g = np.array([3, 5, 70, 600], dtype=np.int64)
    tier.write(g, np.arange(16, dtype=np.float32).reshape(4, 4))
    assert tier.read(np.array([5, 70, 71])).tolist() == [[4, 5, 6, 7], [8, 9, 10, 11], [0, 0, 0, 0]]
    assert tier.pages_checked == 2  # pages 0 and 1 (rows 0..63, 64..127)
    assert tier.read(np.arange(0, 640)).shape == (640, 4) and tier.pages_checked == 2 + 10
    # plausible floats written over row 600 (page 9) by another process
    subprocess.run([sys.executable, "-c", "import sys, struct; f = open(sys.argv[1], 'r+b'); f.seek(600 * 16); "
                    "f.write(struct.pack('4f', 0.5, -0.25, 0.125, 1.0))", str(tier.path)], check=True)
    assert tier.read(np.array([5, 70])).tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]  # other pages: fine
    with pytest.raises(TierFileError, match=r"page 9 \(rows 576..639, bytes 9216..10239\) does not match") as err:
        tier.read(np.array([5, 601]))
    assert str(tier.path) in str(err.value) and err.value.path == str(tier.path)
    tier.write(np.array([600]), np.full((1, 4), 7.0, np.float32))  # rewriting the row keeps the page suspect
    with pytest.raises(TierFileError, match="page 9"):
        tier.read(np.array([600]))


def test_a_store_and_its_checkpoint_refuse_outside_rows(tmp_path) -> None:
    from fbrapids.errors import TierFileError

    store = _tiered_store(tmp_path / "ssd")
    for start in range(0, 200, 8):  # spill most rows to the SSD file
        store.lookup(np.arange(start, start + 8, dtype=np.uint64), requires_grad=False)
        store.end_step()
    store.save(tmp_path / "good")  # every page read back and checked
    checked = store.tiers.ssd.pages_checked
    assert checked >= -(-200 // store.tiers.ssd.page_rows)
    path = tmp_path / "ssd" / "t" / "rows.f32"
    with open(path, "r+b") as f:  # plausible floats over row 2's embedding, as an outside writer would
        f.seek(2 * store.config.width * 4)
        f.write(np.full(4, 0.01, np.float32).tobytes())
    with pytest.raises(TierFileError, match=rf"{path}.* page 0 "):
        store.lookup(np.arange(0, 8, dtype=np.uint64))
    with pytest.raises(TierFileError, match="page 0"):
        store.save(tmp_path / "bad")  # never checkpointed
    assert store.tiers.ssd.pages_checked > checked
