"""The four models on the default demo data: held-out AUC, NE and logloss side by side.

Each (rows, model) pair runs :func:`fbrapids.demo.run_demo`, exactly what
``fbrapids demo --rows R --model M`` runs (same data, seed, batch size and defaults), in a
process of its own, one after the other.  The table checks the acceptance of issue 24
(part A): every model reaches NE < 0.97 and an AUC at least DLRM's minus 0.01 on the same
rows.  The last line printed is one JSON object: ``rows`` -> ``model`` -> ``auc``,
``gauc``, ``logloss``, ``ne``, ``calibration``, ``train_rows``, ``held_out_rows``,
``seconds`` (the whole demo run) and ``samples_per_s``; ``oracle_auc`` per size (the
generator's hidden model); ``checks`` per size; ``all_pass``.

    python benchmarks/models.py --rows 200000 1000000

``--out FILE`` also writes that JSON to a file (``scripts/bench.py --only models`` keeps it
as ``benchmarks/results/models.json``).

Example:
    >>> checks({"dlrm": {"auc": 0.67, "ne": 0.96}, "deepfm": {"auc": 0.665, "ne": 0.95}})
    {'dlrm': True, 'deepfm': True}
    >>> checks({"dlrm": {"auc": 0.67, "ne": 0.96}, "deepfm": {"auc": 0.565, "ne": 2.82}})
    {'dlrm': True, 'deepfm': False}
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description  # noqa: E402

log = logging.getLogger("benchmarks.models")

MODELS = ("dlrm", "wide_deep", "deepfm", "din")
#: acceptance (issue 24): NE below this, and AUC at least DLRM's minus AUC_SLACK
MAX_NE = 0.97
AUC_SLACK = 0.01


def checks(results: dict[str, dict[str, float]]) -> dict[str, bool]:
    """Per model: NE < :data:`MAX_NE` and AUC >= DLRM's AUC - :data:`AUC_SLACK` (DLRM's row
    checks its NE only)."""
    ref = results["dlrm"]["auc"]
    return {m: bool(r["ne"] < MAX_NE and r["auc"] >= ref - AUC_SLACK) for m, r in results.items()}


def run_one(rows: int, model: str, batch_size: int, seed: int) -> dict[str, Any]:
    """One demo run in this process; its held-out metrics and timings."""
    from fbrapids.demo import run_demo

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-models-") as work:
        r = run_demo(rows=rows, model=model, seed=seed, progress=False, work_dir=work, batch_size=batch_size)
    m = r.metrics
    return {"auc": round(float(m["auc"]), 5), "gauc": None if m.get("gauc") is None else round(float(m["gauc"]), 5),
            "logloss": round(float(m["logloss"]), 5), "ne": round(float(m["ne"]), 5),
            "calibration": round(float(m["calibration"]), 4), "held_out_rows": int(m["n"]),
            "train_rows": int(r.rows.get("trained", 0)), "seconds": round(time.perf_counter() - t, 1),
            "samples_per_s": round(float(r.samples_per_s), 1), "oracle_auc": r.oracle_auc}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000])
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--one", nargs=2, metavar=("ROWS", "MODEL"), help=argparse.SUPPRESS)  # a child's run
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.one:
        print(json.dumps(run_one(int(args.one[0]), args.one[1], args.batch_size, args.seed)))
        return 0
    if "dlrm" not in args.models:
        ap.error("--models must include dlrm: the AUC bound is relative to it")
    out: dict[str, Any] = {"machine": machine_description(), "batch_size": args.batch_size, "seed": args.seed,
                           "criteria": f"NE < {MAX_NE} and AUC >= DLRM's AUC - {AUC_SLACK}", "rows": {},
                           "oracle_auc": {}, "checks": {}}
    for rows in args.rows:
        res: dict[str, dict] = {}
        for model in args.models:  # one process per run: nothing carries over between models
            cmd = [sys.executable, __file__, "--one", str(rows), model, "--batch-size", str(args.batch_size),
                   "--seed", str(args.seed)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                log.error("%s", proc.stderr[-3000:])
                raise SystemExit(f"models: {rows} rows, {model}: exit {proc.returncode}")
            res[model] = json.loads(proc.stdout.strip().splitlines()[-1])
            out["oracle_auc"][str(rows)] = res[model].pop("oracle_auc")
            r = res[model]
            log.info("%9d rows  %-9s  AUC %.4f  NE %.4f  logloss %.4f  calibration %.3f  (%.0f s)", rows, model,
                     r["auc"], r["ne"], r["logloss"], r["calibration"], r["seconds"])
        out["rows"][str(rows)] = res
        out["checks"][str(rows)] = checks(res)
    out["all_pass"] = all(all(c.values()) for c in out["checks"].values())
    text = json.dumps(out)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(text)
    return 0 if out["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
