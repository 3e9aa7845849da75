import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import fbrapids  # noqa: F401
from fbrapids.datasets.synthetic import views as workload
from fbrapids.joins.strategies import JoinError, join, join_decisions
from fbrapids.views.read import read_view

USER_COLS = ["cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level", "shopping_level",
             "occupation", "new_user_class_level"]
AD_COLS = ["cate_id", "campaign_id", "customer", "brand", "price"]


def _views():
    rng = np.random.default_rng(0)
    left = pd.DataFrame({"k": rng.integers(0, 50, 400).astype(np.int64), "v": np.arange(400)})
    right = pd.DataFrame({"k": np.arange(0, 40, dtype=np.int64), "w": np.arange(40) * 10,
                          "big": (np.arange(40, dtype=np.int64) + 2**62)})
    return left, right


def test_left_and_inner_on_pandas_match_a_plain_reference():
    left, right = _views()
    got = left.fbx.join(right, on="k")
    lookup = dict(zip(right["k"], right["w"]))
    assert got["v"].tolist() == left["v"].tolist()  # left join keeps every view row, in order
    assert [None if pd.isna(x) else int(x) for x in got["w"]] == [lookup.get(k) for k in left["k"]]
    inner = left.fbx.join(right, on="k", how="inner")
    assert sorted(inner["v"]) == sorted(left.loc[left["k"] < 40, "v"])


def test_left_join_keeps_64_bit_payload_exact():
    left, right = _views()
    got = left.fbx.join(right, on="k")
    hit = got["k"] < 40
    assert (got.loc[hit, "big"].astype("int64") == got.loc[hit, "k"] + 2**62).all()
    assert got["big"].isna().sum() == (~hit).sum()


@pytest.mark.parametrize("broadcast", [True, False])
def test_dask_broadcast_and_shuffle_equal_eager(broadcast):
    left, right = _views()
    eager = join(left, right, on="k")
    lazy = join(dd.from_pandas(left, npartitions=4), dd.from_pandas(right, npartitions=2), on="k", broadcast=broadcast)
    assert join_decisions()[-1].strategy == ("broadcast" if broadcast else "shuffle")
    pd.testing.assert_frame_equal(lazy.compute().sort_values("v").reset_index(drop=True), eager, check_dtype=False)


def test_key_dtype_mismatch_is_an_error_not_an_empty_join():
    left, right = _views()
    with pytest.raises(JoinError, match="'k' has dtype int64 on the left but str on the right"):
        left.fbx.join(right.astype({"k": "str"}), on="k")
    with pytest.raises(JoinError, match="uint64"):
        left.fbx.join(right.astype({"k": "uint64"}), on="k")
    with pytest.raises(JoinError, match="floating point"):
        left.fbx.join(right.astype({"k": "float64"}), on="k")
    with pytest.raises(JoinError, match="not in the right frame"):
        left.fbx.join(right.rename(columns={"k": "key"}), on="k")
    with pytest.raises(JoinError, match="how='outer'"):
        left.fbx.join(right, on="k", how="outer")


def test_narrow_int_keys_are_widened():
    left, right = _views()
    got = left.fbx.join(right.astype({"k": "int32"}), on="k", how="inner")
    assert len(got) == (left["k"] < 40).sum()


def test_oversized_dictionary_runs_on_the_host_and_gives_the_same_rows():
    left, right = _views()
    fits = join(left, right, on="k", device_budget=10**9)
    assert join_decisions()[-1].placement == "device"
    host = join(left, right, on="k", device_budget=16)
    decision = join_decisions()[-1]
    assert decision.placement == "host" and decision.budget_bytes == 16
    assert decision.build_bytes == right.memory_usage(deep=True, index=False).sum()
    assert "exceeds the given device budget" in str(decision)
    pd.testing.assert_frame_equal(host, fits)
    lazy = join(dd.from_pandas(left, npartitions=3), right, on="k", device_budget=16)
    assert join_decisions()[-1].placement == "host"
    pd.testing.assert_frame_equal(lazy.compute().sort_values("v").reset_index(drop=True), fits, check_dtype=False)


def test_taobao_split_into_views_joins_back_into_the_original_rows(shared_data):
    path = shared_data / "taobao_tiny_train.csv"
    original = read_view(path, eager=True)
    # In this sample four adgroup_ids carry two or three different ad feature rows, so the
    # ad view is keyed by (adgroup_id, campaign_id), which is functional here; the user
    # view is keyed by userid alone.
    per_ad = original.groupby("adgroup_id")[AD_COLS].nunique(dropna=False)
    assert (per_ad > 1).any(axis=1).sum() == 4
    ad_key = ["adgroup_id", "campaign_id"]
    users = original[["userid"] + USER_COLS].drop_duplicates("userid").reset_index(drop=True)
    ads = original[ad_key + AD_COLS[:1] + AD_COLS[2:]].drop_duplicates(ad_key).reset_index(drop=True)
    assert not original.groupby(ad_key)[AD_COLS[:1] + AD_COLS[2:]].nunique(dropna=False).gt(1).any().any()
    log_view = original.drop(columns=USER_COLS + [c for c in AD_COLS if c != "campaign_id"])
    assert len(users) < len(original) and len(ads) < len(original)
    rejoined = log_view.fbx.join(users, on="userid").fbx.join(ads, on=ad_key)[list(original.columns)]
    # a left join makes the dictionaries' int columns nullable (Int64); the values are the original ones
    pd.testing.assert_frame_equal(rejoined, original, check_dtype=False)
    assert rejoined.isna().sum().tolist() == original.isna().sum().tolist()
    numbered = log_view.assign(row=np.arange(len(log_view)))
    lazy = (dd.from_pandas(numbered, npartitions=4).fbx.join(dd.from_pandas(users, npartitions=2), on="userid")
            .fbx.join(ads, on=ad_key)).compute().sort_values("row").reset_index(drop=True)
    pd.testing.assert_frame_equal(lazy[list(original.columns)], original, check_dtype=False)


def test_local_cluster_read_clean_join_equals_eager(gen_dir, local_cluster):
    eager = workload.join_views(*workload.clean_views(workload.read_views(gen_dir, eager=True)))
    views = workload.read_views(gen_dir)
    views["impressions"] = views["impressions"].repartition(npartitions=5)
    lazy = workload.join_views(*workload.clean_views(views))
    assert lazy.npartitions >= 4
    got = local_cluster.compute(lazy).result()
    assert len(local_cluster.scheduler_info()["workers"]) == 2
    key = "instance_id"
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  eager.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert (got["category"] >= -1).all() and got["gender"].notna().all() and (got["slot"] >= 0).all()


@pytest.mark.gpu
def test_gpu_join_host_fallback_gives_device_frames():
    from fbrapids.frames.backend import get_backend, is_gpu_object, to_backend, to_host

    be = get_backend("gpu")
    left, right = (to_backend(f, be) for f in _views())
    device = join(left, right, on="k")
    host = join(left, right, on="k", device_budget=16)
    assert is_gpu_object(host) and join_decisions()[-1].placement == "host"
    pd.testing.assert_frame_equal(to_host(host).sort_values("v").reset_index(drop=True),
                                  to_host(device).sort_values("v").reset_index(drop=True), check_dtype=False)


def test_join_decisions_since_a_mark_survive_a_full_history() -> None:
    """The pipeline's summary lists the joins it planned by a mark, not by the history's length:
    past 256 recorded decisions the kept history stops growing (a long test session, a notebook),
    and a length-based slice then listed no join at all."""
    from fbrapids.joins.strategies import join_decision_mark

    left, right = pd.DataFrame({"k": [1, 2]}), pd.DataFrame({"k": [1], "v": [5]})
    for _ in range(300):
        left.fbx.join(right, on="k")
    mark = join_decision_mark()
    left.fbx.join(right, on="k", how="inner")
    assert [d.how for d in join_decisions(since=mark)] == ["inner"]
    assert len(join_decisions()) == 256 and join_decisions(since=0) == join_decisions()
