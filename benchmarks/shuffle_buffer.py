"""The stream's shuffle buffer against the window shuffle it replaced: the demo's held-out
AUC, GAUC, logloss and calibration over seeds, and how much extraction it overlaps.

Each seed runs ``fbrapids demo --rows R --seed S`` twice, one process each, alternating which
goes first: once with this checkout (rows shuffled through a buffer of
:data:`fbrapids.app.pipeline.SHUFFLE_BUFFER` rows filled as partitions arrive,
:mod:`fbrapids.trainers.shuffle`), once with the code at ``--baseline`` (a git ref, default
``4d5eef4``: rows shuffled within windows of 2^18 rows, the window read whole before its
first batch), checked out in a temporary git worktree.  Both read the same generated data
(the demo's cache), build the same model from the same seed and differ in the order rows
are trained in, and in whatever else changed between the two trees: the store's rows and
the dense optimizer are the same bits in both (tests/trainers check that), the rest of the
summary is printed for each run.

The JSON holds every run's metrics and pipelining figures, the mean and spread per side and
the paired differences (buffer - window) per seed, with the load at the start and end.

    python benchmarks/shuffle_buffer.py --rows 200000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METRICS = ("auc", "gauc", "logloss", "calibration")


def run_demo(tree: Path, rows: int, seed: int, unset: tuple[str, ...] = ()) -> dict[str, Any]:
    """``fbrapids demo`` of the code in ``tree`` (its own package first on the path), in its
    own process, without the environment variables ``unset``: the summary's metrics and
    pipelining figures, and the process's wall seconds."""
    with tempfile.TemporaryDirectory(prefix="fbrapids-shuffle-bench-") as tmp:
        out = Path(tmp) / "summary.json"
        env = {k: v for k, v in os.environ.items() if k not in unset} | {"PYTHONPATH": str(tree)}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "demo", "--rows", str(rows), "--seed", str(seed),
                        "--summary-json", str(out)], cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads(out.read_text())
    got = {k: summary["metrics"][k] for k in METRICS}
    got.update({k: summary[k] for k in ("overlap_s", "extract_busy_s", "train_wait_s", "samples_per_s")})
    got["extract_train_s"] = summary["seconds"]["extract+train"]
    got["hidden_share"] = got["overlap_s"] / summary["extract_busy_s"] if summary["extract_busy_s"] else 0.0
    got["wall_s"] = time.perf_counter() - start
    return got


def spread(values: list[float]) -> dict[str, float]:
    """Mean and standard deviation (0 for one value).

    Example:
        >>> spread([1.0, 3.0])
        {'mean': 2.0, 'sd': 1.4142135623730951}
    """
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--baseline", default="4d5eef4", help="the git ref of the window shuffle")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/shuffle_buffer.json")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fbrapids-baseline-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs: dict[str, list[dict[str, Any]]] = {"buffer": [], "window": []}
        try:
            for k, seed in enumerate(args.seeds):
                sides = [("buffer", REPO), ("window", base)]
                for side, tree in sides if k % 2 == 0 else sides[::-1]:
                    got = run_demo(tree, args.rows, seed)
                    got["seed"] = seed
                    runs[side].append(got)
                    print(f"seed {seed} {side:6s}: AUC {got['auc']:.4f} calibration {got['calibration']:.3f} "
                          f"overlap {got['overlap_s']:.2f} s of {got['extract_busy_s']:.2f} s extraction, "
                          f"{got['samples_per_s']:,.0f} samples/s (load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False)
    res: dict[str, Any] = {"rows": args.rows, "seeds": args.seeds, "baseline": args.baseline, "runs": runs}
    for side, rs in runs.items():
        res[side] = {k: spread([r[k] for r in rs]) for k in (*METRICS, "overlap_s", "hidden_share", "samples_per_s")}
    res["buffer_minus_window"] = {k: spread([b[k] - w[k] for b, w in zip(runs["buffer"], runs["window"])])
                                  for k in METRICS}
    res["load_average"] = {"start": list(load_start), "end": list(os.getloadavg())}
    res["machine"] = machine_description()
    res["command"] = "python benchmarks/shuffle_buffer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for k in METRICS:
        d = res["buffer_minus_window"][k]
        print(f"{k}: buffer {res['buffer'][k]['mean']:.4f} ± {res['buffer'][k]['sd']:.4f}, window "
              f"{res['window'][k]['mean']:.4f} ± {res['window'][k]['sd']:.4f}; paired difference "
              f"{d['mean']:+.4f} ± {d['sd']:.4f}")
    write_result(args.out or REPO / "benchmarks" / "results" / "shuffle_buffer.json", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
