"""The demo on several ranks: ``fbrapids demo --nproc N`` (local ranks) or
``torchrun --nproc-per-node N -m fbrapids.demo_distributed [--rows R ...]`` (any cluster).

Every rank builds the same lazy feature frame of the default data
(:func:`fbrapids.pipeline.feature_frame`), streams its own dask partitions of the training
days (``partitions[r::W]``, :func:`~fbrapids.trainers.distributed.shard_partitions`) in
batches of ``batch_size / W``, trains the model with dense layers under DDP and every table
sharded across the ranks (:func:`~fbrapids.trainers.distributed.fit_distributed`), and
evaluates on the held-out day over the union of the ranks' predictions.  With
``--scheduler`` every rank extracts its partitions on that dask cluster (e.g. a
dask-cuda ``LocalCUDACluster``), otherwise in its own process.  Each rank's SSD tier lives
in ``<work>/store/rank-<r>``; a sharded checkpoint goes to ``<work>/checkpoints``.

DIN (its history features are fitted over the whole log) runs in one process only.

Example:
    >>> r = run_distributed_demo(2, rows=3000, data_dir=tempfile.mkdtemp())  # doctest: +SKIP
    >>> r[0]["metrics"]["n"] > 0  # doctest: +SKIP
    True
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from fbrapids.errors import ArgumentError, BackendUnavailableError, FbrapidsError

log = logging.getLogger(__name__)

DISTRIBUTED_MODELS = ("dlrm", "wide_deep", "deepfm")


def train_rank(rank: int, world: int, options: dict[str, Any]) -> dict[str, Any]:
    """One rank's share of the demo (module docstring); returns its figures (metrics over the union)."""
    import torch.distributed as dist

    from fbrapids.cluster import close_client, connect
    from fbrapids.datagen import DAYS, TS0
    from fbrapids.pipeline import DAY, DENSE, GROUP, LABEL, SPARSE, build_model, feature_frame, split_by_day
    from fbrapids.trainers.distributed import (evaluate_distributed, fit_distributed, per_rank_batch,
                                               rank_store_config, shard_partitions)
    from fbrapids.trainers.sparse import StoreConfig
    from fbrapids.trainers.stream import stream

    model = options.get("model", "dlrm")
    if model not in DISTRIBUTED_MODELS:
        raise ArgumentError(f"model {model!r} does not train on several ranks (one of {', '.join(DISTRIBUTED_MODELS)})")
    local_batch = per_rank_batch(int(options.get("batch_size", 2048)), world)
    work = Path(options["work_dir"])
    seed = int(options.get("seed", 0))
    client = connect(options["scheduler"]) if options.get("scheduler") else None
    try:
        merged, _ = feature_frame(options["data_dir"], backend=options.get("backend"))
        train, test = split_by_day(merged, TS0 + (DAYS - 1) * DAY)
        cols = list(dict.fromkeys([LABEL, GROUP, *DENSE, *SPARSE]))
        mine, held = shard_partitions(train[cols], rank, world), shard_partitions(test[cols], rank, world)
        batches = stream(mine, label=LABEL, dense=DENSE, sparse=SPARSE, group=GROUP, batch_size=local_batch,
                         seed=seed, prefetch=1)
        store = rank_store_config(StoreConfig(cache_rows=int(options.get("cache_rows", 1 << 17)),
                                              host_rows=options.get("host_rows", 1 << 19),
                                              ssd_dir=str(work / "store"), seed=seed), rank)
        import torch

        torch.manual_seed(seed)
        net = build_model(model, len(DENSE), list(SPARSE), store, int(options.get("embedding_dim", 16)))
        t0 = time.perf_counter()
        result, trainer = fit_distributed(net, batches, epochs=int(options.get("epochs", 1)),
                                          checkpoint_dir=work / "checkpoints")
        train_s = time.perf_counter() - t0
        rows = sum(len(s.local) for s in trainer.sharded.tables)
        metrics = evaluate_distributed(trainer, stream(held, label=LABEL, dense=DENSE, sparse=SPARSE, group=GROUP,
                                                       batch_size=local_batch, seed=seed, prefetch=1))
        trained = batches.stats.get("rows", 0)
        dist.barrier()
        return {"rank": rank, "world": world, "steps": result.steps, "rows_trained": int(trained),
                "train_s": train_s, "table_rows": rows, "metrics": metrics,
                "checkpoint": str(result.checkpoints[-1]) if result.checkpoints else None,
                "exchange": dict(trainer.exchange.stats)}
    finally:
        if client is not None:
            close_client(client)


def render(results: Sequence[dict[str, Any]]) -> str:
    """A few lines: the union's metrics, rows trained and table rows per rank."""
    m = results[0]["metrics"]
    lines = [f"{len(results)} ranks, {results[0]['steps']} steps: AUC {m['auc']:.4f}  GAUC {m['gauc']:.4f}  "
             f"logloss {m['logloss']:.4f}  NE {m['ne']:.4f}  calibration {m['calibration']:.3f}  "
             f"({int(m['n'])} held-out rows, over the union of the ranks)"]
    for r in results:
        lines.append(f"  rank {r['rank']}: trained {r['rows_trained']} rows in {r['train_s']:.1f} s, owns "
                     f"{r['table_rows']} table rows, exchanged {r['exchange']['bytes_to_others'] / 1e6:.1f} MB "
                     f"({r['exchange']['seconds']:.1f} s in collectives)")
    return "\n".join(lines)


def run_distributed_demo(nproc: int, rows: int = 200_000, data_dir: str | Path | None = None,
                         work_dir: str | Path | None = None, **options: Any) -> list[dict[str, Any]]:
    """Generate (once) the default data, then train on ``nproc`` local ranks
    (:func:`fbrapids.trainers.distributed.spawn`); returns each rank's figures."""
    from fbrapids.datagen import ensure_dataset
    from fbrapids.demo import WORK_PREFIX, default_data_dir
    from fbrapids.trainers.distributed import per_rank_batch, spawn
    from fbrapids.workdir import temporary_work_dir

    per_rank_batch(int(options.get("batch_size", 2048)), nproc)  # refused before any work
    if options.get("model", "dlrm") not in DISTRIBUTED_MODELS:
        raise ArgumentError(f"--nproc: model {options.get('model')!r} trains in one process only "
                            f"(several ranks: {', '.join(DISTRIBUTED_MODELS)})")
    data = Path(data_dir) if data_dir is not None else default_data_dir(rows, int(options.get("seed", 0)))
    ensure_dataset(rows, data, seed=int(options.get("seed", 0)))
    with contextlib.ExitStack() as stack:
        work = Path(work_dir) if work_dir is not None else stack.enter_context(temporary_work_dir(WORK_PREFIX))
        opts = {**options, "data_dir": str(data), "work_dir": str(work)}
        return spawn(train_rank, nproc, (opts,), backend=options.get("dist_backend"))


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun --nproc-per-node N -m fbrapids.demo_distributed``: this process is one rank."""
    import torch.distributed as dist

    from fbrapids.datagen import ensure_dataset
    from fbrapids.demo import default_data_dir
    from fbrapids.trainers.distributed import init_from_env

    p = argparse.ArgumentParser(prog="fbrapids.demo_distributed", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None,
                   help="shared by the ranks (default: fbrapids-demo-dist under $TMPDIR)")
    p.add_argument("--model", default="dlrm", choices=DISTRIBUTED_MODELS)
    p.add_argument("--batch-size", type=int, default=2048, help="the global batch (divided by the world size)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", default=None, help="dask scheduler address feeding every rank")
    p.add_argument("--backend", default=None, choices=("cpu", "gpu"), help="the dataframe backend")
    args = p.parse_args(argv)
    backend_usable(args.backend)  # before the process group: one line per rank, not a traceback each
    rank, world = init_from_env()
    try:
        data = args.data_dir or default_data_dir(args.rows, args.seed)
        if rank == 0:
            ensure_dataset(args.rows, data, seed=args.seed)
        dist.barrier()
        work = args.work_dir or Path(tempfile.gettempdir()) / "fbrapids-demo-dist"
        out = train_rank(rank, world, {"data_dir": str(data), "work_dir": str(work), "model": args.model,
                                       "batch_size": args.batch_size, "epochs": args.epochs, "seed": args.seed,
                                       "scheduler": args.scheduler, "backend": args.backend})
        got: list[Any] = [None] * world
        dist.all_gather_object(got, out)
        if rank == 0:
            sys.stdout.write(render(got) + "\n")
    finally:
        dist.destroy_process_group()
    return 0


def backend_usable(name: str | None) -> None:
    """The :class:`~fbrapids.errors.BackendUnavailableError` of ``--backend gpu`` (or
    ``FBRAPIDS_BACKEND=gpu``) where the GPU backend cannot run, asked of the packages and
    the driver (:mod:`fbrapids.gpu_probe`) before any rank joins the process group."""
    from fbrapids.gpu_probe import ENV_VAR, gpu_missing, gpu_unavailable_message

    name = name if name is not None else os.environ.get(ENV_VAR)
    if name is not None and name.strip().lower() == "gpu" and gpu_missing():
        raise BackendUnavailableError(gpu_unavailable_message(gpu_missing()))


def rank_main(argv: Sequence[str] | None = None) -> int:
    """:func:`main` with what fbrapids refuses on one line per rank (``rank R: ...``), exit
    status 2; torchrun then adds its own report of the failed ranks."""
    try:
        return main(argv)
    except FbrapidsError as exc:
        sys.stderr.write(f"fbrapids.demo_distributed rank {os.environ.get('RANK', '?')}: {exc}\n")
        return 2


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("FBRAPIDS_LOG", "WARNING"))
    raise SystemExit(rank_main())
