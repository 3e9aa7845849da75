"""Parquet files of a view: opened with the footer checked first (:func:`parquet_file`), the
integer columns that may hold nulls found from the footers' statistics alone, and Arrow
tables as the pandas frames a view reads (nullable ints exact, lists Arrow-backed,
dictionaries decoded, a stored index a column, strings the default ``str``).

Example:
    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> p = tempfile.mkdtemp() + "/v.parquet"
    >>> pq.write_table(pa.table({"id": [1, None], "s": pa.array(["x", "y"]).dictionary_encode()}), p)
    >>> frame = arrow_to_pandas(parquet_file(p).read(), nullable_int_columns([p], ["id", "s"]))
    >>> {c: str(t) for c, t in frame.dtypes.items()}, frame["id"].tolist()
    ({'id': 'Int64', 's': 'str'}, [1, <NA>])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fbrapids.errors import MissingFileError, ViewError
from fbrapids.views.dtype_spec import DtypeSpec
from fbrapids.views.parquet_footer import FilePin, check_footer, check_pin


def parquet_file(path: str, pin: FilePin | None = None) -> pq.ParquetFile:
    """``path`` opened as parquet; a truncated or corrupt file is a ViewError naming it.

    The footer is checked in Python before pyarrow reads it (a corrupt footer can abort
    pyarrow's process: :func:`fbrapids.views.parquet_footer.check_footer`); with ``pin``,
    the file must still be the one pinned (its footer was checked then), else an
    :class:`~fbrapids.errors.InputChangedError` naming it.  Page checksums are verified
    where the writer stored them (``fbrapids gen`` does): a flipped byte in a data page is
    an error at read, naming the file, not a wrong value.

    Example:
        >>> import tempfile
        >>> bad = tempfile.mktemp(suffix=".parquet"); _ = open(bad, "wb").write(b"PAR1 not really")
        >>> parquet_file(bad)
        Traceback (most recent call last):
        ...
        fbrapids.errors.ViewError: ... is not a readable parquet file (corrupt footer): ... (truncated?)
    """
    from fbrapids.files.manifest import verification_enabled

    if pin is not None:
        check_pin(pin)
    else:
        check_footer(path)
    try:
        return pq.ParquetFile(path, page_checksum_verification=verification_enabled())
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    except (pa.ArrowException, OSError) as exc:
        raise ViewError(f"{path} is not a readable parquet file (truncated or corrupt?): {exc}") from None


def masked_ints(dtype: dict[str, DtypeSpec]) -> dict[str, DtypeSpec]:
    """The columns of ``dtype`` that ask for a pandas nullable int (``Int64``...)."""
    return {c: d for c, d in dtype.items() if str(d) in _NULLABLE_INTS.values()}


def _arrow_list_dtype(t: pa.DataType) -> pd.ArrowDtype | None:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pd.ArrowDtype(t)
    return None


_NULLABLE_INTS = {pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32", pa.int64(): "Int64",
                  pa.uint8(): "UInt8", pa.uint16(): "UInt16", pa.uint32(): "UInt32", pa.uint64(): "UInt64",
                  pa.bool_(): "boolean"}


def nullable_int_columns(files: Sequence[str], columns: Sequence[str]) -> dict[str, str]:
    """Integer (and bool) columns of parquet ``files`` that may hold nulls, with the pandas
    nullable dtype they read as (``{"age": "Int64"}``), from the footers' statistics alone.

    A column is nullable when any row group of any file counts a null in it, or does not
    say.  Reading those as ``Int64`` in every partition keeps their values exact (pandas
    would turn an int column with nulls into float64) and the dtype the same everywhere.

    Example:
        >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> p = tempfile.mkdtemp() + "/t.parquet"
        >>> pq.write_table(pa.table({"a": [1, None], "b": [1, 2], "c": ["x", None]}), p)
        >>> nullable_int_columns([p], ["a", "b", "c"])
        {'a': 'Int64'}
    """
    out: dict[str, str] = {}
    for f in files:
        md = parquet_file(f).metadata  # the footer checked first
        schema = md.schema.to_arrow_schema()
        wanted = {name: _NULLABLE_INTS[schema.field(name).type] for name in columns
                  if name in schema.names and schema.field(name).type in _NULLABLE_INTS}
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            for j in range(rg.num_columns):
                chunk = rg.column(j)
                name = chunk.path_in_schema
                if name in wanted and name not in out:
                    st = chunk.statistics
                    if st is None or not st.has_null_count or st.null_count > 0:
                        out[name] = wanted[name]
    return out


def decode_dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded columns cast to their value type."""
    if not any(pa.types.is_dictionary(f.type) for f in table.schema):
        return table
    decoded = [pa.field(f.name, f.type.value_type, f.nullable) if pa.types.is_dictionary(f.type) else f
               for f in table.schema]
    return table.cast(pa.schema(decoded, metadata=table.schema.metadata))


def arrow_to_pandas(table: pa.Table, nullable: dict[str, DtypeSpec] | None = None) -> pd.DataFrame:
    """A pyarrow table as pandas; list columns stay Arrow-backed (``pd.ArrowDtype``).

    ``nullable`` names integer columns to read as pandas nullable ints (``Int64``), never
    through float64.
    pandas metadata that names an Arrow dtype pandas cannot parse back (``list<item:
    int64>[pyarrow]``, written by pandas itself) is dropped for those columns only, so
    nullable integer columns keep their ``Int64`` types.

    Dictionary-encoded columns (parquet dictionary pages, pandas Categorical written to
    parquet) are decoded to their value type: the encoding is a storage detail, and plain
    columns behave the same in every partition (a dask meta of unknown categories would
    otherwise decide what a join matches).
    """
    table = decode_dictionaries(table)
    frame = _arrow_to_pandas(table)
    for name, dtype in (nullable or {}).items():
        if name in frame.columns and str(frame[name].dtype) != str(dtype):
            mapper = {t: pd.api.types.pandas_dtype(d) for t, d in _NULLABLE_INTS.items()}.get
            frame[name] = pd.Series(table.column(name).to_pandas(types_mapper=mapper).array, index=frame.index,
                                    name=name)
    return frame


def without_stored_index(table: pa.Table) -> pa.Table:
    """``table`` whose pandas metadata no longer makes its stored index the frame's index:
    a named index reads as a column of that name, an unnamed one as ``__index_level_0__``
    (the name pandas stored it under), like any other column of the file.

    Example:
        >>> import pandas as pd
        >>> t = pa.Table.from_pandas(pd.DataFrame({"x": [1]}, index=pd.Index([7], name="k")))
        >>> without_stored_index(t).to_pandas().to_dict("list")
        {'x': [1], 'k': [7]}
    """
    import json

    meta = table.schema.pandas_metadata
    if not meta or not meta.get("index_columns"):
        return table
    stored = {c for c in meta["index_columns"] if isinstance(c, str)}
    meta = dict(meta, index_columns=[])
    meta["columns"] = [dict(c, name=c.get("field_name")) if c.get("field_name") in stored else c
                       for c in meta.get("columns", [])]
    return table.replace_schema_metadata({**table.schema.metadata, b"pandas": json.dumps(meta).encode()})


def _arrow_to_pandas(table: pa.Table) -> pd.DataFrame:
    # split_blocks: a block per column, so a number column without nulls is a view of its
    # Arrow buffer (read-only; pandas copies on write) instead of a copy into one 2-d block
    table = without_stored_index(table)
    try:
        return table.to_pandas(types_mapper=_arrow_list_dtype, split_blocks=True)
    except TypeError:
        import json

        meta = table.schema.pandas_metadata or {}
        for col in meta.get("columns", []):
            if "[pyarrow]" in str(col.get("numpy_type")):
                col["numpy_type"], col["pandas_type"] = "object", "object"
        table = table.replace_schema_metadata({b"pandas": json.dumps(meta).encode()})
        return table.to_pandas(types_mapper=_arrow_list_dtype, split_blocks=True)


def normalize_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """pandas ``string`` (NA-valued) columns as the default ``str`` dtype; both are Arrow-backed.

    Parquet files written from ``string`` columns would otherwise read back as ``string``.
    """
    for col in frame.columns:
        dtype = frame[col].dtype
        if isinstance(dtype, pd.StringDtype) and dtype != pd.StringDtype(storage="pyarrow", na_value=np.nan):
            frame[col] = frame[col].astype("str")
    return frame
