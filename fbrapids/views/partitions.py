"""A view's dask partitions: the rows each holds when none is asked for
(:func:`auto_partition_rows`), and the piece of a file each reads
(:func:`partition_pieces`: parquet by runs of row groups, a row group larger than a
partition split into row ranges; the other formats a file each).

Example:
    >>> import tempfile, pandas as pd
    >>> p = tempfile.mkdtemp() + "/v.parquet"
    >>> pd.DataFrame({"a": range(10)}).to_parquet(p, row_group_size=4)
    >>> [(x.row_groups, x.row_slice) for x in partition_pieces([p], "parquet", None, partition_rows=3)]
    [((0,), (0, 2)), ((0,), (2, 4)), ((1,), (0, 2)), ((1,), (2, 4)), ((2,), None)]
"""

from __future__ import annotations

import os

from fbrapids.views.parquet import parquet_file
from fbrapids.views.parquet_footer import pin_file
from fbrapids.views.paths import FilePiece

MIN_PARTITION_ROWS = 16_384
MAX_PARTITION_ROWS = 1 << 20


def auto_partition_rows(total_rows: int, cores: int | None = None) -> int:
    """Rows per dask partition when none is asked for: about two partitions per core (so
    every core has work and a slow partition does not leave one idle), none smaller than
    ``MIN_PARTITION_ROWS`` (per-partition overheads) nor larger than ``MAX_PARTITION_ROWS``
    (memory in flight).

    Example:
        >>> auto_partition_rows(1_000_000, cores=2), auto_partition_rows(10_000, cores=2)
        (250000, 16384)
    """
    cores = cores or os.cpu_count() or 1
    return int(min(MAX_PARTITION_ROWS, max(MIN_PARTITION_ROWS, -(-total_rows // (2 * cores)))))


def partition_pieces(files: list[str], fmt: str, row_groups_per_partition: int | None,
                     partition_rows: int | None = None) -> list[FilePiece]:
    """The partitions of a parquet view: ``row_groups_per_partition`` groups each when
    given; else consecutive row groups of a file up to ``partition_rows`` rows (auto when
    None), a row group larger than that split into row ranges.  Other formats: a file each."""
    pins = {f: pin_file(f, parquet=fmt == "parquet") for f in files}  # every read checks its file is this one
    if fmt != "parquet":
        return [FilePiece(f, pin=pins[f]) for f in files]
    metas = [parquet_file(f, pins[f]).metadata for f in files]
    if row_groups_per_partition:
        out = []
        for f, meta in zip(files, metas):
            n = meta.num_row_groups
            if n <= row_groups_per_partition:
                out.append(FilePiece(f, pin=pins[f]))
                continue
            for start in range(0, n, row_groups_per_partition):
                out.append(FilePiece(f, tuple(range(start, min(n, start + row_groups_per_partition))), pin=pins[f]))
        return out
    target = partition_rows or auto_partition_rows(sum(m.num_rows for m in metas))
    out = []
    for f, meta in zip(files, metas):
        if meta.num_rows <= target:
            out.append(FilePiece(f, pin=pins[f]))
            continue
        group: list[int] = []
        rows = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if n > target:  # one large row group: read it, keep a row range (pyarrow cannot seek rows)
                if group:
                    out.append(FilePiece(f, tuple(group), pin=pins[f]))
                    group, rows = [], 0
                k = -(-n // target)
                step = -(-n // k)
                out.extend(FilePiece(f, (g,), (lo, min(n, lo + step)), pins[f]) for lo in range(0, n, step))
                continue
            if group and rows + n > target:
                out.append(FilePiece(f, tuple(group), pin=pins[f]))
                group, rows = [], 0
            group.append(g)
            rows += n
        if group:
            out.append(FilePiece(f, tuple(group) if len(group) < meta.num_row_groups else None, pin=pins[f]))
    return out
