"""``read_view``: raw log views from parquet, CSV or JSON lines, column-projected.

One partition per file (parquet files with several row groups split further by row
group), read by fbrapids' own per-file reader through ``dask.dataframe.from_map``.
That keeps three promises the stock readers do not make together:

* every error names the file it happened in (a file that vanishes between planning and
  reading, a schema that differs from the first file's, a value that will not convert);
* only the requested columns are read (parquet: pyarrow reads just those column chunks);
* integer columns keep their exact 64-bit values: 20-digit ids above 2^63 come back as
  ``uint64``, never as float and never wrapped negative.

The dask frame's ``_meta`` is built without reading a partition: parquet from the file's
schema (footer only), CSV and JSON lines from their first ``META_SAMPLE_ROWS`` rows; every
partition is then converted to those dtypes (a value that does not fit is an error naming
the file, column and row; pass ``dtype=`` to choose).

On the GPU backend cudf reads: parquet column-projected (``columns=``, row groups); CSV
as text on the device, converted there after an on-device check that every value parses
as the host's rules would (pylibcudf's ``is_integer`` with the target's range,
``isfloat``; no null for a non-nullable int; no integer text a float cannot hold exactly;
no float32 overflow; NaN texts null).  A file the device check rejects, or whose dtypes it
cannot produce (bool, datetime), is read by the host reader instead, which gives the exact
answer or the error naming the row.  JSON lines are parsed on the host on every backend
(cudf's reader cannot tell a JSON string from a number once read as text, keeps nested
values' raw text and drops keys beyond the columns asked for) and moved to the device.

This module plans the view and reads its partitions; each step has a module of its own
beside it: :mod:`~fbrapids.views.paths` (the files, their compression and format),
:mod:`~fbrapids.views.schemas` (the files' columns, checked to agree),
:mod:`~fbrapids.views.csv`, :mod:`~fbrapids.views.jsonl_files` and
:mod:`~fbrapids.views.parquet` (a format each), :mod:`~fbrapids.views.text_columns` (text as
typed columns, on the host and the device), :mod:`~fbrapids.views.casts` (the checks before
an exact cast) and :mod:`~fbrapids.views.partitions` (the partitions' files and rows).

Example:
    >>> import tempfile, pandas as pd
    >>> d = tempfile.mkdtemp()
    >>> pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(f"{d}/v.parquet")
    >>> read_view(f"{d}/*.parquet", columns=["a"], eager=True)["a"].tolist()
    [1, 2]
"""


from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import pyarrow as pa

from fbrapids.errors import MissingFileError, ViewError
from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import EagerFrame, FrameLike
from fbrapids.views import jsonl
from fbrapids.views.csv import META_SAMPLE_ROWS, CsvOptions, read_csv_file
from fbrapids.views.dtype_spec import DtypeSpec
from fbrapids.views.jsonl_files import json_plan, read_json_host
from fbrapids.views.parquet import (
    arrow_to_pandas,
    decode_dictionaries,
    masked_ints,
    normalize_strings,
    nullable_int_columns,
    parquet_file,
)
from fbrapids.views.parquet_footer import check_pin, pin_file
from fbrapids.views.partitions import partition_pieces
from fbrapids.views.paths import FilePiece, expand_paths, infer_format
from fbrapids.views.schemas import check_schemas
from fbrapids.views.text_columns import apply_dtypes

log = logging.getLogger(__name__)


def _check_columns(requested: Sequence[str] | None, available: list[str], pattern: str) -> list[str]:
    if requested is None:
        return available
    missing = [c for c in requested if c not in available]
    if missing:
        raise ViewError(
            f"column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} not found in {pattern!r}; "
            f"available: {', '.join(available)}"
        )
    return list(requested)


def _read_one(piece: FilePiece, fmt: str, columns: list[str], csv_opts: CsvOptions,
              dtype: dict[str, DtypeSpec], backend_name: str) -> EagerFrame:
    """Read one partition; every failure names the file."""
    return _read_piece(piece, fmt, columns, csv_opts, dtype, _backend.get_backend(backend_name))


def _read_piece(piece: FilePiece, fmt: str, columns: list[str], csv_opts: CsvOptions,
                dtype: dict[str, DtypeSpec], be: _backend.Backend, nrows: int | None = None) -> EagerFrame:
    """One partition (``nrows``: only its first rows, read on the host, for a meta sample)."""
    path = piece.path
    if not os.path.exists(path):
        raise MissingFileError(f"view file vanished before it could be read: {path}")
    if piece.pin is not None:
        check_pin(piece.pin)
    try:
        if fmt == "parquet":
            if be.is_gpu:
                # cudf takes one list of row groups per input file
                groups = [list(piece.row_groups)] if piece.row_groups is not None else None
                frame = be.xdf.read_parquet(path, columns=columns, row_groups=groups, use_pandas_metadata=False)
                if piece.row_slice is not None:
                    frame = frame.iloc[piece.row_slice[0]:piece.row_slice[1]].reset_index(drop=True)
            else:
                pf = parquet_file(path, piece.pin)
                if piece.row_groups is not None:
                    table = pf.read_row_groups(list(piece.row_groups), columns=columns)
                else:
                    table = pf.read(columns=columns)
                if piece.row_slice is not None:
                    table = table.slice(piece.row_slice[0], piece.row_slice[1] - piece.row_slice[0])
                frame = normalize_strings(arrow_to_pandas(table, masked_ints(dtype)))
        elif fmt == "csv":
            frame = apply_dtypes(read_csv_file(piece, columns, csv_opts, dtype, be, nrows), dtype, path)
            if piece.pin is not None:
                check_pin(piece.pin)
            return frame
        else:
            # JSON lines are parsed on the host on every backend: cudf's reader gives a JSON
            # string and a number the same text, nested values their raw (not compact) text,
            # and drops keys beyond the columns asked for: not the documented answer
            frame = _backend.to_backend(read_json_host(path, columns, csv_opts, dtype, nrows), be)
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        if isinstance(exc, ViewError):
            raise
        if piece.pin is not None:
            check_pin(piece.pin)  # a file replaced while it was read: say that, not what it broke
        raise ViewError(f"{path}: {exc}") from None
    if piece.pin is not None:
        check_pin(piece.pin)  # not replaced while it was read
    return apply_dtypes(frame, dtype, path)


def view_meta(piece: FilePiece, fmt: str, columns: list[str], csv_opts: CsvOptions, dtype: dict[str, DtypeSpec],
              be: _backend.Backend) -> EagerFrame:
    """The empty frame a view's partitions will look like, without reading a partition:
    parquet from the schema in the footer, CSV / JSON from the first ``META_SAMPLE_ROWS`` rows."""
    if fmt == "parquet":
        empty = parquet_file(piece.path).schema_arrow.empty_table().select(columns)
        meta = (be.xdf.DataFrame.from_arrow(decode_dictionaries(empty)) if be.is_gpu
                else normalize_strings(arrow_to_pandas(empty, masked_ints(dtype))))
        return apply_dtypes(meta, dtype, piece.path)
    if fmt == "json":
        sample = pd.DataFrame({c: jsonl.to_column([], dtype.get(c, "str"), piece.path, c) for c in columns})
    else:
        sample = _read_piece(piece, fmt, columns, csv_opts, dtype, _backend.CPU, nrows=META_SAMPLE_ROWS)
    return _backend.to_backend(sample.iloc[:0], be)


def read_view(
    path_or_glob: str | os.PathLike | Sequence[str | os.PathLike],
    columns: Sequence[str] | None = None,
    format: str | None = None,
    *,
    sep: str | None = None,
    header: bool = True,
    names: Sequence[str] | None = None,
    dtype: dict[str, DtypeSpec] | None = None,
    encoding: str = "utf-8",
    compression: str | None = None,
    eager: bool = False,
    backend: str | None = None,
    row_groups_per_partition: int | None = None,
    partition_rows: int | None = None,
) -> FrameLike:
    """Read a raw log view as a dask DataFrame (dask-cudf on the GPU backend).

    Args:
        path_or_glob: a file, a directory, a glob, or a list of them.
        columns: the columns to read (all when None). Only these are read from disk.
        format: ``"parquet"``, ``"csv"`` or ``"json"`` (JSON lines); inferred from suffixes.
        sep: CSV separator.  None: tab for a ``.tsv`` file; else the first of ``","``,
            tab, ``";"``, ``"|"`` that splits each of the file's first lines into the same
            number (> 1) of fields, most fields winning; ``","`` when none does.  A given
            ``sep`` that leaves the header one column, where the guess would split it into
            several, gives a :class:`~fbrapids.errors.SeparatorWarning` naming the file and
            the guess (the read goes on with the ``sep`` given).
        header: whether CSV files start with a header line.
        names: column names for headerless CSV.  A row with more fields than the header
            (or ``names``) is an error naming the file and line; a row with fewer has
            nulls in its missing fields (pandas' rule).
        encoding: the text encoding of CSV files (default UTF-8; a leading byte-order
            mark is dropped, so the first column's name is clean).
        compression: CSV / JSON lines compression, ``"gzip"``, ``"bz2"``, ``"zstd"``,
            ``"lz4"`` or ``"none"``; None: from the suffix (``.csv.gz``, ``.csv.bz2``,
            ``.csv.zst``, ``.jsonl.gz`` ...).
        dtype: per-column dtypes to enforce (ints are converted exactly; ``"260.0"`` is a
            valid int 260, ``"260.5"`` is an error naming the file, column and row).  A
            value the dtype cannot hold (beyond a narrower int, a finite float that
            overflows float32, an int float64 cannot hold exactly, null for ``int64`` /
            ``bool``) is an error naming the file, column, row and value; never wrapped.
            An integer (text, JSON or stored) read as a float must be exact in it
            (``"16777217"`` is not a ``float32``); a fraction rounds to the nearest.
            Numbers read as ``bool`` must be 0 or 1; text as ``bool`` is ``true`` /
            ``false`` (any case); stored strings read as numbers follow the CSV text
            rules (``" +7"`` and ``"1e3"`` are ints 7 and 1000).  Numbers read as a
            datetime count units of the dtype (``datetime64[s]``: epoch seconds) and
            must be whole; a datetime read in a coarser unit must lose nothing; a
            datetime is never read as a number (its number depends on its stored
            unit).  CSV texts read as a datetime are epoch numbers in its unit when
            every one is an integer, else datetime texts.
        eager: return one eager pandas / cudf frame instead (for small inputs).
        backend: ``"cpu"`` / ``"gpu"`` / None (see :mod:`fbrapids.frames.backend`).
        row_groups_per_partition: parquet row groups per partition (None: by
            ``partition_rows``).
        partition_rows: rows per dask partition for parquet (None: about two partitions
            per core, see :func:`~fbrapids.views.partitions.auto_partition_rows`);
            consecutive row groups are read together, a larger row group is split into
            row ranges.  CSV and JSON lines give a partition per file.  Eager reads read
            each file whole.

    What each format reads as (the same eager and on dask; the dask ``_meta`` holds the
    dtypes every partition is converted to):

    * CSV: an empty field is null; every value is text first, and a column without
      ``dtype=`` becomes exact ints (``int64``, ``uint64`` above 2^63 - 1, ``Int64`` /
      ``UInt64`` with nulls) when every value is an integer, else ``bool`` (``boolean``
      with nulls) when every value is ``true`` / ``false`` (any case), else ``float64``
      when every value is a number (and every integer among them is exact in
      float64), else ``str``.  Integers are ASCII digits with an optional sign.  The text ``NaN`` (any case) is null
      in a number column and text in a ``str`` one; ``NA``, ``null`` ... stay text.
      Dtypes are inferred from the first ``META_SAMPLE_ROWS`` rows of the first file
      with text; a later value they cannot hold is an error naming the file and row
      (pass ``dtype=``).  Datetimes stay text unless ``dtype=`` names a datetime.
    * JSON lines: see :mod:`fbrapids.views.jsonl`: ints stay exact (``Int64`` /
      ``UInt64`` with nulls, never float64), booleans are ``bool`` / ``boolean``,
      objects and arrays are their compact JSON text.  The columns are the keys of the
      first ``META_SAMPLE_ROWS`` records of every file (a key missing from a record is
      null there); with ``columns=None`` a record holding a key beyond those is an error
      naming the file, line and key.
    * parquet: the stored types (nullable ints as ``Int64`` ...).  An index pandas
      stored in the file is a column like the others: a named index under its name, an
      unnamed one as ``__index_level_0__`` (pass ``columns=`` to leave it out); a
      ``RangeIndex`` is stored as metadata only and reads as the default index.
    * Several files: parquet and CSV files must hold the same columns (any order;
      parquet: the same types), or with ``columns=`` the requested ones; a difference is
      an error naming both files and the columns.  JSON lines files are united by key.
      An empty (0-byte) CSV file holds no rows; the others decide the columns.

    Raises:
        ViewError: no file matches, a column is absent (the message lists the available
            ones), files disagree on schema (naming the files and columns), or a value
            does not convert (naming the file, column, row or line, and the value).

    Example:
        >>> import tempfile, pandas as pd
        >>> d = tempfile.mkdtemp()
        >>> pd.DataFrame({"id": [1], "q": ["a b"]}).to_csv(f"{d}/v.csv", index=False)
        >>> read_view(f"{d}/v.csv").compute()["q"].tolist()
        ['a b']
    """
    be = _backend.get_backend(backend)
    csv_opts = CsvOptions(sep, header, tuple(names) if names is not None else None, encoding, compression)
    view = _plan_view(path_or_glob, columns, format, csv_opts, dtype, be)
    if eager:
        return _read_eager(view, be)
    return _read_lazy(view, be, row_groups_per_partition, partition_rows)


@dataclass(frozen=True)
class _ViewPlan:
    """What :func:`read_view` reads, settled before any partition is read (:func:`_plan_view`)."""

    pattern: str  #: the path or glob as the user gave it (for messages)
    files: list[str]
    fmt: str
    columns: list[str]  #: the columns read, checked present
    csv_opts: CsvOptions
    dtypes: dict[str, DtypeSpec]  #: every partition's columns converted to these
    meta: EagerFrame  #: the empty frame every partition looks like


def _plan_view(path_or_glob: str | os.PathLike | Sequence[str | os.PathLike], columns: Sequence[str] | None,
               format: str | None, csv_opts: CsvOptions, dtype: dict[str, DtypeSpec] | None,
               be: _backend.Backend) -> _ViewPlan:
    """The files, format, columns and dtypes of a view and its empty ``_meta`` frame, from
    footers and the first rows only: absent columns, files that disagree on schema, and a
    ``dtype=`` for an absent column are errors here, before any partition is read."""
    pattern = os.fspath(path_or_glob) if isinstance(path_or_glob, (str, os.PathLike)) else str(list(path_or_glob))
    files = expand_paths(path_or_glob)
    fmt = infer_format(files, format)
    plan = json_plan(files, csv_opts) if fmt == "json" else None
    available = plan.keys if plan is not None else check_schemas(files, fmt, csv_opts, columns)
    cols = _check_columns(columns, available, pattern)
    dtypes = _given_dtypes(dtype, available, pattern)
    if fmt == "parquet" and not be.is_gpu:  # (cudf ints hold nulls as they are)
        dtypes = nullable_int_columns(files, cols) | dtypes
    if plan is not None:
        dtypes = {c: plan.dtype(c) for c in cols if c not in dtypes} | dtypes
        if columns is None:  # a key beyond the sampled records is an error, not dropped
            csv_opts = dataclasses.replace(csv_opts, keys=tuple(available))
    first = files[0] if fmt != "csv" else next((f for f in files if os.path.getsize(f)), files[0])
    meta = view_meta(FilePiece(first), fmt, cols, csv_opts, dtypes, be)
    if fmt != "parquet":
        # every partition converts to the sampled dtypes (errors name the file and row)
        dtypes = {c: meta[c].dtype for c in cols} | dtypes
    return _ViewPlan(pattern, files, fmt, cols, csv_opts, dtypes, meta)


def _given_dtypes(dtype: dict[str, DtypeSpec] | None, available: list[str], pattern: str) -> dict[str, DtypeSpec]:
    """``read_view``'s ``dtype=`` as a dict, every column it names checked present.

    Example:
        >>> _given_dtypes({"a": "int64"}, ["a", "b"], "v.csv"), _given_dtypes(None, ["a"], "v.csv")
        ({'a': 'int64'}, {})
    """
    dtypes = dict(dtype or {})
    unknown = [c for c in dtypes if c not in available]
    if unknown:
        raise ViewError(f"dtype given for absent column(s) {unknown} in {pattern!r}; available: {', '.join(available)}")
    return dtypes


def _read_eager(view: _ViewPlan, be: _backend.Backend) -> EagerFrame:
    """Every file of the view read whole, as one eager pandas / cudf frame (index 0..n-1);
    files whose partitions came out of different dtypes are an error naming both."""
    pieces = [FilePiece(f, pin=pin_file(f, parquet=view.fmt == "parquet")) for f in view.files]
    parts = [_read_one(p, view.fmt, view.columns, view.csv_opts, view.dtypes, be.name) for p in pieces]
    frames = [p for p in parts if len(p)] or parts[:1]
    frame = be.xdf.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
    _check_partition_dtypes(parts, pieces)
    return frame


def _read_lazy(view: _ViewPlan, be: _backend.Backend, row_groups_per_partition: int | None,
               partition_rows: int | None) -> FrameLike:
    """The view as a dask frame of ``view.meta``: one partition per file (parquet: per
    run of row groups, :func:`~fbrapids.views.partitions.partition_pieces`), each read by
    :func:`_read_one` when computed."""
    pieces = partition_pieces(view.files, view.fmt, row_groups_per_partition, partition_rows)
    dd = _backend.dask_dataframe()
    log.debug("read_view %s: %d files, %d partitions, format %s, columns %s", view.pattern, len(view.files),
              len(pieces), view.fmt, view.columns)
    import dask

    # dask's "convert-string" would make the text columns "string" (NA semantics: ``s == "a"``
    # is <NA> at a null) where the eager frame has "str": the same frame both ways instead
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(
            _read_one, pieces, fmt=view.fmt, columns=view.columns, csv_opts=view.csv_opts, dtype=view.dtypes,
            backend_name=be.name, meta=view.meta, enforce_metadata=True, label=f"read-{view.fmt}",
        )


def _check_partition_dtypes(parts: list[FrameLike], pieces: list[FilePiece]) -> None:
    first = parts[0]
    for part, piece in zip(parts[1:], pieces[1:]):
        for col in first.columns:
            if str(part[col].dtype) != str(first[col].dtype) and len(part) and len(first):
                raise ViewError(
                    f"{piece.path}: column {col!r} reads as {part[col].dtype}, but as {first[col].dtype} in {pieces[0].path}"
                )
