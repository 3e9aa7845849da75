"""Generate the README's picture from a real feature trial: docs/images/feature_trial.png,
and its figures: benchmarks/results/figures/trial.json.

Runs :func:`fbrapids.trial` on the embedded default data (200,000 impressions, seed 0:
what ``make demo`` trains on, generated afresh here by this checkout's generator) and draws
its AUC / GAUC deltas with :func:`fbrapids.plot.trial_deltas`; the figure in the README is
this script's output, nothing drawn by hand, and the README's caption is rendered from the
JSON (``scripts/docs_figures.py``).

    python scripts/make_readme_figure.py [--rows 200000] [--out docs/images/feature_trial.png]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JSON_OUT = ROOT / "benchmarks" / "results" / "figures" / "trial.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--boot", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "feature_trial.png")
    parser.add_argument("--json", type=Path, default=JSON_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import machine_description

    machine = machine_description()
    from fbrapids import ops, plot, trial
    from fbrapids.datagen import DATA_VERSION, ensure_dataset, read_metadata

    candidates = {
        "slot x os": {"slot_x_os": ops.cross("slot", "os")},
        "query x category": {"query_x_cat": ops.cross(ops.split("query", " ", buckets=1 << 18), "category", cap=16)},
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-figure-data-") as tmp:
        data = ensure_dataset(args.rows, Path(tmp) / "data")
        meta = read_metadata(data)
        results = {label: trial(data, feats, n_boot=args.boot, progress=False, batch_size=1024,
                                cache_rows=1 << 15, host_rows=1 << 16, seed=0)
                   for label, feats in candidates.items()}
    fig = plot.trial_deltas(results, title=f"feature trials on the default data: {args.rows:,} generated "
                                           f"impressions, seed 0 ({args.boot} bootstrap rounds)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110, metadata={"Software": None})  # no version string: the PNG is reproducible
    logging.info("wrote %s", args.out)
    for label, r in results.items():
        logging.info("%s\n%s", label, r.render())
    out = {"rows": args.rows, "seed": 0, "n_boot": args.boot, "data": meta, "data_version": DATA_VERSION,
           "image": str(args.out.resolve().relative_to(ROOT)) if args.out.resolve().is_relative_to(ROOT) else None,
           "trials": {label: json.loads(json.dumps(dataclasses.asdict(r), default=float))
                      for label, r in results.items()},
           "seconds": round(time.perf_counter() - t0, 1), "machine": machine,
           "command": " ".join(["python scripts/make_readme_figure.py", *(sys.argv[1:] if argv is None else argv)]),
           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    logging.info("wrote %s", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
