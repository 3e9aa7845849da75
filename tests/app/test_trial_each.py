"""Many candidates in one trial, a trial killed and resumed, a sequential trial: on a small
declared log with one planted column and two noise columns (CPU backend, logistic
regression, a few thousand rows).

* ``fbrapids trial --each`` killed (SIGKILL) after its first seed leaves no result file and
  keeps that seed's predictions; ``--resume`` trains only the seed left and ranks the
  candidates; each candidate's comparison equals a trial of that candidate alone;
* a work dir holding a trial's seeds is refused without ``--resume``, and with other settings;
* a sequential trial stops at its first look when the answer is clear.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops

DAY = 86400
CANDIDATES = {"planted_h": 'ops.hash_bucket("planted", 64)', "noise_a_h": 'ops.hash_bucket("noise_a", 64)',
              "noise_b_h": 'ops.hash_bucket("noise_b", 64)'}


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    """A log of 4,000 impressions over 8 days: ``planted`` (16 levels) moves the click's logit
    by up to 2.25, ``noise_a`` / ``noise_b`` by nothing; the last day held out."""
    d = tmp_path_factory.mktemp("each-log")
    rng = np.random.default_rng(0)
    n = 4000
    ts = 1413849600 + np.sort(rng.integers(0, 8 * DAY, n))
    user, ad, planted = rng.integers(0, 300, n), rng.integers(0, 40, n), rng.integers(0, 16, n)
    logit = -1.6 + 1.5 * (planted - 7.5) / 5 + 0.3 * ((ad % 5) - 2)
    click = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    pd.DataFrame({"click": click, "ts": ts, "user": user, "ad": ad, "planted": planted,
                  "noise_a": rng.integers(0, 16, n), "noise_b": rng.integers(0, 16, n)}).to_csv(d / "log.csv",
                                                                                                 index=False)
    p = d / "w.toml"
    p.write_text('name = "mine"\nlabel = "click"\ntime = "ts"\ngroup = "user"\nsplit = { rule = "last_day" }\n'
                 '[[views]]\nname = "log"\npath = "log.csv"\n[features]\nsparse = ["user", "ad"]\n')
    return p


def _argv(workload: Path, work: Path, out: Path, *more: str) -> list[str]:
    cands = [a for name, expr in CANDIDATES.items() for a in ("--candidate", f"{name}={expr}")]
    return ["trial", "--workload", str(workload), *cands, "--each", "--no-aa", "--model", "logreg", "--seeds", "2",
            "--n-boot", "30", "--batch-size", "256", "--epochs", "3", "--work-dir", str(work),
            "--models-per-pass", "4", "--json", str(out), "--no-progress", *more]


def test_a_killed_each_trial_resumes_from_its_finished_seed_and_ranks_as_separate_trials(workload, tmp_path, capsys):
    from fbrapids.app.cli import main
    from fbrapids.app.trials import trial
    from fbrapids.workloads import load_workload

    work, out = tmp_path / "work", tmp_path / "trial.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "fbrapids", *_argv(workload, work, out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = work / "seeds" / "seed0.npz"
    while not first.exists() and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # between its two passes (4 arms, 4 models a pass: a seed each)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    assert first.exists() and not (work / "seeds" / "seed1.npz").exists() and not out.exists()

    assert main(_argv(workload, work, out, "--resume")) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["each"] and data["correction"] == "holm" and data["seeds"] == [0, 1]
    assert data["cost"]["models"] == 4 and data["cost"]["models_resumed"] == 4 and data["cost"]["passes"] == 1
    assert data["ranking"]["auc"][0] == "planted_h" and "cost: " in text
    res = data["candidates"]
    assert res["planted_h"]["verdict"]["auc"] == "helps"
    # (a noise id column costs a logistic regression some AUC at 3,400 training rows: "hurts" may be right)
    assert "helps" not in {res[n]["verdict"]["auc"] for n in ("noise_a_h", "noise_b_h")}
    for n, r in res.items():  # the family's p-value: the larger of the own test's and the pooled test's
        assert r["p_value"]["auc"] <= r["p_family"]["auc"] <= r["p_adjusted"]["auc"] and r["family"] == 3

    alone = trial(load_workload(workload), {"planted_h": ops.hash_bucket("planted", 64)}, each=True, aa=False,
                  model="logreg", seeds=2, n_boot=30, batch_size=256, epochs=3, progress=False)
    mine = alone.results["planted_h"]
    assert mine.seed_deltas == res["planted_h"]["seed_deltas"]  # the same arms, read the same batches
    assert list(mine.interval["auc"]) == res["planted_h"]["interval"]["auc"]
    assert mine.family == 1 and mine.p_adjusted == mine.p_value and alone.cost["models"] == 4


def test_a_work_dir_holding_a_trial_is_refused_without_resume_and_with_other_settings(workload, tmp_path, capsys):
    from fbrapids.app.cli import main
    from fbrapids.app.trial_workdir import TrialWorkDir

    work, out = tmp_path / "work", tmp_path / "trial.json"
    with TrialWorkDir(work, {"model": "logreg", "batch_size": 128}) as kept:
        kept.save(_seed_run(), np.array([0, 1]), np.array([3, 4]))
    capsys.readouterr()
    assert main(_argv(workload, work, out)) == 2
    err = capsys.readouterr().err
    assert f"{work} holds a trial's finished seeds (0); pass resume=True (--resume)" in err, err
    assert main(_argv(workload, work, out, "--resume")) == 2  # recorded: batch size 128
    err = capsys.readouterr().err
    assert "cannot resume from" in err and "batch_size: 128 in the checkpoint, 256 in this run" in err, err
    assert not out.exists()


def _seed_run():
    from fbrapids.app.trial_training import SeedRun

    return SeedRun(0, {"baseline": np.array([0.3, 0.6])}, rows=10, steps=1, order="x")


def test_a_sequential_trial_stops_at_its_first_look_when_the_answer_is_clear(workload):
    from fbrapids.app.trials import trial
    from fbrapids.workloads import load_workload

    r = trial(load_workload(workload), {"planted_h": ops.hash_bucket("planted", 64)}, min_effect=0.01, model="logreg",
              aa=False, n_boot=30, batch_size=256, epochs=3, progress=False)
    seq = r.sequential
    assert seq["max_seeds"] == 6 and seq["looks_allowed"] == 5 and [h["seeds"] for h in seq["looks"]] == [2]
    assert seq["looks"][0]["positions"] == {"planted_h": "above"} and r.seeds == [0, 1]
    assert r.level == pytest.approx(1 - 0.05 / 5) and r.verdict["auc"] == "helps" and r.cost["models"] == 4
    assert r.p_adjusted["auc"] == pytest.approx(min(1.0, 5 * r.p_value["auc"]))
    assert "sequential: margin +0.0100 on AUC" in r.render()


def test_a_pass_scored_beside_the_next_pass_gives_the_bits_of_one_pass_scored_at_the_end(workload):
    """Two passes (one seed each): the first pass's arms are scored on the scoring thread while
    the second trains; one pass of both seeds scores every arm at the end, on every core.
    Every score, so every delta, interval and p-value, is the same bits; the scoring thread
    is gone once the trial returns."""
    import threading

    from fbrapids.app.trials import trial
    from fbrapids.workloads import load_workload

    w = load_workload(workload)
    cands = {"planted_h": ops.hash_bucket("planted", 64), "noise_a_h": ops.hash_bucket("noise_a", 64)}
    runs = {per_pass: trial(w, cands, each=True, aa=False, model="logreg", seeds=2, n_boot=30, batch_size=256,
                            epochs=1, models_per_pass=per_pass, progress=False) for per_pass in (3, 6)}
    assert runs[3].cost["passes"] == 2 and runs[6].cost["passes"] == 1
    for name in cands:
        two, one = runs[3].results[name], runs[6].results[name]
        assert two.seed_deltas == one.seed_deltas and two.interval == one.interval and two.se == one.se
        assert two.p_value == one.p_value and two.verdict == one.verdict
    assert not [t for t in threading.enumerate() if t.name.startswith("fbrapids-trial-scores")]
