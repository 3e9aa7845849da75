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


def tune_one(rows: int, model: str, seed: int, grid: Any) -> dict[str, Any]:
    """One model's tuned run on the default data of ``rows`` rows and ``seed`` (this process)."""
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir
    from fbrapids.workloads import RunConfig

    data = ensure_dataset(rows, default_data_dir(rows, seed), seed=seed)
    load, t = round(os.getloadavg()[0], 1), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-tune-") as work:
        r = run_pipeline(data, RunConfig(model=model, seed=seed, progress=False, work_dir=work, tune=grid,
                                         checkpoint=False))
    return {"seed": seed, "load": load, "seconds": round(time.perf_counter() - t, 1), "tuning": r.tuning,
            "recipe": r.recipe, "held_out": {k: r.metrics.get(k) for k in ("auc", "gauc", "logloss", "ne",
                                                                          "calibration", "n")}}


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
    ap.add_argument("--one", metavar="MODEL", help=argparse.SUPPRESS)  # a child's run: its JSON on stdout
    args = ap.parse_args(argv)
    grid = True if args.grid is None else args.grid
    if args.one:
        print(json.dumps(tune_one(args.rows, args.one, args.seed, grid)))
        return 0
    command = "python scripts/tune_recipes.py " + " ".join(sys.argv[1:] if argv is None else argv)
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
