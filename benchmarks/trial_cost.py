"""What a trial costs beside one plain training on the same data, measured side by side in one run.

Three measurements, each trial set beside a plain training and one ``fbrapids demo`` run just
before it and the same two just after it on the same data (one training: the mean of each
pair, so that one slow or fast demo does not make the ratio), with the load average at the
start and end of each step:

* **K = 3 with the A/A arm** (9 models: baseline, candidate, A/A x 3 seeds) on the default
  generated data, the candidate ``slot x os`` (the README's): ``trial(...)`` wall time over
  one plain training's (:func:`fbrapids.app.pipeline.run_pipeline`: extraction, training,
  held-out predictions, no checkpoints, no clean counts), and over one ``fbrapids demo``
  (the command as a user runs it, in a process of its own) on the same data;
* **10 candidates, K = 3** (``trial(each=True, aa=False)``: 11 arms x 3 seeds) on data with
  planted columns (``generate(plant=...)``: three with an effect, seven of pure noise), over
  one plain training and over one ``fbrapids demo`` on that data (one training as a user
  times it: the command, as for K = 3);
* **the same 10 candidates tried one at a time** (``--separate``): each candidate's verdict
  and delta against those of the 10-candidate trial (equal verdicts; each delta inside the
  other trial's interval).

A speed figure: the load and a fixed loop at both ends and one plain training's rate are
recorded, and a run the noise rule marks noisy (:class:`benchmarks.machine.NoiseCheck`) is
kept but not published.  On a machine whose speed wanders (the same trial took 26-44 s back
to back on the 2-core benchmark box, nothing else running), one ratio is an anecdote:
``--repeat N`` measures both trials N times, alternated, each beside its own plain trainings
and demos, and reports each repeat's ratios, their median (the figure) and their range.
Ends with one JSON line, also written to ``benchmarks/results/trial_cost.json``.

    nice -n 10 python benchmarks/trial_cost.py [--rows 200000] [--separate] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "trial_cost.json"
#: the planted columns of the 10-candidate data: beta (0: pure noise)
PLANT = {"p0": 0.6, "p1": 0.45, "p2": 0.35, **{f"p{i}": 0.0 for i in range(3, 10)}}

log = logging.getLogger("trial_cost")


def timed(what: str, fn: Callable[[], Any], steps: list[dict]) -> Any:
    """Run ``fn``, record its wall time and the load around it in ``steps``; its result."""
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    out = fn()
    steps.append({"step": what, "seconds": round(time.perf_counter() - t, 2), "load": [load0, os.getloadavg()[0]]})
    log.info("%s: %.1f s (load %.1f -> %.1f)", what, steps[-1]["seconds"], *steps[-1]["load"])
    return out


def plain(data: Path) -> Any:
    from fbrapids.app.pipeline import run_pipeline

    return run_pipeline(data, checkpoint=False, count_clean=False, progress=False)


def demo(data: Path, rows: int) -> None:
    subprocess.run([sys.executable, "-m", "fbrapids", "demo", "--rows", str(rows), "--data-dir", str(data)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _mean_of(steps: list[dict], name: str) -> float:
    """The mean wall time of the steps named ``name`` (each timed just before and just after
    the trial it is set beside).

    Example:
        >>> _mean_of([{"step": "plain", "seconds": 4.0}, {"step": "fbrapids demo", "seconds": 9.0},
        ...           {"step": "plain", "seconds": 5.0}], "plain")
        4.5
    """
    near = [s["seconds"] for s in steps if s["step"] == name]
    return sum(near) / len(near)


def summary(repeats: list[dict[str, float]]) -> dict[str, Any]:
    """One trial's figures over its repeats (each: the trial's ``seconds``, the ``plain_s`` and,
    where timed, ``demo_s`` beside it, and their ratios): each figure the median over the
    repeats, each ratio's range, and the repeats themselves.

    Example:
        >>> r = summary([{"seconds": 40.0, "plain_s": 4.0, "demo_s": 10.0}, {"seconds": 30.0, "plain_s": 4.0,
        ...              "demo_s": 8.0}, {"seconds": 36.0, "plain_s": 4.5, "demo_s": 9.0}])
        >>> r["seconds"], r["ratio_to_demo"], r["ratio_to_demo_range"], len(r["repeats"])
        (36.0, 4.0, [3.75, 4.0], 3)
    """
    import statistics

    rows = [{**r, "ratio": r["seconds"] / r["plain_s"],
             **({"ratio_to_demo": r["seconds"] / r["demo_s"]} if "demo_s" in r else {})} for r in repeats]
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    for k in ("ratio", "ratio_to_demo"):
        if k in out:
            out[f"{k}_range"] = [min(r[k] for r in rows), max(r[k] for r in rows)]
    out["repeats"] = rows
    return out


def _deltas(result: Any) -> list[float]:
    """A trial's (or a family's) deltas, every candidate's AUC and GAUC, in order."""
    results = getattr(result, "results", None) or {"": result}
    return [r.delta[m] for r in results.values() for m in ("auc", "gauc")]


def compare(family: Any, separate: dict[str, Any]) -> dict[str, Any]:
    """Each candidate's verdicts and deltas in the family against its own trial's: its
    family verdict (corrected for the 10) and its own test's (uncorrected, as a trial of it
    alone gives it) against the lone trial's verdict; each delta inside the other's interval.

    Example:
        >>> from fbrapids.app.trials import TrialResult
        >>> one = TrialResult(["a"], {}, {}, delta={"auc": 0.01, "gauc": 0.0}, verdict={"auc": "helps", "gauc": "x"},
        ...                   interval={"auc": (0.005, 0.015), "gauc": (-0.01, 0.01)}, p_value={"auc": 0.001, "gauc": 1.0})
        >>> class F: results = {"a": one}
        >>> c = compare(F(), {"a": one}); c["verdicts_equal"], c["own_verdicts_equal"]
        (2, 1)
    """
    from fbrapids.app.trial_family import verdict_of

    rows, equal, own, inside = {}, 0, 0, 0
    for name, mine in family.results.items():
        alone = separate[name]
        row = {}
        for m in ("auc", "gauc"):
            lo, hi = alone.interval[m]
            flo, fhi = mine.interval[m]
            uncorrected = verdict_of(mine.delta[m], mine.p_value[m], 1 - mine.level)
            row[m] = {"family": [mine.delta[m], mine.verdict[m], uncorrected], "alone": [alone.delta[m], alone.verdict[m]],
                      "family_in_alone_interval": lo <= mine.delta[m] <= hi,
                      "alone_in_family_interval": flo <= alone.delta[m] <= fhi}
            equal += mine.verdict[m] == alone.verdict[m]
            own += uncorrected == alone.verdict[m]
            inside += row[m]["family_in_alone_interval"] and row[m]["alone_in_family_interval"]
        rows[name] = row
    return {"verdicts_equal": equal, "own_verdicts_equal": own, "deltas_inside_each_others_interval": inside,
            "of": 2 * len(family.results), "candidates": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--separate", action="store_true", help="also try the 10 candidates one at a time")
    ap.add_argument("--no-demo", action="store_true", help="leave out the `fbrapids demo` command's timing")
    ap.add_argument("--repeat", type=int, default=1, help="measure both trials this many times, alternated "
                                                          "(the figures: the repeats' medians, with their range)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import NoiseCheck, machine_description, write_result
    from fbrapids import ops, trial
    from fbrapids.datasets.synthetic.generate import generate

    machine = machine_description()
    noise = NoiseCheck(f"trial_cost rows={args.rows}")
    steps: list[dict] = []
    res: dict[str, Any] = {"rows": args.rows, "seed": args.seed, "plant": PLANT}
    with tempfile.TemporaryDirectory(prefix="fbrapids-cost-") as tmp:
        default, planted = Path(tmp) / "default", Path(tmp) / "planted"
        generate(args.rows, default, seed=args.seed)
        generate(args.rows, planted, seed=args.seed, plant=PLANT)
        plain(default)  # the kernels compiled and the caches warm before anything is timed

        def beside(suffix: str, data: Path, run: Callable[[], Any], name: str) -> tuple[Any, dict[str, float]]:
            """``run`` (the trial ``name``) timed between a plain training and a demo on ``data``
            before it and a demo and a plain training after it (one training: the mean of each
            pair); its result and this repeat's seconds."""
            mine: list[dict] = []
            timed("plain" + suffix, lambda: plain(data), mine)
            if not args.no_demo:
                timed("fbrapids demo" + suffix, lambda: demo(data, args.rows), mine)
            out = timed(name, run, mine)
            if not args.no_demo:
                timed("fbrapids demo" + suffix, lambda: demo(data, args.rows), mine)
            timed("plain" + suffix, lambda: plain(data), mine)
            steps.extend(mine)
            seconds = {"seconds": _mean_of(mine, name), "plain_s": _mean_of(mine, "plain" + suffix)}
            if not args.no_demo:
                seconds["demo_s"] = _mean_of(mine, "fbrapids demo" + suffix)
            return out, seconds

        cand = {"slot_x_os": ops.cross("slot", "os")}
        cands = {f"{n}_f": ops.col(n) for n in PLANT}
        k3_name, fam_name = "trial K=3 with A/A", "trial, 10 candidates each, K=3"
        k3_runs, fam_runs = [], []
        for _ in range(max(1, args.repeat)):  # alternated: a slow stretch of the machine falls on both
            k3_runs.append(beside("", default, lambda: trial(default, cand, seeds=3, progress=False), k3_name))
            fam_runs.append(beside(" (planted)", planted,
                                   lambda: trial(planted, cands, each=True, aa=False, seeds=3, progress=False), fam_name))
        k3, fam = k3_runs[-1][0], fam_runs[-1][0]
        for key, runs, extra in (
                ("k3_aa", k3_runs, {"verdict": k3.verdict}),
                ("family", fam_runs, {"ranking": fam.ranking("auc"),
                                      "verdicts": {n: r.verdict for n, r in fam.results.items()}})):
            run = runs[-1][0]
            res[key] = {**summary([sec for _, sec in runs]), "cost": run.cost, **extra, "trial_seconds": run.seconds,
                        # the trial is deterministic: every repeat's deltas are the same bits
                        "same_deltas_every_repeat": all(_deltas(r) == _deltas(run) for r, _ in runs)}
        if args.separate:
            alone = {n: timed(f"trial {n} alone, K=3", lambda n=n, e=e: trial(planted, {n: e}, aa=False, seeds=3,
                                                                             progress=False), steps)
                     for n, e in cands.items()}
            res["separate"] = {**compare(fam, alone),
                               "seconds": sum(s["seconds"] for s in steps if s["step"].endswith("alone, K=3"))}
    plains = [s["seconds"] for s in steps if s["step"] == "plain"]  # the default data's
    res.update(noise.finish({"plain training rows/s": args.rows / (sum(plains) / len(plains))}))
    res.update({"steps": steps, "machine": machine,
                "command": " ".join(["python benchmarks/trial_cost.py", *(sys.argv[1:] if argv is None else argv)]),
                "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})
    write_result(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
