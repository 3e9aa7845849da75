"""Benchmark: fit + extract against extract alone, on the canonical workload plus fitted
and history features, through the PUBLIC method chain.

Both systems run ``read_view`` -> ``.fbx.clean`` -> ``.fbx.join`` (users, ads) and then:

* ``extract``: ``joined.fbx.extract(fitted)`` with a state fitted beforehand (frozen);
* ``fit+extract``: ``fitted = train_days.fbx.fit(**features)`` (one pass over the
  training days) and then the same ``joined.fbx.extract(fitted)``.

The features are the workload's 20 (section 5) plus a target-encoded (user, category), a
count-encoded user, quantile buckets and a normalised price, a categorified city, the
user's last 50 clicked categories (``history``), the user's impressions in the last day
and the time since the user's previous impression.  Same warm-up (one run each, not
timed) and ``--repeat`` interleaved timed runs per system; the figure is the median, and
the ratio is printed beside them.  The outputs of the two systems are checked equal.

Usage (one line; the last line printed is one JSON object)::

    python benchmarks/fitted.py --rows 1000000            # dask (read_view's default)
    python benchmarks/fitted.py --rows 200000 --eager     # pandas frames
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

import fbrapids  # noqa: E402,F401  (registers .fbx)
from benchmarks.extract import data_dir  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402
from fbrapids import ops  # noqa: E402
from fbrapids.datasets.synthetic import views as workload  # noqa: E402
from fbrapids.datasets.synthetic.generate import DAYS, TS0  # noqa: E402

DAY = 86400


def features() -> dict[str, Any]:
    """The workload's features plus fitted and history ones."""
    return {**workload.features(),
            "te_user_cat": ops.target_encode("user_id", "category", label="click", fold_by="instance_id"),
            "n_user": ops.count_encode("user_id"),
            "price_q": ops.quantile_bucketize("price", 16),
            "price_z": ops.normalize("price"),
            "city_c": ops.categorify("city", min_freq=5),
            "hist_cat": ops.history("user_id", "category", "ts", last_n=50, events="click"),
            "n_user_1d": ops.window_count("user_id", "ts", "1d"),
            "since_user": ops.time_since("user_id", "ts")}


def joined_view(d: Path, eager: bool) -> Any:
    views = workload.read_views(d, eager=eager)
    return workload.join_views(*workload.clean_views(views))


def train_days(frame: Any) -> Any:
    return frame[frame["ts"] < TS0 + (DAYS - 1) * DAY]


def materialise(frame: Any, eager: bool) -> pd.DataFrame:
    out = frame if eager else frame.compute()
    return out.sort_values("instance_id").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--eager", action="store_true", help="pandas frames instead of dask")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    d = data_dir(args.rows)
    feats = features()
    frozen = train_days(joined_view(d, args.eager)).fbx.fit(**feats)

    def extract_only() -> pd.DataFrame:
        return materialise(joined_view(d, args.eager).fbx.extract(frozen), args.eager)

    def fit_and_extract() -> pd.DataFrame:
        joined = joined_view(d, args.eager)
        fitted = train_days(joined).fbx.fit(**feats)
        return materialise(joined.fbx.extract(fitted), args.eager)

    systems: dict[str, Callable[[], pd.DataFrame]] = {"extract": extract_only, "fit+extract": fit_and_extract}
    for fn in systems.values():  # warm-up: kernels compiled or loaded from the disk cache
        fn()
    times: dict[str, list[float]] = {k: [] for k in systems}
    outs: dict[str, pd.DataFrame] = {}
    for _ in range(args.repeat):
        for name, fn in systems.items():
            t = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t)
    pd.testing.assert_frame_equal(outs["extract"], outs["fit+extract"], check_exact=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["fit+extract"] / med["extract"]
    mode = "eager pandas" if args.eager else "dask"
    print(f"machine: {machine_description('cpu')}; {args.rows:,} impressions, {len(feats)} features ({mode}), "
          f"median of {args.repeat}")
    for name in systems:
        print(f"{name:<12} {med[name]:8.2f} s  {args.rows / med[name]:12,.0f} rows/s")
    print(f"fit+extract / extract = {ratio:.2f}x (target <= 2x)")
    print(json.dumps({"rows": args.rows, "mode": mode, "seconds": med, "ratio": ratio, "repeat": args.repeat}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
