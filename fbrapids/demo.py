"""The main job: the FeatureBox flow on the embedded default data, with a summary.

Example:
    >>> import tempfile
    >>> s = run_demo(rows=2000, data_dir=tempfile.mkdtemp())
    >>> s.rows["joined"] > 0
    True
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fbrapids.backend import get_backend

log = logging.getLogger(__name__)


def default_data_dir(rows: int, seed: int) -> Path:
    """Where the demo keeps its generated data: ``$FBRAPIDS_DATA`` or ~/.cache/fbrapids/data."""
    root = Path(os.environ.get("FBRAPIDS_DATA", Path.home() / ".cache" / "fbrapids" / "data"))
    return root / f"default-{rows}-seed{seed}"


@dataclass
class DemoSummary:
    """Row counts and timings of each stage of the demo."""

    backend: str
    data_dir: Path
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"fbrapids demo — backend {self.backend}, data {self.data_dir}", "", "rows per stage:"]
        lines += [f"  {k:<12} {v:>12,}" for k, v in self.rows.items()]
        lines += ["", "seconds per stage:"]
        lines += [f"  {k:<12} {v:>12.3f}" for k, v in self.seconds.items()]
        if self.notes:
            lines += [""] + [f"  {n}" for n in self.notes]
        return "\n".join(lines)


def run_demo(rows: int = 200_000, data_dir: str | Path | None = None, backend: str | None = None,
             model: str = "dlrm", scheduler: str | None = None, seed: int = 0) -> DemoSummary:
    """Generate (once) the default data, then read, clean and join it; returns the summary."""
    from fbrapids import workload
    from fbrapids.datagen import ensure_dataset
    from fbrapids.joins import join_decisions
    from fbrapids.views.clean import clean_report

    be = get_backend(backend)
    data = Path(data_dir) if data_dir is not None else default_data_dir(rows, seed)
    summary = DemoSummary(be.name, data)
    t = time.perf_counter()
    ensure_dataset(rows, data, seed=seed)
    summary.seconds["generate"] = time.perf_counter() - t

    t = time.perf_counter()
    views = workload.read_views(data, backend=be.name)
    impressions, users, ads = workload.clean_views(views)
    joined = workload.join_views(impressions, users, ads).persist()
    summary.rows["impressions"] = int(len(views["impressions"]))
    summary.rows["users"] = int(len(views["users"]))
    summary.rows["ads"] = int(len(views["ads"]))
    summary.rows["cleaned"] = int(clean_report(impressions).counts["rows_out"])
    summary.rows["joined"] = int(len(joined))
    summary.seconds["read+clean+join"] = time.perf_counter() - t
    counts = clean_report(impressions).counts
    summary.notes.append(f"ctx JSON: {counts['json']['ctx']}")
    summary.notes += [str(d) for d in join_decisions()[-2:]]
    return summary
