"""Every model against two independent peers, on the default demo data, over seeds.

For each size and seed, one run of each arm, each in a process of its own:

* ``lr``: scikit-learn's ``LogisticRegression`` with ``C`` chosen on a validation day, on the
  raw columns (``FeatureHasher`` 2^20 over ``column=value`` strings and the words of the query,
  title and interests; the dense columns standardised) plus the derived column the demo
  extracts (``qt_first_eq``: the query's first word is the title's), the features built here
  with pandas from the four raw files, written from scikit-learn's documentation, not with
  fbrapids.  ``C`` is chosen from :data:`LR_C_GRID` by the AUC on the last training day of a
  fit on the days before it; then the fit on every training day scores the held-out day;
* ``gbdt``: LightGBM (:func:`gbdt_reference`) on the same raw columns (ids and categories as
  its native categorical features, the dense columns as numbers) plus the same derived
  column, its categorical regularisation chosen from :data:`GBDT_GRID` and its rounds by
  early stopping on the same validation day, then refitted on every training day;
* ``logreg`` where fbrapids has that model, and ``dlrm``, ``wide_deep``, ``deepfm``, ``din``,
  ``dcn``: :func:`fbrapids.app.demo.run_demo`, exactly what ``fbrapids demo --rows R --model M
  --seed S`` runs (data generated with that seed, the model seeded with it, the defaults:
  the pipeline's recipe for the model and size).

All see the demo's rows (``same_rows`` in the JSON: every arm of a seed held out and trained
on as many rows), train on its first six days and score its held-out last day.  The table
prints AUC, GAUC, logloss, NE and calibration as mean ± SD over the seeds, with the
generator's hidden model's AUC (the oracle) as the ceiling, and checks the
acceptance: each model's mean AUC at least the tuned LR's, its mean logloss at most the
LR's, and every run's calibration in [0.97, 1.03]; and the best model's mean AUC against the
GBDT's (``vs_gbdt``).  The last line printed is one JSON object: ``rows`` -> arm -> ``runs``
(one dict per seed) and ``mean`` / ``sd`` of each metric; ``oracle_auc`` per size (the mean
over the seeds; ``oracle_auc_by_seed``); ``checks`` per size and model; ``vs_gbdt`` per size;
``all_pass``.

    python benchmarks/models.py --rows 200000 1000000 --seeds 0 1 2

``--out FILE`` also writes that JSON to a file (``scripts/bench.py --only models`` keeps it
as ``benchmarks/results/models.json``); with ``--add-seeds`` the runs already in ``FILE``
are kept, but those of the arms and seeds run now, which replace them (the peers are
not run again for a seed they have; means, SDs and checks over all of them):

    python benchmarks/models.py --seeds 3 4 --out benchmarks/results/models.json --add-seeds

``--arms`` runs only some arms (the others' runs kept with ``--add-seeds``).

``--predictions DIR`` keeps each run's predictions as ``DIR/<rows>-<arm>-seed<seed>.npz``, so
that a calibration can be judged again without training again: ``label`` and ``group`` (the
user) of the held-out rows and ``logit``, their logits *before* the post-hoc calibration
(the peers' raw scores); for the models also ``calibration`` (``a``, ``b`` of
``sigmoid(a * logit + b)``, fitted on the rows ``fit`` held back: :mod:`fbrapids.trainers.calibration`).

Example:
    >>> r = {"lr": {"mean": {"auc": 0.68, "logloss": 0.35}}, "gbdt": {"mean": {"auc": 0.70, "logloss": 0.34}},
    ...      "dlrm": {"mean": {"auc": 0.69, "logloss": 0.349}, "runs": [{"calibration": 1.01}]},
    ...      "din": {"mean": {"auc": 0.69, "logloss": 0.349}, "runs": [{"calibration": 1.2}]}}
    >>> checks(r), vs_gbdt(r)
    ({'dlrm': True, 'din': False}, {'best': 'dlrm', 'auc': 0.69, 'gbdt_auc': 0.7, 'gap': -0.01})
    >>> summary([{"auc": 0.5}, {"auc": 0.7}])["mean"]["auc"], summary([{"auc": 0.5}, {"auc": 0.7}])["sd"]["auc"]
    (0.6, 0.14142)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description  # noqa: E402

log = logging.getLogger("benchmarks.models")

MODELS = ("dlrm", "wide_deep", "deepfm", "din", "dcn")
METRICS = ("auc", "gauc", "logloss", "ne", "calibration")
#: acceptance: held-out calibration of every run within these bounds
CALIBRATION = (0.97, 1.03)
REFERENCE = "lr"
GBDT = "gbdt"
PEERS = (REFERENCE, GBDT)

#: the sklearn LR: hashed one-hot of the raw columns + standardised dense columns, C chosen on the validation day
HASH_FEATURES = 1 << 20
LR_C_GRID = (0.003, 0.01, 0.03, 0.1)
LR_MAX_ITER = 1000
#: scikit-learn's default solver, run to convergence (the default 100 iterations stop short here)
LR_SOLVER = "lbfgs"
DAY_S = 86400

#: LightGBM: its parameters (every fit), and the categorical regularisation tried on the validation day
GBDT_PARAMS = {"objective": "binary", "learning_rate": 0.05, "num_leaves": 63, "min_data_in_leaf": 100,
               "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "max_cat_to_onehot": 4,
               "max_cat_threshold": 64, "verbose": -1, "seed": 0, "deterministic": True, "num_threads": 2}
GBDT_GRID = ({"cat_smooth": 10, "cat_l2": 10, "min_data_per_group": 100},
             {"cat_smooth": 50, "cat_l2": 30, "min_data_per_group": 300},
             {"cat_smooth": 200, "cat_l2": 100, "min_data_per_group": 1000},
             {"cat_smooth": 800, "cat_l2": 300, "min_data_per_group": 3000})
GBDT_MAX_ROUNDS = 3000
GBDT_EARLY_STOP = 50
GBDT_CATEGORICAL = ("user_id", "ad_id", "advertiser_id", "category", "slot", "hour", "gender", "city", "os",
                    "geo_city", "b0", "b1", "b2", "b3", "b4")


def _context(text: Any) -> tuple[str, str]:
    """``(os, geo city)`` of an impression's ``ctx`` JSON; empty strings where it is missing or malformed."""
    try:
        ctx = json.loads(text)
    except (TypeError, ValueError):
        return "", ""
    if not isinstance(ctx, dict):
        return "", ""
    device, geo = ctx.get("device"), ctx.get("geo")
    return (str(device.get("os", "")) if isinstance(device, dict) else "",
            str(geo.get("city", "")) if isinstance(geo, dict) else "")


def reference_frame(data_dir: Path) -> pd.DataFrame:
    """The demo's rows, built with pandas from the four raw files: impressions with a slot,
    their user and ad (left joins), their basic features (inner join)."""
    imp = pd.read_parquet(data_dir / "impressions.parquet")
    imp = imp[imp["slot"] >= 0]
    os_geo = [_context(c) for c in imp["ctx"]]
    imp = imp.assign(os=[o for o, _ in os_geo], geo_city=[g for _, g in os_geo])
    return (imp.merge(pd.read_parquet(data_dir / "users.parquet"), on="user_id", how="left")
            .merge(pd.read_parquet(data_dir / "ads.parquet"), on="ad_id", how="left")
            .merge(pd.read_parquet(data_dir / "basic.parquet"), on="instance_id", how="inner"))


def _words(col: pd.Series, sep: str) -> list[list[str]]:
    """Each row's non-empty words (``sep``-separated; a null: none)."""
    return [[w for w in text.split(sep) if w] for text in col.fillna("").astype(str)]


def first_word_equal(df: pd.DataFrame) -> np.ndarray:
    """The demo's derived column ``qt_first_eq``, written here with pandas: 1 where the query's
    first word is the title's first word (both non-empty), else 0."""
    q, t = _words(df["query"], " "), _words(df["title"], " ")
    return np.array([int(bool(a) and bool(b) and a[0] == b[0]) for a, b in zip(q, t)], dtype=np.int8)


def reference_features(df: pd.DataFrame) -> tuple[list[list[str]], np.ndarray]:
    """Per row, the ``column=value`` strings of the categorical columns and the derived
    ``qt_first_eq``, and the words of the text columns (hashed by ``FeatureHasher``), and the
    dense matrix: ``d0``..``d9``, the query's word count, ``log1p(price)``."""
    hour, weekday = (df["ts"] % 86400) // 3600, (df["ts"] // 86400 + 3) % 7  # 1970-01-01 was a Thursday
    single = {"user": df["user_id"], "ad": df["ad_id"], "advertiser": df["advertiser_id"], "category": df["category"],
              "slot": df["slot"], "hour": hour, "weekday": weekday, "gender": df["gender"], "city": df["city"],
              "os": df["os"], "geo_city": df["geo_city"], "age": df["age"] // 10,
              "qt_first_eq": pd.Series(first_word_equal(df)), **{f"b{j}": df[f"b{j}"] for j in range(5)}}
    cols = [[f"{name}={v}" for v in col.astype(str)] for name, col in single.items()]
    words = {name: _words(df[col], sep) for name, col, sep in
             (("q", "query", " "), ("t", "title", " "), ("i", "interests", "|"))}
    lists = [[[f"{name}={w}" for w in ws] for ws in col] for name, col in words.items()]
    rows = [[*one, *(w for ws in many for w in ws)] for one, many in
            zip(zip(*cols), zip(*lists))]
    qlen = np.array([len(ws) for ws in words["q"]], dtype=np.float64)
    dense = np.column_stack([df[[f"d{j}" for j in range(10)]].to_numpy(np.float64), qlen,
                             np.log1p(df["price"].fillna(0.0).to_numpy(np.float64))])
    return rows, dense


def day_masks(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The demo's split of ``df``'s rows: ``train`` (the first days), ``test`` (the held-out
    last day), and for the choices ``fit`` (the training days but the last) and ``validation``
    (the last training day)."""
    from fbrapids.datasets.synthetic.generate import DAYS, TS0

    cutoff = TS0 + (DAYS - 1) * DAY_S
    ts = df["ts"].to_numpy()
    return {"train": ts < cutoff, "test": ts >= cutoff, "fit": ts < cutoff - DAY_S,
            "validation": (ts >= cutoff - DAY_S) & (ts < cutoff)}


def _lr_design(hashed: Any, dense: np.ndarray, rows: np.ndarray) -> Any:
    """``hashed`` beside ``dense`` standardised on ``rows`` (sparse CSR)."""
    from scipy import sparse as sp
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(dense[rows])
    return sp.hstack([hashed, sp.csr_matrix(np.nan_to_num(scaler.transform(dense)))]).tocsr()


def choose_c(hashed: Any, dense: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray]) -> tuple[float, dict]:
    """``C`` of :data:`LR_C_GRID` with the best validation-day AUC of a fit on the days before
    it (lbfgs warm-started from the previous ``C``'s solution, smallest first), and each
    ``C``'s validation AUC and logloss."""
    from sklearn.linear_model import LogisticRegression

    from fbrapids.trainers.metrics import all_metrics

    x = _lr_design(hashed, dense, masks["fit"])
    fit, val = masks["fit"], masks["validation"]
    lr = LogisticRegression(solver=LR_SOLVER, max_iter=LR_MAX_ITER, warm_start=True)
    scores = {}
    for c in sorted(LR_C_GRID):
        lr.set_params(C=c).fit(x[fit], y[fit])
        m = all_metrics(y[val], lr.predict_proba(x[val])[:, 1])
        scores[str(c)] = {"auc": round(float(m["auc"]), 5), "logloss": round(float(m["logloss"]), 5)}
    best = max(LR_C_GRID, key=lambda c: scores[str(c)]["auc"])
    return best, scores


def lr_reference(data_dir: Path, keep: Path | None = None) -> dict[str, Any]:
    """scikit-learn's ``LogisticRegression`` on :func:`reference_features` of the demo's rows
    (``FeatureHasher`` 2^20 + ``StandardScaler`` fitted on the rows it trains on), ``C``
    chosen on the validation day (:func:`choose_c`), then trained on every training day and
    scored on the held-out last day; written from sklearn's documentation, no fbrapids
    feature code.  ``keep``: an ``.npz`` file for the held-out rows' labels, users and logits."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression

    from fbrapids.trainers.metrics import all_metrics

    t = time.perf_counter()
    df = reference_frame(Path(data_dir))
    rows, dense = reference_features(df)
    masks = day_masks(df)
    train, test = masks["train"], masks["test"]
    hashed = FeatureHasher(n_features=HASH_FEATURES, input_type="string").transform(rows)
    y = df["click"].to_numpy()
    c, validation = choose_c(hashed, dense, y, masks)
    x = _lr_design(hashed, dense, train)
    lr = LogisticRegression(C=c, solver=LR_SOLVER, max_iter=LR_MAX_ITER).fit(x[train], y[train])
    p = lr.predict_proba(x[test])[:, 1]
    m = all_metrics(y[test], p, df["user_id"].to_numpy()[test])
    if keep is not None:
        np.savez_compressed(keep, label=y[test].astype(np.int8), group=df["user_id"].to_numpy()[test],
                            logit=lr.decision_function(x[test]))
    return {**_rounded(m), "held_out_rows": int(test.sum()), "train_rows": int(train.sum()),
            "seconds": round(time.perf_counter() - t, 1), "iterations": int(lr.n_iter_[0]), "C": c,
            "validation": validation}


def gbdt_frame(df: pd.DataFrame) -> pd.DataFrame:
    """LightGBM's inputs: the raw ids and categories as pandas categoricals (its native
    categorical features; the held-out day's unseen values are codes no training row has),
    the dense columns, the age, the price's ``log1p``, the query's word count and the derived
    ``qt_first_eq``."""
    out = pd.DataFrame(index=df.index)
    for c in GBDT_CATEGORICAL:
        col = ((df["ts"] % 86400) // 3600) if c == "hour" else df[c]
        out[c] = col.astype(str).astype("category")
    for j in range(10):
        out[f"d{j}"] = df[f"d{j}"].astype(np.float64)
    out["age"] = df["age"].astype("float64")
    out["log_price"] = np.log1p(df["price"].astype("float64"))
    out["query_len"] = [len(ws) for ws in _words(df["query"], " ")]
    out["qt_first_eq"] = first_word_equal(df)
    return out


def gbdt_reference(data_dir: Path, keep: Path | None = None) -> dict[str, Any]:
    """LightGBM on :func:`gbdt_frame` of the demo's rows: each of :data:`GBDT_GRID` trained on
    the training days but the last with early stopping on the last (the validation day), the
    best by validation AUC retrained on every training day for its best round count, and
    scored on the held-out last day; written from LightGBM's documentation."""
    import lightgbm as lgb

    from fbrapids.trainers.metrics import all_metrics

    t = time.perf_counter()
    df = reference_frame(Path(data_dir))
    x, y, masks = gbdt_frame(df), df["click"].to_numpy(), day_masks(df)
    fit, val = masks["fit"], masks["validation"]
    validation = []
    for extra in GBDT_GRID:
        params = {**GBDT_PARAMS, **extra, "metric": "auc"}
        booster = lgb.train(params, lgb.Dataset(x[fit], y[fit]), num_boost_round=GBDT_MAX_ROUNDS,
                            valid_sets=[lgb.Dataset(x[val], y[val])],
                            callbacks=[lgb.early_stopping(GBDT_EARLY_STOP, verbose=False)])
        m = all_metrics(y[val], booster.predict(x[val], num_iteration=booster.best_iteration))
        validation.append({**extra, "rounds": int(booster.best_iteration), "auc": round(float(m["auc"]), 5),
                           "logloss": round(float(m["logloss"]), 5)})
    best = max(validation, key=lambda v: v["auc"])
    params = {**GBDT_PARAMS, **{k: best[k] for k in GBDT_GRID[0]}}
    train, test = masks["train"], masks["test"]
    booster = lgb.train(params, lgb.Dataset(x[train], y[train]), num_boost_round=best["rounds"])
    p = booster.predict(x[test])
    m = all_metrics(y[test], p, df["user_id"].to_numpy()[test])
    if keep is not None:
        q = np.clip(p, 1e-15, 1 - 1e-15)
        np.savez_compressed(keep, label=y[test].astype(np.int8), group=df["user_id"].to_numpy()[test],
                            logit=np.log(q / (1 - q)))
    return {**_rounded(m), "held_out_rows": int(test.sum()), "train_rows": int(train.sum()),
            "seconds": round(time.perf_counter() - t, 1), "choice": best, "validation": validation}


def _rounded(m: dict[str, Any]) -> dict[str, Any]:
    return {k: None if m.get(k) is None else round(float(m[k]), 5) for k in METRICS}


def checks(results: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Per model (every arm but the peers): mean AUC >= the tuned LR's, mean logloss <= the
    LR's, and every run's calibration within :data:`CALIBRATION`."""
    ref = results[REFERENCE]["mean"]
    lo, hi = CALIBRATION
    return {m: bool(r["mean"]["auc"] >= ref["auc"] and r["mean"]["logloss"] <= ref["logloss"]
                    and all(lo <= run["calibration"] <= hi for run in r["runs"]))
            for m, r in results.items() if m not in PEERS}


def vs_gbdt(results: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The best model's mean AUC (of the arms but the peers) against the GBDT's: ``gap`` =
    best - GBDT (None without a GBDT arm)."""
    models = {m: r["mean"]["auc"] for m, r in results.items() if m not in PEERS}
    if GBDT not in results or not models:
        return None
    best = max(models, key=lambda m: models[m])
    gb = results[GBDT]["mean"]["auc"]
    return {"best": best, "auc": models[best], "gbdt_auc": gb, "gap": round(models[best] - gb, 5)}


def same_rows(runs: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether every arm of a seed trained on and held out as many rows (the demo's rows)."""
    by_seed: dict[int, set[tuple[int, int]]] = {}
    for x in runs.values():
        for r in x:
            by_seed.setdefault(r["seed"], set()).add((r["train_rows"], r["held_out_rows"]))
    return all(len(v) == 1 for v in by_seed.values())


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``runs`` with the mean and the sample SD (0 for one run) of each metric they hold."""
    keys = [k for k in METRICS if all(r.get(k) is not None for r in runs)]
    return {"runs": runs, "mean": {k: round(statistics.fmean(r[k] for r in runs), 5) for k in keys},
            "sd": {k: round(statistics.stdev([r[k] for r in runs]), 5) if len(runs) > 1 else 0.0 for k in keys}}


def _keep_predictions(keep: Path, predictions: dict[str, Any], checkpoint: str | None) -> None:
    """A demo run's held-out predictions, uncalibrated again, and its calibration, into ``keep``."""
    import torch

    state = torch.load(Path(checkpoint) / "dense.pt", weights_only=True) if checkpoint else {}
    a, b = (state["model"]["calibration"].double().tolist() if "model" in state else (1.0, 0.0))
    pred = np.clip(np.asarray(predictions["pred"], dtype=np.float64), 1e-15, 1 - 1e-15)
    extra: dict[str, Any] = {}
    group = predictions.get("group")
    np.savez_compressed(keep, label=np.asarray(predictions["label"]).astype(np.int8),
                        group=np.asarray(group if group is not None else []),
                        logit=(np.log(pred / (1 - pred)) - b) / a, calibration=np.array([a, b]), **extra)


def run_one(rows: int, model: str, batch_size: int | None, seed: int,
            keep: Path | None = None) -> dict[str, Any]:
    """One arm's run in this process: a peer on the demo's data, or one demo run; ``keep``:
    its predictions into this ``.npz`` file (module docstring).  The load average at its
    start is in ``load``."""
    from fbrapids.app.demo import default_data_dir
    from fbrapids.datasets.synthetic.generate import ensure_dataset, read_metadata

    data = default_data_dir(rows, seed)
    load = round(os.getloadavg()[0], 1)
    if model in PEERS:
        ensure_dataset(rows, data, seed=seed)
        peer = lr_reference if model == REFERENCE else gbdt_reference
        return {**peer(data, keep), "oracle_auc": read_metadata(data).get("oracle_auc"), "load": load}
    from fbrapids.app.demo import run_demo

    t = time.perf_counter()
    kw = {} if batch_size is None else {"batch_size": batch_size}
    with tempfile.TemporaryDirectory(prefix="fbrapids-models-") as work:
        r = run_demo(rows=rows, model=model, seed=seed, progress=False, work_dir=work, **kw)
        if keep is not None:
            _keep_predictions(keep, r.predictions, r.checkpoint)
    m = r.metrics
    epochs = int(r.recipe.get("epochs") or 1)  # the rows trained, once each: a pass's
    return {**_rounded(m), "held_out_rows": int(m["n"]), "train_rows": int(r.rows.get("trained", 0)) // epochs,
            "seconds": round(time.perf_counter() - t, 1), "samples_per_s": round(float(r.samples_per_s), 1),
            "oracle_auc": r.oracle_auc, "load": load, "recipe": r.recipe.get("text")}


def arms(models: list[str], logreg: bool = True) -> list[str]:
    """The peers, ``logreg`` where the pipeline has it (and ``logreg``), then ``models``."""
    from fbrapids.app.pipeline import MODELS as PIPELINE_MODELS

    extra = ["logreg"] if logreg and "logreg" in PIPELINE_MODELS and "logreg" not in models else []
    return [*PEERS, *extra, *models]


def _child(rows: int, arm: str, seed: int, batch_size: int | None, keep: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", str(rows), arm, "--seeds", str(seed)]
    if batch_size is not None:
        cmd += ["--batch-size", str(batch_size)]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        cmd += ["--predictions", str(keep)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log.error("%s", proc.stderr[-3000:])
        raise SystemExit(f"models: {rows} rows, {arm}, seed {seed}: exit {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tally(out: dict[str, Any], rows: int, runs: dict[str, list[dict]], path: Path | None) -> None:
    """Summaries and checks of ``runs`` into ``out`` (and ``path``, when given)."""
    order = {a: k for k, a in enumerate([*PEERS, "logreg", *MODELS])}
    res = {arm: summary(runs[arm]) for arm in sorted(runs, key=lambda a: order.get(a, len(order)))}
    key = str(rows)
    out["rows"][key] = res
    out["checks"][key] = checks(res) if REFERENCE in res else {}
    out.setdefault("vs_gbdt", {})[key] = vs_gbdt(res)
    out.setdefault("same_rows", {})[key] = same_rows(runs)
    out["oracle_auc"][key] = round(statistics.fmean(out["oracle_auc_by_seed"][key].values()), 4)
    out.setdefault("seeds_by_rows", {})[key] = sorted({r["seed"] for x in runs.values() for r in x})
    out["seeds_done"] = sorted({s for v in out["seeds_by_rows"].values() for s in v})
    out["all_pass"] = all(all(c.values()) for c in out["checks"].values()) and all(out["same_rows"].values())
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")


def _kept(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any] | None:
    """With ``--add-seeds``: the JSON already in ``--out``, its sizes not run now copied into ``out``."""
    kept = json.loads(args.out.read_text()) if args.add_seeds and args.out and args.out.exists() else None
    if kept is None:
        return None
    out["seeds"] = sorted(set(kept["seeds"]) | set(args.seeds))
    out["machine"] = f"{kept['machine']}; then: {out['machine']}"
    out["oracle_auc_by_seed"] = kept.get("oracle_auc_by_seed", {})
    out["command"] = f"{kept.get('command', '')}, then {out['command']}"
    out["seeds_by_rows"] = dict(kept.get("seeds_by_rows", {}))
    for key in ("rows", "checks", "oracle_auc", "vs_gbdt", "same_rows"):  # the sizes not run now stay as they were
        out[key] = {rows: v for rows, v in kept.get(key, {}).items() if int(rows) not in args.rows}
    return kept


def _run_size(args: argparse.Namespace, out: dict[str, Any], kept: dict[str, Any] | None, rows: int,
              run_arms: list[str]) -> None:
    """Every arm of ``run_arms`` on every seed at ``rows`` (the kept runs of the others, and the
    peers' of the seeds they have, stay), tallied after each seed."""
    runs: dict[str, list[dict]] = {}
    old = (kept or {}).get("rows", {}).get(str(rows), {})
    has_peer = {p: {r["seed"] for r in old.get(p, {}).get("runs", [])} for p in PEERS}
    for arm, x in old.items():  # these arms' runs of these seeds are run anew, but a peer's (the same fit)
        runs[arm] = [r for r in x["runs"] if arm not in run_arms or r["seed"] not in args.seeds or arm in PEERS]
    for seed in args.seeds:
        for arm in [a for a in run_arms if a not in PEERS or seed not in has_peer[a]]:  # a process each
            r = _child(rows, arm, seed, args.batch_size, args.predictions)
            out["oracle_auc_by_seed"].setdefault(str(rows), {})[str(seed)] = r.pop("oracle_auc")
            runs.setdefault(arm, []).append({"seed": seed, **r})
            log.info("%9d rows  seed %d  %-9s  AUC %.4f  logloss %.4f  NE %.4f  calibration %.3f  (%.0f s, load %.1f)",
                     rows, seed, arm, r["auc"], r["logloss"], r["ne"], r["calibration"], r["seconds"], r["load"])
        _tally(out, rows, runs, args.out)  # after each seed: a run cut short keeps what it measured
    for arm, x in out["rows"][str(rows)].items():
        mu, sd = x["mean"], x["sd"]
        check = out["checks"][str(rows)].get(arm)
        log.info("%9d rows  %-9s  " + "  ".join(f"{k} %.4f ± %.4f" for k in METRICS) + "  (oracle AUC %.4f)%s",
                 rows, arm, *[v for k in METRICS for v in (mu[k], sd[k])], out["oracle_auc"][str(rows)],
                 "" if check is None else ("  pass" if check else "  FAIL"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000])
    ap.add_argument("--models", nargs="+", choices=(*MODELS, "logreg"), default=list(MODELS))
    ap.add_argument("--arms", nargs="+", choices=(*PEERS, *MODELS, "logreg"), default=None,
                    help="run only these arms (default: the peers, logreg and --models)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch-size", type=int, default=None, help="the demo's default when not given")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--add-seeds", action="store_true", help="keep the runs already in --out and add these seeds'")
    ap.add_argument("--predictions", type=Path, default=None,
                    help="keep each run's predictions here, one .npz per run (module docstring)")
    ap.add_argument("--no-logreg", action="store_true", help="leave out the logreg arm")
    ap.add_argument("--one", nargs=2, metavar=("ROWS", "ARM"), help=argparse.SUPPRESS)  # a child's run
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.one:
        keep = (None if args.predictions is None
                else args.predictions / f"{args.one[0]}-{args.one[1]}-seed{args.seeds[0]}.npz")
        print(json.dumps(run_one(int(args.one[0]), args.one[1], args.batch_size, args.seeds[0], keep)))
        return 0
    out: dict[str, Any] = {"machine": machine_description(), "seeds": args.seeds, "batch_size": args.batch_size,
                           "criteria": (f"mean AUC >= the tuned sklearn LR's, mean logloss <= its, calibration of "
                                        f"every run in [{CALIBRATION[0]}, {CALIBRATION[1]}]"),
                           "rows": {}, "oracle_auc": {}, "oracle_auc_by_seed": {}, "checks": {},
                           "command": "python benchmarks/models.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    kept = _kept(args, out)
    run_arms = args.arms or arms(args.models, not args.no_logreg)
    for rows in args.rows:
        _run_size(args, out, kept, rows, run_arms)
    print(json.dumps(out))
    return 0 if out["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
