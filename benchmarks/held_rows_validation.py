"""What the post-hoc calibration's held-back rows cost a model, on the validation day only.

For each data seed, the model is trained on the demo's training days before the last one
(the tuning's split: :func:`fbrapids.app.pipeline.validation_frames`) with its pipeline
recipe, once per cap on the rows ``fit`` holds back for its shift (``FitConfig.calibration_rows``;
0: no calibration, every row trained on), each run from the same seed and in the same batch
order, and scored on the last training day (the validation day).  The held-out day is never
read.  The last line printed is one JSON object: ``runs`` (one per seed and cap: AUC, logloss,
calibration, the logloss after the best shift) and ``mean`` per cap over the seeds.

    python benchmarks/held_rows_validation.py --model logreg --rows 200000 --seeds 0 1 2 --caps 32768 4096 0 \\
        --out benchmarks/results/figures/held_rows_validation.json
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description, write_result  # noqa: E402

log = logging.getLogger("benchmarks.held_rows_validation")


def one_seed(model: str, rows: int, seed: int, caps: list[int]) -> list[dict[str, Any]]:
    """``model`` trained on data seed ``seed``'s days before the validation day, once per cap,
    and scored on the validation day."""
    import torch

    from fbrapids.app import pipeline as P
    from fbrapids.app.tuning import shifted_logloss
    from fbrapids.datasets.synthetic import as_workload
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir
    from fbrapids.trainers.fit import default_optimizer, fit, predict
    from fbrapids.trainers.metrics import all_metrics
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.workloads import RunConfig

    w = as_workload(ensure_dataset(rows, default_data_dir(rows, seed), seed=seed))
    cfg = RunConfig(model=model, seed=seed, progress=False, checkpoint=False)
    inputs = P.training_inputs(w, model, cfg.embedding_dim, cfg.batch_size, cfg.seed)
    data = P._tuning_data(w, cfg, inputs, None)
    recipe = P.recipe_for(model, rows)[0]
    out = []
    with P.training_threads(None, False):
        for cap in caps:
            torch.manual_seed(seed)
            net = data.model(recipe, StoreConfig(cache_rows=cfg.cache_rows, seed=seed))
            opt = default_optimizer([p for p in net.parameters() if p.requires_grad], recipe.dense_lr)
            held = {"calibration_rows": cap} if cap else {}
            fit(net, data.batches(data.train, True), epochs=recipe.epochs, optimizer=opt, progress=False,
                sparse_lr_decay=recipe.sparse_lr_decay, calibrate=cap != 0, **held)
            p = predict(net, data.batches(data.validation, False), progress=False)
            m = all_metrics(p["label"], p["pred"])
            out.append({"seed": seed, "cap": cap, **{k: round(float(m[k]), 5) for k in ("auc", "logloss", "calibration")},
                        "shifted_logloss": round(shifted_logloss(p["label"], p["pred"]), 5)})
            log.info("%s", out[-1])
            del net, opt
            gc.collect()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="logreg")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--caps", type=int, nargs="+", default=[32768, 4096, 0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    runs = [r for s in args.seeds for r in one_seed(args.model, args.rows, s, args.caps)]
    mean = {str(c): {k: round(statistics.fmean(r[k] for r in runs if r["cap"] == c), 5)
                     for k in ("auc", "logloss", "calibration", "shifted_logloss")} for c in args.caps}
    out = {"model": args.model, "rows": args.rows, "seeds": args.seeds, "runs": runs, "mean": mean,
           "machine": machine_description(),
           "command": "python benchmarks/held_rows_validation.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.out is not None:
        write_result(args.out, out)
    else:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
