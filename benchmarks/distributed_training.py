"""Training on W = 1, 2, 4 ranks against one process, on the default demo data.

The demo's features are extracted once (:func:`fbrapids.app.pipeline.feature_frame`, training
days / held-out day) and kept in memory as pandas frames.  Then:

* one process: :func:`fbrapids.trainers.fit` over global batches of ``--batch`` rows, and
  the held-out metrics;
* W ranks (gloo, local processes): rank ``r`` streams only its rows of every global batch
  (:func:`fbrapids.trainers.distributed.data.rank_bounds`), per-rank batch ``batch / W``;
  :func:`~fbrapids.trainers.distributed.fit_distributed`, then the union's metrics.

Reported per W: samples/s (training rows / the slowest rank's training seconds) and its
ratio to the ordinary one-process run, the share of the step time the step spends in the
sparse exchange's collectives (DDP's all-reduce runs inside ``backward`` and is not in it)
with the next step's id exchange overlapped (``fit_distributed(overlap=True)``, the default:
the step's own collectives plus its wait for the prepared ids) and, for W > 1, without it
(``overlap=False``: a second run, ``no_overlap``), bytes exchanged per step against ``(8 + 8 * dim)`` x the
distinct ids (per rank and table; ours also carries each id's occurrence count: 16 bytes
instead of 8), table rows per rank (max / mean), and the match with one process: relative
weight difference of the dense layers and of the tables (all rows, by id), |delta AUC| and
|delta logloss| (acceptance: <= 1e-4, <= 1e-3, <= 1e-4, <= 1e-4).  The one-process rate,
the peer every world is set against, is judged by the noise rule
(:class:`benchmarks.machine.NoiseCheck`: the load and a fixed loop at both ends, its rate
against this machine's reference): a ``noisy`` run is not written into the README.  The
last line printed is one JSON object; ``--out`` writes it too
(``benchmarks/results/distributed.json``).

    python benchmarks/distributed_training.py --rows 200000 --worlds 1 2 4 --out benchmarks/results/distributed.json

On a multi-GPU node (NCCL, one GPU per rank) the same code runs with ``--backend nccl``
(each rank on GPU ``rank``; the exchange's buffers move through the GPUs), or through
torchrun on the demo itself::

    torchrun --nproc-per-node 8 -m fbrapids.app.demo_distributed --rows 1000000 --backend gpu

Example:
    >>> ratio(144, 136)
    1.0588

(Not ``benchmarks/distributed.py``: run as a script, this folder is ``sys.path[0]``, and a module
named ``distributed`` there would shadow dask's ``distributed`` package for every benchmark.)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import NoiseCheck, machine_description, write_result  # noqa: E402

log = logging.getLogger("benchmarks.distributed")

DIM = 16


def ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else float("nan")


def prepare(rows: int, seed: int, out: Path) -> tuple[Path, Path]:
    """The demo's extracted training / held-out frames, written once as pickles in ``out``."""
    import dask

    from fbrapids.app.demo import default_data_dir
    from fbrapids.app.pipeline import DAY, DENSE, GROUP, LABEL, SPARSE, feature_frame, split_by_day
    from fbrapids.datasets.synthetic.generate import DAYS, TS0, ensure_dataset

    data = default_data_dir(rows, seed)
    ensure_dataset(rows, data, seed=seed)
    merged, _ = feature_frame(data, backend="cpu")
    train, test = split_by_day(merged, TS0 + (DAYS - 1) * DAY)
    cols = list(dict.fromkeys([LABEL, GROUP, *DENSE, *SPARSE]))
    with dask.config.set(scheduler="threads"):
        tr, te = train[cols].compute().reset_index(drop=True), test[cols].compute().reset_index(drop=True)
    a, b = out / "train.pkl", out / "test.pkl"
    tr.to_pickle(a)
    te.to_pickle(b)
    return a, b


def _stream(frame: Any, batch: int) -> Any:
    from fbrapids.app.pipeline import DENSE, GROUP, LABEL, SPARSE

    return frame.fbx.stream(label=LABEL, dense=DENSE, sparse=SPARSE, group=GROUP, batch_size=batch, prefetch=1)


def _model(ssd: str | None, rank: int | None = None) -> Any:
    import torch

    from fbrapids.app.pipeline import DENSE, SPARSE, build_model
    from fbrapids.trainers.distributed import rank_store_config
    from fbrapids.trainers.sparse import StoreConfig

    torch.manual_seed(0)
    store = StoreConfig(cache_rows=1 << 17, host_rows=1 << 19, ssd_dir=ssd)
    if rank is not None:
        store = rank_store_config(store, rank)
    return build_model("dlrm", len(DENSE), list(SPARSE), store, DIM)


def rank_rows(n: int, batch: int, rank: int, world: int) -> Any:
    """The row positions of rank ``rank``'s slices of every global batch of ``n`` rows."""
    import numpy as np

    from fbrapids.trainers.distributed.data import rank_bounds

    out = []
    for start in range(0, n, batch):
        a, z = rank_bounds(min(batch, n - start), rank, world)
        out.append(np.arange(start + a, start + z))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def tables_of(stores: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: s.state() for k, s in stores.items()}


def exchange_share(stats: dict[str, Any], train_s: float) -> float:
    """The share of a rank's training time its steps spent in the exchange: the step's own
    collectives plus its wait for the ids prepared during the previous step.

    Example:
        >>> exchange_share({"seconds": 1.0, "seconds_overlapped": 5.0, "waited_for_ids_s": 0.5}, 10.0)
        0.15
    """
    return (stats.get("seconds", 0.0) + stats.get("waited_for_ids_s", 0.0)) / train_s if train_s else float("nan")


def rank_run(rank: int, world: int, train_path: str, test_path: str, batch: int, work: str,
             max_steps: int | None = None, overlap: bool = True) -> dict[str, Any]:
    """One rank: its slices of the global batches, trained and evaluated over the union."""
    import pandas as pd
    import torch

    from fbrapids.trainers.distributed import evaluate_distributed, fit_distributed

    torch.set_num_threads(1)
    train, test = pd.read_pickle(train_path), pd.read_pickle(test_path)
    mine = train.iloc[rank_rows(len(train), batch, rank, world)].reset_index(drop=True)
    held = test.iloc[rank_rows(len(test), batch, rank, world)].reset_index(drop=True)
    model = _model(str(Path(work) / "store"), rank)
    t = time.perf_counter()
    res, trainer = fit_distributed(model, _stream(mine, batch // world), max_steps=max_steps, overlap=overlap,
                                   calibrate=False)  # as the one process: no post-hoc calibration
    train_s = time.perf_counter() - t
    stats = dict(trainer.exchange.stats)
    distinct = trainer.sharded.distinct_ids
    tables = tables_of(trainer.sharded.local_stores())  # before evaluation admits the held-out day's ids
    metrics = evaluate_distributed(trainer, _stream(held, batch // world))
    return {"rank": rank, "steps": res.steps, "train_s": train_s, "rows": len(mine), "stats": stats,
            "distinct": distinct, "metrics": metrics,
            "dense": {k: v.detach().numpy().copy() for k, v in model.state_dict().items()} if rank == 0 else None,
            "tables": tables}


def compare(one: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, float]:
    import numpy as np

    def rel(a: Any, b: Any) -> float:
        return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))

    dense = max(rel(ranks[0]["dense"][k], v) for k, v in one["dense"].items())
    worst, on_one_rank = 0.0, True
    for key, (ids_ref, rows_ref) in one["tables"].items():
        ids = np.concatenate([r["tables"][key][0] for r in ranks])
        rows = np.concatenate([r["tables"][key][1] for r in ranks])
        on_one_rank &= len(np.unique(ids)) == len(ids) == len(ids_ref)
        a, b = np.argsort(ids), np.argsort(ids_ref)
        if not np.array_equal(ids[a], ids_ref[b]):
            on_one_rank = False
            continue
        worst = max(worst, rel(rows[a][:, :DIM], rows_ref[b][:, :DIM]))
    m = ranks[0]["metrics"]
    return {"dense_rel_diff": dense, "tables_rel_diff": worst, "every_id_on_one_rank": bool(on_one_rank),
            "abs_delta_auc": abs(m["auc"] - one["metrics"]["auc"]),
            "abs_delta_logloss": abs(m["logloss"] - one["metrics"]["logloss"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--batch", type=int, default=2048, help="the global batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--max-steps", type=int, default=None, help="stop every run after this many steps")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--set-reference", action="store_true",
                   help="record this run's one-process rate as this machine's reference (a quiet run only)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import numpy as np
    import pandas as pd
    import torch

    from fbrapids.trainers import evaluate, fit
    from fbrapids.trainers.distributed import spawn

    machine = machine_description()
    noise = NoiseCheck(f"distributed rows={args.rows} batch={args.batch}")
    torch.set_num_threads(1)
    out: dict[str, Any] = {"rows": args.rows, "global_batch": args.batch, "dim": DIM, "backend": args.backend,
                           "machine": machine, "worlds": {}}
    with tempfile.TemporaryDirectory(prefix="fbrapids-bench-dist-") as tmp:
        t = time.perf_counter()
        train_path, test_path = prepare(args.rows, args.seed, Path(tmp))
        log.info("features extracted in %.1f s", time.perf_counter() - t)
        train, test = pd.read_pickle(train_path), pd.read_pickle(test_path)
        model = _model(str(Path(tmp) / "one"))
        t = time.perf_counter()
        fit(model, _stream(train, args.batch), progress=False, max_steps=args.max_steps, calibrate=False)
        one_s = time.perf_counter() - t
        one = {"dense": {k: v.detach().numpy().copy() for k, v in model.state_dict().items()},
               "tables": tables_of(model.stores()), "metrics": evaluate(model, _stream(test, args.batch),
                                                                          progress=False)}
        trained = len(train) if args.max_steps is None else min(len(train), args.max_steps * args.batch)
        out["one_process"] = {"samples_per_s": trained / one_s, "train_s": one_s,
                              "auc": one["metrics"]["auc"], "logloss": one["metrics"]["logloss"]}
        log.info("one process: %.0f samples/s, AUC %.4f", trained / one_s, one["metrics"]["auc"])
        del model
        for world in args.worlds:
            work = Path(tmp) / f"w{world}"
            ranks = spawn(rank_run, world, (str(train_path), str(test_path), args.batch, str(work), args.max_steps),
                          backend=args.backend, timeout_s=3600)
            off = None
            if world > 1:  # the same training without the overlap (the id exchange inside the step)
                off = spawn(rank_run, world, (str(train_path), str(test_path), args.batch, str(work) + "-off",
                                              args.max_steps, False), backend=args.backend, timeout_s=3600)
            slowest = max(r["train_s"] for r in ranks)
            steps = ranks[0]["steps"]
            a2a = sum(r["stats"]["bytes_to_others"] + r["stats"]["bytes_to_self"] for r in ranks)
            gathers = sum(r["stats"]["all_gather"] for r in ranks) * (2 + world * 1 * len(one["tables"])) * 8 * (
                world - 1)
            ideal = (8 + 8 * DIM) * ranks[0]["distinct"]
            per_table = {k: [len(r["tables"][k][0]) for r in ranks] for k in one["tables"]}
            total = np.sum([v for v in per_table.values()], axis=0)
            row = {"samples_per_s": trained / slowest, "train_s": slowest, "steps": steps,
                   "vs_one_process": ratio(trained / slowest, trained / one_s),
                   "comm_share": float(np.mean([exchange_share(r["stats"], r["train_s"]) for r in ranks])),
                   "overlapped_s": float(np.mean([r["stats"].get("seconds_overlapped", 0.0) for r in ranks])),
                   "bytes_per_step": (a2a - gathers) / steps, "ideal_bytes_per_step": ideal / steps,
                   "bytes_vs_ideal": ratio(a2a - gathers, ideal),
                   "bytes_to_other_ranks_per_step": sum(r["stats"]["bytes_to_others"] for r in ranks) / steps,
                   "rows_per_rank": total.tolist(), "rows_max_over_mean": float(total.max() / total.mean()),
                   "worst_table_max_over_mean": float(max(max(v) / np.mean(v) for v in per_table.values())),
                   **compare(one, ranks)}
            if off is not None:
                off_s = max(r["train_s"] for r in off)
                row["no_overlap"] = {
                    "samples_per_s": trained / off_s, "train_s": off_s, "steps": off[0]["steps"],
                    "vs_one_process": ratio(trained / off_s, trained / one_s),
                    "comm_share": float(np.mean([exchange_share(r["stats"], r["train_s"]) for r in off])),
                    **compare(one, off)}
            out["worlds"][str(world)] = row
            log.info("W=%d: %s", world, json.dumps(row))
    out["load_average_end"] = os.getloadavg()[0]
    # the one-process rate (the peer every world is compared with) judged by the noise rule
    out.update(noise.finish({"one_process@1": out["one_process"]["samples_per_s"]}, args.set_reference))
    shown = argv if argv is not None else sys.argv[1:]
    if "--out" in shown:  # the command as scripts/bench.py records it (without where the JSON went)
        i = shown.index("--out")
        shown = shown[:i] + shown[i + 2 :]
    out["command"] = "python benchmarks/distributed_training.py " + " ".join(shown)
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = json.loads(json.dumps(out, default=float))  # numpy scalars as plain numbers
    if args.out:
        write_result(args.out, out)
    else:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
