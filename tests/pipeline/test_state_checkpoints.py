"""Checkpoints that prove themselves, non-finite training stops, one run per dir, preflight.

Every fault is injected for real: bytes overwritten in the files on disk, a NaN written
into a table row, a second process holding the work dir, a child process whose file size
limit (RLIMIT_FSIZE) makes every write fail.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fbrapids.errors import CheckpointError, ManifestError, NonFiniteError, PreflightError, WorkDirLockedError
from fbrapids.files.manifest import MANIFEST, read_manifest, verify_manifest
from fbrapids.runs.workdir import LOCK_NAME, preflight
from fbrapids.trainers import fit, load_checkpoint
from fbrapids.trainers.checkpoint.directory import (
    CHECKPOINT_DIGEST,
    checkpoints,
    latest_checkpoint,
    newest_verified,
    prune,
)

from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot, tiered

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REPO = Path(__file__).resolve().parents[2]


def _train(tmp: Path, root: Path, steps: int, every: int, keep: int | None = None, seed: int = 0):
    model = small_model(tiered(tmp / f"ssd-{steps}-{seed}"), seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    res = fit(model, batches(ctr_frame()), optimizer=opt, max_steps=steps, checkpoint_dir=root,
              checkpoint_every=every, keep_checkpoints=keep, progress=False)
    return model, opt, res


def _flip(path: Path, offset: int = 0, n: int = 64) -> None:
    data = bytearray(path.read_bytes())
    at = min(offset, max(0, len(data) - n))
    for i in range(at, min(len(data), at + n)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One checkpoint at step 6, kept pristine; tests copy it before corrupting."""
    tmp = tmp_path_factory.mktemp("saved")
    torch.set_num_threads(1)
    _train(tmp, tmp / "ckpt", 6, 6)
    return latest_checkpoint(tmp / "ckpt")


def test_every_file_of_a_checkpoint_is_in_its_manifest(saved):
    accept = (CHECKPOINT_DIGEST,)
    files = set(verify_manifest(saved, accept=accept))
    assert {"dense.pt", "meta.json"} <= files and files == set(read_manifest(saved, accept=accept)["files"])
    assert {f for f in files if f.startswith("tables/")} == {
        str(p.relative_to(saved)) for p in (saved / "tables").rglob("*") if p.is_file()}
    assert len(files) == 2 + 3 * 3  # dense.pt, meta.json, and rows/index/meta of each of the 3 tables


@pytest.mark.parametrize("how", ["flip", "nan4k", "truncate"])
def test_corrupt_bytes_in_each_checkpoint_file_name_that_file(saved, tmp_path, how):
    files = sorted(p.relative_to(saved) for p in saved.rglob("*") if p.is_file() and p.name != MANIFEST)
    assert len(files) == 11
    model = small_model(tiered(tmp_path / "ssd-load"), seed=5)
    for rel in files:
        bad = tmp_path / str(rel).replace("/", "_")
        shutil.copytree(saved, bad)
        target = bad / rel
        if how == "flip":
            _flip(target, offset=target.stat().st_size // 2)
        elif how == "nan4k":  # 4 KiB of NaN floats written over the middle, the file's size unchanged
            size = target.stat().st_size
            with open(target, "r+b") as f:
                f.seek(max(0, size // 2 - 2048) // 4 * 4)
                f.write(np.full(min(1024, size // 4), np.nan, np.float32).tobytes()[: size])
        else:
            with open(target, "r+b") as f:
                f.truncate(target.stat().st_size // 2)
        with pytest.raises(ManifestError, match=str(target).replace(".", r"\.")):
            load_checkpoint(model, None, bad)


def test_missing_or_garbled_manifest_and_empty_latest_are_clear(saved, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(saved, root / saved.name)
    (root / saved.name / MANIFEST).write_text("{not json")
    model = small_model(tiered(tmp_path / "ssd"), seed=5)
    with pytest.raises(CheckpointError, match="MANIFEST.json: not a crc32 or sha256 manifest"):
        load_checkpoint(model, None, root)
    (root / saved.name / MANIFEST).unlink()
    with pytest.raises(ManifestError, match="MANIFEST.json: no manifest"):
        load_checkpoint(model, None, root / saved.name)
    (root / "latest").write_text("")
    with pytest.raises(CheckpointError, match="latest is empty"):
        latest_checkpoint(root)


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(tmp_path, caplog):
    root = tmp_path / "ckpt"
    _train(tmp_path, root, 8, 4, keep=None)
    assert [p.name for p in checkpoints(root)] == ["step-0000000008", "step-0000000004"]
    # 4 KiB of NaN bytes in one table of the newest checkpoint
    rows = sorted((root / "step-0000000008" / "tables").rglob("rows.f32"))[0]
    with open(rows, "r+b") as f:
        f.write(np.full(1024, np.nan, np.float32).tobytes()[: rows.stat().st_size])
    resumed = small_model(tiered(tmp_path / "ssd-resumed"), seed=77)
    opt = torch.optim.Adam(resumed.parameters(), lr=1e-3)
    with caplog.at_level(logging.WARNING, logger="fbrapids.trainers.checkpoint"):
        res = fit(resumed, batches(ctr_frame()), optimizer=opt, max_steps=12, checkpoint_dir=root,
                  keep_checkpoints=None, progress=False)
    assert res.resumed_from.name == "step-0000000004" and len(res.losses) == 8 - 1  # batch 7: held back (calibration)
    assert "step-0000000008 does not verify" in caplog.text and str(rows) in caplog.text
    # the result is the uninterrupted 12 steps, bit for bit
    straight = small_model(tiered(tmp_path / "ssd-straight"))
    fit(straight, batches(ctr_frame()), optimizer=torch.optim.Adam(straight.parameters(), lr=1e-3), max_steps=12,
        progress=False)
    assert same_bits(snapshot(straight), snapshot(resumed)) == []


def test_no_checkpoint_verifies_is_an_error_not_a_fresh_start(tmp_path):
    root = tmp_path / "ckpt"
    _train(tmp_path, root, 4, 4)
    _flip(root / "step-0000000004" / "dense.pt", 100)
    model = small_model(tiered(tmp_path / "ssd2"))
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints .*/dense.pt: crc32 .* on disk"):
        fit(model, batches(ctr_frame()), max_steps=8, checkpoint_dir=root, progress=False)


class _PoisonAfter:
    """Batches that, after ``k`` of them, overwrite every row of one table with NaN (as a
    corrupted SSD tier would), mid-run."""

    def __init__(self, model, table: str, k: int) -> None:
        self.model, self.table, self.k = model, table, k

    def __iter__(self):
        for i, b in enumerate(batches(ctr_frame())):
            if i == self.k:
                store = self.model.stores()[self.table]
                ids, _ = store.state()
                store.assign(ids, np.full((len(ids), store.config.dim), np.nan, np.float32))
            yield b


def test_a_nan_table_row_stops_training_naming_step_and_table_and_keeps_good_checkpoints(tmp_path):
    root = tmp_path / "ckpt"
    model = small_model(tiered(tmp_path / "ssd"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # the table is poisoned as batch 6 is read: fit reads two batches ahead (where the next one is held back for
    # the calibration, the one after it is prepared), so the lookup of step 5 is the first to read the NaN rows
    with pytest.raises(NonFiniteError, match=r"step 5: loss is nan; non-finite weights in table 'emb_l/ad' "):
        fit(model, _PoisonAfter(model, "emb_l/ad", 6), optimizer=opt, max_steps=20, checkpoint_dir=root,
            checkpoint_every=2, keep_checkpoints=2, progress=False)
    assert [p.name for p in checkpoints(root)] == ["step-0000000004", "step-0000000002"]
    assert newest_verified(root).name == "step-0000000004" and not list(root.glob(".tmp-*"))
    # and that checkpoint holds finite weights: resuming from it trains on
    again = small_model(tiered(tmp_path / "ssd-again"), seed=3)
    res = fit(again, batches(ctr_frame()), max_steps=10, checkpoint_dir=root, progress=False)
    assert res.resumed_from.name == "step-0000000004" and np.isfinite(res.losses).all()


def test_a_checkpoint_is_never_written_from_non_finite_weights(tmp_path):
    root = tmp_path / "ckpt"
    model, opt, _ = _train(tmp_path, root, 2, 2)
    store = model.stores()["emb_l/toks"]
    ids, _ = store.state()
    store.assign(ids[:1], np.full((1, store.config.dim), np.inf, np.float32))
    from fbrapids.trainers import save_checkpoint

    with pytest.raises(NonFiniteError, match="step 3: table 'emb_l/toks' holds"):
        save_checkpoint(model, opt, root, 3)
    assert [p.name for p in checkpoints(root)] == ["step-0000000002"] and not list(root.glob(".tmp-*"))


def test_nan_skip_drops_the_updates_of_bad_batches(tmp_path):
    model = small_model(tiered(tmp_path / "ssd"))
    fit(model, batches(ctr_frame()), max_steps=4, progress=False)
    store = model.stores()["emb_l/toks"]
    ids, _ = store.state()
    store.assign(ids[:1], np.full((1, store.config.dim), np.nan, np.float32))  # one token's row
    res = fit(model, batches(ctr_frame()), max_steps=20, progress=False, nan="skip")
    # batches 7 and 15 are held back for the calibration (fit: every 8th), neither trained nor skipped
    assert res.skipped and len(res.skipped) + len(res.losses) == 20 - 2 and np.isfinite(res.losses).all()
    with pytest.raises(NonFiniteError):
        fit(model, batches(ctr_frame()), max_steps=20, progress=False)


def test_pruning_never_removes_the_newest_verified_checkpoint(tmp_path):
    root = tmp_path / "ckpt"
    _train(tmp_path, root, 6, 2, keep=None)
    for name in ("step-0000000006", "step-0000000004"):
        _flip(root / name / "dense.pt", 200)
    gone = prune(root, keep=1)
    assert [p.name for p in gone] == [] or "step-0000000002" not in [p.name for p in gone]
    assert (root / "step-0000000002").is_dir() and newest_verified(root).name == "step-0000000002"
    assert not (root / "step-0000000004").exists()


_HOLD = """
import sys, time
from fbrapids.runs.workdir import lock_work_dir
with lock_work_dir(sys.argv[1]):
    print("LOCKED", flush=True)
    time.sleep(120)
"""


def test_a_second_run_on_a_held_dir_names_the_holder(tmp_path):
    root = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(root)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert proc.stdout.readline().strip() == "LOCKED"
        model = small_model(tiered(tmp_path / "ssd"))
        with pytest.raises(WorkDirLockedError, match=f"PID {proc.pid} on host {socket.gethostname()}") as exc:
            fit(model, batches(ctr_frame()), max_steps=4, checkpoint_dir=root, progress=False)
        assert exc.value.pid == proc.pid and not checkpoints(root)
    finally:
        proc.kill()
        proc.wait()
    # the holder is gone (killed): the lock went with it, and the next run's start cleans stale debris
    (root / ".tmp-step-0000000009-123").mkdir()
    res = fit(small_model(tiered(tmp_path / "ssd2")), batches(ctr_frame()), max_steps=4, checkpoint_dir=root,
              progress=False)
    assert res.steps == 4 and not list(root.glob(".tmp-*")) and (root / LOCK_NAME).exists()


def test_resume_false_on_a_dir_with_checkpoints_is_an_error_not_a_mix(tmp_path):
    root = tmp_path / "ckpt"
    _train(tmp_path, root, 2, 2)
    with pytest.raises(CheckpointError, match="already holds checkpoints up to step-0000000002"):
        fit(small_model(tiered(tmp_path / "s")), batches(ctr_frame()), max_steps=4, checkpoint_dir=root,
            resume=False, progress=False)


_SHORT_DISK = """
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail with EFBIG instead of killing us
from _trainer_helpers import batches, ctr_frame, small_model
from fbrapids.trainers import fit
from fbrapids.trainers.sparse import StoreConfig
model = small_model(StoreConfig(cache_rows=4096))
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
res = fit(model, batches(ctr_frame()), max_steps=8, checkpoint_dir=sys.argv[1], progress=False)
print("TRAINED", res.steps)
"""


def test_a_short_disk_fails_in_preflight_before_any_training(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SHORT_DISK, str(tmp_path / "ckpt"), str(REPO / "tests")],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert proc.returncode == 1 and "TRAINED" not in proc.stdout
    assert "PreflightError: the checkpoint dir" in proc.stderr and "File too large" in proc.stderr, proc.stderr


def test_preflight_names_the_dir_and_the_sizes(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PreflightError, match="work dir .*/file/work is not writable"):
        preflight({"work dir": tmp_path / "file" / "work"}, {"checkpoint": 1})
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(PreflightError, match=r"GiB free; this run needs about .* \(SSD tier .*, one checkpoint"):
        preflight({"work dir": tmp_path}, {"SSD tier": free, "one checkpoint": 1 << 30})


def test_dense_values_outside_declared_ranges_are_counted_or_an_error(tmp_path):
    from fbrapids.errors import RangeError

    frame = ctr_frame(rows=600)
    frame.loc[[17, 401], "d1"] = [3e21, -7.0]  # d1 is uniform in [0, 1): two corrupt values
    s = frame.fbx.stream(label="click", dense=["d0", "d1"], sparse=["ad"], batch_size=64, ranges={"d1": (0.0, 1.0)})
    assert sum(len(b) for b in s) == 600 and s.out_of_range == {"d1": 2}
    strict = frame.fbx.stream(label="click", dense=["d0", "d1"], sparse=["ad"], batch_size=64,
                              ranges={"d1": (0.0, 1.0)}, strict=True)
    with pytest.raises(RangeError, match=r"partition 0: dense feature 'd1' has 2 value\(s\) outside its declared "
                                         r"range \[0.0, 1.0\], the first at row 17 \(3e\+21\)"):
        list(strict)
    with pytest.raises(RangeError, match="'d9', which is not a dense feature"):
        frame.fbx.stream(label="click", dense=["d0"], sparse=["ad"], ranges={"d9": (0, 1)})


def test_finite_checks_tell_overflowing_finite_values_from_nan_and_inf(tmp_path):
    from fbrapids.trainers.checkpoint.model_state import finite_rows_check
    from fbrapids.trainers.fit import _nonfinite_grads

    big = np.full((256, 4), 3e38, dtype=np.float32)  # finite, but rows . rows overflows float32
    check = finite_rows_check("ad", 7)
    check(big, 0)  # no error: every value is finite
    big[5, 2] = np.nan
    with pytest.raises(NonFiniteError, match=r"step 7: table 'ad' holds 1 non-finite value\(s\) in rows "
                                             r"1024..1279, the first in row 1029"):
        check(big, 1024)

    model = small_model(tiered(tmp_path / "ssd"))
    for p in model.parameters():
        p.grad = torch.full_like(p, 3e38)  # the total norm overflows; every gradient is finite
    assert _nonfinite_grads(model) == []
    name, p = next(iter(model.named_parameters()))
    p.grad.view(-1)[0] = float("inf")
    assert _nonfinite_grads(model) == [name]


def test_a_ctrl_c_while_a_checkpoint_is_committed_waits_for_its_pointer(tmp_path, monkeypatch, stops_heard) -> None:
    """A Ctrl-C that lands between the checkpoint's rename into place and the ``latest``
    pointer's write (here: from the fsync of the folder between the two) is delivered once
    the pointer names the checkpoint; before, the ``KeyboardInterrupt`` left a whole
    checkpoint that no pointer named (a fresh-clone CI run's Ctrl-C test saw it)."""
    import signal

    import fbrapids.trainers.checkpoint.directory as directory

    real_fsync_dir = directory.fsync_dir

    def fsync_then_ctrl_c(path):
        real_fsync_dir(path)
        if Path(path) == tmp_path:  # the root, after the rename: the moment the pointer is still the old one
            os.kill(os.getpid(), signal.SIGINT)

    with directory.checkpoint_dir(tmp_path, step=1) as d:
        (d / "x.bin").write_bytes(b"one")
    monkeypatch.setattr(directory, "fsync_dir", fsync_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        with directory.checkpoint_dir(tmp_path, step=2) as d:
            (d / "x.bin").write_bytes(b"two")
    assert [p.name for p in checkpoints(tmp_path)] == ["step-0000000002", "step-0000000001"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step-0000000002"
