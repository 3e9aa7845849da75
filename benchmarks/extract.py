"""Benchmark: the PUBLIC method chain a user writes against pandas and polars, one run.

The chain timed is exactly the README's: ``read_view`` -> ``.fbx.clean`` -> ``.fbx.join``
(users, ads) -> ``.fbx.extract`` -> ``.fbx.join(basic, how="inner")`` (the workload's
views in :mod:`fbrapids.datasets.synthetic.views`), eager and through dask (``read_view``'s default).

The peers, each written as a user who cares about speed would, none calling fbrapids:

* ``pandas``: :mod:`benchmarks.peer_pandas`, each distinct value hashed once (factorize,
  fingerprint the uniques, take), texts split once per distinct text, ``pd.merge``;
* ``polars eager`` / ``polars lazy``: :mod:`benchmarks.peer_polars` (polars 1.x; FarmHash
  of each batch's unique values through ``map_batches`` + ``replace_strict``);
* ``pandas rows``: :mod:`benchmarks.workload_pandas`, FarmHash called on every row, kept
  as a labelled reference line (the figure this benchmark used to report against).

FarmHash is pyfarmhash's ``fingerprint64`` in every peer (pip extra ``bench``:
``pip install -e '.[bench]'``).  The headline is the ratio against the best peer (the
fastest of them in this run), and against the best pandas and the best polars.  Every
system gets the same warm-up run (not timed: kernels are compiled or loaded from the disk
cache there) and the same ``--repeat`` timed runs, interleaved so they see the same
machine load; the figure is the median.  Every output is checked equal to the reference
line's (exact: same columns, Arrow types, bit-identical floats, equal lists).  The load
average is printed at the start and the end, and everything goes into the JSON line and
into ``--out`` (default ``benchmarks/results/extract.json``, which ``scripts/bench.py
--table-only`` turns into the README's table).

Usage (one line; the last line printed is one JSON object)::

    python benchmarks/extract.py --rows 1000000            # CPU: eager, dask, op-by-op, the peers
    python benchmarks/extract.py --rows 1000000 --backend gpu   # plus cudf / dask-cudf lines
    python benchmarks/extract.py --data DIR                # any folder of the four parquet files

``--backend gpu`` adds, in the same run: the GPU chain (eager cudf and dask-cudf) against
the CPU chain on all of this machine's cores, fused against op-by-op on the GPU (extract
seconds and end to end), and the synthetic launch-bound plan on the GPU.  The synthetic
plan (``--synthetic-ops`` small independent operators, default 1,000, over
``--synthetic-rows`` rows) runs fused (one kernel) against one kernel per operator on
every backend in the run, and its outputs are checked equal across them.

Rows/s = input impressions / seconds from the first read to the merged output in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import fbrapids  # noqa: E402,F401  (registers .fbx)
from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.peer_pandas import run_pandas_fast  # noqa: E402
from benchmarks.workload_pandas import OUTPUT_COLUMNS, frames_equal, load_tables, run_pandas  # noqa: E402
from fbrapids import ops  # noqa: E402
from fbrapids.datasets.synthetic import views as workload  # noqa: E402
from fbrapids.features import compiled_plan, extract  # noqa: E402
from fbrapids.frames.backend import get_backend, gpu_missing, is_gpu_object, to_host  # noqa: E402
from fbrapids.kernels import reset_stats, stats, to_series  # noqa: E402

# the columns of the joined view the output carries through, besides the features
CARRIED = ["instance_id", "click", "slot", "category"]
#: the peers, fastest-written first; "pandas rows" hashes every row (the reference line)
PEERS = ("pandas", "polars eager", "polars lazy", "pandas rows")
RESULTS = Path(__file__).resolve().parent / "results"


def data_dir(rows: int, seed: int = 0) -> Path:
    """A cached folder with ``fbrapids gen`` data of ``rows`` impressions."""
    from fbrapids.datasets.synthetic.generate import generate

    root = Path(os.environ.get("FBRAPIDS_BENCH_DATA", Path.home() / ".cache" / "fbrapids" / "bench"))
    d = root / f"rows{rows}_seed{seed}"
    if not (d / "basic.parquet").exists():
        d.mkdir(parents=True, exist_ok=True)
        generate(rows, d, seed=seed)
    return d


def public_chain(d: Path, eager: bool, backend: str = "cpu", fused: bool = True) -> tuple[Any, dict[str, float]]:
    """The README's chain on workload folder ``d``: (output on the host, seconds per step).

    Eager: seconds per step (read, clean, join, extract, merge).  Dask: the graph is built
    step by step (``build``) and computed once (``compute``), as a user's ``.compute()``.
    ``fused=False`` extracts with one kernel per operator (the baseline fusion is against).
    """
    seconds: dict[str, float] = {}
    t = [time.perf_counter()]

    def mark(step: str) -> None:
        now = time.perf_counter()
        seconds[step] = seconds.get(step, 0.0) + now - t[0]
        t[0] = now

    step = (lambda s: mark(s)) if eager else (lambda s: None)
    views = workload.read_views(d, eager=eager, backend=backend)
    step("read")
    imp, users, ads = workload.clean_views(views)
    step("clean")
    joined = workload.join_views(imp, users, ads)
    step("join")
    feats = workload.features()
    extracted = extract(joined, feats, fused=fused)[CARRIED + list(feats)]
    step("extract")
    out = workload.merge_basic(extracted, views["basic"])[OUTPUT_COLUMNS]
    if eager:
        mark("merge")
    else:
        mark("build")
        out = out.compute()
        mark("compute")
    return to_host(out), seconds


def synthetic_features(n_ops: int) -> dict[str, Any]:
    """``n_ops`` small independent operators over two columns: one layer, launch-bound."""
    feats: dict[str, Any] = {}
    for i in range(n_ops):
        kind = i % 3
        if kind == 0:
            feats[f"s{i}"] = ops.clip("y", -float(i % 97), float(i % 89) + 1.0)
        elif kind == 1:
            feats[f"s{i}"] = ops.bucketize("y", (i / 100.0, i / 100.0 + 2.5))
        else:
            feats[f"s{i}"] = ops.hash_bucket("x", 1000 + i)
    return feats


def synthetic_frame(rows: int, backend: str) -> Any:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"x": rng.integers(0, 1 << 40, rows, dtype=np.int64),
                          "y": rng.normal(0, 10, rows)})
    from fbrapids.frames.backend import to_backend

    return to_backend(frame, get_backend(backend))


def _plan_columns(result: Any) -> pd.DataFrame:
    """A compiled plan's result columns as one host frame (for the equality check): host
    plans give HostColumns, CUDA plans cudf series."""
    cols = {name: to_host(c) if is_gpu_object(c) else to_series(c, None, name) for name, c in result.columns.items()}
    return pd.DataFrame({name: s.to_numpy() for name, s in cols.items()})


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_systems(systems: dict[str, Callable[[], tuple[Any, dict[str, float]]]], repeat: int,
                launches: bool = False, compare: Callable[[Any, Any], tuple[bool, str]] | None = None
                ) -> dict[str, dict[str, Any]]:
    """Warm every system up once, then ``repeat`` interleaved timed runs each.

    Returns per system: the last output, the median total seconds, the steps of the
    median run, and the meta-kernel launches of one run.  With ``compare``, only the
    first system's output is kept: every other one is compared with it (``compare(out,
    first)`` -> ``(equal, why)``, under ``"equal"``) as soon as it is made, so memory holds
    two outputs, not one per system (2M rows x 7 systems would not fit beside other work).
    """
    names = list(systems)
    for fn in systems.values():
        fn()
    runs: dict[str, list] = {name: [] for name in systems}
    last: dict[str, Any] = {}
    equal: dict[str, tuple[bool, str]] = {}
    for rep in range(repeat):
        for name, fn in systems.items():
            reset_stats()
            last.pop(name, None)  # one output per system held at a time (memory is bounded by it)
            (out, steps), total = timed(fn)
            runs[name].append((total, steps, stats()["launches"]))
            if compare is None or name == names[0]:
                last[name] = out
            elif rep == repeat - 1:
                equal[name] = compare(out, last[names[0]])
            del out
    result = {}
    for name, rs in runs.items():
        order = sorted(range(len(rs)), key=lambda i: rs[i][0])
        mid = rs[order[len(rs) // 2]]
        result[name] = {"out": last.get(name), "seconds": statistics.median(r[0] for r in rs),
                        "steps": mid[1], "launches": mid[2], "equal": equal.get(name)}
    return result


def _line(name: str, rows: int, r: dict[str, Any]) -> str:
    steps = " ".join(f"{k}={v:.3f}" for k, v in r["steps"].items())
    return f"{name:<16}{rows / r['seconds']:12,.0f} rows/s  {r['seconds']:.3f}s  {steps}  launches={r['launches']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rows", type=int, help="generate (and cache) this many impressions with fbrapids gen")
    src.add_argument("--data", type=Path, help="a folder with impressions/users/ads/basic parquet files")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: add the cudf / dask-cudf chain and compare it with all CPU cores")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per system (after one warm-up each)")
    ap.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS),
                    help="the peers to run (default: all): pandas (distinct values hashed once), polars eager and "
                         "lazy, and the hash-every-row pandas reference line ('pandas rows')")
    ap.add_argument("--skip-pandas", action="store_true", help="run no peer (same as --peers with none)")
    ap.add_argument("--out", type=Path, default=RESULTS / "extract.json",
                    help="write the summary here too (default: %(default)s); '-' writes none")
    ap.add_argument("--synthetic-ops", type=int, default=1000)
    ap.add_argument("--synthetic-rows", type=int, default=4096)
    args = ap.parse_args(argv)
    if args.backend == "gpu" and gpu_missing():
        ap.error("--backend gpu: " + "; ".join(gpu_missing()))
    d = data_dir(args.rows) if args.rows else args.data
    rows_in = len(load_tables(d)["impressions"])

    load_start = os.getloadavg()

    def pandas_line(run: Callable[[dict], tuple[Any, dict[str, float]]]) -> Callable[[], tuple[Any, dict[str, float]]]:
        def go() -> tuple[Any, dict[str, float]]:
            t0 = time.perf_counter()
            tables = load_tables(d)
            read = time.perf_counter() - t0
            out, sec = run(tables)
            return out, {"read": read, **sec}
        return go

    systems: dict[str, Callable[[], tuple[Any, dict[str, float]]]] = {
        "cpu eager": lambda: public_chain(d, eager=True),
        "cpu dask": lambda: public_chain(d, eager=False),
        "cpu op-by-op": lambda: public_chain(d, eager=True, fused=False),
    }
    if args.backend == "gpu":
        systems |= {
            "gpu eager": lambda: public_chain(d, eager=True, backend="gpu"),
            "gpu dask": lambda: public_chain(d, eager=False, backend="gpu"),
            "gpu op-by-op": lambda: public_chain(d, eager=True, backend="gpu", fused=False),
        }
    peers = [] if args.skip_pandas else list(dict.fromkeys(args.peers))
    if "pandas" in peers:
        systems["pandas"] = pandas_line(run_pandas_fast)
    if "polars eager" in peers or "polars lazy" in peers:
        from benchmarks.peer_polars import run_polars

        if "polars eager" in peers:
            systems["polars eager"] = lambda: run_polars(d, lazy=False)
        if "polars lazy" in peers:
            systems["polars lazy"] = lambda: run_polars(d, lazy=True)
    if "pandas rows" in peers:
        systems["pandas rows"] = pandas_line(run_pandas)
    machine = machine_description(args.backend)  # with the load average at the start
    res = run_systems(systems, args.repeat, compare=frames_equal)
    print(f"rows_in={rows_in} repeat={args.repeat} (+1 warm-up each) machine: {machine}")
    # every output is compared with the first system's as it is made (the reference line,
    # the hash-every-row pandas, among them): equal to it, all are equal to the reference
    ref_name = next((p for p in ("pandas rows", "pandas", "polars eager", "polars lazy") if p in res), None)
    first = next(iter(res))
    equal_all, problems = True, []
    for name, r in res.items():
        print(_line(name, rows_in, r))
        if name != first:
            ok, why = r["equal"]
            if not ok:
                equal_all = False
                problems.append(f"{name} vs {first}: {why}")
    if ref_name is not None:
        print(f"each output compared with {first}'s (exact), the reference line ({ref_name}) included")
    rate = {name: rows_in / r["seconds"] for name, r in res.items()}

    # the synthetic launch-bound plan, fused vs one kernel per operator, on each backend
    synth: dict[str, Any] = {}
    feats = synthetic_features(args.synthetic_ops)
    synth_out = {}
    for be in (["cpu", "gpu"] if args.backend == "gpu" else ["cpu"]):
        frame = synthetic_frame(args.synthetic_rows, be)
        plans = {fused: compiled_plan(frame, feats, fused=fused) for fused in (True, False)}
        sysm = {f"{be} fused": lambda f=frame, p=plans[True]: (_plan_columns(p.run(f)), {}),
                f"{be} op-by-op": lambda f=frame, p=plans[False]: (_plan_columns(p.run(f)), {})}
        sres = run_systems(sysm, args.repeat)
        for name, r in sres.items():
            synth[name] = {"seconds": r["seconds"], "launches": r["launches"]}
            synth_out[name] = to_host(r["out"])
        synth[f"{be} fused_speedup"] = sres[f"{be} op-by-op"]["seconds"] / sres[f"{be} fused"]["seconds"]
    names = list(synth_out)
    synth_equal = all(synth_out[n].equals(synth_out[names[0]]) for n in names[1:])
    if not synth_equal:
        equal_all = False
        problems.append("synthetic plan outputs differ across backends / fusion")

    peer_rate = {p: rate[p] for p in PEERS if p in rate}
    best = {}
    if peer_rate:
        best["best peer"] = max(peer_rate, key=peer_rate.get)
        for family, names in (("best pandas", ("pandas", "pandas rows")), ("best polars", ("polars eager", "polars lazy"))):
            have = [p for p in names if p in peer_rate]
            if have:
                best[family] = max(have, key=peer_rate.get)
    vs_best = {f"{name} / {label}": rate[name] / rate[peer] for name in rate if name not in PEERS
               for label, peer in best.items()}
    for label, peer in best.items():
        print(f"{label}: {peer} ({rate[peer]:,.0f} rows/s)")
    for k, v in vs_best.items():
        print(f"{k} = {v:.2f}x")
    if "pandas rows" in rate:
        print(f"(reference line: cpu eager / pandas rows = {rate['cpu eager'] / rate['pandas rows']:.2f}x)")
    print(f"cpu fused / op-by-op = {rate['cpu eager'] / rate['cpu op-by-op']:.2f}x end to end, "
          f"extract {res['cpu op-by-op']['steps']['extract'] / res['cpu eager']['steps']['extract']:.2f}x")
    if args.backend == "gpu":
        print(f"gpu eager / cpu eager (all {os.cpu_count()} cores) = {rate['gpu eager'] / rate['cpu eager']:.2f}x; "
              f"gpu fused / op-by-op = {rate['gpu eager'] / rate['gpu op-by-op']:.2f}x end to end, extract "
              f"{res['gpu op-by-op']['steps']['extract'] / res['gpu eager']['steps']['extract']:.2f}x")
    for be in (["cpu", "gpu"] if args.backend == "gpu" else ["cpu"]):
        f, o = synth[f"{be} fused"], synth[f"{be} op-by-op"]
        print(f"synthetic {args.synthetic_ops} ops x {args.synthetic_rows} rows on {be}: fused {f['seconds'] * 1e3:.1f} ms "
              f"({f['launches']} launches) vs op-by-op {o['seconds'] * 1e3:.1f} ms ({o['launches']} launches) "
              f"= {synth[f'{be} fused_speedup']:.2f}x")
    print(f"outputs equal: {equal_all}" + ("" if equal_all else f" ({'; '.join(problems)})"))
    load_end = os.getloadavg()
    print(f"load average (1, 5, 15 min): {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} at the start, "
          f"{load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f} at the end")
    summary = {
        "benchmark": "extract", "machine": machine, "backend": args.backend,
        "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
        "rows_in": rows_in, "repeat": args.repeat, "warmup": 1, "peers": list(peer_rate),
        "best": best, "vs_best": vs_best,
        "rows_per_s": {k: round(v) for k, v in rate.items()},
        "seconds": {k: r["seconds"] for k, r in res.items()},
        "steps": {k: r["steps"] for k, r in res.items()},
        "launches": {k: r["launches"] for k, r in res.items()},
        "vs_pandas": ({k: rate[k] / rate["pandas"] for k in rate if k not in PEERS} if "pandas" in rate else None),
        "vs_pandas_rows": ({k: rate[k] / rate["pandas rows"] for k in rate if k not in PEERS}
                           if "pandas rows" in rate else None),
        "synthetic": {"ops": args.synthetic_ops, "rows": args.synthetic_rows, **synth},
        "outputs_equal": equal_all,
    }
    if str(args.out) != "-":
        import datetime as dt

        args.out.parent.mkdir(parents=True, exist_ok=True)
        saved = {**summary, "command": "python benchmarks/extract.py " + " ".join(sys.argv[1:] if argv is None else argv),
                 "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        args.out.write_text(json.dumps(saved, indent=1) + "\n")
    print(json.dumps(summary))
    return 0 if equal_all else 1


if __name__ == "__main__":
    sys.exit(main())
