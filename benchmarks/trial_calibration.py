"""Calibration of ``fbrapids.trial`` on planted data: false alarms on noise, power on real effects.

Each trial is an independent draw: its own generated data (``generate(rows, seed=...,
plant={"p": beta})``, a fresh data seed per trial), its own planted column, its own
training seeds (``trial(seeds=K, seed=...)``).  Noise trials plant ``beta = 0`` (the
column moves nothing); planted trials plant betas whose oracle AUC gain (stored by the
generator) is about +0.024, +0.011, +0.006 and +0.002 (the power curve).  The candidate is the planted column itself, a
sparse id feature.

Reports, per metric (AUC, GAUC): the false-positive rate of the noise trials (verdict not
"no detectable effect") with its Clopper-Pearson 95% interval, the power per effect size
(verdict "helps"), the delta's bias against the oracle gain, the A/A check (each planted trial's
A/A arms: its candidate shuffled across rows; the largest |A/A delta| over trials, per seed
and seed-averaged, their SD, and how often the A/A verdict was not "no detectable
effect"), and the seconds per trial;
ends with one JSON line, also written to ``benchmarks/results/trial_calibration.json``.

Two more designs, each with its own state and result files:

* ``--candidates N`` (N > 1): each run tries N candidates at once, each against one shared
  baseline (``trial(each=True, aa=False)``: the family's p-values, Holm's correction by
  default, ``--correction bh`` for Benjamini-Hochberg's): noise runs plant N pure-noise
  columns, planted runs one column of each beta among N - 1 noise ones.  Reported: the
  **family-wise** false-alarm rate (runs with any noise candidate called "helps", and with
  any called at all), what the same runs would give on the candidates' own p-values with
  and without the correction (from the stored p-values), the planted candidate's power and
  rank, and the seconds and models per run (``trial_calibration_family.json``).
* ``--min-effect M``: sequential trials (``trial(min_effect=M)``, up to ``--seeds`` seeds,
  default 6): false-alarm rate, power and the seeds used per trial, with the looks'
  positions against the margin (``trial_calibration_sequential.json``).

Resumable: every finished trial is appended to a JSON-lines state file; a re-run skips
the trials it holds (``--report`` only summarises it).

    nice -n 10 python benchmarks/trial_calibration.py [--noise 40] [--planted 10] [--seeds 3]
    nice -n 10 python benchmarks/trial_calibration.py --candidates 10 --noise 20 --planted 10 --betas 0.25
    nice -n 10 python benchmarks/trial_calibration.py --min-effect 0.003 --noise 60 --planted 10 --betas 0.5 0.25
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "trial_calibration.json"
STATE = ROOT / "benchmarks" / "results" / "trial_calibration.state.jsonl"
METRICS = ("auc", "gauc")
#: planted effects: beta -> the oracle AUC gain it gives on the default data (about)
BETAS = (0.54, 0.27, 0.37, 0.16)

log = logging.getLogger("trial_calibration")


def plan(noise: int, planted: int, betas: tuple[float, ...], noise_rows: int, planted_rows: int) -> list[dict]:
    """The trials, interleaved (two noise trials, then a planted one of each beta in turn) so
    that a partial run is balanced; each with its own data seed."""
    queues = [[{"id": f"noise-{i}", "beta": 0.0, "rows": noise_rows, "data_seed": 10_000 + i} for i in range(noise)]]
    for j, b in enumerate(betas):
        queues.append([{"id": f"beta{b:g}-{i}", "beta": b, "rows": planted_rows, "data_seed": 20_000 + 1000 * j + i}
                       for i in range(planted)])
    out: list[dict] = []
    turn = 0
    while any(queues):
        for _ in range(2):
            if queues[0]:
                out.append(queues[0].pop(0))
        planted_queues = [q for q in queues[1:] if q]
        if planted_queues:
            out.append(planted_queues[turn % len(planted_queues)].pop(0))
            turn += 1
    return out


def run_one(spec: dict, seeds: int, n_boot: int, model: str, batch_size: int = 2048, noise_aa: bool = False) -> dict:
    """One trial of ``spec`` (its own data, seeds and planted column).  Planted trials train
    the A/A arms (the trial's default); noise trials only with ``noise_aa``: their candidate
    is itself a column that tells nothing, and the arms it would add change no other arm's
    result (each arm starts from its seed, all read the same batches): a third less training."""
    from fbrapids import ops, trial
    from fbrapids.datasets.synthetic.generate import generate, read_metadata

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-calib-") as tmp:
        generate(spec["rows"], tmp, seed=spec["data_seed"], plant={"p": spec["beta"]})
        gain = read_metadata(tmp)["plant"]["p"]["oracle_auc_gain"]
        r = trial(tmp, {"p_f": ops.col("p")}, seeds=seeds, seed=spec["data_seed"] * 10, n_boot=n_boot,
                  model=model, progress=False, batch_size=batch_size, aa=noise_aa or spec["beta"] != 0)
    return {**spec, "oracle_auc_gain": gain, "seeds": r.seeds, "delta": r.delta, "interval": r.interval,
            "verdict": r.verdict, "p_better": r.p_better, "seed_deltas": r.seed_deltas, "se": r.se,
            "se_seeds": r.se_seeds, "se_users": r.se_users, "df": r.df, "aa_spread": r.aa_spread,
            "aa_delta": r.aa_delta, "aa_seed_deltas": r.aa_seed_deltas, "aa_interval": r.aa_interval,
            "aa_verdict": r.aa_verdict, "seed_spread": r.seed_spread, "info_delta": r.info_delta,
            "info_interval": r.info_interval, "info_verdict": r.info_verdict,
            "nan_rounds": r.nan_rounds, "baseline": r.baseline, "seconds": round(time.perf_counter() - t0, 1),
            "trial_seconds": r.seconds, "load": os.getloadavg()[0]}


def run_family(spec: dict, n: int, seeds: int, n_boot: int, model: str, batch_size: int = 2048,
               correction: str = "holm") -> dict:
    """One run of ``spec`` with ``n`` candidates each against one baseline: columns ``p0`` ..
    ``p{n-1}``, ``p0`` planted with the spec's beta (0: every column is noise)."""
    from fbrapids import ops, trial
    from fbrapids.datasets.synthetic.generate import generate, read_metadata

    t0 = time.perf_counter()
    plant = {f"p{i}": (spec["beta"] if i == 0 else 0.0) for i in range(n)}
    with tempfile.TemporaryDirectory(prefix="fbrapids-calib-") as tmp:
        generate(spec["rows"], tmp, seed=spec["data_seed"], plant=plant)
        gain = read_metadata(tmp)["plant"]["p0"]["oracle_auc_gain"]
        f = trial(tmp, {f"p{i}_f": ops.col(f"p{i}") for i in range(n)}, each=True, aa=False, seeds=seeds,
                  seed=spec["data_seed"] * 10, n_boot=n_boot, model=model, progress=False, batch_size=batch_size,
                  correction=correction)
    keys = ("delta", "interval", "verdict", "p_value", "p_family", "p_adjusted", "se", "df", "seed_deltas")
    return {**spec, "candidates": n, "correction": correction, "oracle_auc_gain": gain, "seeds": f.seeds,
            "results": {k: {key: getattr(r, key) for key in keys} for k, r in f.results.items()},
            "ranking": f.ranking("auc"), "cost": f.cost, "seconds": round(time.perf_counter() - t0, 1),
            "load": os.getloadavg()[0]}


def run_sequential(spec: dict, seeds: int, n_boot: int, model: str, min_effect: float,
                   batch_size: int = 2048) -> dict:
    """One sequential trial of ``spec`` (its own data, the planted column ``p`` the candidate)."""
    from fbrapids import ops, trial
    from fbrapids.datasets.synthetic.generate import generate, read_metadata

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-calib-") as tmp:
        generate(spec["rows"], tmp, seed=spec["data_seed"], plant={"p": spec["beta"]})
        gain = read_metadata(tmp)["plant"]["p"]["oracle_auc_gain"]
        r = trial(tmp, {"p_f": ops.col("p")}, seeds=seeds, seed=spec["data_seed"] * 10, n_boot=n_boot, model=model,
                  progress=False, batch_size=batch_size, aa=False, min_effect=min_effect)
    return {**spec, "oracle_auc_gain": gain, "seeds": r.seeds, "delta": r.delta, "interval": r.interval,
            "verdict": r.verdict, "p_value": r.p_value, "p_adjusted": r.p_adjusted, "level": r.level,
            "sequential": r.sequential, "cost": r.cost, "seconds": round(time.perf_counter() - t0, 1),
            "load": os.getloadavg()[0]}


def family_summary(rows: list[dict], alpha: float = 0.05, metrics: tuple[str, ...] = METRICS) -> dict[str, Any]:
    """The family-wise false alarms of the noise runs, and the planted candidate's power and
    rank, per metric; beside them, what the runs' own p-values give with Holm's correction
    and with none (from the stored p-values: what the family's p-value buys).

    Example:
        >>> r = {"p0_f": {"delta": {"auc": 0.01}, "verdict": {"auc": "helps"}, "p_value": {"auc": 0.001},
        ...               "p_adjusted": {"auc": 0.004}},
        ...      "p1_f": {"delta": {"auc": 0.002}, "verdict": {"auc": "no detectable effect"},
        ...               "p_value": {"auc": 0.03}, "p_adjusted": {"auc": 0.06}}}
        >>> s = family_summary([{"beta": 0.0, "results": r, "ranking": ["p0_f", "p1_f"], "seconds": 9.0,
        ...                      "cost": {"models": 9}}], 0.05, ("auc",))
        >>> s["auc"]["noise"]["any_false_helps"], s["auc"]["noise"]["own_p_uncorrected_any_helps"]
        (1, 1)
    """
    from fbrapids.app.trial_family import adjust_p

    out: dict[str, Any] = {}
    noise = [r for r in rows if r["beta"] == 0]
    planted = [r for r in rows if r["beta"] != 0]
    for m in metrics:
        def helps(res: dict, names: list[str]) -> bool:
            return any(res[k]["verdict"][m] == "helps" for k in names)

        def own(res: dict, names: list[str], correct: bool) -> tuple[bool, bool]:
            p = [res[k]["p_value"][m] for k in res]
            q = adjust_p(p, "holm") if correct else p
            called = [k for k, x in zip(res, q) if x < alpha and k in names]
            return bool(called), any(res[k]["delta"][m] > 0 for k in called)

        k_helps = sum(helps(r["results"], list(r["results"])) for r in noise)
        k_any = sum(any(x["verdict"][m] != "no detectable effect" for x in r["results"].values()) for r in noise)
        lo, hi = clopper_pearson(k_helps, len(noise)) if noise else (float("nan"), float("nan"))
        out[m] = {"noise": {"runs": len(noise), "any_false_helps": k_helps, "any_false_call": k_any,
                            "rate_helps": k_helps / len(noise) if noise else None, "cp95_helps": [round(lo, 4), round(hi, 4)],
                            "own_p_holm_any_helps": sum(own(r["results"], list(r["results"]), True)[1] for r in noise),
                            "own_p_uncorrected_any_helps": sum(own(r["results"], list(r["results"]), False)[1]
                                                               for r in noise)}}
        if planted:
            found = sum(r["results"]["p0_f"]["verdict"][m] == "helps" for r in planted)
            out[m]["planted"] = {"runs": len(planted), "found": found,
                                 "ranked_first": sum(r["ranking"][0] == "p0_f" for r in planted) if m == "auc" else None,
                                 "false_helps_among_noise": sum(helps(r["results"], [k for k in r["results"] if k != "p0_f"])
                                                                for r in planted)}
    secs = [r["seconds"] for r in rows]
    out["seconds_per_run"] = float(sum(secs) / len(secs)) if secs else None
    out["models_per_run"] = rows[0]["cost"]["models"] if rows else None
    return out


def sequential_summary(rows: list[dict]) -> dict[str, Any]:
    """False alarms (noise), power (planted, per beta), and the seeds the trials took.

    Example:
        >>> r = {"beta": 0.0, "verdict": {"auc": "no detectable effect", "gauc": "hurts"}, "seeds": [0, 1, 2],
        ...      "sequential": {"stopped": "every interval is clear of the margin"}, "oracle_auc_gain": 0.0}
        >>> s = sequential_summary([r])
        >>> s["false_positive"]["gauc"]["called"], s["seeds_used"]["noise"]["mean"]
        (1, 3.0)
    """
    import numpy as np

    noise = [r for r in rows if r["beta"] == 0]
    out: dict[str, Any] = {"false_positive": {}, "power": {}, "seeds_used": {}}
    for m in METRICS:
        k = sum(r["verdict"][m] != "no detectable effect" for r in noise)
        lo, hi = clopper_pearson(k, len(noise)) if noise else (float("nan"), float("nan"))
        out["false_positive"][m] = {"called": k, "of": len(noise), "helps": sum(r["verdict"][m] == "helps" for r in noise),
                                    "cp95": [round(lo, 4), round(hi, 4)]}
    groups = {"noise": noise, **{f"beta={b:g}": [r for r in rows if r["beta"] == b]
                                 for b in sorted({r["beta"] for r in rows if r["beta"] != 0})}}
    for key, sub in groups.items():
        if not sub:
            continue
        used = [len(r["seeds"]) for r in sub]
        out["seeds_used"][key] = {"mean": float(np.mean(used)), "min": min(used), "max": max(used),
                                  "stopped_at_the_margin": sum(r["sequential"]["stopped"].startswith("every")
                                                               for r in sub)}
        if key != "noise":
            out["power"][key] = {"trials": len(sub), "oracle_auc_gain": round(float(np.mean(
                [r["oracle_auc_gain"] for r in sub])), 4), **{m: sum(r["verdict"][m] == "helps" for r in sub)
                                                             for m in METRICS}}
    return out


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of ``k`` successes in ``n``.

    Example:
        >>> lo, hi = clopper_pearson(2, 40)
        >>> round(lo, 4), round(hi, 4)
        (0.0061, 0.1692)
    """
    from scipy import stats

    a = 1 - level
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def aa_summary(rows: list[dict], m: str) -> dict[str, Any]:
    """The A/A check of metric ``m`` over trials with A/A arms: the largest |A/A delta|
    per seed (the A/A spread) and seed-averaged (what the trial reports), their SD over
    trials, how many A/A verdicts were not "no detectable effect", and the seed-averaged
    A/A deltas' mean over trials with its standard error (``mean_delta`` / ``se_mean``:
    what an input of the candidate's shape that tells nothing costs on average; a mean
    several standard errors below 0 is a real cost, not a narrow interval); ``by_rows``:
    the same per data size.

    Example:
        >>> r = {"aa_delta": {"auc": 0.001}, "aa_seed_deltas": {"auc": [0.002, 0.0]},
        ...      "aa_verdict": {"auc": "no detectable effect"}, "rows": 100}
        >>> s = aa_summary([r, {**r, "aa_delta": {"auc": -0.003}}], "auc")
        >>> s["max_abs_delta"], s["max_abs_seed_delta"], s["called"], s["mean_delta"]
        (0.003, 0.002, 0, -0.001)
    """
    import numpy as np

    means = [r["aa_delta"][m] for r in rows]
    per_seed = [d for r in rows for d in r["aa_seed_deltas"][m]]
    sizes = sorted({r["rows"] for r in rows})
    out: dict[str, Any] = {
        "trials": len(rows), "rows": sizes,
        "max_abs_delta": float(np.max(np.abs(means))), "max_abs_seed_delta": float(np.max(np.abs(per_seed))),
        "sd_delta": float(np.std(means, ddof=1)) if len(means) > 1 else None,
        "sd_seed_delta": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "called": sum(r["aa_verdict"][m] != "no detectable effect" for r in rows),
        "hurts": sum(r["aa_verdict"][m] == "hurts" for r in rows),
        "mean_delta": float(np.mean(means)),
        "se_mean": float(np.std(means, ddof=1) / np.sqrt(len(means))) if len(means) > 1 else None}
    if len(sizes) > 1:
        out["by_rows"] = {str(n): aa_summary([r for r in rows if r["rows"] == n], m) for n in sizes}
    return out


def z_scores(rows: list[dict], m: str) -> dict[str, Any]:
    """The noise trials' deltas over their own standard errors (``delta / se``): under a
    calibrated interval their SD is about 1 (above 1: the interval is too narrow), and their
    mean, over its standard error, says whether a useless column moves the metric on average.

    Example:
        >>> z = z_scores([{"delta": {"auc": 0.002}, "se": {"auc": 0.001}},
        ...               {"delta": {"auc": -0.001}, "se": {"auc": 0.001}}], "auc")
        >>> z["z_mean"], round(z["z_sd"], 3), z["mean_delta"]
        (0.5, 2.121, 0.0005)
    """
    import numpy as np

    z = np.array([r["delta"][m] / r["se"][m] for r in rows])
    d = np.array([r["delta"][m] for r in rows])
    return {"z_mean": float(z.mean()), "z_sd": float(z.std(ddof=1)) if len(z) > 1 else None,
            "mean_delta": float(d.mean()), "se_mean": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None}


def summarise(rows: list[dict]) -> dict[str, Any]:
    """False-positive rate, power, bias and time per trial from the finished trials."""
    import numpy as np

    noise = [r for r in rows if r["beta"] == 0]
    out: dict[str, Any] = {"noise_trials": len(noise), "false_positive": {}, "power": {}, "bias": {},
                           "delta_sd_noise": {}}
    for m in METRICS:
        k = sum(r["verdict"][m] != "no detectable effect" for r in noise)
        lo, hi = clopper_pearson(k, len(noise)) if noise else (float("nan"), float("nan"))
        out["false_positive"][m] = {"called": k, "of": len(noise), "rate": k / len(noise) if noise else None,
                                    "cp95": [round(lo, 4), round(hi, 4)],
                                    "helps": sum(r["verdict"][m] == "helps" for r in noise),
                                    "hurts": sum(r["verdict"][m] == "hurts" for r in noise)}
        if noise:
            out["delta_sd_noise"][m] = float(np.std([r["delta"][m] for r in noise], ddof=1)) if len(noise) > 1 else None
            out.setdefault("noise_z", {})[m] = z_scores(noise, m)
        with_aa = [r for r in rows if r.get("aa_delta")]
        if with_aa:
            out.setdefault("aa", {})[m] = aa_summary(with_aa, m)
        for b in sorted({r["beta"] for r in rows if r["beta"] != 0}):
            sub = [r for r in rows if r["beta"] == b]
            gain = float(np.mean([r["oracle_auc_gain"] for r in sub]))
            key = f"beta={b:g}"
            out["power"].setdefault(key, {"oracle_auc_gain": round(gain, 4), "trials": len(sub)})
            out["power"][key][m] = sum(r["verdict"][m] == "helps" for r in sub)
            info = [r for r in sub if r.get("info_verdict")]
            if info:  # the candidate against its A/A arm (a shuffled copy), where the trials had one
                out["power"][key][f"{m}_vs_shuffled"] = f"{sum(r['info_verdict'][m] == 'helps' for r in info)}/{len(info)}"
            if m == "auc":
                bias = [r["delta"]["auc"] - r["oracle_auc_gain"] for r in sub]
                out["bias"][key] = {"mean": float(np.mean(bias)), "sd": float(np.std(bias, ddof=1)) if len(bias) > 1
                                    else None}
    secs = [r["seconds"] for r in rows]
    out["seconds_per_trial"] = {"mean": float(np.mean(secs)) if secs else None,
                                "noise_mean": float(np.mean([r["seconds"] for r in noise])) if noise else None}
    out["load_mean"] = float(np.mean([r["load"] for r in rows])) if rows else None
    return out


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--noise", type=int, default=40, help="pure-noise trials")
    ap.add_argument("--planted", type=int, default=10, help="planted trials per effect size")
    ap.add_argument("--betas", type=float, nargs="+", default=list(BETAS))
    ap.add_argument("--noise-rows", type=int, default=50_000)
    ap.add_argument("--planted-rows", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, default=None, help="seeds per arm (default: trial's DEFAULT_SEEDS; "
                                                            "with --min-effect the most seeds, default 6)")
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--model", default="dlrm")
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--candidates", type=int, default=1, help="candidates per run, each against one baseline")
    ap.add_argument("--correction", choices=("holm", "bh"), default="holm", help="with --candidates")
    ap.add_argument("--min-effect", type=float, default=None, help="sequential trials with this margin")
    ap.add_argument("--state", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--noise-aa", action="store_true", help="noise trials train A/A arms too (+50%% training)")
    ap.add_argument("--report", action="store_true", help="summarise the state file only")
    args = ap.parse_args(argv)
    mode = "family" if args.candidates > 1 else "sequential" if args.min_effect is not None else None
    if args.candidates > 1 and args.min_effect is not None:
        ap.error("--candidates and --min-effect: one design at a time")
    stem = f"trial_calibration_{mode}" if mode else "trial_calibration"
    args.mode = mode
    args.state = args.state or OUT.parent / f"{stem}.state.jsonl"
    args.out = args.out or OUT.parent / f"{stem}.json"
    return args


def _run(spec: dict, args: argparse.Namespace, seeds: int) -> dict:
    if args.mode == "family":
        return run_family(spec, args.candidates, seeds, args.boot, args.model, args.batch_size, args.correction)
    if args.mode == "sequential":
        return run_sequential(spec, seeds, args.boot, args.model, args.min_effect, args.batch_size)
    return run_one(spec, seeds, args.boot, args.model, args.batch_size, args.noise_aa)


def _logged(row: dict, mode: str | None) -> None:
    if mode == "family":
        v = {k: r["verdict"]["auc"][0] for k, r in row["results"].items()}
        log.info("%s: oracle %+.4f  AUC verdicts %s  ranking %s  (%.0f s, %d models, load %.1f)", row["id"],
                 row["oracle_auc_gain"], v, row["ranking"][:3], row["seconds"], row["cost"]["models"], row["load"])
        return
    log.info("%s: oracle %+.4f  AUC %+.4f [%+.4f, %+.4f] %s  GAUC %+.4f %s  (%d seeds, %.0f s, load %.1f)", row["id"],
             row["oracle_auc_gain"], row["delta"]["auc"], *row["interval"]["auc"], row["verdict"]["auc"],
             row["delta"]["gauc"], row["verdict"]["gauc"], len(row["seeds"]), row["seconds"], row["load"])


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import machine_description, write_result
    from fbrapids.app.trial_sequential import DEFAULT_MAX_SEEDS
    from fbrapids.app.trials import DEFAULT_SEEDS

    seeds = args.seeds or (DEFAULT_MAX_SEEDS if args.mode == "sequential" else DEFAULT_SEEDS)
    machine = machine_description()
    done = {}
    if args.state.exists():
        for line in args.state.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["id"]] = row
    planned = plan(args.noise, args.planted, tuple(args.betas), args.noise_rows, args.planted_rows)
    todo = [s for s in planned if s["id"] not in done]
    if not args.report:
        from fbrapids.ui.autobar import tqdm

        args.state.parent.mkdir(parents=True, exist_ok=True)
        for spec in tqdm(todo, desc="calibration", unit="trial", initial=len(done), total=len(done) + len(todo)):
            row = _run(spec, args, seeds)
            done[row["id"]] = row
            with args.state.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            _logged(row, args.mode)
    rows = list(done.values())
    argv_run = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--report"]
    summary = family_summary(rows) if args.mode == "family" else sequential_summary(rows) \
        if args.mode == "sequential" else summarise(rows)
    res = {"planned": len(planned), "design": args.mode or "fixed K, one candidate set", "model": args.model,
           "seeds": seeds, "batch_size": args.batch_size, "n_boot": args.boot, "noise_rows": args.noise_rows,
           "planted_rows": args.planted_rows, "trials": len(rows), **summary, "machine": machine,
           **({"candidates": args.candidates, "correction": args.correction} if args.mode == "family" else {}),
           **({"min_effect": args.min_effect} if args.mode == "sequential" else {}),
           "command": " ".join(["python benchmarks/trial_calibration.py", *argv_run]),
           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_result(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
