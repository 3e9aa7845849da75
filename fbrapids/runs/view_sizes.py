"""The views of a workload sized before any work: rows from the parquet footers (the first
lines of a text file), bytes per row in memory from the first row group read (Arrow
buffers), the Arrow type of every column, and the held-out rows of the split from the time
column's row-group statistics.  What :mod:`fbrapids.runs.memory_budget` estimates a run's
peak from.

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic import generate, workload
    >>> folder = tempfile.mkdtemp()
    >>> written = generate.generate(2000, folder, seed=1)
    >>> sizes, schema = view_sizes(workload(folder))
    >>> sizes["impressions"].rows, sizes["users"].rows, str(schema["user_id"])
    (2000, 200, 'int64')
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from fbrapids.runs.workload_like import WorkloadLike

if TYPE_CHECKING:  # (annotations only: pyarrow loads where a view is sized)
    import pyarrow as pa

#: the rows of a text (csv / json lines) file sampled to size its rows
_TEXT_SAMPLE_BYTES = 1 << 16


@dataclass(frozen=True)
class ViewSize:
    """A view's rows and its bytes per row in memory as read (Arrow buffers)."""

    rows: int
    row_bytes: float
    partitions: int = 1  #: parquet row groups, or files of another format

    @property
    def bytes(self) -> int:
        return int(self.rows * self.row_bytes)


def _files(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        hits = sorted(glob.glob(p)) if any(c in p for c in "*?[") else [p]
        for h in hits:
            hp = Path(h)
            out.extend(sorted(str(x) for x in hp.rglob("*") if x.is_file()) if hp.is_dir() else [h])
    return out


def _parquet_size(files: list[str], columns: Sequence[str] | None) -> tuple[ViewSize, pa.Schema | None]:
    """Rows from the footers, bytes per row from the first non-empty row group read."""
    import pyarrow.parquet as pq

    rows, groups, row_bytes, schema = 0, 0, 0.0, None
    for f in files:
        pf = pq.ParquetFile(f)
        rows += pf.metadata.num_rows
        groups += pf.metadata.num_row_groups
        if schema is None:
            schema = pf.schema_arrow
        for g in range(pf.metadata.num_row_groups if not row_bytes else 0):
            if pf.metadata.row_group(g).num_rows:
                have = [c for c in (columns or []) if c in pf.schema_arrow.names] or None
                table = pf.read_row_group(g, columns=have)
                row_bytes = table.nbytes / max(table.num_rows, 1)
                break
    return ViewSize(rows, row_bytes, max(groups, 1)), schema


def _text_size(files: list[str]) -> ViewSize:
    """Rows and bytes per row of text files from the first lines of the first (x 1.5: the
    text as Arrow columns)."""
    total = sum(os.path.getsize(f) for f in files)
    with open(files[0], "rb") as fh:
        head = fh.read(_TEXT_SAMPLE_BYTES)
    line = len(head) / max(head.count(b"\n"), 1)
    return ViewSize(int(total / max(line, 1.0)), 1.5 * line, len(files))


def view_sizes(w: WorkloadLike) -> tuple[dict[str, ViewSize], dict[str, pa.DataType]]:
    """Each view of workload ``w`` sized (:class:`ViewSize`), and the Arrow type of every
    column of its parquet views (what features are typed with)."""
    sizes: dict[str, ViewSize] = {}
    schema: dict[str, pa.DataType] = {}
    for v in w.views:
        files = _files([w.resolve(p) for p in v.paths])
        fmt = v.options.get("format") or ("parquet" if files and files[0].endswith(".parquet") else "text")
        if not files or not all(os.path.isfile(f) for f in files):
            continue  # the run's own file checks name it
        if fmt == "parquet":
            sizes[v.name], arrow = _parquet_size(files, v.options.get("columns"))
            if arrow is not None:  # (files were found: the first one's schema)
                schema.update({n: arrow.field(n).type for n in arrow.names if n not in schema})
        else:
            sizes[v.name] = _text_size(files)
    return sizes, schema


def held_out_rows(w: WorkloadLike, sizes: Mapping[str, ViewSize]) -> int:
    """The held-out rows of workload ``w``, from the footers: an ``at`` split's row groups of
    the log at or past the cutoff (from their time statistics), a ``last_day`` split's last
    day in the same way, a ``fraction`` of the rows, or a ``files`` split's files; the whole
    log where the footers do not say."""
    log_rows = sizes[w.log.name].rows if w.log.name in sizes else 0
    rule = w.split.rule
    if rule == "fraction":
        assert w.split.fraction is not None  # (a fraction split holds its fraction: the workload checks it)
        return int(log_rows * w.split.fraction)
    if rule == "files":
        files = _files([w.resolve(p) for p in w.split.files])
        return sum(_text_size([f]).rows if not f.endswith(".parquet") else _parquet_size([f], None)[0].rows
                   for f in files if os.path.isfile(f))
    groups = _time_groups(w)
    if not groups:
        return log_rows
    if rule == "at":
        cutoff = w.split.cutoff()
    else:  # last_day: epoch seconds
        cutoff = max(hi for _, _, hi in groups) // 86400 * 86400
    return sum(n for n, _, hi in groups if hi >= cutoff)


def _time_groups(w: WorkloadLike) -> list[tuple[int, int, int]]:
    """``(rows, min, max)`` of the time column per row group of the log's parquet files;
    empty when a file is not parquet or a group lacks integer statistics."""
    import pyarrow.parquet as pq

    out = []
    for f in _files([w.resolve(p) for p in w.log.paths]):
        if not f.endswith(".parquet") or not os.path.isfile(f):
            return []
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        if w.time is None or w.time not in names:
            return []
        c = names.index(w.time)
        for g in range(meta.num_row_groups):
            st = meta.row_group(g).column(c).statistics
            if st is None or not st.has_min_max or not isinstance(st.max, int):
                return []
            out.append((meta.row_group(g).num_rows, st.min, st.max))
    return out
