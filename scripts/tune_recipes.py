"""The demo's recipes (``fbrapids.app.pipeline.RECIPES``), chosen by the pipeline's own tuning.

For each model, ``run_pipeline(RunConfig(model=M, seed=S, tune=GRID))`` on the default data of
``--rows`` rows (:mod:`fbrapids.app.tuning`: the last training day held out as a validation
day, the grid tried on the days before it, one field at a time; then the refit on every
training day, scored on the held-out day), one process per model, one model at a time.  Each
run's tuning record (every recipe tried with its validation AUC and logloss, the choice), its
held-out metrics and the load average at its start go into ``--out`` (a JSON file, merged:
the runs of other sizes and models stay), which docs/models.md's recipe table renders.

    python scripts/tune_recipes.py --rows 200000 --out benchmarks/results/figures/tuning.json
    python scripts/tune_recipes.py --rows 1000000 --grid '{"sparse_lr": [0.05, 0.1, 0.2]}' --out ...

``--grid`` (JSON: recipe field -> values) replaces the default grid
(:data:`fbrapids.workloads.recipe.DEFAULT_GRID`).

``--start`` (JSON: recipe fields) starts the search from that recipe instead of the pipeline's.
``--model-seeds S ...`` searches field by field, each field's values tried by the pipeline's
tuning once per model seed (``RunConfig(seed=S)``: the initial weights and the batches' order;
the data stays ``--seed``'s), and keeps the value of the best *mean* score, each field from the
choices so far: a choice that does not depend on one draw (DIN's dense learning rate,
docs/models.md).  Its record has the tuning's keys, ``tried`` holding each value's mean
metrics and per-seed scores; the held-out metrics are the last field's refit (the choice),
under the first model seed.

    python scripts/tune_recipes.py --models din --model-seeds 0 1 2 --grid '{"dense_lr": [0.001, 0.003, 0.01]}' --out ...

``--data-seeds S ...`` searches the same way with each field's values tried on the default
data of each of these data seeds (the model seeded with the data's seed, or with each of
``--model-seeds``), the best mean score kept: a choice that does not rest on one data set's
validation day.  The held-out metrics are then those of the first data seed's refit.

    python scripts/tune_recipes.py --models logreg --data-seeds 0 1 2 --grid '{"first_order_lr": [0.1, 0.2, 0.4]}' --out ...

(The DeepFM record in the recipe table was made this way with one model seed.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = ("dlrm", "wide_deep", "deepfm", "din", "dcn", "logreg")


def tune_one(rows: int, model: str, seed: int, grid: Any, start: dict[str, Any] | None = None,
             model_seed: int | None = None) -> dict[str, Any]:
    """One model's tuned run on the default data of ``rows`` rows and ``seed`` (this process),
    from ``start`` (recipe fields; None: the pipeline's recipe), the model seeded with
    ``model_seed`` (None: ``seed``)."""
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir
    from fbrapids.workloads import RunConfig
    from fbrapids.workloads.recipe import Recipe

    data = ensure_dataset(rows, default_data_dir(rows, seed), seed=seed)
    load, t = round(os.getloadavg()[0], 1), time.perf_counter()
    recipe = None if start is None else Recipe(**start)
    with tempfile.TemporaryDirectory(prefix="fbrapids-tune-") as work:
        r = run_pipeline(data, RunConfig(model=model, seed=seed if model_seed is None else model_seed, progress=False,
                                         work_dir=work, tune=grid, checkpoint=False, recipe=recipe))
    return {"seed": seed, "load": load, "seconds": round(time.perf_counter() - t, 1), "tuning": r.tuning,
            "recipe": r.recipe, "held_out": {k: r.metrics.get(k) for k in ("auc", "gauc", "logloss", "ne",
                                                                          "calibration", "n")}}


def mean_over_seeds(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tries of one field's tunings, one per model seed, as one try per value: the mean
    of each metric over the seeds that tried it (``seeds``: how many), each seed's score in
    ``per_seed_shifted_logloss``.

    Example:
        >>> a = {"tuning": {"tried": [{"field": "dense_lr", "value": 0.1, "auc": 0.7, "shifted_logloss": 0.3}]}}
        >>> b = {"tuning": {"tried": [{"field": "dense_lr", "value": 0.1, "auc": 0.6, "shifted_logloss": 0.5}]}}
        >>> [(t["value"], round(t["auc"], 3), t["shifted_logloss"], t["seeds"]) for t in mean_over_seeds([a, b])]
        [(0.1, 0.65, 0.4, 2)]
    """
    by_value: dict[Any, list[dict[str, Any]]] = {}
    for rec in records:
        for t in rec["tuning"]["tried"]:
            by_value.setdefault(t["value"], []).append(t)
    out = []
    for ts in by_value.values():
        row = {**ts[0], "seeds": len(ts), "per_seed_shifted_logloss": [t["shifted_logloss"] for t in ts]}
        for k in ("auc", "gauc", "logloss", "ne", "calibration", "shifted_logloss"):
            if all(t.get(k) is not None for t in ts):
                row[k] = sum(t[k] for t in ts) / len(ts)
        out.append(row)
    return out


def field_by_field(args: argparse.Namespace, model: str, grid: dict[str, list[Any]]) -> dict[str, Any]:
    """The search of the module docstring's ``--model-seeds`` / ``--data-seeds``: one child
    process per field and (data seed, model seed), each a pipeline tuning of that one field
    from the choices so far."""
    from fbrapids.app.pipeline import UNUSED_RECIPE_FIELDS, recipe_for

    cur = dict(args.start) if args.start else recipe_for(model, args.rows)[0].as_dict()
    data_seeds = args.data_seeds or [args.seed]
    runs = [(ds, ms) for ds in data_seeds for ms in (args.model_seeds or [None])]
    start, tried, loads, t0 = dict(cur), [], [], time.perf_counter()
    last: dict[str, Any] = {}
    for field, values in grid.items():
        if field in UNUSED_RECIPE_FIELDS.get(model, ()):
            continue
        records = []
        for ds, ms in runs:
            cmd = [sys.executable, __file__, "--rows", str(args.rows), "--seed", str(ds), "--out", str(args.out),
                   "--one", model, "--grid", json.dumps({field: values}), "--start", json.dumps(cur),
                   *([] if ms is None else ["--model-seed", str(ms)])]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-3000:])
                raise SystemExit(proc.returncode)
            records.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        rows = [dict(t, field=field) for t in mean_over_seeds(records)]
        full = [t for t in rows if t["seeds"] == len(runs)]  # values every run tried
        cur[field] = min(full, key=lambda t: t["shifted_logloss"])["value"]
        tried += rows
        loads += [r["load"] for r in records]
        last = records[0]
        sys.stderr.write(f"{model}: {field} -> {cur[field]}\n")
    over = [f"{what} {', '.join(map(str, seeds))}" for what, seeds in
            (("data seeds", args.data_seeds), ("model seeds", args.model_seeds)) if seeds and len(seeds) > 1]
    return {"seed": data_seeds[0], "load": max(loads), "seconds": round(time.perf_counter() - t0, 1),
            **({"data_seeds": data_seeds} if args.data_seeds else {}),
            "tuning": {"criterion": "validation logloss after a shift" + (f" (mean over {' and '.join(over)})"
                                                                          if over else ""),
                       "grid": grid, "start": start, "choice": cur, "tried": tried,
                       **({"model_seeds": args.model_seeds} if args.model_seeds else {}),
                       **({"data_seeds": args.data_seeds} if args.data_seeds else {}),
                       "validation": last["tuning"]["validation"]},
            "recipe": last["recipe"], "held_out": last["held_out"]}


def merge(out: Path, rows: int, model: str, run: dict[str, Any], command: str) -> None:
    """``run`` into ``out``'s ``runs[rows][model]``, with the machine and date."""
    from benchmarks.machine import machine_description

    data = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    data.setdefault("runs", {}).setdefault(str(rows), {})[model] = run
    data["machine"] = machine_description()
    data["command"] = command
    data["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", type=json.loads, default=None, help="JSON: recipe field -> values (default grid)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start", type=json.loads, default=None, help="JSON: the recipe the search starts from")
    ap.add_argument("--model-seeds", type=int, nargs="+", default=None,
                    help="field by field, each field's score the mean over these model seeds (module docstring)")
    ap.add_argument("--data-seeds", type=int, nargs="+", default=None,
                    help="field by field, each field's score the mean over the data of these seeds (module docstring)")
    ap.add_argument("--one", metavar="MODEL", help=argparse.SUPPRESS)  # a child's run: its JSON on stdout
    ap.add_argument("--model-seed", type=int, default=None, help=argparse.SUPPRESS)  # a child's model seed
    args = ap.parse_args(argv)
    grid = True if args.grid is None else args.grid
    if args.one:
        print(json.dumps(tune_one(args.rows, args.one, args.seed, grid, args.start, args.model_seed)))
        return 0
    command = "python scripts/tune_recipes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.model_seeds or args.data_seeds:
        from fbrapids.workloads.recipe import DEFAULT_GRID

        for model in args.models:
            merge(args.out, args.rows, model, field_by_field(args, model, {k: list(v) for k, v in (
                DEFAULT_GRID if args.grid is None else args.grid).items()}), command)
        return 0
    for model in args.models:  # one process each
        cmd = [sys.executable, __file__, "--rows", str(args.rows), "--seed", str(args.seed), "--out", str(args.out),
               "--one", model] + ([] if args.grid is None else ["--grid", json.dumps(args.grid)])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            return proc.returncode
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        merge(args.out, args.rows, model, run, command)
        sys.stderr.write(f"{args.rows} rows, {model}: {run['recipe']['text']} (held-out AUC "
                         f"{run['held_out']['auc']:.4f}, {run['seconds']:.0f} s, load {run['load']})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
