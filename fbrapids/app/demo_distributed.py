"""The demo on several ranks: ``fbrapids demo --nproc N`` (local ranks) or
``torchrun --nproc-per-node N -m fbrapids.app.demo_distributed [--rows R ...]`` (any cluster).

W ranks train the model one process trains (``fbrapids demo``), on the same global
batches: **rows, not partitions, are the unit of data parallelism.**  Rank 0 plans the
same lazy feature frame as :func:`fbrapids.app.pipeline.run_pipeline` (history features over
the whole log, fitted ones fitted once on the training days: DIN included) and streams
the training days once, in the one process's global batches (``--batch-size``, same
order, same seed); rank ``r`` receives rows ``[r*B/W, (r+1)*B/W)`` of each
(:class:`~fbrapids.trainers.distributed.LeaderFeed`), so one partition, empty ones or a
short last batch change nothing.  Dense layers train under DDP and every table is
sharded across the ranks (:func:`~fbrapids.trainers.distributed.fit_distributed`); the
held-out day is evaluated over the union of the ranks' predictions.  With ``--scheduler``
rank 0 extracts on that dask cluster (e.g. a dask-cuda ``LocalCUDACluster``), otherwise
in its own threads.  Each rank's SSD tier lives in ``<work>/store/rank-<r>``; a sharded
checkpoint goes to ``<work>/checkpoints``, recording the global batch, the rows trained
so far and the run's settings, so that ``--resume`` continues at the same row on any
number of ranks (one included), and refuses another batch size, data or feature set.

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
from typing import TYPE_CHECKING, Sequence, TypedDict, Unpack

from fbrapids.errors import ArgumentError, BackendUnavailableError, FbrapidsError
from fbrapids.workloads.run_config import ModelNames

if TYPE_CHECKING:
    import torch

    from fbrapids.app.pipeline import TrainingInputs
    from fbrapids.trainers.distributed import DistributedTrainer, LeaderFeed
    from fbrapids.trainers.fit_config import FitResult
    from fbrapids.trainers.models.base import CTRModel
    from fbrapids.trainers.stream import BatchStream
    from fbrapids.workloads.recipe import Recipe

log = logging.getLogger(__name__)

#: the models that train on several ranks: those that say so (``trains_distributed``), read from the registry
DISTRIBUTED_MODELS = ModelNames("trains_distributed")
#: how long the other ranks wait for rank 0's next batch (planning included) before failing
FEED_TIMEOUT_S = 3600.0


class DemoOptions(TypedDict, total=False):
    """The settings of a run on several ranks (:func:`run_distributed_demo`'s ``options``)."""

    model: str
    batch_size: int  #: the global batch
    seed: int
    nan: str
    embedding_dim: int
    epochs: int | None
    checkpoint_every: int | None
    resume: bool
    max_steps: int | None
    overlap: bool
    calibrate: bool
    cache_rows: int
    host_rows: int | None
    backend: str | None  #: the dataframe backend rank 0 extracts on
    scheduler: str | None  #: the dask scheduler address rank 0 extracts on
    dist_backend: str | None  #: the process group's backend
    feed_timeout_s: float
    timeout_s: float


class RankOptions(DemoOptions, total=False):
    """What each rank is handed (:func:`train_rank`): the run's settings and its folders."""

    data_dir: str
    work_dir: str


class RankCounts(TypedDict):
    """A rank's figures besides its seconds and the metrics (:func:`rank_figures`)."""

    rank: int
    world: int
    steps: int
    rows_trained: int
    held_rows: int
    position_rows: int
    table_rows: int
    checkpoint: str | None
    resumed_from: str | None
    calibration: list[float]
    exchange: dict[str, float]


class RankResult(RankCounts):
    """What :func:`train_rank` returns: its figures, its training seconds, the union's metrics."""

    train_s: float
    metrics: dict[str, float]


def train_rank(rank: int, world: int, options: RankOptions) -> RankResult:
    """One rank's share of the demo (module docstring); returns its figures (metrics over the union)."""
    import datetime

    import dask
    import torch
    import torch.distributed as dist

    from fbrapids.app.pipeline import KEEP_CHECKPOINTS, default_recipe, training_inputs
    from fbrapids.frames.cluster import close_client, connect, frozen_worker_watchdog
    from fbrapids.trainers.distributed import LeaderFeed, evaluate_distributed, fit_distributed, per_rank_batch

    model = options.get("model", "dlrm")
    if model not in DISTRIBUTED_MODELS:
        raise ArgumentError(f"model {model!r} does not train on several ranks (one of {', '.join(DISTRIBUTED_MODELS)})")
    batch_size = int(options.get("batch_size", 2048))
    per_rank_batch(batch_size, world)
    work, data = Path(options["work_dir"]), options["data_dir"]
    seed, nan = int(options.get("seed", 0)), options.get("nan", "error")
    dim = int(options.get("embedding_dim", 16))
    inputs = training_inputs(data, model, dim, batch_size, seed)  # every rank: the model's inputs, no data read
    inputs.run["recipe"] = (recipe := default_recipe(data, model)).as_dict()  # one process's: the same training
    # the ranks wait for rank 0's batches on a group of their own, whose deadline covers planning (rank 0's
    # own progress is watched by the launcher's heartbeats and, on a cluster, frozen_worker_watchdog)
    feed_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(
        seconds=float(options.get("feed_timeout_s", FEED_TIMEOUT_S))))
    scheduler = options.get("scheduler")
    client = connect(scheduler) if rank == 0 and scheduler else None
    try:
        with dask.config.set(scheduler=client if client is not None else "threads"), \
                frozen_worker_watchdog(client, f"rank 0 extracting {data} for every rank"):
            train_src = test_src = None
            if rank == 0:  # the only rank that reads the data: once, as one process would
                train_src, test_src = _leader_streams(inputs, data, options.get("backend"), batch_size, seed, nan)
            feed = LeaderFeed(train_src, rank, world, feed_group)
            torch.manual_seed(seed)
            net, optimizer = _rank_model(model, inputs, options, rank, recipe)
            t0 = time.perf_counter()
            result, trainer = fit_distributed(net, feed, epochs=int(options.get("epochs") or recipe.epochs),
                                              optimizer=optimizer, checkpoint_dir=work / "checkpoints",
                                              checkpoint_every=options.get("checkpoint_every"),
                                              resume=bool(options.get("resume", False)), run=inputs.run,
                                              keep_checkpoints=KEEP_CHECKPOINTS,
                                              max_steps=options.get("max_steps"),
                                              overlap=bool(options.get("overlap", True)),
                                              calibrate=bool(options.get("calibrate", True)))
            train_s = time.perf_counter() - t0
            metrics = evaluate_distributed(trainer, LeaderFeed(test_src, rank, world, feed_group))
        dist.barrier()
        return {**rank_figures(result, trainer, feed), "train_s": train_s, "metrics": metrics}
    finally:
        if client is not None:
            close_client(client)


def _leader_streams(inputs: TrainingInputs, data: str | Path, backend: str | None, batch_size: int, seed: int,
                    nan: str) -> tuple[BatchStream, BatchStream]:
    """Rank 0's training and held-out batch streams (the other ranks read no data)."""
    from fbrapids.app.pipeline import GROUP, LABEL, SHUFFLE_BUFFER, TimedPartitions, batch_stream, plan_frames

    frames = plan_frames(inputs, data, backend)
    cols = [LABEL, GROUP, *inputs.dense, *inputs.sparse]
    train_src, test_src = (batch_stream(TimedPartitions(f, window=1, columns=cols), inputs.dense, inputs.sparse,
                                        batch_size, seed, nan, shuffle_buffer=window)
                           for f, window in ((frames.train, SHUFFLE_BUFFER), (frames.test, 0)))
    return train_src, test_src


def _rank_model(model: str, inputs: TrainingInputs, options: RankOptions, rank: int,
                recipe: Recipe) -> tuple[CTRModel, torch.optim.Optimizer]:
    """Rank ``rank``'s demo ``model`` over ``inputs`` with ``recipe`` (as one process builds it;
    its tables' tiers and seed from :func:`train_rank`'s ``options``) and its dense optimizer at
    the recipe's rate, made where the ranks' trainer puts the model."""
    from fbrapids.app.pipeline import build_model
    from fbrapids.trainers.device import place_model
    from fbrapids.trainers.distributed import rank_store_config
    from fbrapids.trainers.fit import default_optimizer
    from fbrapids.trainers.sparse import StoreConfig

    store = rank_store_config(StoreConfig(cache_rows=int(options.get("cache_rows", 1 << 17)),
                                          host_rows=options.get("host_rows", 1 << 19),
                                          ssd_dir=str(Path(options["work_dir"]) / "store"),
                                          seed=int(options.get("seed", 0))), rank)
    net = build_model(model, len(inputs.dense), inputs.sparse, store, int(options.get("embedding_dim", 16)),
                      sequences=inputs.sequences, recipe=recipe)
    place_model(net, None)
    return net, default_optimizer([p for p in net.parameters() if p.requires_grad], recipe.dense_lr)


def rank_figures(result: FitResult, trainer: DistributedTrainer, feed: LeaderFeed) -> RankCounts:
    """What :func:`train_rank` reports of its rank besides the seconds and the metrics:
    ``rows_trained``, this rank's rows in this call; ``position_rows``, the global stream's
    rows read over the run, resumes included (rank 0's feed counts the rows a resume
    skipped); the steps, the held-back rows, the table rows it owns, the final checkpoint,
    the calibration and the exchange's counters."""
    checkpoint = result.checkpoints[-1] if result.checkpoints else result.resumed_from
    return {"rank": trainer.rank, "world": trainer.world, "steps": result.steps, "rows_trained": int(feed.rows),
            "held_rows": int(result.held_rows), "position_rows": int(feed.global_rows),
            "table_rows": sum(len(s.local) for s in trainer.sharded.tables),
            "checkpoint": str(checkpoint) if checkpoint else None,
            "resumed_from": str(result.resumed_from) if result.resumed_from else None,
            "calibration": [float(v) for v in trainer.model.calibration.tolist()],
            "exchange": dict(trainer.exchange.stats)}


def rows_summary(results: Sequence[RankResult]) -> dict[str, int]:
    """The rows of a run on several ranks, as the one-process summary counts them: trained
    over every resume of the run (the global stream's rows read, those held back for the
    calibration among them), of them in this call when it resumed, and held out.

    Example:
        >>> r = {"position_rows": 2560, "rows_trained": 512, "held_rows": 256, "resumed_from": "ck/step-8",
        ...      "metrics": {"n": 300}}
        >>> rows_summary([r, {**r, "rows_trained": 512}])
        {'trained': 2560, 'of which held back for calibration': 256, 'of which in this resumed run': 1024, 'held out': 300}
    """
    first = results[0]
    out = {"trained": int(first["position_rows"])}
    if first["held_rows"]:
        out["of which held back for calibration"] = int(first["held_rows"])
    if first.get("resumed_from"):
        out["of which in this resumed run"] = sum(int(r["rows_trained"]) for r in results)
    out["held out"] = int(first["metrics"]["n"])
    return out


def summary(results: Sequence[RankResult]) -> dict[str, object]:
    """What ``--summary-json`` writes for a run on several ranks: the union's metrics, steps,
    rows (:func:`rows_summary`) and each rank's figures."""
    return {"nproc": len(results), "steps": results[0]["steps"], "metrics": results[0]["metrics"],
            "rows": rows_summary(results), "checkpoint": results[0]["checkpoint"],
            "resumed_from": results[0]["resumed_from"],
            "ranks": [{k: v for k, v in r.items() if k != "metrics"} for r in results]}


def render(results: Sequence[RankResult]) -> str:
    """A few lines: the union's metrics, the rows (:func:`rows_summary`), and per rank the
    rows it trained in this call and the table rows it owns."""
    m = results[0]["metrics"]
    lines = [f"{len(results)} ranks, {results[0]['steps']} steps"
             + (f" (resumed from {results[0]['resumed_from']})" if results[0].get("resumed_from") else "") + ":"
             + f" AUC {m['auc']:.4f}  GAUC {m['gauc']:.4f}  "
             f"logloss {m['logloss']:.4f}  NE {m['ne']:.4f}  calibration {m['calibration']:.3f}  "
             f"({int(m['n'])} held-out rows, over the union of the ranks)",
             "  rows: " + ", ".join(f"{k} {v:,}" for k, v in rows_summary(results).items())]
    for r in results:
        lines.append(f"  rank {r['rank']}: trained {r['rows_trained']:,} rows in {r['train_s']:.1f} s"
                     + (" (this run)" if r.get("resumed_from") else "") + f", owns "
                     f"{r['table_rows']} table rows, exchanged {r['exchange']['bytes_to_others'] / 1e6:.1f} MB "
                     f"({r['exchange']['seconds']:.1f} s in collectives)")
    return "\n".join(lines)


def run_distributed_demo(nproc: int, rows: int = 200_000, data_dir: str | Path | None = None,
                         work_dir: str | Path | None = None, **options: Unpack[DemoOptions]) -> list[RankResult]:
    """Generate (once) the default data, then train on ``nproc`` local ranks
    (:func:`fbrapids.trainers.distributed.spawn`); returns each rank's figures.

    ``options``: :func:`train_rank`'s (model, batch_size, seed, backend, scheduler,
    checkpoint_every, resume, max_steps, embedding_dim, cache_rows, host_rows, epochs,
    nan), and ``dist_backend`` (the process group's: None follows the device rule, NCCL
    with a GPU per rank on CUDA, gloo on the CPU; :func:`~fbrapids.trainers.distributed.launch.place_ranks`).  ``resume`` continues the run in ``work_dir`` (a sharded checkpoint, of any
    number of ranks); a checkpoint of one process, or one trained with another batch size,
    data or features, is refused before any rank starts."""
    from fbrapids.app.demo import WORK_PREFIX, default_data_dir
    from fbrapids.datasets.synthetic.generate import using_dataset
    from fbrapids.errors import CheckpointError
    from fbrapids.runs.workdir import lock_work_dir, temporary_work_dir, torch_cache_in
    from fbrapids.trainers.distributed import per_rank_batch, spawn
    from fbrapids.trainers.distributed.launch import local_placement

    batch_size, seed = int(options.get("batch_size", 2048)), int(options.get("seed", 0))
    per_rank_batch(batch_size, nproc)  # refused before any work
    placement = local_placement(nproc, options.get("dist_backend"))  # a GPU per NCCL rank, or refused now
    if options.get("model", "dlrm") not in DISTRIBUTED_MODELS:
        raise ArgumentError(f"--nproc: model {options.get('model')!r} trains in one process only "
                            f"(several ranks: {', '.join(DISTRIBUTED_MODELS)})")
    if options.get("resume") and work_dir is None:
        raise CheckpointError("resume needs the work dir of the run to continue (--work-dir)")
    data = Path(data_dir) if data_dir is not None else default_data_dir(rows, seed)
    with contextlib.ExitStack() as stack:
        work = Path(work_dir) if work_dir is not None else stack.enter_context(temporary_work_dir(WORK_PREFIX))
        # the work dir held by this launcher before anything is written: a second run on it is refused
        # naming this one, never on what its ranks have started writing there
        stack.enter_context(lock_work_dir(work))
        stack.enter_context(torch_cache_in(work))  # the ranks' too: nothing of torch's left in $TMPDIR
        stack.enter_context(using_dataset(rows, data, seed=seed))  # not regenerated under this run
        if options.get("resume"):
            check_resumable(work, data, options)
        opts: RankOptions = {**options, "data_dir": str(data), "work_dir": str(work)}
        return spawn(train_rank, nproc, (opts,), placement=placement,
                     timeout_s=float(options.get("timeout_s", 24 * 3600)))


def check_resumable(work: Path, data: Path, options: DemoOptions) -> None:
    """Refuse, before any rank starts, a resume of ``work`` whose newest checkpoint is a
    one-process one or was trained with other settings (one line naming each difference)."""
    from fbrapids.app.pipeline import training_inputs
    from fbrapids.errors import CheckpointError
    from fbrapids.trainers.distributed.checkpoint import newest_layout
    from fbrapids.trainers.run_identity import check_identity

    found = newest_layout(work / "checkpoints")
    if found is None:
        return
    path, meta = found
    if meta is None:
        raise CheckpointError(f"{path} is a one-process checkpoint: resume it without --nproc (or --nproc 1)")
    inputs = training_inputs(data, options.get("model", "dlrm"), int(options.get("embedding_dim", 16)),
                             int(options.get("batch_size", 2048)), int(options.get("seed", 0)))
    if "run" in meta:
        check_identity(meta["run"], inputs.run, path)


def is_sharded_work_dir(work: str | Path) -> bool:
    """Whether the newest checkpoint of a demo work dir was written by ranks (``--nproc``).

    Example:
        >>> import tempfile
        >>> is_sharded_work_dir(tempfile.mkdtemp())
        False
    """
    from fbrapids.trainers.distributed.checkpoint import newest_layout

    found = newest_layout(Path(work) / "checkpoints")
    return found is not None and found[1] is not None


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun --nproc-per-node N -m fbrapids.app.demo_distributed``: this process is one rank."""
    import torch.distributed as dist

    from fbrapids.app.demo import default_data_dir
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.workdir import lock_work_dir
    from fbrapids.trainers.distributed import init_from_env

    p = argparse.ArgumentParser(prog="fbrapids.app.demo_distributed", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None,
                   help="shared by the ranks (default: fbrapids-demo-dist under $TMPDIR)")
    p.add_argument("--model", default="dlrm", type=DISTRIBUTED_MODELS.argument("dlrm"), metavar="MODEL")
    p.add_argument("--batch-size", type=int, default=2048, help="the global batch (divided by the world size)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    p.add_argument("--resume", action="store_true", help="continue the run in --work-dir at the row it reached")
    p.add_argument("--scheduler", default=None, help="dask scheduler address rank 0 extracts on")
    p.add_argument("--backend", default=None, choices=("cpu", "gpu"), help="the dataframe backend")
    p.add_argument("--dist-backend", default=None, choices=("gloo", "nccl"),
                   help="the process group's backend (default: NCCL when the ranks train on CUDA, else gloo)")
    args = p.parse_args(argv)
    backend_usable(args.backend)  # before the process group: one line per rank, not a traceback each
    rank, world = init_from_env(args.dist_backend)
    try:
        data = args.data_dir or default_data_dir(args.rows, args.seed)
        work = args.work_dir or Path(tempfile.gettempdir()) / "fbrapids-demo-dist"
        with lock_work_dir(work) if rank == 0 else contextlib.nullcontext():  # held before any rank writes there
            if rank == 0:
                ensure_dataset(args.rows, data, seed=args.seed)
            dist.barrier()
            out = train_rank(rank, world, {"data_dir": str(data), "work_dir": str(work), "model": args.model,
                                           "batch_size": args.batch_size, "epochs": args.epochs, "seed": args.seed,
                                           "scheduler": args.scheduler, "backend": args.backend,
                                           "checkpoint_every": args.checkpoint_every, "resume": args.resume})
            got = [out] * world  # one place per rank, each filled with that rank's figures
            dist.all_gather_object(got, out)
        if rank == 0:
            sys.stdout.write(render(got) + "\n")
    finally:
        dist.destroy_process_group()
    return 0


def backend_usable(name: str | None) -> None:
    """The :class:`~fbrapids.errors.BackendUnavailableError` of ``--backend gpu`` (or
    ``FBRAPIDS_BACKEND=gpu``) where the GPU backend cannot run, asked of the packages and
    the driver (:mod:`fbrapids.frames.gpu_probe`) before any rank joins the process group."""
    from fbrapids.frames.gpu_probe import ENV_VAR, gpu_missing, gpu_unavailable_message

    name = name if name is not None else os.environ.get(ENV_VAR)
    if name is not None and name.strip().lower() == "gpu" and gpu_missing():
        raise BackendUnavailableError(gpu_unavailable_message(gpu_missing()))


def rank_main(argv: Sequence[str] | None = None) -> int:
    """:func:`main` with what fbrapids refuses on one line per rank (``rank R: ...``), exit
    status 2; torchrun then adds its own report of the failed ranks."""
    try:
        return main(argv)
    except FbrapidsError as exc:
        sys.stderr.write(f"fbrapids.app.demo_distributed rank {os.environ.get('RANK', '?')}: {exc}\n")
        return 2


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("FBRAPIDS_LOG", "WARNING"))
    raise SystemExit(rank_main())
