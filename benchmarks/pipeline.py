"""Pipeline vs write-then-train, side by side in one run.

* **pipeline**: ``fbrapids.app.pipeline.run_pipeline`` — features are extracted partition by
  partition in the stream's background thread while the trainer consumes the previous
  partition; nothing is written.
* **write-then-train** (the MapReduce-then-GPU-training baseline of the FeatureBox
  paper): the same features are extracted and written to parquet, read back, then
  streamed into the same model with the same seed.

Both train the same DLRM on the same data with the same seed and evaluate on the
held-out last day.  Bytes written and read are measured the same way on both sides: the
``/proc/<pid>/io`` counters of this process and its children (``write_bytes``: sent to
storage; ``rchar``: every byte read, input parquet and SSD tier included), over the
whole run of each side; the intermediate feature files' size on disk is shown beside them.
The last line printed is one JSON object with ``pipeline_s``, ``write_then_train_s``,
``pipeline_bytes_written``, ``baseline_bytes_written``, ``pipeline_bytes_read``,
``baseline_bytes_read``, ``baseline_intermediate_file_bytes``, ``pipeline_auc`` and
``baseline_auc``.

    python benchmarks/pipeline.py --rows 200000

``--verify-overhead`` measures instead what the integrity checks cost: the pipeline with
checkpoints and a reload of the last one, verification on vs off (``FBRAPIDS_VERIFY=0``),
in rounds of one run each, back to back, alternating which goes first.  The overhead is
the median of the rounds' on/off ratios (a pair shares the machine's state, so drift over
the run cancels); the ratio of the two medians and of the CPU times are printed beside it:

    python benchmarks/pipeline.py --rows 200000 --verify-overhead --repeat 3 --checkpoint-every 25
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description  # noqa: E402
from fbrapids.app.pipeline import (
    DAY,
    DENSE,
    SHUFFLE_BUFFER,
    SPARSE,
    batch_stream,
    build_model,
    default_recipe,
    feature_frame,
    run_pipeline,
    split_by_day,
)
from fbrapids.datasets.synthetic.generate import DAYS, TS0, ensure_dataset
from fbrapids.files.iostats import IOCounter
from fbrapids.files.manifest import VERIFY_ENV
from fbrapids.trainers import evaluate, fit
from fbrapids.trainers.dense_optim import default_optimizer
from fbrapids.trainers.metrics import format_metric
from fbrapids.trainers.sparse import StoreConfig
from fbrapids.views.read import read_view


def write_then_train(data_dir: Path, work: Path, batch_size: int, seed: int) -> dict:
    """Extract everything to parquet, read it back, train and evaluate; returns the figures."""
    torch.manual_seed(seed)
    io = IOCounter().__enter__()
    t0 = time.perf_counter()
    merged, _ = feature_frame(data_dir)
    cutoff = TS0 + (DAYS - 1) * DAY
    train, test = split_by_day(merged, cutoff)
    out = work / "intermediate"
    columns = ["click", "user_id", "ts", *DENSE, *SPARSE]
    columns = list(dict.fromkeys(columns))
    train[columns].to_parquet(out / "train", write_index=False)
    test[columns].to_parquet(out / "test", write_index=False)
    files = sum(f.stat().st_size for f in out.rglob("*.parquet"))
    t_written = time.perf_counter()
    train_back = read_view(out / "train" / "*.parquet")
    test_back = read_view(out / "test" / "*.parquet")
    store = StoreConfig(cache_rows=1 << 17, host_rows=1 << 19, ssd_dir=str(work / "store"), seed=seed)
    recipe = default_recipe(data_dir, "dlrm")  # the pipeline's: its learning rates, epochs and model
    torch.manual_seed(seed)  # as the pipeline builds its model
    net = build_model("dlrm", len(DENSE), SPARSE, store, recipe=recipe)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))  # the same training threads as the pipeline
    try:
        # the training rows shuffled in the pipeline's buffer: the same batches as run_pipeline's
        fit(net, batch_stream(_partitions(train_back), DENSE, SPARSE, batch_size, seed, shuffle_buffer=SHUFFLE_BUFFER),
            optimizer=default_optimizer([p for p in net.parameters() if p.requires_grad], recipe.dense_lr),
            epochs=recipe.epochs, progress=False)
        metrics = evaluate(net, batch_stream(_partitions(test_back), DENSE, SPARSE, batch_size, seed), progress=False)
    finally:
        torch.set_num_threads(threads)
    total = time.perf_counter() - t0
    io.__exit__(None, None, None)
    return {"seconds": total, "extract_write_s": t_written - t0, "bytes_written": io.write_bytes,
            "bytes_read": io.rchar, "intermediate_file_bytes": files,
            "auc": metrics["auc"], "gauc": metrics["gauc"], "logloss": metrics["logloss"]}


def _partitions(frame):
    for piece in frame.to_delayed():
        yield piece.compute()


def _settle() -> None:
    """Start each timed run from the same state: the previous run's dirty pages written back
    (its SSD tier and checkpoint, ~200 MB, would otherwise be flushed during the next run)
    and its garbage collected."""
    import gc

    os.sync()
    gc.collect()


def _cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _verified_run(data: Path, work: Path, args: argparse.Namespace,
                  verify: bool) -> tuple[float, float, float, str | None]:
    """One pipeline run writing checkpoints, then the final checkpoint loaded back into a
    fresh model; returns (wall seconds, CPU seconds, AUC, the checkpoint).  ``verify`` False
    sets FBRAPIDS_VERIFY=0 for it."""
    from fbrapids.trainers.checkpoint.model_state import load_checkpoint

    os.environ[VERIFY_ENV] = "1" if verify else "0"
    try:
        t, c = time.perf_counter(), _cpu_seconds()
        r = run_pipeline(data, batch_size=args.batch_size, seed=args.seed, work_dir=work,
                         checkpoint=not args.no_checkpoint, checkpoint_every=args.checkpoint_every, progress=False,
                         count_clean=False)
        if not args.no_checkpoint:
            store = StoreConfig(cache_rows=1 << 17, host_rows=1 << 19, ssd_dir=str(work / "reload"), seed=args.seed)
            load_checkpoint(build_model("dlrm", len(DENSE), SPARSE, store), None, r.checkpoint)
        return time.perf_counter() - t, _cpu_seconds() - c, r.metrics["auc"], r.checkpoint
    finally:
        os.environ.pop(VERIFY_ENV, None)


def _checkpoint_round_trips(checkpoint: str, work: Path, args: argparse.Namespace,
                            rounds: int) -> dict[bool, list[float]]:
    """Seconds of one save + load of ``checkpoint``'s model, verification on vs off,
    alternated: the part of a run the checks cost most in, timed on its own (a pipeline
    run's own noise is larger than the whole overhead)."""
    from fbrapids.trainers.checkpoint.model_state import load_checkpoint, save_checkpoint

    def model(ssd: Path):
        return build_model("dlrm", len(DENSE), SPARSE, StoreConfig(cache_rows=1 << 17, host_rows=1 << 19,
                                                                   ssd_dir=str(ssd), seed=args.seed))

    source = model(work / "source")
    load_checkpoint(source, None, checkpoint)
    out: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for verify in ((True, False) if r % 2 == 0 else (False, True)):
            os.environ[VERIFY_ENV] = "1" if verify else "0"
            root = work / f"trip-{r}-{verify}"
            try:
                _settle()
                t = time.perf_counter()
                saved = save_checkpoint(source, None, root, 1)
                load_checkpoint(model(root / "ssd"), None, saved)
                out[verify].append(time.perf_counter() - t)
            finally:
                os.environ.pop(VERIFY_ENV, None)
                shutil.rmtree(root, ignore_errors=True)
    return out


def verify_overhead(args: argparse.Namespace) -> int:
    """Verification on vs off, alternated run by run in one process, same data and seed."""
    data = args.data or ensure_dataset(args.rows, Path(tempfile.gettempdir()) / f"fbrapids-bench-{args.rows}-crc", 0)
    base = Path(tempfile.mkdtemp(prefix="fbrapids-bench-verify-"))
    try:
        if args.warmup_rows:
            small = ensure_dataset(args.warmup_rows, base / "warm-data", 0)
            for verify in (True, False):  # warm-up, untimed
                _verified_run(small, base / f"warm-{verify}", args, verify)
        times: dict[bool, list[float]] = {True: [], False: []}
        cpu: dict[bool, list[float]] = {True: [], False: []}
        aucs: dict[bool, float] = {}
        kept: str | None = None
        for r in range(args.repeat):
            for verify in ((True, False) if r % 2 == 0 else (False, True)):  # alternate who goes first
                work = base / f"run-{r}-{verify}"
                _settle()
                seconds, cpu_s, aucs[verify], ckpt = _verified_run(data, work, args, verify)
                times[verify].append(seconds)
                cpu[verify].append(cpu_s)
                if ckpt is not None and kept is None:
                    kept = ckpt  # timed apart below; removed with ``base``
                else:
                    shutil.rmtree(work, ignore_errors=True)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        cpu_on, cpu_off = statistics.median(cpu[True]), statistics.median(cpu[False])
        # each round runs both back to back: the median of the rounds' own ratios cancels the machine's drift
        paired = statistics.median(100 * (a / b - 1) for a, b in zip(times[True], times[False]))
        of_medians = 100 * (on - off) / off
        trips = _checkpoint_round_trips(kept, base / "trips", args, max(5, args.repeat)) if kept else None
        trip_pct = None
        if trips:
            trip_on, trip_off = statistics.median(trips[True]), statistics.median(trips[False])
            trip_pct = 100 * (trip_on - trip_off) / off  # the checkpoint's extra seconds, against a whole run
        what = "pipeline (no checkpoint)" if args.no_checkpoint else "pipeline + checkpoint(s) + reload"
        print(f"machine: {machine_description()}")
        print(f"rows: {args.rows:,}; {what}, {args.repeat} rounds of on + off back to back (median; min in brackets)")
        print(f"verification on   {on:8.2f} s wall ({min(times[True]):.2f})  {cpu_on:8.2f} s CPU  "
              f"{['%.2f' % x for x in times[True]]}")
        print(f"verification off  {off:8.2f} s wall ({min(times[False]):.2f})  {cpu_off:8.2f} s CPU  "
              f"{['%.2f' % x for x in times[False]]}")
        print(f"overhead          {paired:+8.2f} % wall (median of the rounds' on/off ratios); "
              f"{of_medians:+.2f} % between the medians; {100 * (cpu_on - cpu_off) / cpu_off:+.2f} % CPU   "
              f"(AUC on {aucs[True]:.5f}, off {aucs[False]:.5f})")
        if trips:
            print(f"checkpoint save + load alone, {len(trips[True])} rounds: on {trip_on:.3f} s, off {trip_off:.3f} s: "
                  f"{trip_on - trip_off:+.3f} s = {trip_pct:+.2f} % of a run with verification off")
        print(json.dumps({"machine": machine_description(), "rows": args.rows,
                          "verify_on_s": round(on, 3), "verify_off_s": round(off, 3),
                          "overhead_pct": round(paired, 2), "overhead_of_medians_pct": round(of_medians, 2),
                          "overhead_min_pct": round(100 * (min(times[True]) / min(times[False]) - 1), 2),
                          "cpu_on_s": round(cpu_on, 3), "cpu_off_s": round(cpu_off, 3),
                          "cpu_overhead_pct": round(100 * (cpu_on - cpu_off) / cpu_off, 2),
                          "runs_on": times[True], "runs_off": times[False], "cpu_runs_on": cpu[True],
                          "cpu_runs_off": cpu[False], "auc_on": aucs[True], "auc_off": aucs[False],
                          "checkpoint_trip_on_s": trips and trips[True], "checkpoint_trip_off_s": trips and trips[False],
                          "checkpoint_overhead_pct_of_run": trip_pct and round(trip_pct, 2)}))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--data", type=Path, default=None, help="a workload folder (default: generated)")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side; the median is reported")
    parser.add_argument("--warmup-rows", type=int, default=3000,
                        help="rows of the untimed warm-up round of each side (0: none; the smoke tests' choice)")
    parser.add_argument("--verify-overhead", action="store_true",
                        help="instead: the pipeline with a checkpoint and its reload, with verification (manifests, "
                             "page checksums, finite checks, work-dir lock, preflight) on vs off (FBRAPIDS_VERIFY=0)")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="with --verify-overhead")
    parser.add_argument("--no-checkpoint", action="store_true",
                        help="with --verify-overhead: the pipeline as this benchmark times it (no checkpoint, no reload)")
    args = parser.parse_args(argv)
    if args.verify_overhead:
        return verify_overhead(args)

    data = args.data or ensure_dataset(args.rows, Path(tempfile.gettempdir()) / f"fbrapids-bench-{args.rows}", 0)
    base = Path(tempfile.mkdtemp(prefix="fbrapids-bench-pipeline-"))
    try:
        # one untimed round of each on a small slice warms imports, thread pools and the kernel cache
        if args.warmup_rows:
            small = ensure_dataset(args.warmup_rows, base / "warm-data", 0)
            run_pipeline(small, batch_size=args.batch_size, seed=args.seed, work_dir=base / "warm-pipe",
                         checkpoint=False, progress=False, count_clean=False)
            (base / "warm-wtt" / "intermediate").mkdir(parents=True)
            write_then_train(small, base / "warm-wtt", args.batch_size, args.seed)

        pipe_times, base_times = [], []
        for r in range(args.repeat):  # alternate the two so drift in machine load hits both
            shutil.rmtree(base / "pipe", ignore_errors=True)
            shutil.rmtree(base / "wtt", ignore_errors=True)
            (base / "pipe").mkdir()
            (base / "wtt" / "intermediate").mkdir(parents=True)
            t = time.perf_counter()
            pipe = run_pipeline(data, batch_size=args.batch_size, seed=args.seed, work_dir=base / "pipe",
                                checkpoint=False, progress=False, count_clean=False)
            pipe_times.append(time.perf_counter() - t)
            baseline = write_then_train(data, base / "wtt", args.batch_size, args.seed)
            base_times.append(baseline["seconds"])
        pipeline_s = statistics.median(pipe_times)
        baseline["seconds"] = statistics.median(base_times)

        print(f"rows: {args.rows:,} impressions ({pipe.rows.get('trained', 0):,} trained, "
              f"{pipe.rows.get('held out', 0):,} held out)")
        print(f"{'':22}{'pipeline':>14}{'write-then-train':>20}")
        print(f"{'wall seconds':22}{pipeline_s:>14.2f}{baseline['seconds']:>20.2f}")
        print(f"{'bytes written':22}{pipe.bytes_written:>14,}{baseline['bytes_written']:>20,}  (measured, /proc io)")
        print(f"{'bytes read':22}{pipe.bytes_read:>14,}{baseline['bytes_read']:>20,}  (measured, /proc io)")
        print(f"{'feature files on disk':22}{0:>14,}{baseline['intermediate_file_bytes']:>20,}")
        print(f"{'held-out AUC':22}{format_metric(pipe.metrics['auc']):>14}{format_metric(baseline['auc']):>20}")
        print(f"{'held-out GAUC':22}{format_metric(pipe.metrics['gauc']):>14}{format_metric(baseline['gauc']):>20}")
        print(f"{'extraction overlapped':22}{pipe.overlap_s:>13.2f}s{'0.00s':>20}")
        print(f"runs per side: {args.repeat} (median); pipeline {['%.2f' % x for x in pipe_times]}, "
              f"write-then-train {['%.2f' % x for x in base_times]}")
        print(f"speed-up of the pipeline: {baseline['seconds'] / pipeline_s:.2f}x")
        print(json.dumps({
            "pipeline_s": round(pipeline_s, 3),
            "write_then_train_s": round(baseline["seconds"], 3),
            "pipeline_bytes_written": pipe.bytes_written,
            "baseline_bytes_written": baseline["bytes_written"],
            "pipeline_bytes_read": pipe.bytes_read,
            "baseline_bytes_read": baseline["bytes_read"],
            "baseline_intermediate_file_bytes": baseline["intermediate_file_bytes"],
            "machine": machine_description(),
            "pipeline_auc": pipe.metrics["auc"] and round(pipe.metrics["auc"], 5),
            "baseline_auc": baseline["auc"] and round(baseline["auc"], 5),
        }))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
