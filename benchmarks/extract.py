"""Benchmark: the canonical workload with fused meta-kernels vs the same operators one
kernel per operator vs idiomatic pandas, measured side by side in one run.

Usage::

    python benchmarks/extract.py --rows 1000000 [--repeat 3] [--out out.parquet]
    python benchmarks/extract.py --data DIR     # any folder of the four parquet files

Rows/s = input impressions / (read + clean + join + extract + merge seconds), the median
over ``--repeat`` runs (WORKLOAD.md section 7).  Kernels are compiled (or loaded from the
disk cache) in a warm-up run that is not timed.  The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
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


def timed(run, d: Path, repeat: int):
    totals, steps, out, extra = [], [], None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        tables = load_tables(d)
        read = time.perf_counter() - t0
        res = run(tables)
        out, sec = res[0], res[1]
        extra = res[2] if len(res) > 2 else None
        sec = {"read": read, **sec}
        steps.append(sec)
        totals.append(sum(sec.values()))
    med = statistics.median(totals)
    return out, med, steps[totals.index(sorted(totals)[len(totals) // 2])], extra


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rows", type=int, help="generate (and cache) this many impressions with fbrapids gen")
    src.add_argument("--data", type=Path, help="a folder with impressions/users/ads/basic parquet files")
    ap.add_argument("--out", type=Path, help="write the fused output here (parquet; not timed)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-pandas", action="store_true", help="leave out the (slow) pandas line")
    args = ap.parse_args(argv)
    d = data_dir(args.rows) if args.rows else args.data
    rows_in = len(load_tables(d)["impressions"])

    run_fbrapids(load_tables(d), fused=True)  # warm-up: compile / load kernels
    run_fbrapids(load_tables(d), fused=False)
    fused_out, fused_s, fused_steps, launches = timed(lambda t: run_fbrapids(t, fused=True), d, args.repeat)
    obo_out, obo_s, obo_steps, obo_launches = timed(lambda t: run_fbrapids(t, fused=False), d, args.repeat)
    print(f"rows_in={rows_in}")
    print(f"fused      {rows_in / fused_s:12,.0f} rows/s  {fused_s:.3f}s  "
          + " ".join(f"{k}={v:.3f}" for k, v in fused_steps.items()) + f"  launches={launches}")
    print(f"op-by-op   {rows_in / obo_s:12,.0f} rows/s  {obo_s:.3f}s  "
          + " ".join(f"{k}={v:.3f}" for k, v in obo_steps.items()) + f"  launches={obo_launches}")
    equal, why = frames_equal(fused_out, obo_out)
    pandas_rate = None
    if not args.skip_pandas:
        pd_out, pd_s, pd_steps, _ = timed(run_pandas, d, max(1, min(args.repeat, 1)))
        pandas_rate = rows_in / pd_s
        print(f"pandas     {pandas_rate:12,.0f} rows/s  {pd_s:.3f}s  "
              + " ".join(f"{k}={v:.3f}" for k, v in pd_steps.items()))
        eq2, why2 = frames_equal(fused_out, pd_out)
        equal, why = equal and eq2, why if not equal else why2
        print(f"fused / op-by-op = {obo_s / fused_s:.2f}x, fused / pandas = {pd_s / fused_s:.2f}x")
    print(f"outputs equal: {equal} ({why})")
    if args.out:
        write_output(fused_out, args.out)
    print(json.dumps({"rows_in": rows_in, "fused_rows_per_s": rows_in / fused_s,
                      "op_by_op_rows_per_s": rows_in / obo_s, "pandas_rows_per_s": pandas_rate,
                      "outputs_equal": equal, "launches_per_partition": launches,
                      "op_by_op_launches_per_partition": obo_launches}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
