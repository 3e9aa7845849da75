"""Generate the README's picture from real feature trials: docs/images/feature_trial.png,
and its figures: benchmarks/results/figures/trial.json.

Runs :func:`fbrapids.trial` on generated data where the truth is known: the default
generator (``--rows`` impressions, ``--seed``) with two planted columns
(``generate(plant=...)``): ``p_signal``, which moves the hidden click logit (beta
:data:`SIGNAL_BETA`, an oracle AUC gain of about +0.02, stored in the metadata), and
``p_noise``, drawn independently of everything (beta 0).  Each is tried as a candidate on
its own: the right answers are "helps" and "no detectable effect".  It draws the AUC /
GAUC deltas with :func:`fbrapids.ui.plot.trial_deltas`; the figure in the README is this
script's output, nothing drawn by hand, and the README's caption is rendered from the JSON
(``scripts/docs_figures.py``, which also compares it with the same trials at another seed).

    python scripts/make_readme_figure.py [--rows 50000] [--seed 0] [--out docs/images/feature_trial.png]
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
#: the planted column's beta: an oracle AUC gain of about +0.02 (benchmarks/trial_calibration.py)
SIGNAL_BETA = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--boot", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="the data's seed and the trials' first seed")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per arm (default: trial's)")
    parser.add_argument("--batch-size", type=int, default=2048, help="the trial's default, as calibrated")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "feature_trial.png")
    parser.add_argument("--json", type=Path, default=JSON_OUT)
    parser.add_argument("--replot", action="store_true",
                        help="measure nothing: redraw the picture from the trials recorded in --json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.replot:
        return replot(args.json, args.out)

    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import machine_description

    machine = machine_description()
    from fbrapids import ops, trial
    from fbrapids.datasets.synthetic.generate import DATA_VERSION, generate, read_metadata

    candidates = {"planted column": {"signal": ops.col("p_signal")}, "noise column": {"noise": ops.col("p_noise")}}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fbrapids-figure-data-") as tmp:
        data = Path(tmp) / "data"
        generate(args.rows, data, seed=args.seed, plant={"p_signal": SIGNAL_BETA, "p_noise": 0.0})
        meta = read_metadata(data)
        results = {label: trial(data, feats, n_boot=args.boot, progress=False, batch_size=args.batch_size, seeds=args.seeds,
                                seed=args.seed)
                   for label, feats in candidates.items()}
        # the results name the data's files: by their names in the generated folder, not its temporary path
        trials = {label: json.loads(json.dumps(dataclasses.asdict(r), default=float).replace(str(data) + "/", ""))
                  for label, r in results.items()}
    k = len(next(iter(results.values())).seeds)
    draw(results, args.rows, args.seed, k, args.boot, args.out)
    for label, r in results.items():
        logging.info("%s\n%s", label, r.render())
    out = {"rows": args.rows, "seed": args.seed, "seeds_per_arm": k, "n_boot": args.boot, "batch_size": args.batch_size, "data": meta, "data_version": DATA_VERSION,
           "image": str(args.out.resolve().relative_to(ROOT)) if args.out.resolve().is_relative_to(ROOT) else None,
           "trials": trials,
           "seconds": round(time.perf_counter() - t0, 1), "machine": machine,
           "command": " ".join(["python scripts/make_readme_figure.py", *(sys.argv[1:] if argv is None else argv)]),
           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    logging.info("wrote %s", args.json)
    return 0


def draw(results: dict, rows: int, seed: int, k: int, n_boot: int, out: Path) -> None:
    """The picture: :func:`fbrapids.ui.plot.trial_deltas` of ``results``, titled, at 110 dpi."""
    from fbrapids.ui import plot

    fig = plot.trial_deltas(results, title=f"a planted and a noise column tried: {rows:,} generated "
                                           f"impressions, seed {seed} ({k} training seeds per arm, "
                                           f"{n_boot} bootstrap rounds)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, metadata={"Software": None})  # no version string: the PNG is reproducible
    logging.info("wrote %s", out)


def replot(path: Path, out: Path) -> int:
    """Redraw the picture from a JSON this script wrote (the trials as measured there)."""
    from fbrapids.app.trials import TrialResult

    r = json.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(TrialResult)}
    results = {label: TrialResult(**{k: v for k, v in t.items() if k in fields}) for label, t in r["trials"].items()}
    draw(results, r["rows"], r["seed"], r.get("seeds_per_arm", 1), r["n_boot"], out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
