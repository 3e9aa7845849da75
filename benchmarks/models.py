"""Every model against an independent logistic regression, on the default demo data, over seeds.

For each size and seed, one run of each arm, each in a process of its own:

* ``lr``: the reference, scikit-learn's ``LogisticRegression(C=0.1)`` on the raw columns
  (``FeatureHasher`` 2^20 over ``column=value`` strings and the words of the query, title and
  interests; the dense columns standardised), the features built here with pandas from the
  four raw files, written from scikit-learn's documentation, not with fbrapids;
* ``logreg`` where fbrapids has that model, and ``dlrm``, ``wide_deep``, ``deepfm``, ``din``:
  :func:`fbrapids.app.demo.run_demo`, exactly what ``fbrapids demo --rows R --model M --seed S``
  runs (data generated with that seed, the model seeded with it, the defaults).

Both train on the demo's rows of the first six days and score its held-out last day.  The
table prints AUC, GAUC, logloss, NE and calibration as mean ± SD over the seeds, with the
generator's hidden model's AUC (the oracle) as the ceiling, and checks issue 34's
acceptance: each model's mean AUC at least the reference's, its mean logloss at most the
reference's, and every run's calibration in [0.95, 1.05].  The last line printed is one JSON
object: ``rows`` -> arm -> ``runs`` (one dict per seed) and ``mean`` / ``sd`` of each
metric; ``oracle_auc`` per size (the mean over the seeds; ``oracle_auc_by_seed``); ``checks``
per size and model; ``all_pass``.

    python benchmarks/models.py --rows 200000 1000000 --seeds 0 1 2

``--out FILE`` also writes that JSON to a file (``scripts/bench.py --only models`` keeps it
as ``benchmarks/results/models.json``); with ``--add-seeds`` the runs already in ``FILE``
are kept, but those of the arms and seeds run now, which replace them (the reference is
not run again for a seed it has; means, SDs and checks over all of them):

    python benchmarks/models.py --seeds 3 4 --out benchmarks/results/models.json --add-seeds

``--predictions DIR`` keeps each run's predictions as ``DIR/<rows>-<arm>-seed<seed>.npz``, so
that a calibration can be judged again without training again: ``label`` and ``group`` (the
user) of the held-out rows and ``logit``, their logits *before* the post-hoc calibration
(the reference's decision function); for the models also ``calibration`` (``a``, ``b`` of
``sigmoid(a * logit + b)``, fitted on the rows ``fit`` held back: :mod:`fbrapids.trainers.calibration`).
Files an older fbrapids kept also hold ``progressive_logit`` / ``progressive_label``, the
progressive pairs its calibration was fitted on (``benchmarks/held_out_calibration.py``).

Example:
    >>> r = {"lr": {"mean": {"auc": 0.68, "logloss": 0.35}},
    ...      "dlrm": {"mean": {"auc": 0.69, "logloss": 0.349}, "runs": [{"calibration": 1.01}]},
    ...      "din": {"mean": {"auc": 0.69, "logloss": 0.349}, "runs": [{"calibration": 1.2}]}}
    >>> checks(r)
    {'dlrm': True, 'din': False}
    >>> summary([{"auc": 0.5}, {"auc": 0.7}])["mean"]["auc"], summary([{"auc": 0.5}, {"auc": 0.7}])["sd"]["auc"]
    (0.6, 0.14142)
"""

from __future__ import annotations

import argparse
import json
import logging
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

MODELS = ("dlrm", "wide_deep", "deepfm", "din")
METRICS = ("auc", "gauc", "logloss", "ne", "calibration")
#: acceptance (issue 34): held-out calibration of every run within these bounds
CALIBRATION = (0.95, 1.05)
REFERENCE = "lr"

#: the sklearn reference (issue 34): hashed one-hot of the raw columns + standardised dense columns
HASH_FEATURES = 1 << 20
LR_C = 0.1
LR_MAX_ITER = 1000
#: scikit-learn's default solver, run to convergence (the default 100 iterations stop short here)
LR_SOLVER = "lbfgs"


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


def reference_features(df: pd.DataFrame) -> tuple[list[list[str]], np.ndarray]:
    """Per row, the ``column=value`` strings of the categorical columns and the words of the
    text columns (hashed by ``FeatureHasher``), and the dense matrix: ``d0``..``d9``, the
    query's word count, ``log1p(price)``."""
    hour, weekday = (df["ts"] % 86400) // 3600, (df["ts"] // 86400 + 3) % 7  # 1970-01-01 was a Thursday
    single = {"user": df["user_id"], "ad": df["ad_id"], "advertiser": df["advertiser_id"], "category": df["category"],
              "slot": df["slot"], "hour": hour, "weekday": weekday, "gender": df["gender"], "city": df["city"],
              "os": df["os"], "geo_city": df["geo_city"], "age": df["age"] // 10,
              **{f"b{j}": df[f"b{j}"] for j in range(5)}}
    cols = [[f"{name}={v}" for v in col.astype(str)] for name, col in single.items()]
    words = {name: df[col].fillna("").str.split(sep) for name, col, sep in
             (("q", "query", " "), ("t", "title", " "), ("i", "interests", "|"))}
    lists = [[[f"{name}={w}" for w in ws if w] for ws in col] for name, col in words.items()]
    rows = [[*one, *(w for ws in many for w in ws)] for one, many in
            zip(zip(*cols), zip(*lists))]
    qlen = np.array([sum(1 for w in ws if w) for ws in words["q"]], dtype=np.float64)
    dense = np.column_stack([df[[f"d{j}" for j in range(10)]].to_numpy(np.float64), qlen,
                             np.log1p(df["price"].fillna(0.0).to_numpy(np.float64))])
    return rows, dense


def lr_reference(data_dir: Path, keep: Path | None = None) -> dict[str, Any]:
    """scikit-learn's ``LogisticRegression(C=0.1)`` on :func:`reference_features` of the
    demo's rows (``FeatureHasher`` 2^20 + ``StandardScaler`` fitted on the training days),
    trained on the first days and scored on the held-out last day; written from sklearn's
    documentation, no fbrapids feature code.  ``keep``: an ``.npz`` file for the held-out
    rows' labels, users and logits."""
    from scipy import sparse as sp
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from fbrapids.datasets.synthetic.generate import DAYS, TS0
    from fbrapids.trainers.metrics import all_metrics

    t = time.perf_counter()
    df = reference_frame(Path(data_dir))
    rows, dense = reference_features(df)
    train = (df["ts"] < TS0 + (DAYS - 1) * 86400).to_numpy()
    hashed = FeatureHasher(n_features=HASH_FEATURES, input_type="string").transform(rows)
    scaler = StandardScaler().fit(dense[train])
    x = sp.hstack([hashed, sp.csr_matrix(np.nan_to_num(scaler.transform(dense)))]).tocsr()
    y = df["click"].to_numpy()
    lr = LogisticRegression(C=LR_C, solver=LR_SOLVER, max_iter=LR_MAX_ITER).fit(x[train], y[train])
    p = lr.predict_proba(x[~train])[:, 1]
    m = all_metrics(y[~train], p, df["user_id"].to_numpy()[~train])
    if keep is not None:
        np.savez_compressed(keep, label=y[~train].astype(np.int8), group=df["user_id"].to_numpy()[~train],
                            logit=lr.decision_function(x[~train]))
    return {**_rounded(m), "held_out_rows": int((~train).sum()), "train_rows": int(train.sum()),
            "seconds": round(time.perf_counter() - t, 1), "iterations": int(lr.n_iter_[0])}


def _rounded(m: dict[str, Any]) -> dict[str, Any]:
    return {k: None if m.get(k) is None else round(float(m[k]), 5) for k in METRICS}


def checks(results: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Per model (every arm but the reference): mean AUC >= the reference's, mean logloss <=
    the reference's, and every run's calibration within :data:`CALIBRATION`."""
    ref = results[REFERENCE]["mean"]
    lo, hi = CALIBRATION
    return {m: bool(r["mean"]["auc"] >= ref["auc"] and r["mean"]["logloss"] <= ref["logloss"]
                    and all(lo <= run["calibration"] <= hi for run in r["runs"]))
            for m, r in results.items() if m != REFERENCE}


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
    """One arm's run in this process: the reference on the demo's data, or one demo run;
    ``keep``: its predictions into this ``.npz`` file (module docstring)."""
    from fbrapids.datasets.synthetic.generate import ensure_dataset, read_metadata
    from fbrapids.app.demo import default_data_dir

    data = default_data_dir(rows, seed)
    if model == REFERENCE:
        ensure_dataset(rows, data, seed=seed)
        return {**lr_reference(data, keep), "oracle_auc": read_metadata(data).get("oracle_auc")}
    from fbrapids.app.demo import run_demo

    t = time.perf_counter()
    kw = {} if batch_size is None else {"batch_size": batch_size}
    with tempfile.TemporaryDirectory(prefix="fbrapids-models-") as work:
        r = run_demo(rows=rows, model=model, seed=seed, progress=False, work_dir=work, **kw)
        if keep is not None:
            _keep_predictions(keep, r.predictions, r.checkpoint)
    m = r.metrics
    return {**_rounded(m), "held_out_rows": int(m["n"]), "train_rows": int(r.rows.get("trained", 0)),
            "seconds": round(time.perf_counter() - t, 1), "samples_per_s": round(float(r.samples_per_s), 1),
            "oracle_auc": r.oracle_auc}


def arms(models: list[str], logreg: bool = True) -> list[str]:
    """The reference, ``logreg`` where the pipeline has it (and ``logreg``), then ``models``."""
    from fbrapids.app.pipeline import MODELS as PIPELINE_MODELS

    extra = ["logreg"] if logreg and "logreg" in PIPELINE_MODELS and "logreg" not in models else []
    return [REFERENCE, *extra, *models]


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
    res = {arm: summary(x) for arm, x in runs.items()}
    out["rows"][str(rows)] = res
    out["checks"][str(rows)] = checks(res)
    out["oracle_auc"][str(rows)] = round(statistics.fmean(out["oracle_auc_by_seed"][str(rows)].values()), 4)
    out["seeds_done"] = sorted({r["seed"] for x in runs.values() for r in x})
    out.setdefault("seeds_by_rows", {})[str(rows)] = out["seeds_done"]
    out["all_pass"] = all(all(c.values()) for c in out["checks"].values())
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000])
    ap.add_argument("--models", nargs="+", choices=(*MODELS, "logreg"), default=list(MODELS))
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
                           "criteria": (f"mean AUC >= the sklearn reference's, mean logloss <= its, calibration of "
                                        f"every run in [{CALIBRATION[0]}, {CALIBRATION[1]}]"),
                           "rows": {}, "oracle_auc": {}, "oracle_auc_by_seed": {}, "checks": {},
                           "command": "python benchmarks/models.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    kept = json.loads(args.out.read_text()) if args.add_seeds and args.out and args.out.exists() else None
    if kept is not None:
        out["seeds"] = sorted(set(kept["seeds"]) | set(args.seeds))
        out["machine"] = f"{kept['machine']}; seeds {', '.join(map(str, args.seeds))}: {out['machine']}"
        out["oracle_auc_by_seed"] = kept.get("oracle_auc_by_seed", {})
        first = kept.get("command", f"python benchmarks/models.py --seeds {' '.join(map(str, kept['seeds']))}")
        out["command"] = f"{first}, then {out['command']}"
        out["seeds_by_rows"] = dict(kept.get("seeds_by_rows", {}))
        for key in ("rows", "checks", "oracle_auc"):  # the sizes not run now stay as they were
            out[key] = {rows: v for rows, v in kept.get(key, {}).items() if int(rows) not in args.rows}
    run_arms = arms(args.models, not args.no_logreg)
    for rows in args.rows:
        runs: dict[str, list[dict]] = {}
        old = (kept or {}).get("rows", {}).get(str(rows), {})
        # these arms' runs of these seeds are run anew, but the reference's (the same data, the same fit)
        has_ref = {r["seed"] for r in old.get(REFERENCE, {}).get("runs", [])}
        for arm, x in old.items():
            runs[arm] = [r for r in x["runs"] if arm not in run_arms or r["seed"] not in args.seeds
                         or arm == REFERENCE]
        for seed in args.seeds:
            for arm in [a for a in run_arms if a != REFERENCE or seed not in has_ref]:  # a process each
                r = _child(rows, arm, seed, args.batch_size, args.predictions)
                out["oracle_auc_by_seed"].setdefault(str(rows), {})[str(seed)] = r.pop("oracle_auc")
                runs.setdefault(arm, []).append({"seed": seed, **r})
                log.info("%9d rows  seed %d  %-9s  AUC %.4f  logloss %.4f  NE %.4f  calibration %.3f  (%.0f s)", rows,
                         seed, arm, r["auc"], r["logloss"], r["ne"], r["calibration"], r["seconds"])
            _tally(out, rows, runs, args.out)  # after each seed: a run cut short keeps what it measured
        for arm, x in out["rows"][str(rows)].items():
            mu, sd = x["mean"], x["sd"]
            log.info("%9d rows  %-9s  " + "  ".join(f"{k} %.4f ± %.4f" for k in METRICS) + "  (oracle AUC %.4f)%s",
                     rows, arm, *[v for k in METRICS for v in (mu[k], sd[k])], out["oracle_auc"][str(rows)],
                     "" if arm == REFERENCE else ("  pass" if out["checks"][str(rows)][arm] else "  FAIL"))
    print(json.dumps(out))
    return 0 if out["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
