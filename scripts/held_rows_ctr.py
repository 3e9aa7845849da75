"""Why the held-back calibration predicted low, measured: the click rate of the rows ``fit``
holds back against the rows they stand for.

``fit`` holds back every ``HOLD_EVERY``-th batch of its pass (:mod:`fbrapids.trainers.calibration`)
and fits the shift of the logits that makes the final model's mean prediction on them a click
rate.  That rate was the held rows' own until it became their spans' (each held batch and the
batches read since the one held before it).  This script streams the demo's training rows
exactly as ``run_pipeline`` does (the same shuffle, batches and held batches, no training) and
the held-out day, and writes per data seed: the click rate of the held rows, of their spans,
of every training row and of the held-out day.  A shift fitted to the held rows' rate moves
every model of that seed's mean prediction by about the held rows' offset from the spans'.

    python scripts/held_rows_ctr.py --rows 200000 --seeds 0 1 2 --out benchmarks/results/figures/held_rows_ctr.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def held_rates(rows: int, seed: int, batch_size: int = 2048) -> dict[str, Any]:
    """The click rates of one data seed's held rows, their spans, the training rows and the
    held-out day, streamed as the demo streams them."""
    from fbrapids.app.pipeline import SHUFFLE_WINDOW, TimedPartitions, batch_stream, plan_frames, training_inputs
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir
    from fbrapids.trainers.calibration import CALIBRATION_ROWS, HeldBack

    w = as_workload(ensure_dataset(rows, default_data_dir(rows, seed), seed=seed))
    inputs = training_inputs(w, "dlrm", 16, batch_size, seed)
    frames = plan_frames(inputs, w, "cpu")
    cols = [w.label, w.group, *inputs.dense, *inputs.sparse]

    def stream(frame: Any, window: int) -> Any:
        return batch_stream(TimedPartitions(frame, window=1, columns=cols), inputs.dense, inputs.sparse, batch_size,
                            seed, "error", w.label, w.group, window)

    held, labels = HeldBack(CALIBRATION_ROWS), []
    for i, b in enumerate(stream(frames.train, SHUFFLE_WINDOW)):
        held.count(b)
        labels.append(b.label.numpy())
        if held.holds(i):
            held.add(b)
    test = np.concatenate([b.label.numpy() for b in stream(frames.test, 0)])
    held_y = np.concatenate([b.label.numpy() for b in held.batches])
    train = np.concatenate(labels)
    return {"seed": seed, "held_rows": int(len(held_y)), "held_ctr": float(held_y.mean()),
            "span_rows": int(sum(s[0] for s in held.spans)), "span_ctr": held.rate(),
            "train_rows": int(len(train)), "train_ctr": float(train.mean()), "held_out_rows": int(len(test)),
            "held_out_ctr": float(test.mean())}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import machine_description

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.exists() else {"rows": {}}
    load = round(os.getloadavg()[0], 1)
    data["rows"][str(args.rows)] = [held_rates(args.rows, s) for s in args.seeds]
    data.update(machine=machine_description(), measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="python scripts/held_rows_ctr.py " + " ".join(sys.argv[1:] if argv is None else argv))
    data.setdefault("load", {})[str(args.rows)] = load
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
