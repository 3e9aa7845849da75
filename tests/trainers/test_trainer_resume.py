"""Exact resume across a killed process, and crash safety of checkpoint writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fbrapids.trainers import fit, load_checkpoint
from fbrapids.trainers.calibration import HOLD_EVERY
from fbrapids.trainers.checkpoint.directory import latest_checkpoint

from _trainer_helpers import batches, ctr_frame, same_bits, small_model, snapshot, tiered

HELPER = Path(__file__).resolve().parents[1] / "_trainer_helpers.py"
N, M = 12, 9


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _child(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(HELPER.parents[1]))
    return subprocess.Popen([sys.executable, str(HELPER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _straight(tmp: Path, steps: int) -> dict:
    """``steps`` steps of an uninterrupted fit (holding batches back for the calibration, as
    the killed runs do)."""
    model = small_model(tiered(tmp))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    fit(model, batches(ctr_frame()), optimizer=opt, max_steps=steps, progress=False)
    return snapshot(model)


def test_resume_after_kill_is_bit_identical(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    proc = _child("train-then-hang", str(root), str(tmp_path / "ssd-child"), str(N))
    try:
        line = proc.stdout.readline()
        assert line.strip() == "CHECKPOINTED", proc.stderr.read() if proc.poll() is not None else line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert latest_checkpoint(root).name == f"step-{N:010d}"

    resumed = small_model(tiered(tmp_path / "ssd-resumed"), seed=123)  # different init: all comes from the checkpoint
    opt = torch.optim.Adam(resumed.parameters(), lr=1e-3)
    res = fit(resumed, batches(ctr_frame()), optimizer=opt, max_steps=N + M, checkpoint_dir=root, progress=False)
    held = sum(1 for i in range(N, N + M) if i % HOLD_EVERY == HOLD_EVERY - 1)  # held back: never trained on
    assert res.resumed_from is not None and len(res.losses) == M - held == M - 1 and res.steps == N + M

    straight = _straight(tmp_path / "ssd-straight", N + M)
    assert same_bits(straight, snapshot(resumed)) == []
    # and the comparison can fail: one step fewer differs
    assert same_bits(_straight(tmp_path / "ssd-short", N + M - 1), straight) != []


def test_kill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    proc = _child("crash-in-checkpoint", str(root), str(tmp_path / "ssd-child"), str(N))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    assert "WROTE" in out and "UNREACHABLE" not in out
    partial = list(root.glob(".tmp-step-*"))
    assert len(partial) == 1 and (partial[0] / "dense.pt").exists()  # killed mid-write
    assert latest_checkpoint(root).name == f"step-{N:010d}"
    assert not (root / f"step-{N + 1:010d}").exists()

    model = small_model(tiered(tmp_path / "ssd-load"), seed=99)
    assert load_checkpoint(model, None, root) == N
    # a checkpoint written during training holds that moment's model (no calibration yet, the
    # held batches not looked up at the end): compare with an uninterrupted run's checkpoint at N
    ref = small_model(tiered(tmp_path / "ssd-straight"))
    fit(ref, batches(ctr_frame()), optimizer=torch.optim.Adam(ref.parameters(), lr=1e-3), max_steps=N,
        checkpoint_dir=tmp_path / "ckpt-straight", checkpoint_every=N, progress=False)
    want = small_model(tiered(tmp_path / "ssd-want"), seed=98)
    assert load_checkpoint(want, None, tmp_path / "ckpt-straight") == N
    assert same_bits(snapshot(model), snapshot(want)) == []
    # fit(resume=True) clears the debris of the killed writer
    fit(model, batches(ctr_frame()), max_steps=N + 1, checkpoint_dir=root, progress=False)
    assert not list(root.glob(".tmp-step-*")) and latest_checkpoint(root).name == f"step-{N + 1:010d}"
