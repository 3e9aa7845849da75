import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from fbrapids.datasets.synthetic.generate import generate, hidden_probabilities, read_metadata

SCHEMA = {
    "impressions": {"instance_id": "int64", "ts": "int64", "user_id": "int64", "ad_id": "int64", "slot": "int8",
                    "query": "string", "ctx": "string", "click": "int8"},
    "users": {"user_id": "int64", "age": "int32", "gender": "string", "city": "string", "interests": "string"},
    "ads": {"ad_id": "int64", "title": "string", "category": "int32", "price": "double", "advertiser_id": "int64"},
    "basic": {"instance_id": "int64", **{f"d{j}": "float" for j in range(10)}, **{f"b{j}": "int64" for j in range(5)}},
}


def test_schema_is_exactly_workload_section_1(gen_dir):
    assert sorted(p.name for p in gen_dir.iterdir()) == [f"{n}.parquet" for n in sorted(SCHEMA)]
    for name, cols in SCHEMA.items():
        schema = pq.read_schema(gen_dir / f"{name}.parquet")
        assert {f.name: str(f.type) for f in schema} == cols, name
        assert schema.names == list(cols), name


def test_generator_is_deterministic(tmp_path):
    a = generate(800, tmp_path / "a", seed=3)
    b = generate(800, tmp_path / "b", seed=3)
    c = generate(800, tmp_path / "c", seed=4)
    for name in a:
        pd.testing.assert_frame_equal(pd.read_parquet(a[name]), pd.read_parquet(b[name]))
    assert not pd.read_parquet(a["impressions"]).equals(pd.read_parquet(c["impressions"]))


def test_distributions_follow_the_spec(tmp_path):
    generate(40_000, tmp_path, seed=0)
    imp = pd.read_parquet(tmp_path / "impressions.parquet")
    users = pd.read_parquet(tmp_path / "users.parquet")
    ads = pd.read_parquet(tmp_path / "ads.parquet")
    basic = pd.read_parquet(tmp_path / "basic.parquet")
    assert imp["instance_id"].is_unique and imp["ts"].is_monotonic_increasing
    assert imp["ts"].min() >= 1699833600 and imp["ts"].max() < 1699833600 + 7 * 86400
    assert 0.02 < (imp["slot"] < 0).mean() < 0.04
    assert 0.02 < imp["query"].isna().mean() < 0.04
    assert 0.015 < imp["ctx"].isna().mean() < 0.025
    assert len(users) == 4000 and len(ads) == 2000 and users["user_id"].is_unique and ads["ad_id"].is_unique
    missing_users = ~imp["user_id"].isin(users["user_id"])
    assert 0.002 < missing_users.mean() < 0.01
    assert 0.0005 < (~imp["ad_id"].isin(ads["ad_id"])).mean() < 0.005
    assert 0.03 < users["age"].isna().mean() < 0.07 and 0.06 < users["gender"].isna().mean() < 0.1
    n_words = ads["title"].str.split(" ").str.len()
    assert n_words.min() >= 3 and n_words.max() <= 12
    tags = users["interests"].str.split("|")
    assert tags.str.len().max() <= 10 and (users["interests"] == "").any()
    assert 0.005 < 1 - len(basic) / len(imp) < 0.015 and basic["instance_id"].isin(imp["instance_id"]).all()
    # in instance_id order, like the impressions: the two views are partitioned alike
    assert basic["instance_id"].is_monotonic_increasing
    words = pd.Series(" ".join(ads["title"]).split(" "))
    assert 0.0 < (~words.map(str.isascii)).mean() < 0.1  # some non-ASCII UTF-8 words
    assert 0.05 < imp["click"].mean() < 0.3


def test_metadata_documents_learnable_signal(gen_dir):
    meta = read_metadata(gen_dir)
    assert meta["rows"] == 5000 and meta["seed"] == 0
    assert 0.7 < meta["oracle_auc"] < 0.9


def test_hidden_probabilities_are_the_written_clicks_oracle(gen_dir):
    """The hidden probabilities drawn again are those of the written data: the same
    impressions and clicks, and sklearn's AUC of the clicks on them is the metadata's oracle AUC."""
    from sklearn.metrics import roc_auc_score

    h = hidden_probabilities(5000, seed=0)
    imp = pd.read_parquet(gen_dir / "impressions.parquet", columns=["instance_id", "ts", "click"])
    assert h[["instance_id", "ts", "click"]].equals(imp.astype({"click": h["click"].dtype}))
    assert ((h["prob"] > 0) & (h["prob"] < 1)).all()
    assert abs(roc_auc_score(h["click"], h["prob"]) - read_metadata(gen_dir)["oracle_auc"]) < 2e-4


def test_cli_gen(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "gen", "--rows", "300", "--out", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    assert "oracle AUC" in out.stdout
    assert len(pd.read_parquet(tmp_path / "impressions.parquet")) == 300
    assert np.isfinite(read_metadata(tmp_path)["oracle_auc"])


def test_output_does_not_depend_on_the_row_group_size(tmp_path):
    """Blocks are drawn from their own seeds: the same rows whatever the row-group size,
    and each basic row group covers exactly the impressions of the same-numbered group."""
    rows = 70_000  # more than one generator block (65,536 rows)
    a = generate(rows, tmp_path / "a", seed=5, row_group_rows=7_000)
    b = generate(rows, tmp_path / "b", seed=5, row_group_rows=32_768)
    for name in a:
        pd.testing.assert_frame_equal(pd.read_parquet(a[name]), pd.read_parquet(b[name]), check_exact=True)
    assert read_metadata(tmp_path / "a") == read_metadata(tmp_path / "b")
    imp, basic = pq.ParquetFile(a["impressions"]), pq.ParquetFile(a["basic"])
    assert [imp.metadata.row_group(i).num_rows for i in range(imp.num_row_groups)] == [7_000] * 10
    assert imp.num_row_groups == basic.num_row_groups
    for g in range(imp.num_row_groups):
        ids = imp.read_row_group(g, columns=["instance_id"])["instance_id"].to_numpy()
        bids = basic.read_row_group(g, columns=["instance_id"])["instance_id"].to_numpy()
        assert ids.min() <= bids.min() and bids.max() <= ids.max()
        assert 0.97 * len(ids) < len(bids) < len(ids)


def test_gen_shows_progress_over_rows(tmp_path, capsys):
    """One bar from the start over every row written (users', ads', impressions'), with a
    total and time left, ending complete."""
    paths = generate(1_000, tmp_path, progress=True)
    written = sum(pq.ParquetFile(paths[n]).metadata.num_rows for n in ("users", "ads", "impressions"))
    assert written == 1_150  # 1,000 impressions, 100 users, 50 ads
    err = capsys.readouterr().err
    assert re.search(r"gen: +0%\|[^|]*\| 0\.00/1\.15k \[", err), err  # the total is known before any row
    assert re.search(r"gen: 100%\|[^|]*\| 1\.15k/1\.15k \[[0-9:]+<[0-9:]+", err), err
