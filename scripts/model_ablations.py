"""Ablations of the models' training recipe on the default data (docs/models.md).

The demo's features are extracted once (:func:`fbrapids.app.pipeline.feature_frame`, the held-out
last day split off as the pipeline does) and kept in a pickle; each arm then trains one of the
pipeline's models (:func:`fbrapids.app.pipeline.model_arguments`, the demo's defaults) on the
training days in one process and scores the held-out day, with one setting changed:

    python scripts/model_ablations.py --rows 200000 --seeds 0 1 \\
        --arm '{"model": "dlrm", "lr": 0.15}' --arm '{"model": "dlrm", "epochs": 2}'

Arm keys: ``model``; ``lr`` / ``acc`` / ``init`` (the tables' row-wise Adagrad learning rate,
initial accumulator, initial scale); ``dlr`` (the dense Adam learning rate); ``emb``;
``epochs``; ``bs`` (batch size); ``pooling`` (``"sum"`` / ``"mean"``); ``wide`` (add a
first-order term, :func:`fbrapids.trainers.models.wide_deep.first_order_config` tables plus a
linear map of the dense features, to the model's logit); ``sparse`` (the feature list);
``drop`` (features left out of ``sparse``); ``eval_ro`` (score the held-out day with read-only tables: ids never trained on read zeros);
``calibrate`` (``fit``'s post-hoc calibration, default on); ``shuffle`` (the training rows'
shuffle buffer, default :data:`fbrapids.app.pipeline.SHUFFLE_BUFFER`; 0: time order);
``first_order`` (DIN's first-order part, default the pipeline's).  ``--seeds`` seed the model
(the data is the default data of ``--data-seed``; with ``--paired``, of each seed itself, as
``benchmarks/models.py`` pairs them).  One JSON line per (arm, seed) is printed and
appended to ``--out`` (default ``benchmarks/results/figures/model_ablations.json``, whose table
docs/models.md renders).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def features(rows: int, data_seed: int, cache: Path) -> tuple[Any, Any]:
    """The demo's (train, held-out) feature frames, extracted once into ``cache``."""
    path = cache / f"features-{rows}-seed{data_seed}.pkl"
    if path.exists():
        with open(path, "rb") as fh:
            return tuple(f.loc[:, ~f.columns.duplicated()] for f in pickle.load(fh))
    import dask

    from fbrapids.app import pipeline as P
    from fbrapids.datasets.synthetic.generate import DAYS, TS0, ensure_dataset

    data = ensure_dataset(rows, cache / f"default-{rows}-seed{data_seed}", seed=data_seed)
    with dask.config.set(scheduler="threads"):
        plain, history, _ = P.split_fitted(P.din_history())
        merged, _ = P.feature_frame(data, extra_features=plain)
        merged = merged.fbx.extract(**history)
        train, test = P.split_by_day(merged, TS0 + (DAYS - 1) * P.DAY)
        cols = list(dict.fromkeys([P.LABEL, P.GROUP, *P.DENSE, *P.SPARSE, P.DIN_SEQUENCE]))
        frames = train[cols].compute(), test[cols].compute()
    with open(path, "wb") as fh:
        pickle.dump(frames, fh)
    return frames


def build(arm: dict[str, Any], seed: int) -> tuple[Any, list[str]]:
    """The arm's model (the pipeline's model with the arm's changes) and its sparse inputs."""
    import torch

    from fbrapids.app import pipeline as P
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.models.wide_deep import first_order_config, linear_term
    from fbrapids.trainers.modules import TieredEmbeddingBagCollection
    from fbrapids.trainers.sparse import StoreConfig

    model = arm.get("model", "dlrm")
    sparse = [f for f in arm.get("sparse", P.SPARSE) if f not in arm.get("drop", [])]
    seqs = None
    if model == "din":
        sparse, seqs = [*sparse, P.DIN_SEQUENCE], {P.DIN_SEQUENCE: P.DIN_TARGET}
    store = StoreConfig(cache_rows=1 << 20, seed=seed, lr=arm.get("lr", 0.05), init_scale=arm.get("init"),
                        initial_accumulator=arm.get("acc", 0.0))
    cls, kw = P.model_arguments(model, len(P.DENSE), sparse, store, arm.get("emb", 16), seqs)
    if "pooling" in arm:
        kw["pooling"] = arm["pooling"]
    if "first_order" in arm:
        kw["first_order"] = arm["first_order"]
    kw.update(arm.get("kw", {}))
    net = cls(**kw)
    if arm.get("wide"):
        base, plain = net, [f for f in sparse if f != P.DIN_SEQUENCE]

        class WithFirstOrder(CTRModel):
            def __init__(self) -> None:
                super().__init__()
                self.base = base
                self.first = TieredEmbeddingBagCollection(plain, first_order_config(store), prefix="first_")
                self.first_dense = torch.nn.Linear(len(P.DENSE), 1)

            def forward(self, batch: Any) -> Any:
                return self.base(batch) + linear_term(self.first, self.first_dense, batch.dense, batch, plain)

        net = WithFirstOrder()
    return net, sparse


def run_arm(arm: dict[str, Any], seed: int, train: Any, test: Any) -> dict[str, Any]:
    import torch

    from fbrapids.app import pipeline as P
    from fbrapids.trainers.fit import default_optimizer, fit, predict
    from fbrapids.trainers.metrics import all_metrics

    t = time.perf_counter()
    torch.manual_seed(seed)
    net, sparse = build(arm, seed)
    opt = default_optimizer([p for p in net.parameters() if p.requires_grad], lr=arm.get("dlr", 1e-3))

    def batches(frame: Any, shuffle_buffer: int = 0) -> Any:
        return frame.fbx.stream(label=P.LABEL, dense=P.DENSE, sparse=sparse, group=P.GROUP,
                                batch_size=arm.get("bs", 2048), seed=seed, shuffle_buffer=shuffle_buffer)

    fit(net, batches(train, arm.get("shuffle", P.SHUFFLE_BUFFER)), epochs=arm.get("epochs", 1), optimizer=opt, progress=False,
        calibrate=arm.get("calibrate", True))
    stores = net.stores().values()
    for s in stores if arm.get("eval_ro") else ():
        s.read_only = True
    out = predict(net, batches(test), progress=False)
    for s in stores:
        s.read_only = False
    m = all_metrics(out["label"], out["pred"], out.get("group"))
    # the held-out calibration per quarter of the day (hours 0-5, 6-11, 12-17, 18-23): the
    # stream keeps the held-out frame's row order
    quarter = test["hour"].to_numpy() // 6
    by_quarter = [round(float(out["pred"][quarter == q].mean() / out["label"][quarter == q].mean()), 4)
                  for q in range(4)]
    return {k: round(float(m[k]), 5) for k in ("auc", "gauc", "logloss", "ne", "calibration")} | {
        "calibration_by_quarter_day": by_quarter,
        "seconds": round(time.perf_counter() - t, 1),
        "features": f"{len(sparse)}, " + ("weekday among them" if "weekday" in sparse else "without weekday")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--paired", action="store_true", help="each seed's own data (data seed = model seed)")
    ap.add_argument("--arm", action="append", required=True, help="a JSON object of changes (module docstring)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fbrapids" / "ablations")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "figures" / "model_ablations.json")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.machine import machine_description

    torch.set_num_threads(1)
    args.cache.mkdir(parents=True, exist_ok=True)
    for arm in map(json.loads, args.arm):
        for seed in args.seeds:
            data_seed = seed if args.paired else args.data_seed
            train, test = features(args.rows, data_seed, args.cache)
            row = {"arm": arm, "seed": seed, "data_seed": data_seed, "rows": args.rows,
                   **run_arm(arm, seed, train, test), "machine": machine_description(),
                   "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
            print(json.dumps(row), flush=True)
            runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
            args.out.write_text(json.dumps({"machine": row["machine"], "command": "python scripts/model_ablations.py",
                                            "measured_at": row["measured_at"], "runs": runs + [row]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
