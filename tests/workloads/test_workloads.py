"""Declared workloads (fbrapids.workloads): the spec's errors name the field and the file,
and the real samples' workload files (examples/*.toml) run end to end: Taobao split into
views and joined back to its own rows, a trial on it from Python, Criteo and Avazu through
``run_pipeline``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops
from fbrapids.errors import FbrapidsError, WorkloadError
from fbrapids.workloads import RunConfig, Split, View, Workload, load_workload, parse_candidate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = RunConfig(batch_size=32, cache_rows=1024, host_rows=None, checkpoint=False, progress=False,
                 count_clean=False, embedding_dim=4, train_threads=1)


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return p


BASE = 'label = "click"\nsplit = { rule = "fraction", fraction = 0.2 }\n[[views]]\nname = "log"\npath = "l.csv"\n'


@pytest.mark.parametrize("extra, field", [
    ('[features]\ndense = "price"\n', "dense must be a list"),
    ('[features]\nsparse = ["a"]\ndense = ["a"]\n', "both sparse and dense"),
    ('[[joins]]\nview = "users"\non = "u"\n', "join of view 'users': no such view"),
    ('[features.extract]\nx = \'__import__("os").system("true")\'\n', "features.extract.x"),
    ('[features.extract]\nx = \'ops.hash_bucket("a")\'\n', "features.extract.x"),
    ('[features.extract]\nx = \'ops.register_operator("evil", "i64 x", "i64 y", "y = x;")\'\n',
     "features.extract.x: 'register_operator' registers code (C source) and is refused"),
    ('colour = 1\n', "unknown field(s) ['colour']"),
])
def test_a_bad_workload_file_is_one_error_naming_the_field_and_the_file(tmp_path, extra, field):
    p = _toml(tmp_path, BASE + extra)
    with pytest.raises(WorkloadError) as e:
        load_workload(p)
    assert field in str(e.value) and str(p) in str(e.value)


def test_spec_errors_before_any_work(tmp_path):
    with pytest.raises(WorkloadError, match="rule 'at' needs"):
        Split("at")
    with pytest.raises(WorkloadError, match="split rule 'last_day' needs the time column"):
        Workload([View("log", "l.csv")], "click", Split("last_day"))
    with pytest.raises(WorkloadError, match=r"view 'log': unknown reader option\(s\) \['seperator'\]"):
        View("log", "l.csv", options={"seperator": ","})
    with pytest.raises(WorkloadError, match="RunConfig.batch_size must be an int"):
        RunConfig(batch_size=0)
    with pytest.raises(WorkloadError, match=r"RunConfig has no option\(s\) \['batch'\]"):
        RunConfig().with_(batch=3)
    with pytest.raises(WorkloadError, match="view 'log': no file matches .*nothing.csv"):
        Workload([View("log", "nothing.csv")], "click", Split("fraction", fraction=0.5), root=str(tmp_path)).check_files()
    from fbrapids.app.pipeline import run_pipeline

    with pytest.raises(WorkloadError, match="view 'impressions': no file matches .*declare your own log"):
        run_pipeline(tmp_path)  # a folder of one's own: the error says a fixed schema is what a folder means
    with pytest.raises(WorkloadError, match="expected NAME=EXPRESSION"):
        parse_candidate('ops.cross("a", "b")')
    from fbrapids.kernels.registry import operators

    with pytest.raises(WorkloadError, match="--candidate f: 'register_operator' registers code .* may only call "
                                            "operators"):  # refused at parse time: nothing registered
        parse_candidate('f=ops.cross("a", ops.register_operator("evil_cli", "i64 x", "i64 y", "y = x;"))')
    assert "evil_cli" not in operators()
    assert str(parse_candidate('x = cross("a", "b", buckets=8)')[1]).startswith("cross(a, b, buckets=8")


def test_the_split_rules_hold_out_the_rows_they_say(tmp_path):
    from fbrapids.workloads import frames

    n = 50
    pd.DataFrame({"click": np.arange(n) % 2, "u": np.arange(n) % 7, "row": np.arange(n)}).to_csv(
        tmp_path / "l.csv", index=False)
    w = Workload([View("log", "l.csv")], "click", Split("fraction", fraction=0.3), root=str(tmp_path), sparse=["u"])
    merged, _ = frames.feature_frame(w)
    train, test = (f.compute() for f in frames.split_frame(w, merged))
    assert train["row"].tolist() == list(range(35)) and test["row"].tolist() == list(range(35, 50))
    assert frames.HELD_OUT not in train.columns
    # a time rule: the log's last calendar day (UTC), or from a date on
    day = 86400
    ts = 1494028800 + np.arange(n) * (day // 20)  # 2017-05-06 00:00 UTC on, 20 rows a day
    pd.DataFrame({"click": np.arange(n) % 2, "ts": ts}).to_csv(tmp_path / "t.csv", index=False)
    for split, first_held in ((Split("last_day"), ts.max() // day * day), (Split("at", at="2017-05-07"), ts[0] + day)):
        w = Workload([View("log", "t.csv")], "click", split, time="ts", root=str(tmp_path))
        merged, _ = frames.feature_frame(w)
        test = frames.split_frame(w, merged)[1].compute()
        assert test["ts"].tolist() == [t for t in ts if t >= first_held] != [], split


# -- the real samples (../shared/data) ----------------------------------------------------------
def test_taobao_views_split_off_the_joined_sample_join_back_to_its_own_rows(shared_data):
    from fbrapids.workloads import frames

    w = load_workload(EXAMPLES / "taobao.toml", root=shared_data)
    merged, parts = frames.feature_frame(w, features={})
    got = merged.compute()
    want = pd.concat([pd.read_csv(shared_data / f) for f in ("taobao_tiny_train.csv", "taobao_tiny_test.csv")],
                     ignore_index=True)
    assert len(got) == len(want) == 200
    assert got["fbx_held_out"].tolist() == [False] * 100 + [True] * 100
    # the user profile is one per userid in the sample: the join gives its rows back exactly
    for col in ("clk", "userid", "adgroup_id", "pid"):
        assert got[col].tolist() == want[col].tolist(), col
    for col in ("cms_segid", "final_gender_code", "age_level", "pvalue_level"):  # the profile's nulls: -1
        np.testing.assert_array_equal(got[col].to_numpy(float), want[col].fillna(-1.0).to_numpy(float), err_msg=col)
    # 4 adgroup_ids of the sample carry two different ad rows: the ad view keeps each id's
    # first (the files in order), as pandas' drop_duplicates does
    ads = want[["adgroup_id", "cate_id", "brand", "price"]].drop_duplicates("adgroup_id")
    assert (want.groupby("adgroup_id")["cate_id"].nunique() > 1).sum() == 4
    oracle = want[["adgroup_id"]].merge(ads, on="adgroup_id", how="left")
    assert got["cate_id"].tolist() == oracle["cate_id"].tolist()
    np.testing.assert_array_equal(got["brand"].to_numpy(float), oracle["brand"].fillna(-1.0).to_numpy(float))
    np.testing.assert_array_equal(got["price"].to_numpy(float), oracle["price"].to_numpy(float))


def test_a_trial_on_taobao_declared_in_toml_runs_from_python(shared_data):
    from fbrapids.app.trials import trial

    w = load_workload(EXAMPLES / "taobao.toml", root=shared_data)
    r = trial(w, {"pid_x_cate": ops.cross("pid", "cate_id", buckets=4096)}, seeds=1, n_boot=20, progress=False,
              batch_size=32, embedding_dim=4, cache_rows=1024, train_threads=1)
    table = r.render()
    assert "baseline + pid_x_cate" in table and "AUC" in table and "GAUC" in table
    assert r.n_users == pd.read_csv(shared_data / "taobao_tiny_test.csv")["userid"].nunique()
    assert r.extraction["rows streamed"] == 200 and r.extraction["models"] == 3  # baseline, candidate, A/A
    with pytest.raises(FbrapidsError, match="already name baseline columns"):
        trial(w, {"pid_h": ops.hash_bucket("pid", 8)}, progress=False)


def test_criteo_and_avazu_workloads_run_the_pipeline_end_to_end(shared_data, tmp_path, capsys):
    """Avazu through run_pipeline (its uint64 ids above 2^63 read exactly), Criteo through
    ``fbrapids demo --workload`` (datasets.criteo's preprocessing, named in the file)."""
    import json

    from fbrapids.app.cli import main
    from fbrapids.app.pipeline import run_pipeline

    r = run_pipeline(load_workload(EXAMPLES / "avazu.toml", root=shared_data), TINY.with_(count_clean=True))
    assert r.rows == {"log read": 100, "after clean": 100, "merged (train+test)": 100, "trained": 80, "held out": 20}
    assert r.metrics["n"] == 20 and 0 <= r.metrics["auc"] <= 1 and np.isfinite(r.metrics["logloss"])
    # a true summary: the split's own name and report, no JSON kernels where none ran
    text = r.render()
    assert "held out: fraction 0.2\n" in text and "JSON" not in text and "held-out last day" not in text
    assert "time 'hour' as text '%y%m%d%H'" in text and r.split["held_range"] == ["2014-10-21 00:00:00"] * 2
    out = tmp_path / "criteo.json"
    assert main(["demo", "--workload", str(EXAMPLES / "criteo.toml"), "--data-root", str(shared_data),
                 "--batch-size", "32", "--summary-json", str(out)]) == 0
    assert "AUC" in capsys.readouterr().out
    summary = json.loads(out.read_text())
    assert summary["workload"] == "criteo" and summary["rows"]["trained"] == 160
    assert summary["rows"]["held out"] == 40 == summary["metrics"]["n"]
    assert summary["split"]["rule"] == "fraction 0.2" and summary["split"]["held_rows"] == 40


def test_the_example_workload_files_parse_without_the_data():
    for p in sorted(EXAMPLES.glob("*.toml")):
        w = load_workload(p)
        assert w.sparse and w.source == str(p), p
        assert re.fullmatch(r"[a-z]+", w.name)


def test_the_readme_your_own_log_section_runs_as_written(shared_data, tmp_path, monkeypatch, capsys):
    """The section shows examples/taobao.toml as it is, and its trial command runs (the CLI,
    in this process, from a folder holding the examples: the JSON lands there)."""
    import shlex

    from fbrapids.app.cli import main

    readme = (EXAMPLES.parent / "README.md").read_text()
    section = readme.split("## Your own log", 1)[1].split("\n## ", 1)[0]
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    lines = (EXAMPLES / "taobao.toml").read_text().splitlines(keepends=True)
    assert toml == "".join(line for line in lines if not line.startswith("root = "))  # the README leaves root out
    command = re.search(r"```sh\n(fbrapids trial .*?)\n```", section, re.S).group(1)
    (tmp_path / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:] + ["--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "feature trial: baseline + pid_x_cate" in out and "P(better)" in out
    import json

    data = json.loads((tmp_path / "taobao-trial.json").read_text())
    assert data["workload"] == "taobao" and len(data["seeds"]) == 2 and set(data["delta"]) == {"auc", "gauc"}
    assert data["rows"] == {"trained": 100, "held out": 100} and data["split"]["rule"] == "files taobao_tiny_test.csv"
    assert "rows: trained 100, held out 100 (files taobao_tiny_test.csv)" in out


def test_the_workload_reference_lists_every_field_the_parser_accepts():
    """docs/workloads.md's field tables hold exactly the fields the TOML parser accepts (a
    field added to the parser and not to the reference fails here), and its complete example
    is a workload the parser reads."""
    import dataclasses
    import tomllib

    from fbrapids.workloads import Join, toml_file, workload_from_dict
    from fbrapids.workloads.spec import clean_options, reader_options

    doc = (EXAMPLES.parent / "docs" / "workloads.md").read_text()
    tables = {m.group(1): {re.match(r"\| `([^`]+)`", row).group(1) for row in m.group(2).splitlines()}
              for m in re.finditer(r"<!-- fields: (\w+) -->\n\|.*\n\|.*\n((?:\|.*\n)+)", doc)}
    accepted = {"top": toml_file.TOP, "split": {f.name for f in dataclasses.fields(Split)},
                "views": {f.name for f in dataclasses.fields(View)}, "options": reader_options(),
                "clean": clean_options(), "joins": {f.name for f in dataclasses.fields(Join)},
                "features": toml_file.FEATURES, "sequence": toml_file.SEQUENCE}
    assert sorted(tables) == sorted(accepted)
    for section, names in accepted.items():
        assert tables[section] == set(names), (section, sorted(set(names) ^ tables[section]))
    w = workload_from_dict(tomllib.loads(re.search(r"```toml\n(.*?)```", doc, re.S).group(1)), "docs/workloads.md")
    assert w.time_form == "%y%m%d%H" and w.item_view == "ads" and "hour_of_day" in w.sparse
    assert "](docs/workloads.md)" in (EXAMPLES.parent / "README.md").read_text().split("## Your own log", 1)[1]
