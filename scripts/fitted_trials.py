"""Acceptance trials of the fitted operators: held-out AUC deltas, with the paired bootstrap over users,
of (1) a target-encoded (user, category) feature on the demo's model (DLRM) and (2) a
last-50 history of clicked categories pooled by DIN, on the generated data (seed 0).

One line (writes ``<out>/trials-<rows>.txt``)::

    PYTHONPATH=. python scripts/fitted_trials.py --rows 1000000 --n-boot 30 --out /tmp/fitted-trials
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path


def main() -> None:
    from fbrapids import ops
    from fbrapids.app.demo import default_data_dir
    from fbrapids.app.pipeline import DIN_TARGET, din_history
    from fbrapids.app.trials import trial
    from fbrapids.datasets.synthetic.generate import ensure_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--n-boot", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    for rows in args.rows:
        data = ensure_dataset(rows, default_data_dir(rows, args.seed), seed=args.seed)
        report = args.out / f"trials-{rows}.txt"
        lines = [f"generated data: {rows:,} impressions, seed {args.seed} ({data})"]
        arms = {
            "target_encode(user_id, category) on dlrm": dict(
                candidates={"te_user_cat": ops.target_encode("user_id", "category", label="click",
                                                             fold_by="instance_id")},
                kind="dense", model="dlrm"),
            "last-50 clicked categories (history) pooled by din": dict(
                candidates=din_history(), model="din", sequences={k: DIN_TARGET for k in din_history()}),
        }
        for title, kw in arms.items():
            t = time.perf_counter()
            r = trial(data, n_boot=args.n_boot, seed=args.seed, progress=False, **kw)
            lines += [f"== {title} ({time.perf_counter() - t:.0f} s)", r.render(),
                      json.dumps({"delta": r.delta, "interval": r.interval, "baseline": r.baseline,
                                  "candidate": r.candidate, "n_users": r.n_users, "n_boot": r.n_boot})]
            report.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
