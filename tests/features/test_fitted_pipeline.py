"""Fitted and history features in the pipeline: fitted on the training days only, held-out
labels never in the state, ``fbrapids.trial`` accepts them, ``demo --model din`` trains DIN
over a history built from the generated log."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from fbrapids import ops
from fbrapids.app.pipeline import run_pipeline
from fbrapids.datasets import synthetic
from fbrapids.datasets.synthetic.generate import DAYS, TS0, generate
from fbrapids.features import Fitted
from fbrapids.workloads import RunConfig

CUTOFF = TS0 + (DAYS - 1) * 86400
TE = {"te_uc": ops.target_encode("user_id", "category", label="click", fold_by="instance_id"),
      "n_user": ops.count_encode("user_id")}


def _run(data, work) -> tuple:
    w = synthetic.workload(data).with_features(TE, dense=["te_uc"])
    r = run_pipeline(w, RunConfig(epochs=1, batch_size=512, progress=False, work_dir=work))
    return r, Fitted.load(work / "fitted")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same log twice, the second with every held-out label flipped."""
    a = tmp_path_factory.mktemp("logA")
    generate(4000, a, seed=3)
    b = tmp_path_factory.mktemp("logB")
    generate(4000, b, seed=3)
    table = pq.read_table(b / "impressions.parquet")
    df = table.to_pandas()
    held = df["ts"] >= CUTOFF
    assert held.any() and (~held).any()
    df.loc[held, "click"] = 1 - df.loc[held, "click"]
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(df, schema=table.schema, preserve_index=False), b / "impressions.parquet",
                   row_group_size=32_768)
    return _run(a, tmp_path_factory.mktemp("workA")), _run(b, tmp_path_factory.mktemp("workB"))


def test_fitted_features_are_fitted_on_the_training_days_only(two_runs) -> None:
    (r, fitted), _ = two_runs
    assert fitted.info["time_max"] < CUTOFF <= fitted.info["time_max"] + 86400
    assert fitted.info["rows"] == r.rows["trained"]
    assert "fitted on" in r.render()


def test_held_out_labels_never_enter_fitted_state(two_runs) -> None:
    (ra, fa), (rb, fb) = two_runs
    assert fa.states.keys() == fb.states.keys()
    for sid, s in fa.states.items():
        for k, v in s.tables.items():
            np.testing.assert_array_equal(v, fb.states[sid].tables[k])
        assert s.meta == fb.states[sid].meta
    # the flip did reach the held-out labels the model is scored on
    assert not np.array_equal(ra.predictions["label"], rb.predictions["label"])


def test_trial_accepts_fitted_features(gen_dir) -> None:
    from fbrapids.app.trials import trial

    r = trial(gen_dir, {"te_uc": TE["te_uc"]}, kind="dense", n_boot=5, progress=False, batch_size=512, seeds=1)
    assert r.candidates == ["te_uc"] and r.n_boot == 5
    lo, hi = r.interval["auc"]
    assert lo <= hi and np.isfinite(r.delta["auc"])
    assert np.isfinite(r.aa_delta["auc"]) and r.extraction["models"] == 3  # a dense candidate's A/A arm too


def test_demo_model_din_trains_over_a_history_of_the_log(tmp_path, capsys) -> None:
    from fbrapids.app.cli import main

    assert main(["demo", "--rows", "4000", "--model", "din", "--data-dir", str(tmp_path / "data"),
                 "--work-dir", str(tmp_path / "work"), "--batch-size", "512"]) == 0
    out = capsys.readouterr().out
    assert "model din" in out and "AUC" in out


def test_din_history_feeds_the_model_a_list_column(gen_dir, tmp_path) -> None:
    from fbrapids.app.pipeline import DIN_SEQUENCE

    r = run_pipeline(gen_dir, model="din", epochs=1, batch_size=512, progress=False, work_dir=tmp_path)
    assert r.model == "din" and r.rows["trained"] > 0
    assert np.isfinite(r.metrics["auc"])
    assert DIN_SEQUENCE == "hist_cat"
