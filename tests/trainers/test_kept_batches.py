"""A pass's batches kept in memory for the next pass (fbrapids/trainers/kept_batches.py), and
a trial's later pass trained on them (fbrapids/app/trial_training.py): the same batches, the
same predictions as a pass that extracts the rows again; nothing kept past the limit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fbrapids.trainers.kept_batches import KeptBatches, batch_bytes
from fbrapids.trainers.stream import stream


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"y": rng.integers(0, 2, rows), "d": rng.random(rows), "ad": rng.integers(0, 50, rows)})


def _same(a, b) -> bool:
    return (torch.equal(a.dense, b.dense) and torch.equal(a.label, b.label)
            and all(torch.equal(a.sparse[f][i], b.sparse[f][i]) for f in a.sparse for i in (0, 1)))


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 300), batch=st.integers(1, 64), epochs=st.integers(1, 3), seed=st.integers(0, 9))
def test_the_kept_batches_replay_each_epoch_of_the_stream_in_its_order(rows, batch, epochs, seed):
    """Each epoch a shuffled stream reads (its own order: set_epoch) is replayed batch for
    batch, in order; the bytes kept are the batches' (numpy's count of their arrays)."""
    df = _frame(rows, seed)
    s = stream(df, label="y", dense=["d"], sparse=["ad"], batch_size=batch, shuffle_buffer=64, seed=seed)
    kept = KeptBatches(s, limit=1 << 30)
    read = {}
    for e in range(epochs):
        kept.set_epoch(e)
        read[e] = list(kept)
    replay = kept.replay(epochs)
    assert replay is not None
    for e in range(epochs):
        replay.set_epoch(e)
        again = list(replay)
        assert len(again) == len(read[e]) == replay.expected_batches() and all(map(_same, again, read[e]))
        s.set_epoch(e)
        assert all(map(_same, again, s))  # the stream's own read of that epoch
    want = sum(b.dense.numpy().nbytes + b.label.numpy().nbytes + sum(t.numpy().nbytes for t in b.sparse["ad"])
               for e in range(epochs) for b in read[e])
    assert kept.bytes == want == sum(batch_bytes(b) for e in range(epochs) for b in read[e])


def test_nothing_is_kept_past_the_limit_nor_for_an_epoch_left_unfinished():
    df = _frame(200, 0)
    s = stream(df, label="y", dense=["d"], sparse=["ad"], batch_size=32)
    one = batch_bytes(next(iter(s)))
    kept = KeptBatches(s, limit=3 * one)  # 7 batches: past the limit at the fourth
    assert len(list(kept)) == 7 and kept.replay() is None and kept.bytes == 0
    assert len(list(kept)) == 7 and kept.replay() is None  # past it once: nothing kept after either
    half = KeptBatches(s, limit=1 << 30)
    for k, _ in enumerate(half):
        if k == 2:
            break
    assert half.replay() is None  # the epoch was not read to its end
    assert len(list(half)) == 7 and half.replay() is not None and half.replay(2) is None  # epoch 1 never read


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    from fbrapids.datasets.synthetic.generate import generate

    d = tmp_path_factory.mktemp("kept")
    generate(1500, d, seed=4)
    return d


def _session(d, **opt):
    from fbrapids import ops
    from fbrapids.app.trial_training import ArmsSession, plan_arms

    cand = {"slot_x_os": ops.cross("slot", "os")}
    return ArmsSession(d, cand, plan_arms(list(cand), each=False, aa=True), batch_size=256, embedding_dim=4,
                       order_seed=1, **opt)


def test_a_pass_on_the_batches_a_pass_kept_predicts_as_one_that_extracts_them_again(gen_dir):
    """Seed 2 trained after a pass that kept its batches (no extraction) and after one that
    did not (the rows extracted again): the same training order and rows, the same held-out
    rows, every arm's predictions equal bit for bit; the trial's counts say which pass
    extracted."""
    with _session(gen_dir, epochs=2) as kept:
        kept.train([1], progress=False, keep=True)
        replayed = kept.train([2], progress=False)[0]
    with _session(gen_dir, epochs=2) as fresh:
        fresh.train([1], progress=False)
        extracted = fresh.train([2], progress=False)[0]
    assert kept.extraction["passes"] == fresh.extraction["passes"] == 2
    assert kept.extraction["passes extracted"] == 1 and fresh.extraction["passes extracted"] == 2
    assert kept.extraction["partitions"] < fresh.extraction["partitions"]
    assert kept.extraction["rows streamed"] == fresh.extraction["rows streamed"]
    assert replayed.order == extracted.order and replayed.rows == extracted.rows > 0
    assert replayed.steps == extracted.steps
    assert np.array_equal(kept.label, fresh.label) and np.array_equal(kept.group, fresh.group)
    assert sorted(replayed.preds) == sorted(extracted.preds) == ["aa", "baseline", "candidate"]
    for arm, p in extracted.preds.items():
        assert np.array_equal(replayed.preds[arm], p), arm


def test_past_the_limit_the_next_pass_extracts_again(gen_dir, monkeypatch):
    from fbrapids.app import trial_training

    monkeypatch.setattr(trial_training, "KEPT_BATCHES_BYTES", 10_000)
    with _session(gen_dir) as s:
        s.train([1], progress=False, keep=True)
        s.train([2], progress=False)
    assert s.extraction["passes"] == s.extraction["passes extracted"] == 2
