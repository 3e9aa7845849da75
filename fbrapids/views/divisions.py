"""Known dask divisions for a view sorted by a key, from its parquet row-group statistics.

A parquet file written in key order (the generator's impressions and basic features, both
by ``instance_id``) says so in its row-group min / max statistics, without reading a row.
:func:`index_by_sorted_key` makes that key the index of the view, with those divisions, so
two such views are joined partition by partition (dask aligns their divisions) instead of
through a shuffle.  A file that is not sorted (overlapping row groups, missing statistics)
is returned unchanged and the join falls back to dask's shuffle.

The statistics are not covered by the page checksums: one flipped bit there shifts a
division, and a partition-wise join would silently drop the rows on the wrong side of it.
So every partition read is checked against its divisions (:func:`keys_within`): a first
or last key outside them is a :class:`~fbrapids.errors.ViewError` naming the file, the
partition and the keys.

Example:
    >>> import tempfile, pandas as pd
    >>> from fbrapids.views.read import read_view
    >>> path = tempfile.mkdtemp() + "/v.parquet"
    >>> pd.DataFrame({"id": range(10), "x": range(10)}).to_parquet(path, row_group_size=4)
    >>> sorted_divisions(path, "id")
    (0, 4, 8, 9)
    >>> index_by_sorted_key(read_view(path, row_groups_per_partition=1), path, "id").divisions
    (0, 4, 8, 9)
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from fbrapids.errors import InputTypeError, ViewError
from fbrapids.frames.backend import is_eager_frame
from fbrapids.views.parquet import parquet_file

if TYPE_CHECKING:  # (annotations only: no import at run time)
    import dask.dataframe as dd

    from fbrapids.frames.backend import EagerFrame, FrameLike

log = logging.getLogger(__name__)


def sorted_divisions(path: str | os.PathLike, column: str, groups_per_partition: int = 1) -> tuple[Any, ...] | None:
    """``(min_0, min_1, ..., min_last, max_last)`` of ``column`` over the partitions of one
    parquet file (``groups_per_partition`` consecutive row groups each), or None unless every
    row group has statistics and the groups are in strictly increasing, non-overlapping key
    order."""
    meta = parquet_file(os.fspath(path)).metadata  # the footer checked before pyarrow reads it
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if column not in names or meta.num_row_groups == 0:
        return None
    col = names.index(column)
    mins, maxs = [], []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(col).statistics
        if stats is None or not stats.has_min_max or (stats.null_count or 0) > 0:
            return None
        mins.append(stats.min)
        maxs.append(stats.max)
    if any(maxs[i] >= mins[i + 1] for i in range(len(mins) - 1)):
        return None
    return (*mins[::groups_per_partition], maxs[-1])


def groups_per_partition(path: str | os.PathLike, partition_rows: int) -> int:
    """Whole row groups of ``path`` per partition for about ``partition_rows`` rows each.

    Example:
        >>> import tempfile, pandas as pd
        >>> path = tempfile.mkdtemp() + "/v.parquet"
        >>> pd.DataFrame({"id": range(100)}).to_parquet(path, row_group_size=10)
        >>> groups_per_partition(path, 35)
        3
    """
    meta = parquet_file(os.fspath(path)).metadata  # the footer checked before pyarrow reads it
    per_group = max(1, meta.num_rows // max(1, meta.num_row_groups))
    return max(1, partition_rows // per_group)


def index_by_sorted_key(frame: FrameLike, path: str | os.PathLike, key: str, groups: int = 1) -> dd.DataFrame:
    """``frame`` (``groups`` row groups of ``path`` per partition) indexed by ``key`` with
    known divisions, when the file is sorted by ``key``; else ``frame`` unchanged (logged)."""
    if is_eager_frame(frame):
        raise InputTypeError(f"index_by_sorted_key takes a dask frame (read_view(..., row_groups_per_partition=...)), not {type(frame).__name__}")
    divisions = sorted_divisions(path, key, groups)
    if divisions is None or len(divisions) - 1 != frame.npartitions:
        log.info("%s is not sorted by %s in %d row groups: its joins on %s will shuffle", path, key,
                 frame.npartitions, key)
        return frame
    indexed = frame.set_index(key, sorted=True, divisions=list(divisions))
    return indexed.map_partitions(keys_within, list(divisions), os.fspath(path), key, meta=indexed._meta)


def keys_within(part: EagerFrame, divisions: list[Any], path: str, key: str, partition_info: dict | None = None) -> EagerFrame:
    """``part`` (partition ``partition_info["number"]`` of a frame indexed by ``key`` with
    ``divisions`` from the statistics of ``path``), checked: its keys lie within its
    divisions, else a :class:`~fbrapids.errors.ViewError` naming the file.

    Example:
        >>> import pandas as pd
        >>> part = pd.DataFrame({"x": [1, 2]}, index=pd.Index([5, 9], name="id"))
        >>> len(keys_within(part, [0, 10, 20], "v.parquet", "id", {"number": 0}))
        2
        >>> keys_within(part, [0, 8, 20], "v.parquet", "id", {"number": 0})
        Traceback (most recent call last):
        ...
        fbrapids.errors.ViewError: v.parquet: partition 0 holds id 5 to 9, but the file's row-group statistics put it in [0, 8); ...
    """
    if partition_info is None or not len(part):
        return part
    i = partition_info["number"]
    lo, hi = divisions[i], divisions[i + 1]
    last = i == len(divisions) - 2
    first_key, last_key = part.index.min(), part.index.max()
    if first_key < lo or last_key > hi or (not last and last_key >= hi):
        raise ViewError(f"{path}: partition {i} holds {key} {first_key} to {last_key}, but the file's row-group "
                        f"statistics put it in [{lo}, {hi}{']' if last else ')'}; the footer's statistics are "
                        "corrupt (not covered by the page checksums), and a join by partition would drop rows: "
                        "rewrite the file (or regenerate it)")
    return part
