"""Why a model's calibration on the held-out day moves: the oracle's own, and calibration slices judged again.

This is the study that replaced ``fit``'s calibration on *progressive* pairs (each batch's
logits before its own step) by one on batches held back from training
(:mod:`fbrapids.trainers.calibration`, docs/models.md). Its ``slices`` need the progressive
pairs that runs of that older fbrapids kept (``benchmarks/models.py --predictions``); runs
kept since hold none and are left out of them (``days`` and ``by_user`` take every run).

Calibration here is ``benchmarks/models.py``'s: the mean prediction over the click rate on
the held-out last day.  Two parts, written as one JSON object:

* ``days``: per size and seed, the demo's rows (impressions with a slot and basic features)
  of each day with the generator's hidden probabilities
  (:func:`fbrapids.datasets.synthetic.generate.hidden_probabilities`): rows, click rate, mean hidden probability
  and the oracle's calibration (mean hidden probability over the click rate).  The hidden
  model has no day effect (the hour of the day is its only time term), so a day's mean
  probability moves only with which users and ads come that day, and its click rate on top
  of that with the coin flips; the oracle's held-out calibration is the part of any model's
  that no calibration fitted on the training days can remove.  ``binomial_sd``: the SD of
  that ratio from the coin flips alone, ``sqrt((1 - p) / (n p))`` at the day's ``n`` and
  mean probability ``p``.
* ``slices``: per run kept by ``benchmarks/models.py --predictions DIR``, the held-out
  calibration and logloss with the shift of :func:`fbrapids.trainers.calibration.intercept`
  fitted on the newest ``k`` progressive pairs, for each ``k`` of :data:`SLICES` (0: no
  calibration), and the count of runs outside [0.95, 1.05] per ``k`` and size; and
  ``pseudo``, the same choice judged without the held-out day: the shift fitted on the
  ``k`` pairs before the newest :data:`PSEUDO_TEST` and the calibration of those newest
  pairs with it (``pseudo_per_slice``: the mean distance from one over the runs); and
  ``recency``: in blocks of :data:`BLOCK` progressive pairs (a batch of the demo's, counted
  from the newest), the SD of a block's mean prediction relative to their mean, and its
  correlation with the click rate of the block before (a model whose mean prediction
  follows the labels of the last steps ends in a state that a shift fitted over many
  steps does not describe).
* ``by_user``: per size and seed, the held-out day's rows by how many training rows their
  user has (:data:`USER_BUCKETS`): the oracle's calibration there, and each kept model
  run's without the shift (where a model's error sits: rarely seen users or all).

    python benchmarks/held_out_calibration.py --rows 200000 --seeds 0 1 2 3 4 --predictions DIR --out FILE

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(-2, 1, 200_000); y = (rng.random(200_000) < 1 / (1 + np.exp(-(z + 0.5)))).astype(float)
    >>> r = slice_metrics(z[:100_000], y[:100_000], z[100_000:], y[100_000:], (0, 1 << 15))
    >>> [round(r[k]["calibration"], 1) for k in ("0", "32768")], round(r["32768"]["shift"], 1)  # planted: +0.5
    ([0.7, 1.0], 0.5)
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description, write_result  # noqa: E402

log = logging.getLogger("benchmarks.held_out_calibration")

#: progressive pairs the shift is fitted on (0: none); fit's default is 2^15, it keeps 2^17
SLICES = (0, 1 << 14, 1 << 15, 1 << 16, 1 << 17)
BOUNDS = (0.95, 1.05)
#: the newest progressive pairs that stand in for a held-out day in ``pseudo``
PSEUDO_TEST = 1 << 14
#: users by their rows in the training days, for ``by_user`` (``None``: no upper bound)
USER_BUCKETS = ((0, 1), (1, 5), (5, 50), (50, None))
#: progressive pairs per block in ``recency`` (the demo's batch size)
BLOCK = 2048
#: fit's calibration slice (:data:`fbrapids.trainers.calibration.CALIBRATION_ROWS`)
CALIBRATION_SLICE = 1 << 15


def demo_rows(rows: int, seed: int) -> pd.DataFrame:
    """The demo's rows of ``(rows, seed)`` (impressions with a slot and basic features):
    ``instance_id``, ``ts``, ``click``, ``prob`` (the hidden model's) and ``user_id``."""
    from fbrapids.datasets.synthetic.generate import ensure_dataset, hidden_probabilities
    from fbrapids.runs.data_cache import default_data_dir

    data = default_data_dir(rows, seed)
    if not (data / "basic.parquet").exists():  # a folder the demo made is read as it is (a run may hold it)
        data = ensure_dataset(rows, data, seed=seed)
    imp = pd.read_parquet(Path(data) / "impressions.parquet", columns=["instance_id", "slot", "user_id"])
    basic = pd.read_parquet(Path(data) / "basic.parquet", columns=["instance_id"])
    demo = imp.loc[imp["slot"] >= 0, ["instance_id", "user_id"]].merge(basic, on="instance_id")
    return hidden_probabilities(rows, seed).merge(demo, on="instance_id")


def _bucket(counts: np.ndarray) -> np.ndarray:
    """The index in :data:`USER_BUCKETS` of each training-row count."""
    return np.searchsorted(np.array([lo for lo, _ in USER_BUCKETS[1:]]), counts, side="right")


def by_user(h: pd.DataFrame, rows: int, seed: int, folder: Path | None) -> dict[str, Any]:
    """The held-out day's calibration by how many training rows the user has
    (:data:`USER_BUCKETS`): the oracle's, and each kept model run's without the shift."""
    from fbrapids.datasets.synthetic.generate import DAYS, TS0

    held = h["ts"] >= TS0 + (DAYS - 1) * 86400
    counts = h.loc[~held, "user_id"].value_counts()
    te = h[held]
    b = _bucket(te["user_id"].map(counts).fillna(0).to_numpy())
    out: dict[str, Any] = {"buckets": [f"{lo}-{'' if hi is None else hi - 1}" for lo, hi in USER_BUCKETS],
                           "rows": [int((b == i).sum()) for i in range(len(USER_BUCKETS))],
                           "oracle": [round(float(te["prob"][b == i].mean() / te["click"][b == i].mean()), 3)
                                      for i in range(len(USER_BUCKETS))], "runs": {}}
    for f in sorted(folder.glob(f"{rows}-*-seed{seed}.npz")) if folder is not None else []:
        z = np.load(f)
        if "calibration" not in z:  # the models' runs (the reference keeps none)
            continue
        p, y = _sigmoid(z["logit"]), z["label"].astype(np.float64)
        bz = _bucket(pd.Series(z["group"]).map(counts).fillna(0).to_numpy())
        out["runs"][f.stem.split("-")[1]] = [round(float(p[bz == i].mean() / y[bz == i].mean()), 3)
                                             for i in range(len(USER_BUCKETS))]
    return out


def day_table(h: pd.DataFrame) -> list[dict[str, Any]]:
    """Per day of :func:`demo_rows`: rows, clicks, click rate, mean hidden probability, the
    oracle's calibration and its binomial SD (module docstring)."""
    from fbrapids.datasets.synthetic.generate import TS0

    out = []
    for day, g in h.groupby((h["ts"] - TS0) // 86400):
        n, p, c = len(g), float(g["prob"].mean()), float(g["click"].mean())
        out.append({"day": int(day), "rows": n, "ctr": round(c, 5), "mean_prob": round(p, 5),
                    "oracle_calibration": round(p / c, 4), "binomial_sd": round(float(np.sqrt((1 - p) / (n * p))), 4)})
    return out


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


def slice_metrics(prog_z: np.ndarray, prog_y: np.ndarray, z: np.ndarray, y: np.ndarray,
                  slices: tuple[int, ...] = SLICES) -> dict[str, dict[str, float]]:
    """Per ``k`` of ``slices``: the held-out (``z``, ``y``) calibration and logloss with the
    shift fitted on the newest ``k`` progressive pairs (``prog_z``, ``prog_y``; 0: none)."""
    from fbrapids.trainers.calibration import intercept

    out = {}
    for k in slices:
        if k > len(prog_z):
            continue
        b = intercept(prog_z[len(prog_z) - k:], prog_y[len(prog_y) - k:]) if k else 0.0
        p = np.clip(_sigmoid(z + b), 1e-15, 1 - 1e-15)
        out[str(k)] = {"shift": round(b, 4), "calibration": round(float(p.mean() / y.mean()), 4),
                       "logloss": round(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), 5)}
    return out


def recency(logits: np.ndarray, labels: np.ndarray, block: int = BLOCK) -> dict[str, float]:
    """Blocks of ``block`` progressive pairs counted from the newest: the SD of a block's mean
    prediction over the blocks' mean, and the correlation of a block's mean prediction with
    the click rate of the block before it.

    Example:
        >>> y = (np.random.default_rng(0).random(1 << 14) < 0.1).astype(float)
        >>> z = np.full(len(y), -2.2)
        >>> recency(z, y)["block_pred_sd"]
        0.0
    """
    n = len(logits) // block * block
    p = _sigmoid(np.asarray(logits[len(logits) - n:], dtype=np.float64)).reshape(-1, block).mean(1)
    c = np.asarray(labels[len(labels) - n:], dtype=np.float64).reshape(-1, block).mean(1)
    sd = float(p.std() / p.mean())
    corr = float(np.corrcoef(p[1:], c[:-1])[0, 1]) if sd > 0 and len(p) > 2 else 0.0
    return {"blocks": len(p), "block_pred_sd": round(sd, 4), "corr_with_previous_ctr": round(corr, 3)}


def run_slices(folder: Path) -> dict[str, Any]:
    """:func:`slice_metrics` of every model run kept in ``folder`` (``<rows>-<arm>-seed<seed>.npz``),
    per size: runs and, per slice, the count outside :data:`BOUNDS` and the calibrations' mean and SD."""
    sizes: dict[str, dict[str, Any]] = {}
    for f in sorted(folder.glob("*.npz")):
        rows, arm, seed = f.stem.split("-")
        z = np.load(f)
        if "progressive_logit" not in z:
            continue
        a, b = z["calibration"]
        m = slice_metrics(z["progressive_logit"].astype(np.float64), z["progressive_label"].astype(np.float64),
                          a * z["logit"], z["label"].astype(np.float64))  # a = 1: a shift-only calibration
        pz, py = z["progressive_logit"].astype(np.float64), z["progressive_label"].astype(np.float64)
        t = len(pz) - PSEUDO_TEST
        pseudo = slice_metrics(pz[:t], py[:t], pz[t:], py[t:], tuple(k for k in SLICES if k <= t))
        sizes.setdefault(rows, {"runs": []})["runs"].append({"arm": arm, "seed": int(seed.removeprefix("seed")),
                                                             "fitted_shift": round(float(b), 4), "slices": m,
                                                             "pseudo": pseudo, "recency": recency(pz, py),
                                                             "raw_progressive_calibration": round(float(
                                                                 _sigmoid(pz[-CALIBRATION_SLICE:]).mean()
                                                                 / py[-CALIBRATION_SLICE:].mean()), 4)})
    lo, hi = BOUNDS
    for s in sizes.values():
        s["recency"] = {key: round(statistics.fmean(r["recency"][key] for r in s["runs"]), 3)
                        for key in ("block_pred_sd", "corr_with_previous_ctr")}
        s["per_slice"] = {}
        for k in map(str, SLICES):
            cal = [r["slices"][k]["calibration"] for r in s["runs"] if k in r["slices"]]
            if cal:
                s["per_slice"][k] = {"runs": len(cal), "outside": sum(not lo <= c <= hi for c in cal),
                                     "mean": round(statistics.fmean(cal), 4),
                                     "sd": round(statistics.stdev(cal), 4) if len(cal) > 1 else 0.0,
                                     "mean_abs_dev": round(statistics.fmean(abs(c - 1) for c in cal), 4)}
            ps = [r["pseudo"][k]["calibration"] for r in s["runs"] if k in r["pseudo"]]
            if ps:
                s.setdefault("pseudo_per_slice", {})[k] = {
                    "runs": len(ps), "mean": round(statistics.fmean(ps), 4),
                    "mean_abs_dev": round(statistics.fmean(abs(c - 1) for c in ps), 4)}
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--predictions", type=Path, default=None, help="benchmarks/models.py --predictions DIR")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--add", action="store_true", help="keep the other sizes' days already in --out")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out: dict[str, Any] = {"machine": machine_description(), "days": {}, "held_out": {}, "by_user": {},
                           "command": "python benchmarks/held_out_calibration.py " +
                           " ".join(sys.argv[1:] if argv is None else argv)}
    if args.add and args.out is not None and args.out.exists():
        kept = json.loads(args.out.read_text())
        for key in ("days", "held_out", "by_user"):
            out[key] = {rows: v for rows, v in kept.get(key, {}).items() if int(rows) not in args.rows}
        out["command"] = f"{kept['command']}, then {out['command']}"
    for rows in args.rows:
        for seed in args.seeds:
            h = demo_rows(rows, seed)
            days = day_table(h)
            out["by_user"].setdefault(str(rows), {})[str(seed)] = by_user(h, rows, seed, args.predictions)
            out["days"].setdefault(str(rows), {})[str(seed)] = days
            last = days[-1]
            log.info("%8d rows seed %d: held-out day oracle calibration %.4f (binomial SD %.4f); mean hidden prob "
                     "per day %s", rows, seed, last["oracle_calibration"], last["binomial_sd"],
                     " ".join(f"{d['mean_prob']:.4f}" for d in days))
        cal = [d[-1]["oracle_calibration"] for d in out["days"][str(rows)].values()]
        out["held_out"][str(rows)] = {"oracle_calibration": cal, "outside": sum(not BOUNDS[0] <= c <= BOUNDS[1]
                                                                                for c in cal)}
    if args.predictions is not None:
        out["slices"] = run_slices(args.predictions)
        for rows, s in out["slices"].items():
            for k, v in s["per_slice"].items():
                log.info("%8s rows  slice %6s: %d of %d runs outside [%.2f, %.2f]; calibration %.4f ± %.4f", rows, k,
                         v["outside"], v["runs"], *BOUNDS, v["mean"], v["sd"])
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.out is not None:
        write_result(args.out, out)
    else:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
