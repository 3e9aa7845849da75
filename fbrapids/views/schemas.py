"""The columns a view's files hold, and their agreement: parquet's from the footers'
schemas, CSV's from the header lines, JSON lines' from the keys of their first records;
parquet and CSV files that differ are an error naming both files and the columns.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> for name, text in (("a", "id,q\\n1,x\\n"), ("b", "q,id\\ny,2\\n"), ("c", "id,z\\n3,y\\n")):
    ...     _ = open(f"{d}/{name}.csv", "w").write(text)
    >>> opts = CsvOptions(sep=",", header=True, names=None)
    >>> check_schemas([f"{d}/a.csv", f"{d}/b.csv"], "csv", opts)
    ['id', 'q']
    >>> check_schemas([f"{d}/a.csv", f"{d}/c.csv"], "csv", opts)
    Traceback (most recent call last):
    ...
    fbrapids.errors.ViewError: columns of .../c.csv ['id', 'z'] differ from .../a.csv ['id', 'q']: only in ...
"""

from __future__ import annotations

from typing import Literal, Sequence

import pyarrow as pa

from fbrapids.errors import ViewError
from fbrapids.views.csv import CsvOptions, csv_header, sniff_sep, warn_one_column
from fbrapids.views.jsonl_files import json_plan
from fbrapids.views.parquet import parquet_file


def file_columns(path: str, fmt: str, csv_opts: CsvOptions) -> list[str] | None:
    """The column names stored in one file, without reading its data (JSON lines: the keys
    of its first ``META_SAMPLE_ROWS`` records); None for a CSV file with no text at all."""
    if fmt == "parquet":
        return list(parquet_file(path).schema_arrow.names)
    if fmt == "csv":
        if not csv_opts.header:
            if csv_opts.names is None:
                raise ViewError(f"{path}: headerless CSV needs names=[...]")
            return list(csv_opts.names)
        names = csv_header(path, csv_opts.sep or sniff_sep(path, csv_opts), csv_opts)
        if csv_opts.sep is not None and names is not None and len(names) == 1:
            warn_one_column(path, csv_opts, names[0])
        return names
    return json_plan([path], csv_opts).keys


def _read_type(t: pa.DataType) -> pa.DataType:
    """The type a column reads as: dictionary encodings and 32 / 64-bit offsets alike."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(t, t)


def check_schemas(files: list[str], fmt: str, csv_opts: CsvOptions,
                  requested: Sequence[str] | None = None) -> list[str]:
    """The view's columns: the first file's (JSON lines: every sampled key of every file).

    Parquet and CSV files must agree on them: with ``requested`` None, every file holds the
    same columns (in any order; parquet: of the same types); else every file holds the
    requested ones (parquet: of the same types).  A CSV file with no text at all holds no
    rows and is left out of the comparison.  A difference is a ViewError naming both
    files and the columns.
    """
    if fmt == "json":
        return json_plan(files, csv_opts).keys
    if fmt == "parquet":
        schemas = [(f, parquet_file(f).schema_arrow) for f in files]
        first_file, first = schemas[0]
        for f, schema in schemas[1:]:
            names = requested if requested is not None else list(dict.fromkeys(first.names + schema.names))
            diff = [f"{c}: {_type_or_absent(first, c)} vs {_type_or_absent(schema, c)}" for c in names
                    if _type_or_absent(first, c) != _type_or_absent(schema, c)]
            if diff:
                raise ViewError(f"schema of {f} differs from {first_file}: {'; '.join(diff)}")
        return list(first.names)
    headers = [(f, cols) for f in files if (cols := file_columns(f, fmt, csv_opts)) is not None]
    if not headers:
        return list(csv_opts.names or [])
    first_file, first_cols = headers[0]
    for f, cols in headers[1:]:
        if requested is not None:
            missing = [c for c in requested if c not in cols]
            if missing:
                raise ViewError(f"columns of {f} {cols} lack {missing}, which {first_file} {first_cols} has")
        elif set(cols) != set(first_cols):
            raise ViewError(f"columns of {f} {cols} differ from {first_file} {first_cols}: "
                            f"only in {f}: {[c for c in cols if c not in first_cols]}; "
                            f"only in {first_file}: {[c for c in first_cols if c not in cols]}")
    return first_cols


def _type_or_absent(schema: pa.Schema, name: str) -> pa.DataType | Literal["absent"]:
    i = schema.get_field_index(name)
    return "absent" if i < 0 else _read_type(schema.field(i).type)
