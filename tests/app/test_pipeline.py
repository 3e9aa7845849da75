import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from fbrapids import ops
from fbrapids.app.pipeline import feature_frame, run_pipeline
from fbrapids.app.trial_stats import _auc_weighted
from fbrapids.app.trials import paired_bootstrap, trial
from fbrapids.datasets.synthetic import views as workload


@pytest.fixture(scope="module")
def pipeline_run(gen_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("pipe")
    return run_pipeline(gen_dir, batch_size=512, progress=False, work_dir=work, cache_rows=1 << 14,
                        host_rows=1 << 15, tiers="tiered"), work  # the tiers asked for: SSD files (auto: one RAM tier)


def test_pipeline_end_to_end_counts_and_writes_no_intermediate_files(pipeline_run, gen_dir):
    r, work = pipeline_run
    # measured bytes (/proc/<pid>/io): the run writes its checkpoint and SSD-tier files and nothing
    # more (features written out, as write-then-train does, would push it past them); it reads
    # at least its input files
    assert r.bytes_written >= r.work_tree["checkpoints"] > 0
    assert r.bytes_written <= sum(r.work_tree.values()) + (1 << 20), (r.bytes_written, r.work_tree)
    assert set(r.work_tree) == {"checkpoints", "store", ".fbrapids.lock"}  # the lock: its holder's PID and host
    assert r.bytes_read >= sum(f.stat().st_size for f in gen_dir.glob("*.parquet"))
    assert r.rows["impressions read"] == 5000
    assert r.rows["after clean"] == int((pd.read_parquet(gen_dir / "impressions.parquet")["slot"] >= 0).sum())
    assert r.rows["trained"] + r.rows["held out"] == r.rows["merged (train+test)"] <= r.rows["after clean"]
    k = r.kernel
    # per streamed partition: the JSON-cleaning plan's two launches (json_scan, json_pick), then one
    # launch per feature layer
    assert k["layers"] >= 2 and k["launches"] == (k["layers"] + 2) * k["partitions"] > 0
    assert {"cache", "host", "ssd"} <= set(r.store) and r.store["cache"]["hits"] > 0
    assert any((work / "store").rglob("*")), "the SSD tier keeps real files"
    assert r.metrics["n"] == r.rows["held out"]
    # the producer's compute time is recorded (overlap = busy - wait is in [0, busy] by its
    # definition, so nothing to check there; that partitions are computed while the trainer
    # holds a batch is counted in tests/trainers/test_trainer_stream.py)
    assert r.extract_busy_s > 0
    assert r.checkpoint and Path(r.checkpoint).is_dir()
    assert f"bytes written          {r.bytes_written:>12,}" in r.render() and "AUC" in r.render()
    # the overlap's share of the training pass's extraction: at least the overlap over every pass's busy
    # seconds (the held-out pass's are in those too), at most all of it; none said without an overlap
    share = re.search(r"overlapped w/ training +[0-9.]+ s  \((\d+)% of the training pass's extraction\)", r.render())
    if r.overlap_s > 0:
        assert share and round(100 * r.overlap_s / r.extract_busy_s) <= int(share.group(1)) <= 100, r.render()
    else:
        assert share is None
    # the JSON cleaning's counts are shown: malformed and too deep apart, non-string leaves per field
    jc = r.clean["json"]["ctx"]
    assert jc["malformed"] > 0 and jc["rows"] == r.rows["after clean"]  # parsed after the slot filter
    leaves = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in jc.items() if k.startswith("not_string:"))
    assert (f"JSON ctx: {jc['malformed']:,} malformed, {jc['too_deep']:,} nested deeper than 64, "
            f"{jc['null_input']:,} null; non-string leaves read as null: {leaves}") in r.render()
    # the joins' strategies and sizes, and each pass's shared work, are in the summary
    strategies = [j.split("(")[1].split(")")[0] for j in r.joins]
    assert strategies == ["left, broadcast", "left, broadcast", "inner, partitioned"], r.joins
    assert all("build side ~" in j and f"  {j}" in r.render() for j in r.joins)
    for name, plan in r.passes.items():
        if name == "held-out":  # computed with the training pass, partition by partition, and kept
            assert plan["kept_partitions"] == r.passes["training"]["partitions"] and plan["kept_bytes"] > 0
            assert plan["partitions"] == 0 and f"{plan['kept_partitions']} partitions computed with the training " \
                                                "pass" in r.render()
            continue
        assert plan["partitions"] >= 1 and plan["tasks"] > plan["partitions"]  # shared tasks: tests/pipeline/test_scale_passes.py
        assert f"{name} pass: {plan['partitions']} partitions" in r.render()
    assert k["partitions"] == r.passes["training"]["partitions"]  # each partition extracted once
    # its memory, sampled by stage against the budget (tests/runs/test_memory_budget.py)
    mem = r.memory
    assert mem["scheduler"] == "threads" and set(mem["peak_by_stage"]) >= {"plan", "extract+train", "extract+evaluate"}
    assert 0 < mem["peak_bytes"] <= mem["budget_bytes"] and mem["estimate_bytes"] > 0
    assert f"peak {mem['peak_bytes'] / 2**30:.2f} GiB in {mem['peak_stage']}" in r.render()


def test_held_out_metrics_match_sklearn(pipeline_run):
    r, _ = pipeline_run
    p = r.predictions
    assert r.metrics["auc"] == pytest.approx(roc_auc_score(p["label"], p["pred"]), abs=1e-9)


def test_same_seed_same_model_same_predictions(pipeline_run, gen_dir, tmp_path):
    r, _ = pipeline_run
    again = run_pipeline(gen_dir, batch_size=512, progress=False, work_dir=tmp_path, cache_rows=1 << 14,
                         host_rows=1 << 15, checkpoint=False, count_clean=False)
    np.testing.assert_array_equal(again.predictions["pred"], r.predictions["pred"])


def test_weighted_auc_and_paired_bootstrap():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 600)
    p = rng.integers(0, 30, 600) / 30
    w = rng.integers(0, 4, 600)
    assert _auc_weighted(y, p, w) == pytest.approx(roc_auc_score(y, p, sample_weight=w), abs=1e-12)
    g = rng.integers(0, 50, 600)
    same = paired_bootstrap(y, p, p, g, n_boot=20)
    assert np.all(same["auc"] == 0) and np.all(np.nan_to_num(same["gauc"]) == 0)
    better = paired_bootstrap(y, p, y * 0.6 + p * 0.4, g, n_boot=20)
    assert np.all(better["auc"] > 0)


def test_trial_reports_deltas_with_intervals_from_one_extraction_pass(gen_dir):
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.app.trials import VERDICTS
    from fbrapids.datasets import synthetic

    cand = {"slot_x_os": ops.cross("slot", "os")}
    opts = dict(batch_size=512, cache_rows=1 << 14, host_rows=1 << 15, count_clean=False, progress=False)
    r = trial(gen_dir, cand, n_boot=30, seeds=2, **opts)
    for m in ("auc", "gauc"):
        assert len(r.seed_deltas[m]) == 2 and r.delta[m] == pytest.approx(np.mean(r.seed_deltas[m]))
        assert r.delta[m] == pytest.approx(r.candidate[m] - r.baseline[m])
        lo, hi = r.interval[m]
        assert lo <= r.delta[m] <= hi and r.verdict[m] in VERDICTS
        assert (r.verdict[m] == "helps") == (lo > 0) and (r.verdict[m] == "hurts") == (hi < 0)
        # the interval and P(better) come from the same t distribution: they must agree
        assert (lo <= 0 or r.p_better[m] >= 0.975) and (hi >= 0 or r.p_better[m] <= 0.025)
        assert r.se[m] ** 2 == pytest.approx(r.se_seeds[m] ** 2 + r.se_users[m] ** 2)
        assert r.seed_spread[m] >= 0 and r.nan_rounds[m] == 0
        # the A/A arms (candidates shuffled) go through the same test; the spread is their largest |delta|
        assert len(r.aa_seed_deltas[m]) == 2 and r.aa_delta[m] == pytest.approx(np.mean(r.aa_seed_deltas[m]))
        assert r.aa_spread[m] == pytest.approx(np.max(np.abs(r.aa_seed_deltas[m])))
        assert r.aa_verdict[m] in VERDICTS and r.aa_interval[m][0] <= r.aa_delta[m] <= r.aa_interval[m][1]
        assert r.info_delta[m] == pytest.approx(r.delta[m] - r.aa_delta[m])  # candidate against the A/A arm
    assert r.n_users > 10 and "P(better)" in r.render() and "A/A spread" in r.render()
    # one extraction pass fed the 2 x 2 models: the kernel launches, partitions and rows of one run
    one = run_pipeline(synthetic.workload(gen_dir).with_features(cand, sparse=list(cand)), checkpoint=False, **opts)
    assert r.extraction["models"] == 6  # baseline, candidate and A/A arm per seed
    assert r.extraction["launches"] == one.kernel["launches"] > 0
    assert r.extraction["partitions"] == one.kernel["partitions"]
    assert r.extraction["rows streamed"] == one.rows["trained"] + one.rows["held out"]
    with pytest.raises(Exception, match="already name baseline columns"):
        trial(gen_dir, {"hour": ops.hour("ts")}, progress=False)


def _canonical(frame):
    return frame.sort_values("instance_id").reset_index(drop=True)


def test_local_cluster_features_equal_the_eager_path_bit_for_bit(gen_dir, local_cluster):
    eager = workload.merge_basic(
        workload.extract_features(workload.join_views(*workload.clean_views(workload.read_views(gen_dir, eager=True)))),
        workload.read_views(gen_dir, eager=True)["basic"])
    lazy, _ = feature_frame(gen_dir)
    got = local_cluster.compute(lazy).result()
    assert lazy.npartitions >= 1
    pd.testing.assert_frame_equal(_canonical(got)[list(eager.columns)], _canonical(eager), check_dtype=False,
                                  check_exact=True)


def test_a_worker_killed_mid_extraction_is_retried_and_the_result_is_identical(tmp_path, local_cluster):
    from fbrapids.datasets.synthetic.generate import generate

    generate(60_000, tmp_path, seed=2)
    views = workload.read_views(tmp_path)
    views["impressions"] = views["impressions"].repartition(npartitions=12)
    expected = _canonical(workload.extract_features(workload.join_views(*workload.clean_views(
        workload.read_views(tmp_path, eager=True)))))
    lazy = workload.extract_features(workload.join_views(*workload.clean_views(views)))
    future = local_cluster.compute(lazy)
    pids = local_cluster.run(os.getpid)
    victim_addr, victim_pid = sorted(pids.items())[0]
    deadline = time.time() + 60
    while time.time() < deadline and not local_cluster.processing().get(victim_addr):
        time.sleep(0.01)
    os.kill(victim_pid, signal.SIGKILL)
    got = future.result(timeout=300)
    pd.testing.assert_frame_equal(_canonical(got), expected, check_dtype=False, check_exact=True)
    local_cluster.wait_for_workers(2, timeout=60)
    assert victim_pid not in local_cluster.run(os.getpid).values()


def test_a_view_file_vanishing_after_planning_is_named(gen_dir, tmp_path):
    import shutil

    for f in gen_dir.iterdir():
        shutil.copy(f, tmp_path / f.name)
    lazy, _ = feature_frame(tmp_path)
    (tmp_path / "impressions.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="impressions.parquet"):
        lazy.compute()


