#!/usr/bin/env python
"""Run the FeatureBox pipeline with extraction on a dask cluster.

    python scripts/run_pipeline.py --scheduler tcp://10.0.0.5:8786 --data /data/ctr-log
    python scripts/run_pipeline.py --local-workers 2 --rows 100000      # a local cluster

With ``--scheduler`` the extraction tasks run on that cluster (dask-cuda workers give the
GPU backend); without it a local cluster is started (LocalCUDACluster with one worker per
GPU, or a CPU LocalCluster).  Training runs in this process on the streamed partitions.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from fbrapids.app.pipeline import MODELS, run_pipeline
from fbrapids.datasets import synthetic
from fbrapids.datasets.synthetic.generate import ensure_dataset
from fbrapids.frames.backend import resolve_name
from fbrapids.frames.cluster import close_client, connect, local_cluster
from fbrapids.workloads import RunConfig, load_workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--scheduler", default=None, help="dask scheduler address, e.g. tcp://host:8786")
    parser.add_argument("--local-workers", type=int, default=None,
                        help="workers of the local cluster (no --scheduler); default: one per visible GPU on the "
                             "GPU backend (LocalCUDACluster refuses more), 2 on the CPU")
    parser.add_argument("--data", type=Path, default=None, help="generated-data folder (default: generate --rows)")
    parser.add_argument("--workload", type=Path, default=None, metavar="FILE",
                        help="a TOML workload file (your own log; README: Your own log) instead of generated data")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--model", choices=MODELS, default="dlrm")
    parser.add_argument("--backend", choices=("auto", "cpu", "gpu"), default=None)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest verified checkpoint in --work-dir (skips the batches it trained)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.resume and args.work_dir is None:
        parser.error("--resume needs the --work-dir of the run to continue")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    if args.workload is not None:
        workload = load_workload(args.workload)
    else:
        workload = synthetic.workload(
            args.data or ensure_dataset(args.rows, Path(tempfile.gettempdir()) / f"fbrapids-data-{args.rows}"))
    backend = None if args.backend == "auto" else args.backend
    config = RunConfig(backend=backend, model=args.model, seed=args.seed, batch_size=args.batch_size,
                       work_dir=args.work_dir, checkpoint_every=args.checkpoint_every, resume=args.resume)
    workers = args.local_workers
    if workers is None and resolve_name(args.backend) == "cpu":
        workers = 2
    client = connect(args.scheduler) if args.scheduler else local_cluster(n_workers=workers, backend=args.backend)
    try:
        result = run_pipeline(workload, config, client=client)
    finally:
        close_client(client)
    sys.stdout.write(result.render() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
