"""From your own log to a served model: ``fbrapids demo --workload examples/avazu.toml --export
DIR``, then ``DIR`` served as ``fbrapids serve DIR`` serves it (its app and uvicorn config, on
127.0.0.1), scores the raw held-out rows of the log (``hour`` as the log writes it,
``14102100``) equal to the offline predictions of the same run within ``SCORE_ATOL``; and
``fbrapids export CHECKPOINT DIR --workload examples/taobao.toml`` of a run's checkpoint
serves the Taobao log's raw rows (request: the log's and the user profile's columns; items:
the ad view's) equal to that run's offline predictions.

The offline predictions are those of the very run whose model is exported (the demo's,
kept as ``run_pipeline`` returns it)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fbrapids.serving.scorer import SCORE_ATOL

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _value(v):
    return None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)


def raw_rows(frame: pd.DataFrame, spec) -> list[dict]:
    """Each row of a log frame as a served call: its request columns, and its item columns as
    the one candidate (nulls as JSON null, as a client sends them)."""
    return [{"request": {c: _value(row[c]) for c in spec.request_columns},
             "items": [{c: _value(row[c]) for c in spec.item_columns}]} for _, row in frame.iterrows()]


def test_demo_workload_export_serves_raw_log_rows_as_offline_predictions(shared_data, tmp_path, capsys,
                                                                        monkeypatch):
    import fbrapids.app.pipeline as pipeline
    from fbrapids.app.cli import main
    from fbrapids.serving.export import load_model
    from tests.serving.test_serving_demo_models import serving

    runs = []  # the demo's own run, kept as it returns (its offline predictions)
    real = pipeline.run_pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **k: runs.append(real(*a, **k)) or runs[-1])
    toml, export = EXAMPLES / "avazu.toml", tmp_path / "avazu-export"
    assert main(["demo", "--workload", str(toml), "--data-root", str(shared_data), "--batch-size", "32",
                 "--export", str(export)]) == 0
    assert f"export                 {export} (serve it: fbrapids serve {export})" in capsys.readouterr().out
    (offline,) = runs
    assert offline.split["rule"] == "fraction 0.2" and offline.metrics["n"] == 20
    _, spec = load_model(export)
    assert spec.time == {"hour": "%y%m%d%H"} and spec.schema["hour"] == "int64" and spec.item_columns == []
    log = pd.read_csv(shared_data / "avazu_sample.txt", dtype={"id": "uint64"})
    rows = raw_rows(log.iloc[80:], spec)  # the held-out fifth, as the log writes it
    assert rows[0]["request"]["hour"] == 14102100
    with serving(export) as url:
        req = urllib.request.Request(url + "/score_batch", data=json.dumps({"requests": rows}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read())
    assert "errors" not in answer, answer
    served = np.concatenate([np.asarray(scores) for scores in answer["scores"]])
    np.testing.assert_allclose(served, offline.predictions["pred"], atol=SCORE_ATOL, rtol=0)
    from fbrapids.errors import RequestError
    from fbrapids.serving import load_scorer

    with pytest.raises(RequestError, match=r"column 'hour' must be text '%y%m%d%H', got 14102199"):  # hour 99
        load_scorer(export).score({**rows[0]["request"], "hour": 14102199}, [{}])


def test_export_of_a_workload_runs_checkpoint_serves_its_logs_raw_rows(shared_data, tmp_path, capsys):
    from fbrapids.app.cli import main
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.serving import load_scorer
    from fbrapids.workloads import RunConfig, load_workload

    toml = EXAMPLES / "taobao.toml"
    run = run_pipeline(load_workload(toml, root=shared_data),
                       RunConfig(batch_size=32, progress=False, work_dir=tmp_path / "work"))
    export = tmp_path / "taobao-export"
    assert main(["export", str(tmp_path / "work" / "checkpoints"), str(export), "--workload", str(toml),
                 "--data-root", str(shared_data)]) == 0
    assert f"serve it: fbrapids serve {export}" in capsys.readouterr().out
    scorer = load_scorer(export)
    spec = scorer.spec
    assert spec.item_key == "adgroup_id" and {"cate_id", "brand", "price"} <= set(spec.item_columns)
    assert {"userid", "pid", "age_level"} <= set(spec.request_columns) and spec.fill["pid"] == ""
    # the held-out log's rows; the user profile and the ad as a client looks them up in its catalogue (the views'
    # first row per id, as training's distinct views kept them: 4 ads of the sample carry two different rows)
    files = [pd.read_csv(shared_data / f).convert_dtypes() for f in ("taobao_tiny_train.csv", "taobao_tiny_test.csv")]
    both = pd.concat(files, ignore_index=True)
    profile = ["cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level", "shopping_level",
               "occupation", "new_user_class_level"]
    users = both.drop_duplicates("userid")[["userid", *profile]]
    ads = both.drop_duplicates("adgroup_id")[spec.item_columns]
    log = files[1][["clk", "time_stamp", "userid", "adgroup_id", "pid", "click_sequence"]]
    rows = raw_rows(log.merge(users, on="userid", how="left").merge(ads, on="adgroup_id", how="left"), spec)
    assert any(r["request"]["age_level"] is None for r in rows) and any(r["items"][0]["brand"] is None for r in rows)
    served = np.concatenate(scorer.score_batch(rows))
    np.testing.assert_allclose(served, run.predictions["pred"], atol=SCORE_ATOL, rtol=0)
    assert main(["export", str(tmp_path / "work" / "checkpoints"), str(tmp_path / "e2"), "--workload", str(toml),
                 "--data-root", str(shared_data), "--embedding-dim", "8"]) == 2
    assert "does not hold workload 'taobao'" in capsys.readouterr().err
