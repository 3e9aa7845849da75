"""What a training run can check before it trains: the stream's columns and their dtypes,
and a held-out day that holds rows.

Each failure is a :class:`~fbrapids.errors.FbrapidsError` naming the column (and the file
it was expected from), raised after planning and before any partition is computed: a
basic view missing a column, a string dense column or label would otherwise fail at the
first batch with a traceback, and a log without its last day would train fully and then
fail in evaluation.

Example:
    >>> import pandas as pd
    >>> meta = pd.DataFrame({"click": pd.Series([], dtype="int8"), "d0": pd.Series([], dtype="float32")})
    >>> check_stream_columns(meta, "click", ["d0"], [], "data")
    >>> check_stream_columns(meta, "click", ["d1"], [], "data")
    Traceback (most recent call last):
    ...
    fbrapids.errors.NotFoundError: dense feature 'd1' is neither a column of the views in data nor an extracted feature (the stream's frame has: click, d0)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from fbrapids.errors import ColumnTypeError, LabelError, NotFoundError

if TYPE_CHECKING:  # (annotations only: cudf is the gpu extra's)
    import cudf


def _numeric(dtype: object) -> bool:
    kind = getattr(dtype, "kind", None)
    return kind in ("b", "i", "u", "f")


def check_stream_columns(meta: pd.DataFrame | cudf.DataFrame, label: str, dense: Sequence[str], sparse: Sequence[str],
                         data_dir: str | os.PathLike, group: str | None = None) -> None:
    """Every column the stream reads is in ``meta`` (the planned frame's empty meta): the
    label, the features and the ``group`` column; the label and the dense features numeric."""
    have = list(meta.columns)
    for role, names in (("label", [label]), ("dense feature", dense), ("sparse feature", sparse),
                        ("group", [group] if group is not None else [])):
        for name in names:
            if name not in have:
                raise NotFoundError(f"{role} {name!r} is neither a column of the views in {data_dir} nor an extracted "
                                    f"feature (the stream's frame has: {', '.join(map(str, have))})")
    for role, names in (("label", [label]), ("dense feature", dense)):
        for name in names:
            dtype = meta[name].dtype
            if not _numeric(dtype):
                error = LabelError if role == "label" else ColumnTypeError
                raise error(f"{role} {name!r} is of dtype {dtype} in the views of {data_dir}; it must be numeric "
                            "(bool, int or float)")


def check_held_out(path: str | os.PathLike, column: str, cutoff: int) -> None:
    """A :class:`~fbrapids.errors.LabelError` when the footer statistics of ``path`` say
    no row has ``column >= cutoff`` (the held-out day would be empty); nothing when the
    statistics do not say.

    Example:
        >>> import tempfile, pandas as pd
        >>> p = tempfile.mkdtemp() + "/i.parquet"
        >>> pd.DataFrame({"ts": [1, 2]}).to_parquet(p)
        >>> check_held_out(p, "ts", 2)
        >>> check_held_out(p, "ts", 3)
        Traceback (most recent call last):
        ...
        fbrapids.errors.LabelError: ... holds no row with ts >= 3 (its last is 2): the held-out last day is empty, and evaluation would fail after training; give a log that reaches its last day
    """
    from fbrapids.views.parquet import parquet_file

    meta = parquet_file(os.fspath(path)).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if column not in names:
        return
    c = names.index(column)
    last = None
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(c).statistics
        if st is None or not st.has_min_max:
            return
        last = st.max if last is None else max(last, st.max)
    if last is not None and last < cutoff:
        raise LabelError(f"{Path(path)} holds no row with {column} >= {cutoff} (its last is {last}): the held-out last "
                         "day is empty, and evaluation would fail after training; give a log that reaches its last day")
