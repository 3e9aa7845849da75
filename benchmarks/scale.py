"""How ``fbrapids demo`` scales with rows: wall and CPU time, time per row, the peak memory of
its whole process tree, and the stage at which it peaks.

Each run is the command a user runs, at default settings, on data generated once per size
(``fbrapids gen --rows N --out ROOT/N``, reused when present)::

    fbrapids demo --rows N --data-dir ROOT/N --summary-json FILE

in a fresh process, timed from outside (wall seconds, and the CPU seconds of the run and its
children: a loaded machine stretches the first far more than the second); this process
samples the resident memory (RSS) of the run's whole process tree every 0.2 s (the peak,
and one sample a second).  The run's
summary adds what the run said of itself (:mod:`fbrapids.runs.memory_budget`,
:mod:`fbrapids.runs.memory_watch`): its budget, its estimated peak by part, how it ran
(threads or a local cluster), and its measured peak by stage (plan, extract+train,
extract+evaluate, metrics).  The load average is recorded at the start and the end of every
run: on a shared machine a per-row time means little without it, so sizes can be repeated
and interleaved (``--sizes 4000000 64000000 4000000``: each size's runs are kept, and the
ratios use the mean of its runs).

Run (the JSON goes to ``--out``, written after every run so a run cut short keeps what it
measured)::

    python benchmarks/scale.py --sizes 1000000 4000000 16000000 64000000 --out benchmarks/results/scale.json

Example of the ratio it reports:
    >>> runs = {"1000000": [{"s_per_mrow": 20.0}], "4000000": [{"s_per_mrow": 18.0}, {"s_per_mrow": 22.0}]}
    >>> per_row_ratio(runs, "4000000", "1000000")
    1.0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = (1_000_000, 4_000_000, 16_000_000)
BIG = 64_000_000


def _sampled(cmd: list[str], limit: int | None) -> tuple[int, int, list[tuple[float, int]], float, bool]:
    """Run ``cmd``; ``(exit code, peak tree RSS, one sample a second, seconds, killed)``.  Past
    ``limit`` bytes the tree is killed (a guard on a shared machine), and that is returned."""
    import psutil

    from fbrapids.runs.memory_watch import tree_rss

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    peak, series, killed = [0], [], [False]
    done = threading.Event()

    def sample() -> None:
        last = -1.0
        while not done.is_set():
            try:
                rss = tree_rss(proc.pid)
            except psutil.NoSuchProcess:
                return
            peak[0] = max(peak[0], rss)
            now = time.perf_counter() - t0
            if now - last >= 1.0:
                series.append((round(now, 1), rss))
                last = now
            if limit is not None and rss > limit:
                killed[0] = True
                os.killpg(proc.pid, 9)
                return
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0 and not killed[0]:
        sys.stderr.write(err[-4000:])
    return proc.returncode, peak[0], series, time.perf_counter() - t0, killed[0]


def measure(rows: int, data: Path, limit: int | None = None) -> dict[str, Any]:
    """One ``fbrapids demo`` run on ``data`` (``rows`` impressions), measured (module doc)."""
    with tempfile.TemporaryDirectory(prefix="fbrapids-scale-") as tmp:
        summary_path = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "fbrapids.app.cli", "demo", "--rows", str(rows), "--data-dir", str(data),
               "--summary-json", str(summary_path)]
        load_start, cpu_start = os.getloadavg(), _children_cpu_s()
        code, peak, series, wall, killed = _sampled(cmd, limit)
        load_end, cpu_s = os.getloadavg(), _children_cpu_s() - cpu_start
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    memory = summary.get("memory", {})
    return {"rows": rows, "exit": code, "killed_over_bytes": limit if killed else None, "wall_s": round(wall, 1),
            "s_per_mrow": wall / (rows / 1e6), "cpu_s": round(cpu_s, 1), "cpu_s_per_mrow": cpu_s / (rows / 1e6),
            "peak_rss_bytes": peak, "load_start": load_start, "load_end": load_end,
            "run_peak_bytes": memory.get("peak_bytes"), "peak_stage": memory.get("peak_stage"),
            "peak_by_stage": memory.get("peak_by_stage"), "estimate_bytes": memory.get("estimate_bytes"),
            "estimate": memory.get("estimate"), "budget_bytes": memory.get("budget_bytes"),
            "scheduler": memory.get("scheduler"), "partition_rows": memory.get("partition_rows"),
            "seconds": summary.get("seconds"), "auc": (summary.get("metrics") or {}).get("auc"),
            "trained": (summary.get("rows") or {}).get("trained"), "joins": summary.get("joins"),
            "partitions": (summary.get("kernel") or {}).get("partitions"), "rss_series": series}


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children that have ended, their own
    children included: a run's CPU time, which a loaded machine does not inflate as it does
    the wall time."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_row_ratio(runs: dict[str, list[dict[str, Any]]], size: str, base: str, key: str = "s_per_mrow") -> float:
    """The mean time per row of ``size``'s runs over ``base``'s (``key``: wall or CPU seconds
    per million rows)."""
    mean = {k: statistics.mean(r[key] for r in runs[k]) for k in (size, base)}
    return round(mean[size] / mean[base], 4)


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per row against 1M and against 4M; the peak against the previous size's."""
    done = {k: v for k, v in runs.items() if all(r["exit"] == 0 for r in v)}
    keys = sorted(done, key=int)
    out: dict[str, Any] = {}
    for k in keys:
        entry: dict[str, Any] = {}
        for base in ("1000000", "4000000"):
            if base in done and base != k:
                entry[f"per_row_vs_{int(base) // 1_000_000}m"] = per_row_ratio(done, k, base)
                if all("cpu_s_per_mrow" in r for r in done[k] + done[base]):
                    entry[f"cpu_per_row_vs_{int(base) // 1_000_000}m"] = per_row_ratio(done, k, base, "cpu_s_per_mrow")
        prev = keys[keys.index(k) - 1] if keys.index(k) else None
        if prev is not None:
            peak = max(r["peak_rss_bytes"] for r in done[k]) / max(r["peak_rss_bytes"] for r in done[prev])
            entry[f"peak_vs_{prev}"] = round(peak, 4)
        out[k] = entry
    return out


def _dataset(root: Path, rows: int) -> Path:
    out = root / str(rows)
    if not (out / "impressions.parquet").exists():
        subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "gen", "--rows", str(rows), "--out", str(out)],
                       cwd=ROOT, check=True)
    return out


def _machine() -> dict[str, Any]:
    """What ran it: the description the README's sources use, the cores and memory (this
    machine's limits), the platform."""
    import psutil

    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import machine_description

    return {"machine": machine_description(), "cpus": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
            "platform": platform.platform(), "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                        help="rows per run, in the order run (repeat a size to interleave runs)")
    parser.add_argument("--big", action="store_true", help=f"add a run of {BIG:,} rows")
    parser.add_argument("--data-root", type=Path, default=Path(tempfile.gettempdir()) / "fbrapids-scale")
    parser.add_argument("--kill-above", type=float, default=None, metavar="GB",
                        help="kill a run whose process tree passes this many GB (a guard on a shared machine)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--append", action="store_true",
                        help="keep the runs already in --out and add these (interleave sizes across invocations)")
    args = parser.parse_args(argv)
    sizes = list(args.sizes) + ([BIG] if args.big else [])
    limit = int(args.kill_above * 1e9) if args.kill_above else None
    report: dict[str, Any] = {**_machine(), "command": " ".join(["python benchmarks/scale.py", *(
        argv if argv is not None else sys.argv[1:])]), "runs": {}}
    report["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.append and args.out and args.out.exists():
        before = json.loads(args.out.read_text())
        report.update(runs=before["runs"], measured_at=before["measured_at"], machine=before["machine"],
                      command=before["command"] + "; " + report["command"])
    for rows in sizes:
        r = measure(rows, _dataset(args.data_root, rows), limit)
        report["runs"].setdefault(str(rows), []).append(r)
        report["ratios"] = ratios(report["runs"])
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1) + "\n")
        sys.stderr.write(f"{rows:>11,} rows: {r['wall_s']:.0f} s, {r['s_per_mrow']:.2f} s/Mrow, peak "
                         f"{r['peak_rss_bytes'] / 2**30:.2f} GiB ({r['peak_stage']}), load {r['load_start'][0]:.1f}"
                         f" -> {r['load_end'][0]:.1f}, exit {r['exit']}\n")
    sys.stdout.write(json.dumps(report) + "\n")  # the last line: scripts/bench.py keeps it
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
