"""Generate the README's picture from a real feature trial: docs/images/feature_trial.png.

Runs :func:`fbrapids.trial` on the embedded default data (generated once) and draws its
AUC / GAUC deltas with :func:`fbrapids.plot.trial_deltas`; the figure in the README is
this script's output, nothing drawn by hand.

    python scripts/make_readme_figure.py [--rows 20000] [--out docs/images/feature_trial.png]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--boot", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "feature_trial.png")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from fbrapids import ops, plot, trial
    from fbrapids.datagen import ensure_dataset

    data = ensure_dataset(args.rows, Path(tempfile.gettempdir()) / f"fbrapids-notebook-data-{args.rows}")
    candidates = {
        "slot x os": {"slot_x_os": ops.cross("slot", "os")},
        "query x category": {"query_x_cat": ops.cross(ops.split("query", " ", buckets=1 << 18), "category", cap=16)},
    }
    results = {label: trial(data, feats, n_boot=args.boot, progress=False, batch_size=1024,
                            cache_rows=1 << 15, host_rows=1 << 16, seed=0)
               for label, feats in candidates.items()}
    fig = plot.trial_deltas(results)
    fig.suptitle(f"feature trials on {args.rows:,} generated impressions ({args.boot} bootstrap rounds)", fontsize=9)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    logging.info("wrote %s", args.out)
    for label, r in results.items():
        logging.info("%s\n%s", label, r.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
