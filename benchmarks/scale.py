"""Scaling of the public pipeline with rows: seconds per million rows and peak memory.

One run reports, side by side:

* **extract**: the pipeline's feature frame (read -> clean -> joins -> extract -> merge with
  basic) streamed into training batches with no training, on dask's local scheduler, at
  1M, 4M and 16M rows (64M with ``--big``): seconds per million rows, and the peak resident
  memory of the whole process tree;
* **cluster**: the same extraction on a 2-worker ``LocalCluster`` with processes (the peak
  counts the workers and nannies);
* **pipeline**: the full pipeline (train one epoch, evaluate on the held-out day) at 1M and
  4M: seconds per million rows and held-out AUC.

Each measurement runs in a fresh Python process (so one size's peak memory is not another's
leftover), sampled every 0.2 s by this process with psutil over the child and all its
descendants.  Every measurement gets the same treatment: the data set is generated once
per size (``fbrapids gen``, reused when present), the kernels are compiled before timing
by a small warm-up in the same process, and the timed region starts after planning.

Run (default settings, no environment variables; the JSON goes to ``--out``)::

    python benchmarks/scale.py --out /tmp/scale.json

Example of one measurement (the child mode)::

    python benchmarks/scale.py --one extract --data /tmp/fbrapids-scale/1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = (1_000_000, 4_000_000, 16_000_000)
BIG = 64_000_000
PIPELINE_SIZES = (1_000_000, 4_000_000)
WARMUP_ROWS = 20_000


# -- child: one measurement ----------------------------------------------------------------
def _extract(data_dir: Path, cluster: bool) -> dict[str, Any]:
    import dask

    from fbrapids.joins.strategies import join_decisions
    from fbrapids.app.pipeline import DENSE, GROUP, LABEL, SPARSE, TimedPartitions, feature_frame
    from fbrapids.trainers.stream import stream

    def once(path: Path) -> dict[str, Any]:
        before = len(join_decisions())
        t0 = time.perf_counter()
        merged, _ = feature_frame(path)
        plan_s = time.perf_counter() - t0
        parts = TimedPartitions(merged, columns=[LABEL, GROUP, *DENSE, *SPARSE])
        batches = stream(parts, label=LABEL, dense=DENSE, sparse=SPARSE, group=GROUP, batch_size=2048, prefetch=2)
        t = time.perf_counter()
        rows = sum(len(b) for b in batches)
        return {"plan_s": plan_s, "stream_s": time.perf_counter() - t, "rows_streamed": rows,
                "partitions": parts.partitions, "pass_plan": parts.plan,
                "joins": [str(d) for d in join_decisions()[before:]]}

    if cluster:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
                Client(lc) as client, dask.config.set(scheduler=client):
            once(_warmup_dir())
            return once(data_dir)
    with dask.config.set(scheduler="threads"):
        once(_warmup_dir())
        return once(data_dir)


def _pipeline(data_dir: Path) -> dict[str, Any]:
    import tempfile

    from fbrapids.app.pipeline import run_pipeline

    run_pipeline(_warmup_dir(), epochs=1, progress=False, checkpoint=False, count_clean=False,
                 work_dir=tempfile.mkdtemp(prefix="fbrapids-scale-"))
    t = time.perf_counter()
    r = run_pipeline(data_dir, epochs=1, progress=False, checkpoint=False, count_clean=False,
                     work_dir=tempfile.mkdtemp(prefix="fbrapids-scale-"))
    return {"total_s": time.perf_counter() - t, "seconds": r.seconds, "auc": r.metrics.get("auc"),
            "trained": r.rows.get("trained"), "held_out": r.rows.get("held out"), "joins": r.joins,
            "partitions": r.kernel.get("partitions")}


def _warmup_dir() -> Path:
    from fbrapids.datasets.synthetic.generate import ensure_dataset

    return ensure_dataset(WARMUP_ROWS, Path(os.environ.get("TMPDIR", "/tmp")) / "fbrapids-scale" / "warmup")


def child_main(kind: str, data: Path) -> None:
    result = _extract(data, cluster=False) if kind == "extract" else (
        _extract(data, cluster=True) if kind == "cluster" else _pipeline(data))
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")


# -- parent: run children, sample their memory ------------------------------------------------
def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def measure(kind: str, data: Path) -> dict[str, Any]:
    """Run one measurement in a child process; its result plus the peak RSS of its tree."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind, "--data", str(data)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ps = psutil.Process(proc.pid)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _tree_rss(ps))
            except psutil.NoSuchProcess:
                return
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} on {data} failed (exit {proc.returncode}):\n{err[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result["peak_rss_bytes"] = peak[0]
    return result


def _dataset(root: Path, rows: int) -> Path:
    from fbrapids.datasets.synthetic.generate import ensure_dataset

    return ensure_dataset(rows, root / str(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(DEFAULT_SIZES), help="extraction sizes")
    parser.add_argument("--pipeline-sizes", type=int, nargs="*", default=list(PIPELINE_SIZES))
    parser.add_argument("--cluster-sizes", type=int, nargs="*", default=None, help="default: --sizes")
    parser.add_argument("--big", action="store_true", help=f"add {BIG:,} rows to the extraction sizes")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/fbrapids-scale"))
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--one", choices=("extract", "cluster", "pipeline"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        child_main(args.one, args.data)
        return 0

    sizes = sorted(set(args.sizes + ([BIG] if args.big else [])))
    cluster_sizes = sorted(args.cluster_sizes if args.cluster_sizes is not None else sizes)
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "memory_bytes": psutil.virtual_memory().total},
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "extract": {}, "cluster": {}, "pipeline": {},
    }
    for rows in sorted(set(sizes) | set(cluster_sizes) | set(args.pipeline_sizes)):
        _dataset(args.data_root, rows)
    for section, kind, wanted in (("extract", "extract", sizes), ("cluster", "cluster", cluster_sizes),
                                  ("pipeline", "pipeline", sorted(args.pipeline_sizes))):
        for rows in wanted:
            r = measure(kind, _dataset(args.data_root, rows))
            seconds = r["stream_s"] if kind != "pipeline" else r["total_s"]
            r["s_per_mrow"] = seconds / (rows / 1e6)
            report[section][str(rows)] = r
            if args.out:  # after every measurement: a run cut short keeps what it measured
                args.out.write_text(json.dumps(report, indent=2))
            sys.stderr.write(f"{section:<9} {rows:>11,} rows: {r['s_per_mrow']:.2f} s/Mrow, "
                             f"peak {r['peak_rss_bytes'] / 2**30:.2f} GiB"
                             + (f", AUC {r['auc']:.4f}" if kind == "pipeline" else "") + "\n")
    report["ratios"] = _ratios(report)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text + "\n")
    return 0


def _ratios(report: dict[str, Any]) -> dict[str, Any]:
    """The acceptance ratios: s/Mrow at the largest size over the smallest, peak memory of the
    largest over the second largest, pipeline AUC difference."""
    out: dict[str, Any] = {}
    for section in ("extract", "cluster", "pipeline"):
        runs = report[section]
        if len(runs) < 2:
            continue
        keys = sorted(runs, key=int)
        small, large = runs[keys[0]], runs[keys[-1]]
        out[section] = {"sizes": [int(keys[0]), int(keys[-1])],
                        "s_per_mrow_ratio": large["s_per_mrow"] / small["s_per_mrow"],
                        "peak_ratio_vs_previous_size": large["peak_rss_bytes"] / runs[keys[-2]]["peak_rss_bytes"]}
        if section == "pipeline":
            out[section]["auc_change"] = large["auc"] - small["auc"]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
