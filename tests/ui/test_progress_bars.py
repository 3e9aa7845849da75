"""Progress bars show a total and a time left: fit / predict over a dask stream's FIRST pass
(an estimate from the partitions read so far, exact once the pass is complete), the
pipeline's streams (demo, trial), and trial's own bar."""
from __future__ import annotations

import re

import dask.dataframe as dd
import numpy as np
import pandas as pd
import torch

import fbrapids  # noqa: F401
from fbrapids.trainers import StoreConfig, fit, predict, stream
from fbrapids.trainers.fit import estimated_batches, expected_batches
from fbrapids.trainers.models import DLRM

# "<desc>: ... <n>/<total> [<elapsed><<remaining>, <rate>]": tqdm's line when it knows a total
_WITH_TOTAL = re.compile(r"(?P<desc>[a-z]+): +(?:\d+%\|[^|]*\| )?(?P<n>\d+)/(?P<total>\d+) \[[0-9:]+<[0-9:?]+")
_NO_TOTAL = re.compile(r"(?P<desc>[a-z]+): (?P<n>\d+)batch \[")


def bar_states(err: str, desc: str) -> tuple[list[tuple[int, int]], list[int]]:
    """Every (n, total) the ``desc`` bar drew with a total and time left, and every n it drew
    without.  (tqdm draws at most every 0.1 s, and always when its total changes and when it
    closes.)"""
    lines = re.split(r"[\r\n]", err)
    with_total = [(int(m["n"]), int(m["total"])) for m in map(_WITH_TOTAL.search, lines) if m and m["desc"] == desc]
    without = [int(m["n"]) for m in map(_NO_TOTAL.search, lines) if m and m["desc"] == desc]
    return with_total, without


def _uneven_dask_frame() -> tuple[dd.DataFrame, list[int]]:
    """A 4-partition dask frame whose partitions hold 80, 20, 60 and 40 rows after a filter
    (so a first-partition extrapolation is not the answer); returns it and those sizes."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"click": rng.integers(0, 2, n), "d": rng.random(n), "ad": rng.integers(0, 50, n),
                       "keep": np.concatenate([np.arange(100) < k for k in (80, 20, 60, 40)])})
    frame = dd.from_pandas(df, npartitions=4)
    frame = frame[frame["keep"]]
    return frame, [80, 20, 60, 40]


def _model() -> DLRM:
    torch.manual_seed(0)
    return DLRM(1, ["ad"], embedding_dim=4, bottom_mlp=[4], top_mlp=[4], store=StoreConfig(cache_rows=1024))


def test_first_dask_pass_estimate_is_refined_per_partition_and_exact_at_the_end():
    frame, sizes = _uneven_dask_frame()
    s = frame.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=10, prefetch=1)
    assert expected_batches(s) is None and estimated_batches(s) is None  # nothing read yet
    # after k partitions: rows so far / k x 4 partitions, in batches of 10
    after = {k: -(-round(sum(sizes[:k]) * 4 / k) // 10) for k in range(1, 5)}
    assert after == {1: 32, 2: 20, 3: 22, 4: 20}
    seen = []
    for _ in s:
        seen.append(estimated_batches(s))
        assert expected_batches(s) is None or seen[-1] == expected_batches(s)
    assert len(seen) == 20 and set(seen) <= set(after.values()) and seen[0] is not None
    assert seen[-1] == expected_batches(s) == 20  # exact after the pass


def test_fit_and_predict_bars_have_a_total_and_time_left_in_the_first_dask_pass(capsys):
    frame, sizes = _uneven_dask_frame()
    exact = sum(sizes) // 10
    s = frame.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=10, prefetch=1)
    fit(_model(), s, epochs=1, progress=True)
    with_total, without = bar_states(capsys.readouterr().err, "fit")
    assert with_total and with_total[-1] == (exact, exact)  # the bar ends complete on the exact count
    # from the first batch on, every draw has a total and a time estimate
    assert min(n for n, _ in with_total) <= 1 and all(n == 0 for n in without)

    s2 = frame.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=10, prefetch=1)
    out = predict(_model(), s2, progress=True)
    assert len(out["pred"]) == sum(sizes)
    with_total, without = bar_states(capsys.readouterr().err, "predict")
    assert with_total[-1] == (exact, exact) and all(n == 0 for n in without)
    assert min(n for n, _ in with_total) <= 1


def test_fit_bar_total_over_epochs_and_capped_by_max_steps(capsys):
    frame, sizes = _uneven_dask_frame()
    s = frame.fbx.stream(label="click", dense=["d"], sparse=["ad"], batch_size=10, prefetch=1)
    fit(_model(), s, epochs=2, progress=True)
    with_total, _ = bar_states(capsys.readouterr().err, "fit")
    assert with_total[-1] == (40, 40)  # 2 epochs x 20 batches
    fit(_model(), s, epochs=3, max_steps=25, progress=True)
    with_total, _ = bar_states(capsys.readouterr().err, "fit")
    assert with_total[-1] == (25, 25) and {t for _, t in with_total} == {25}
    fit(_model(), s, epochs=1, max_steps=1000, progress=True)  # a cap above the data: the data's count
    with_total, _ = bar_states(capsys.readouterr().err, "fit")
    assert with_total[-1] == (20, 20)


def test_trial_and_its_arms_show_totals(gen_dir, capsys):
    """trial: its own bar over its steps (side-by-side training, bootstrap), and one fit and
    one predict bar over the one extraction pass's (dask) streams, shared by every arm,
    each with a total and time left, each ending complete."""
    from fbrapids import ops
    from fbrapids.app.trials import trial

    trial(gen_dir, {"slot_x_os": ops.cross("slot", "os")}, n_boot=5, progress=True, batch_size=512, seeds=2,
          cache_rows=1 << 14, host_rows=1 << 15, count_clean=False, aa=False)
    err = capsys.readouterr().err
    steps, _ = bar_states(err, "trial")
    assert {(0, 2), (1, 2), (2, 2)} <= set(steps)
    for desc in ("fit", "predict"):
        bars = err.split(f"{desc}: 0batch [")[1:]  # each bar's first draw (no total before a partition is read)
        assert len(bars) == 1, desc  # one pass feeds the 2 seeds x 2 arms
        for text in bars:
            with_total, without = bar_states(text, desc)
            n, total = with_total[-1]
            assert n == total > 0, (desc, with_total)  # ends complete on the exact count
            assert not without, (desc, without)


def test_batches_skipped_under_nan_skip_still_advance_the_bar(tmp_path, capsys):
    from _trainer_helpers import batches, ctr_frame, small_model, tiered

    model = small_model(tiered(tmp_path / "ssd"))
    fit(model, batches(ctr_frame()), max_steps=4, progress=False)
    store = model.stores()["emb_l/toks"]
    ids, _ = store.state()
    store.assign(ids[:1], np.full((1, store.config.dim), np.nan, np.float32))  # batches with that token: NaN loss
    res = fit(model, batches(ctr_frame()), max_steps=20, progress=True, nan="skip")
    # batches 7 and 15 are held back for the calibration (fit: every 8th): neither trained nor skipped
    assert res.skipped and len(res.skipped) + len(res.losses) == 20 - 2
    with_total, _ = bar_states(capsys.readouterr().err, "fit")
    assert with_total[-1] == (20, 20)  # before: 20 - len(skipped) of 20


def test_progress_under_a_distributed_client_says_where_to_look(local_cluster, caplog, capsys):
    import dask.dataframe as dd_

    import fbrapids as fbr

    frame = dd_.from_pandas(pd.DataFrame({"a": range(100)}), npartitions=4)
    with local_cluster.as_current(), caplog.at_level("WARNING", logger="fbrapids.ui.progressbar"):
        with fbr.progress() as bar:
            assert int(frame["a"].sum().compute()) == 4950
    assert bar.tasks_done == 0  # the cluster ran the tasks: no local callback saw them
    assert any("distributed Client" in r.getMessage() and "dashboard" in r.getMessage() for r in caplog.records)
    with caplog.at_level("WARNING", logger="fbrapids.ui.progressbar"):
        caplog.clear()
        with fbr.progress() as bar:  # the local scheduler again: a bar, no warning
            frame["a"].sum().compute()
    assert bar.tasks_done >= 4 and not caplog.records


def test_a_list_of_eager_frames_has_an_exact_count_up_front():
    frame, sizes = _uneven_dask_frame()
    df = frame.compute()
    parts = [df.iloc[:80], df.iloc[80:100], df.iloc[100:]]
    s = stream(parts, label="click", dense=["d"], sparse=["ad"], batch_size=10, drop_last=True)
    assert expected_batches(s) == estimated_batches(s) == 20 == len(list(s))
    lazy_parts = stream(iter(parts), label="click", dense=["d"], sparse=["ad"], batch_size=10)
    assert expected_batches(lazy_parts) is None  # an iterator: nothing known before it is read
