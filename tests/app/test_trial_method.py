"""The feature trial's method: metrics against sklearn, the combined interval's calibration
under its own model, arms that start as one function, planted data, logistic regression."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings, strategies as st
from sklearn.metrics import roc_auc_score

from fbrapids.app.trials import arm_rounds, combine, paired_bootstrap


def _gauc_reference(y, p, g, w_user=None):
    """GAUC as the docstring defines it: per user with both classes, sklearn's AUC, weighted
    by the user's rows (times its bootstrap multiplicity)."""
    num = den = 0.0
    for u in np.unique(g):
        m = g == u
        if y[m].min() == y[m].max():
            continue
        k = 1 if w_user is None else w_user[u]
        num += k * m.sum() * roc_auc_score(y[m], p[m])
        den += k * m.sum()
    return num / den


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 120), users=st.integers(1, 12), levels=st.sampled_from([2, 5, 1000]),
       n_boot=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_every_resamples_auc_is_sklearns_with_the_users_counts_as_weights(n, users, levels, n_boot, seed):
    """Each bootstrap round's AUC (in C, one pass per round) against sklearn's weighted AUC:
    ties within and across users (scores of 2 or 5 levels), users drawn 0 times, rounds of
    one class (NaN)."""
    rng = np.random.default_rng(seed)
    y, g = rng.integers(0, 2, n), rng.integers(0, users, n)
    p = rng.integers(0, levels, n) / levels
    r = arm_rounds(y, [p], g, n_boot=n_boot, seed=seed)
    present = np.unique(g)
    draw = np.random.default_rng(seed)  # the resamples: users drawn with replacement, in this order
    weights = [np.ones(n, dtype=np.int64)]
    for _ in range(n_boot):
        counts = np.bincount(draw.integers(0, len(present), len(present)), minlength=len(present))
        weights.append(counts[np.searchsorted(present, g)])
    for b, w in enumerate(weights):
        kept = w > 0
        if len(np.unique(y[kept])) < 2:
            assert np.isnan(r["auc"][0, b])
        else:
            assert r["auc"][0, b] == pytest.approx(roc_auc_score(y[kept], p[kept], sample_weight=w[kept]), abs=1e-12)


def test_arm_rounds_match_sklearn_on_the_full_set_and_each_resample():
    from fbrapids.trainers.metrics import all_metrics

    rng = np.random.default_rng(1)
    n = 700
    y, g = rng.integers(0, 2, n), rng.integers(0, 45, n)
    p = np.round(rng.random(n), 2)  # ties, within and across users
    r = arm_rounds(y, [p], g, n_boot=3, seed=5)
    assert r["auc"][0, 0] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert r["gauc"][0, 0] == pytest.approx(_gauc_reference(y, p, g), abs=1e-12)
    assert r["gauc"][0, 0] == pytest.approx(all_metrics(y, p, g)["gauc"], abs=1e-12)
    users = np.unique(g)
    draw = np.random.default_rng(5)  # the resamples: users drawn with replacement, in this order
    for b in range(3):
        counts = np.bincount(draw.integers(0, len(users), len(users)), minlength=len(users))
        w = counts[np.searchsorted(users, g)]
        assert r["auc"][0, 1 + b] == pytest.approx(roc_auc_score(y, p, sample_weight=w), abs=1e-12)
        assert r["gauc"][0, 1 + b] == pytest.approx(_gauc_reference(y, p, g, dict(zip(users, counts))), abs=1e-12)


def test_paired_bootstrap_counts_undefined_rounds():
    y = np.array([1, 0, 0, 0]); g = np.array([0, 1, 2, 3]); p = np.array([0.9, 0.1, 0.2, 0.3])
    d = paired_bootstrap(y, p, p[::-1].copy(), g, n_boot=50, seed=0)
    # a resample without user 0 holds no positive: its AUC is undefined, counted, not dropped
    assert d["nan_rounds"]["auc"] == int(np.isnan(d["auc"]).sum()) > 0


def test_combined_interval_is_calibrated_under_its_model_and_the_users_only_one_is_not():
    """Deltas d_k = U + T_k (no true effect): U the users' draw shared by the K seeds, T_k
    each seed's training noise; the bootstrap rounds scatter around the mean by U's SD."""
    rng = np.random.default_rng(0)
    k, sims, sd_users, sd_train = 3, 1500, 0.002, 0.004
    called = users_only = 0
    for _ in range(sims):
        d = rng.normal(0, sd_users) + rng.normal(0, sd_train, k)
        boot = d.mean() + rng.normal(0, sd_users, 100)
        called += combine(d, boot)["verdict"] != "no detectable effect"
        lo, hi = np.quantile(boot, [0.025, 0.975])  # the old method: users only
        users_only += lo > 0 or hi < 0
    assert 0.03 <= called / sims <= 0.07
    assert users_only / sims > 0.15  # ~22%: training noise left out


def test_combine_with_one_seed_uses_the_users_alone():
    r = combine(np.array([0.01]), np.random.default_rng(0).normal(0.01, 0.002, 400))
    assert r["df"] == float("inf") and r["se_seeds"] == 0 and r["se"] == pytest.approx(0.002, rel=0.15)


@pytest.mark.parametrize("model", ["dlrm", "wide_deep", "deepfm", "din", "logreg", "dcn"])
def test_arms_start_as_one_function_and_the_baseline_sees_no_candidate(model):
    from fbrapids.app.pipeline import build_model
    from fbrapids.trainers.arms import baseline_view, zero_candidate_inputs
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.side_by_side import fit_side_by_side
    from fbrapids.trainers.sparse import StoreConfig

    dense, sparse, seqs = ["d0", "dnew"], ["a", "b", "new"], {}
    if model == "din":
        sparse, seqs = sparse + ["hist"], {"hist": "a"}
    nets = []
    for _ in range(2):  # the two arms of one seed
        torch.manual_seed(7)
        net = build_model(model, 2, sparse, StoreConfig(cache_rows=256, seed=7), 4, sequences=seqs)
        zeroed = zero_candidate_inputs(net, dense, sparse, ["dnew"], ["new"])
        nets.append(net)
    assert zeroed  # something read the candidates
    sa, sb = nets[0].state_dict(), nets[1].state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    rng = np.random.default_rng(0)
    sp = {f: (torch.from_numpy(rng.integers(1, 50, 12)), torch.arange(0, 12, 2)) for f in sparse}
    batch = Batch(torch.from_numpy(rng.normal(size=(6, 2)).astype(np.float32)), torch.tensor([0., 1.] * 3), sp)
    base = baseline_view(batch, dense, ["dnew"], ["new"])
    assert torch.equal(base.dense[:, 0], batch.dense[:, 0]) and not base.dense[:, 1].any()
    assert base.sparse["new"][0].tolist() == [0] * 6  # the placebo: one constant id per row
    net = nets[0]
    other = Batch(batch.dense.clone(), batch.label, dict(sp))
    other.dense[:, 1] += 5
    other.sparse["new"] = (sp["new"][0] + 1, sp["new"][1])

    def outputs():
        net.eval()
        with torch.no_grad():
            return net(batch), net(base), net(other)

    full, placebo, moved = outputs()
    assert torch.equal(full, placebo) and torch.equal(full, moved)  # step 0: the candidates' inputs are ignored
    fit_side_by_side([net], [batch, batch], progress=False)
    full, _, moved = outputs()
    assert not torch.equal(full, moved)  # trained, the candidate arm reads them


@pytest.mark.parametrize("most", [4, 2])
def test_aa_arm_sees_the_candidates_shuffled_across_rows_and_the_rest_as_is(most):
    """The A/A arm's view: each row's candidate bag (ragged, or one id a row) and dense value
    are another row's, by one permutation; the reference rebuilds the bags as Python lists."""
    from fbrapids.trainers.arms import shuffled_view
    from fbrapids.trainers.batch import Batch

    rng = np.random.default_rng(3)
    # ragged with empty bags (most=4), or one id a row (most=2: the usual candidate column)
    bags = [list(rng.integers(0, 100, rng.integers(0, most) if most > 2 else 1)) for _ in range(40)]
    values = torch.tensor([v for b in bags for v in b], dtype=torch.int64)
    offsets = torch.tensor(np.cumsum([0] + [len(b) for b in bags[:-1]]), dtype=torch.int64)
    other = (torch.arange(40), torch.arange(40))
    batch = Batch(torch.from_numpy(rng.normal(size=(40, 2)).astype(np.float32)), torch.zeros(40),
                  {"new": (values, offsets), "old": other})
    out = shuffled_view(batch, ["d0", "dnew"], ["dnew"], ["new"], torch.Generator().manual_seed(1))
    v, o = out.sparse["new"]
    got = [v[a:b].tolist() for a, b in zip(o.tolist(), o.tolist()[1:] + [len(v)])]
    # the permutation, recovered from the dense column (distinct floats), moves the bags alike
    perm = [int(np.flatnonzero(batch.dense[:, 1].numpy() == x)[0]) for x in out.dense[:, 1].numpy()]
    assert sorted(perm) == list(range(40)) and perm != list(range(40))
    assert got == [bags[i] for i in perm]
    assert torch.equal(out.dense[:, 0], batch.dense[:, 0]) and out.sparse["old"] is other
    again = shuffled_view(batch, ["d0", "dnew"], ["dnew"], ["new"], torch.Generator().manual_seed(1))
    assert torch.equal(again.sparse["new"][0], v)  # the arm's seed fixes its permutations


def test_planted_columns_move_the_clicks_by_their_beta(tmp_path):
    from fbrapids.datasets.synthetic.generate import PLANT_Z, generate, read_metadata
    from fbrapids.errors import DataGenError

    generate(3000, tmp_path / "plain", seed=4)
    generate(3000, tmp_path / "planted", seed=4, plant={"p_noise": 0, "p_big": 2.0})
    a = pd.read_parquet(tmp_path / "plain" / "impressions.parquet")
    b = pd.read_parquet(tmp_path / "planted" / "impressions.parquet")
    assert a.drop(columns="click").equals(b[a.columns].drop(columns="click"))  # only clicks move
    assert pd.read_parquet(tmp_path / "plain" / "basic.parquet").equals(
        pd.read_parquet(tmp_path / "planted" / "basic.parquet"))
    assert str(b["p_big"].dtype) == "int16" and set(b["p_big"]) <= set(range(len(PLANT_Z)))
    ctr = b.groupby("p_big")["click"].mean()
    assert ctr.loc[12:].mean() > 2 * ctr.loc[:3].mean()  # beta 2: z from -1.5 to +1.5
    ctr0 = b.groupby(pd.cut(b["p_noise"], [-1, 7, 16]), observed=True)["click"].mean()
    assert abs(ctr0.iloc[0] - ctr0.iloc[1]) < 0.03  # beta 0: nothing
    plant = read_metadata(tmp_path / "planted")["plant"]
    assert plant["p_noise"]["oracle_auc_gain"] == 0 and plant["p_big"]["oracle_auc_gain"] > 0.05
    with pytest.raises(DataGenError, match="'ts' already names a column"):
        generate(200, tmp_path / "bad", plant={"ts": 1.0})


def test_gen_cli_plants_columns(tmp_path, capsys):
    from fbrapids.app.cli import main

    assert main(["gen", "--rows", "500", "--out", str(tmp_path), "--plant", "p=0.5"]) == 0
    assert "planted p: beta 0.5, oracle AUC gain +" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["gen", "--rows", "500", "--out", str(tmp_path), "--plant", "p"])


def test_small_calibration_gives_the_planted_verdicts(tmp_path):
    """benchmarks/trial_calibration.py end to end, small: a noise trial and a strongly planted
    one with logistic regression (deterministic: one seed; the verdicts are fixed by the seeds)."""
    from benchmarks.trial_calibration import main

    out = tmp_path / "calib.json"
    assert main(["--noise", "1", "--planted", "1", "--betas", "1.5", "--noise-rows", "4000", "--planted-rows", "4000",
                 "--seeds", "1", "--model", "logreg", "--batch-size", "256", "--boot", "50",
                 "--state", str(tmp_path / "state.jsonl"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["trials"] == 2 and res["noise_trials"] == 1
    assert res["false_positive"]["auc"]["called"] == res["false_positive"]["gauc"]["called"] == 0
    assert res["power"]["beta=1.5"]["auc"] == 1  # (GAUC, over ~400 held-out users of 4,000 rows: too noisy here)
    assert res["power"]["beta=1.5"]["oracle_auc_gain"] > 0.05
    assert res["aa"]["auc"]["trials"] == 1 and res["aa"]["auc"]["rows"] == [4000]  # the planted trial's A/A check


def test_logreg_reaches_sklearn_logistic_regression_on_the_same_hashed_features(gen_dir, tmp_path):
    """sklearn's side (FeatureHasher over "feature=id" strings + LogisticRegression, from its
    docs) is benchmarks/logreg_vs_sklearn.py's; at 200k rows the comparison over seeds is
    benchmarks/models.py's (logreg beside its scaled, C=0.1 sklearn reference).

    At 5,000 rows one data set's held-out AUC moves by ~0.02 with the data seed (about 700
    held-out rows), so the comparison is the mean over three data sets, each paired with
    its own reference."""
    from benchmarks.logreg_vs_sklearn import sklearn_auc
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic.generate import generate

    gaps = []
    for seed in (0, 1, 2):
        data = gen_dir if seed == 0 else tmp_path / f"gen-{seed}"
        if seed:
            generate(5000, data, seed=seed)
        reference = sklearn_auc(data, n_features=1 << 18)
        # every training row, as sklearn's: the calibration's held-back rows (an AUC-neutral
        # shift) would compare a model trained on 256 fewer of the ~4,000 rows
        ours = run_pipeline(data, model="logreg", batch_size=256, checkpoint=False, count_clean=False,
                            progress=False, calibrate=False).metrics["auc"]
        gaps.append(ours - reference)
    assert float(np.mean(gaps)) >= -0.005, gaps


def test_logreg_is_deterministic_whatever_the_seed():
    from fbrapids.app.pipeline import build_model
    from fbrapids.trainers.batch import Batch
    from fbrapids.trainers.side_by_side import fit_side_by_side
    from fbrapids.trainers.sparse import StoreConfig

    rng = np.random.default_rng(0)
    batch = Batch(torch.from_numpy(rng.normal(size=(8, 3)).astype(np.float32)), torch.tensor([0.0, 1.0] * 4),
                  {"a": (torch.from_numpy(rng.integers(0, 9, 8)), torch.arange(8))})
    outs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        net = build_model("logreg", 3, ["a"], StoreConfig(cache_rows=64, seed=seed))
        fit_side_by_side([net], [batch] * 3, progress=False)
        net.eval()
        with torch.no_grad():
            outs.append(net(batch))
    assert torch.equal(outs[0], outs[1]) and outs[0].abs().sum() > 0


def test_every_arm_trains_on_the_pipelines_shuffled_batches(tmp_path):
    """The trial's training stream is run_pipeline's (rows shuffled through a buffer of
    SHUFFLE_BUFFER rows, not in time order): the batches every arm and seed read, fingerprinted
    in order, equal pipeline.batch_stream's over the same rows with the window, and differ
    from the time order (what the trial streamed before).  A second pass (another seed)
    reads the same batches in the same order: the trial's first seed fixes it."""
    import hashlib

    from fbrapids import ops
    from fbrapids.app.pipeline import SHUFFLE_BUFFER, batch_stream, plan_frames, training_inputs
    from fbrapids.app.trial_training import ArmsSession, plan_arms
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.datasets.synthetic.generate import generate
    from fbrapids.trainers.side_by_side import batch_fingerprint

    generate(1200, tmp_path, seed=3)
    cand = {"slot_x_os": ops.cross("slot", "os")}
    with ArmsSession(tmp_path, cand, plan_arms(list(cand), each=False, aa=False), batch_size=128, embedding_dim=4,
                     order_seed=5) as session:
        first = session.train([5], progress=False)[0]
        second = session.train([6], progress=False)[0]
    w = as_workload(tmp_path).with_features(cand, sparse=list(cand))
    inputs = training_inputs(w, "dlrm", 16, 128, 5)
    train = plan_frames(inputs, w).train.compute()  # the rows in time order, computed once

    def order(window):
        h, rows = hashlib.sha1(), 0
        for b in batch_stream(train, inputs.dense, inputs.sparse, 128, 5, "error", w.label, w.group, window):
            h.update(batch_fingerprint(b))
            rows += len(b)
        return h.hexdigest(), rows

    shuffled, rows = order(SHUFFLE_BUFFER)
    assert rows > 500 and session.extraction["rows streamed"] == 2 * (rows + len(session.label))
    assert first.order == second.order == shuffled != order(0)[0]
    assert first.rows == rows and session.extraction["passes"] == 2
