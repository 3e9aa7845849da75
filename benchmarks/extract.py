"""Benchmark: the canonical workload with fused meta-kernels vs the same operators one
kernel per operator vs idiomatic pandas, measured side by side in one run.

Usage::

    python benchmarks/extract.py --rows 1000000 [--repeat 3] [--out out.parquet]
    python benchmarks/extract.py --data DIR     # any folder of the four parquet files
    python benchmarks/extract.py --rows 1000000 --partition-rows 32768 --busy-cores 1

``--busy-cores K`` keeps K other processes spinning during the timed runs: the host as it
is while ``stream()`` trains one partition and extracts the next (the trainer holds a
core).  Every kernel launch on the host is an OpenMP parallel region that ends in a
barrier; with a core taken, a barrier waits for a descheduled thread, so the launch count
per partition shows up in the time.  The JSON says how many cores were kept busy.

Rows/s = input impressions / (read + clean + join + extract + merge seconds), the median
over ``--repeat`` runs (WORKLOAD.md section 7).  Kernels are compiled (or loaded from the
disk cache) in a warm-up run that is not timed.  The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload_fbrapids import run_fbrapids  # noqa: E402
from benchmarks.workload_pandas import frames_equal, load_tables, run_pandas, write_output  # noqa: E402


def data_dir(rows: int, seed: int = 0) -> Path:
    """A cached folder with ``fbrapids gen`` data of ``rows`` impressions."""
    from fbrapids.datagen import generate

    root = Path(os.environ.get("FBRAPIDS_BENCH_DATA", Path.home() / ".cache" / "fbrapids" / "bench"))
    d = root / f"rows{rows}_seed{seed}"
    if not (d / "basic.parquet").exists():
        d.mkdir(parents=True, exist_ok=True)
        generate(rows, d, seed=seed)
    return d


def timed_once(run, d: Path):
    """One timed run: (output, total seconds, seconds per step incl. read, launches)."""
    t0 = time.perf_counter()
    tables = load_tables(d)
    read = time.perf_counter() - t0
    res = run(tables)
    sec = {"read": read, **res[1]}
    return res[0], sum(sec.values()), sec, (res[2] if len(res) > 2 else None)


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@contextlib.contextmanager
def busy_cores(k: int):
    """K processes spinning on a core each, for the duration of the block (k = 0: none)."""
    if k <= 0:
        yield
        return
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


def median_run(runs: list):
    """The run with the median total (the output of the last run)."""
    order = sorted(range(len(runs)), key=lambda i: runs[i][1])
    mid = runs[order[len(runs) // 2]]
    return runs[-1][0], statistics.median(r[1] for r in runs), mid[2], mid[3]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rows", type=int, help="generate (and cache) this many impressions with fbrapids gen")
    src.add_argument("--data", type=Path, help="a folder with impressions/users/ads/basic parquet files")
    ap.add_argument("--out", type=Path, help="write the fused output here (parquet; not timed)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partition-rows", type=int, default=None,
                    help="extract partition by partition (e.g. 32768, the generator's row group); default: one partition")
    ap.add_argument("--pandas-repeat", type=int, default=1, help="runs of the (slow) pandas line")
    ap.add_argument("--skip-pandas", action="store_true", help="leave out the pandas line")
    ap.add_argument("--busy-cores", type=int, default=0,
                    help="keep this many other processes spinning during the timed fbrapids runs "
                         "(a co-located trainer); default 0")
    args = ap.parse_args(argv)
    d = data_dir(args.rows) if args.rows else args.data
    rows_in = len(load_tables(d)["impressions"])

    pr = args.partition_rows
    run_fbrapids(load_tables(d), fused=True, partition_rows=pr)  # warm-up: compile / load kernels, size pools
    run_fbrapids(load_tables(d), fused=False, partition_rows=pr)
    fused_runs, obo_runs = [], []
    with busy_cores(args.busy_cores):
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            fused_runs.append(timed_once(lambda t: run_fbrapids(t, fused=True, partition_rows=pr), d))
            obo_runs.append(timed_once(lambda t: run_fbrapids(t, fused=False, partition_rows=pr), d))
    fused_out, fused_s, fused_steps, launches = median_run(fused_runs)
    obo_out, obo_s, obo_steps, obo_launches = median_run(obo_runs)
    print(f"rows_in={rows_in} partition_rows={pr or rows_in} busy_cores={args.busy_cores}")
    print(f"fused      {rows_in / fused_s:12,.0f} rows/s  {fused_s:.3f}s  "
          + " ".join(f"{k}={v:.3f}" for k, v in fused_steps.items()) + f"  launches={launches}")
    print(f"op-by-op   {rows_in / obo_s:12,.0f} rows/s  {obo_s:.3f}s  "
          + " ".join(f"{k}={v:.3f}" for k, v in obo_steps.items()) + f"  launches={obo_launches}")
    equal, why = frames_equal(fused_out, obo_out)
    pandas_rate = None
    if not args.skip_pandas:
        pd_out, pd_s, pd_steps, _ = median_run([timed_once(run_pandas, d) for _ in range(args.pandas_repeat)])
        pandas_rate = rows_in / pd_s
        print(f"pandas     {pandas_rate:12,.0f} rows/s  {pd_s:.3f}s  "
              + " ".join(f"{k}={v:.3f}" for k, v in pd_steps.items()))
        eq2, why2 = frames_equal(fused_out, pd_out)
        equal, why = equal and eq2, why if not equal else why2
        print(f"fused / op-by-op = {obo_s / fused_s:.2f}x, fused / pandas = {pd_s / fused_s:.2f}x")
    print(f"outputs equal: {equal} ({why})")
    if args.out:
        write_output(fused_out, args.out)
    print(json.dumps({"rows_in": rows_in, "partition_rows": pr or rows_in, "busy_cores": args.busy_cores,
                      "fused_rows_per_s": rows_in / fused_s,
                      "op_by_op_rows_per_s": rows_in / obo_s, "pandas_rows_per_s": pandas_rate,
                      "outputs_equal": equal, "launches_per_partition": launches,
                      "op_by_op_launches_per_partition": obo_launches}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
