"""Training state under faults (issue 25 B): a resume with other settings is refused up
front naming them; a same-step re-checkpoint killed between its renames keeps a complete
copy; a non-regular ``latest`` pointer is a one-line error, never a hang; the SSD tier's
folder is locked across processes and its rows carry page checksums."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from _trainer_helpers import FEATURES, ctr_frame, same_bits, small_model, snapshot, tiered
from fbrapids.datagen import generate
from fbrapids.errors import CheckpointMismatchError, FbrapidsError
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
    res = fit(model, _stream(ctr_frame()), max_steps=6, checkpoint_dir=trained, progress=False)
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
