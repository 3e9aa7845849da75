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

Example:
    >>> import tempfile, pandas as pd
    >>> d = tempfile.mkdtemp()
    >>> pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(f"{d}/v.parquet")
    >>> read_view(f"{d}/*.parquet", columns=["a"], eager=True)["a"].tolist()
    [1, 2]
"""

from __future__ import annotations

import csv
import dataclasses
import glob as _glob
import io
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import FrameLike
from fbrapids.errors import MissingFileError, SeparatorWarning, ViewError
from fbrapids.views import jsonl
from fbrapids.views.parquet_footer import FilePin, check_footer, check_pin, pin_file

log = logging.getLogger(__name__)

FORMATS = ("parquet", "csv", "json")
META_SAMPLE_ROWS = 10_000  #: CSV / JSON rows read to infer the dtypes of a view
_SUFFIXES = {
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv", ".txt": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
}


def expand_paths(path_or_glob: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The sorted files a path, directory, glob, or list of them names.

    Raises:
        ViewError: nothing matched; the message names the pattern.

    Example:
        >>> expand_paths("/nonexistent/*.parquet")
        Traceback (most recent call last):
        ...
        fbrapids.errors.ViewError: no files match '/nonexistent/*.parquet'
    """
    patterns = [path_or_glob] if isinstance(path_or_glob, (str, os.PathLike)) else list(path_or_glob)
    files: list[str] = []
    for pattern in patterns:
        p = os.fspath(pattern)
        if os.path.isdir(p):
            found = sorted(
                str(f) for f in Path(p).iterdir()
                if f.is_file() and not f.name.startswith((".", "_")) and data_suffix(str(f)) in _SUFFIXES
            )
        else:
            found = sorted(_glob.glob(p)) if _glob.has_magic(p) else ([p] if os.path.isfile(p) else [])
        if not found:
            raise ViewError(f"no files match {p!r}")
        files.extend(found)
    return files


COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd", ".lz4": "lz4"}


def data_suffix(path: str) -> str:
    """The suffix naming a file's format, under a compression suffix (``a.csv.gz`` -> ``.csv``).

    Example:
        >>> data_suffix("/d/part-0.csv.zst"), data_suffix("x.parquet")
        ('.csv', '.parquet')
    """
    p = Path(path)
    if p.suffix.lower() in COMPRESSIONS:
        p = p.with_suffix("")
    return p.suffix.lower()


def compression_of(path: str, compression: str | None) -> str | None:
    """The compression a CSV / JSON lines file is read with: the one named (``"gzip"``,
    ``"bz2"``, ``"zstd"``, ``"lz4"``, or ``"none"``), else the one its suffix says."""
    if compression is not None:
        name = {"gz": "gzip", "zst": "zstd", "none": None}.get(compression.lower(), compression.lower())
        if name is not None and name not in set(COMPRESSIONS.values()):
            raise ViewError(f"unknown compression {compression!r}; expected one of gzip, bz2, zstd, lz4, none")
        return name
    return COMPRESSIONS.get(Path(path).suffix.lower())


def open_binary(path: str, compression: str | None) -> Any:
    """A binary stream of ``path``'s (decompressed) bytes."""
    codec = compression_of(path, compression)
    return pa.input_stream(path, compression=codec) if codec else open(path, "rb")


def infer_format(files: Sequence[str], format: str | None) -> str:
    """The format named, or the one the file suffixes agree on."""
    if format is not None:
        fmt = format.lower()
        fmt = {"jsonl": "json", "ndjson": "json", "tsv": "csv", "pq": "parquet"}.get(fmt, fmt)
        if fmt not in FORMATS:
            raise ViewError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    kinds = {_SUFFIXES.get(data_suffix(f)) for f in files}
    if None in kinds or len(kinds) != 1:
        raise ViewError(f"cannot infer the format of {list(files)[:3]}...; pass format= one of {', '.join(FORMATS)}")
    return kinds.pop()


@dataclass(frozen=True)
class _CsvOptions:
    sep: str | None
    header: bool
    names: tuple[str, ...] | None
    encoding: str = "utf-8"
    compression: str | None = None
    keys: tuple[str, ...] | None = None  #: JSON lines: the keys a record may hold (None: any)

    @property
    def text_encoding(self) -> str:
        """The encoding to decode with: UTF-8 drops a leading byte-order mark."""
        return "utf-8-sig" if self.encoding.lower().replace("_", "-") in ("utf-8", "utf8") else self.encoding


@dataclass(frozen=True)
class FilePiece:
    """One partition: a file, for parquet the row groups of it to read, and (for a file
    with fewer row groups than the partitions wanted) the rows of those groups to keep."""

    path: str
    row_groups: tuple[int, ...] | None = None
    row_slice: tuple[int, int] | None = None
    pin: FilePin | None = None  #: the file as planned: a read fails, naming it, when it changed since


def _first_lines(path: str, opts: _CsvOptions, n: int = 1) -> tuple[str, bool]:
    """The first ``n`` lines of a text file, and whether they are all of it."""
    try:
        with open_binary(path, opts.compression) as raw:
            with io.TextIOWrapper(raw, encoding=opts.text_encoding, errors="replace", newline="") as fh:
                lines = [fh.readline() for _ in range(n)]
                return "".join(lines), not fh.readline()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ViewError(f"{path}: cannot read it as {compression_of(path, opts.compression) or 'uncompressed'} "
                        f"text: {exc}") from None


def _first_line(path: str, opts: _CsvOptions) -> str:
    return _first_lines(path, opts)[0]


SEP_CANDIDATES = (",", "\t", ";", "|")  #: the separators ``sep=None`` chooses from
_SNIFF_LINES = 20


def sniff_sep(path: str, opts: _CsvOptions) -> str:
    """The separator of a CSV file read with ``sep=None``: tab for a ``.tsv`` file; else the
    first of ``SEP_CANDIDATES`` that splits each of the first lines (quotes respected)
    into the same number of fields, the most fields winning; ``","`` when none does.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/a.tsv", "w").write("id,x\\tq\\n1,2\\tz\\n")
        >>> _ = open(f"{d}/b.csv", "w").write('a;"b;c";d\\n1;2;3\\n')
        >>> sniff_sep(f"{d}/a.tsv", _CsvOptions(None, True, None)), sniff_sep(f"{d}/b.csv", _CsvOptions(None, True, None))
        ('\\t', ';')
    """
    if data_suffix(path) == ".tsv":
        return "\t"
    text, whole = _first_lines(path, opts, _SNIFF_LINES)
    best, best_fields = ",", 1
    for cand in SEP_CANDIDATES:
        try:
            rows = [r for r in csv.reader(io.StringIO(text), delimiter=cand) if r]
        except csv.Error:
            continue
        if not whole and len(rows) > 1:
            rows = rows[:-1]  # the last line read may be cut inside a quoted field
        counts = {len(r) for r in rows}
        if len(counts) == 1 and (k := counts.pop()) > best_fields:
            best, best_fields = cand, k
    return best



def _csv_header(path: str, sep: str, opts: _CsvOptions) -> list[str] | None:
    """The names in a CSV file's header line; None for a file with no text at all."""
    line = _first_line(path, opts)
    if not line:
        return None
    names = next(csv.reader([line], delimiter=sep), [])
    dup = [n for n in dict.fromkeys(names) if names.count(n) > 1]
    if dup:
        raise ViewError(f"{path}: the header names column{'s' if len(dup) > 1 else ''} "
                        f"{', '.join(map(repr, dup))} more than once")
    return names


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


def file_columns(path: str, fmt: str, csv_opts: _CsvOptions) -> list[str] | None:
    """The column names stored in one file, without reading its data (JSON lines: the keys
    of its first ``META_SAMPLE_ROWS`` records); None for a CSV file with no text at all."""
    if fmt == "parquet":
        return list(parquet_file(path).schema_arrow.names)
    if fmt == "csv":
        if not csv_opts.header:
            if csv_opts.names is None:
                raise ViewError(f"{path}: headerless CSV needs names=[...]")
            return list(csv_opts.names)
        names = _csv_header(path, csv_opts.sep or sniff_sep(path, csv_opts), csv_opts)
        if csv_opts.sep is not None and names is not None and len(names) == 1:
            _warn_one_column(path, csv_opts, names[0])
        return names
    return _json_plan([path], csv_opts).keys


def _warn_one_column(path: str, csv_opts: _CsvOptions, header: str) -> None:
    """A :class:`~fbrapids.errors.SeparatorWarning` when the given ``sep`` leaves the
    header one column that the guessed separator splits into several."""
    guess = sniff_sep(path, dataclasses.replace(csv_opts, sep=None))
    fields = next(csv.reader([header], delimiter=guess), [])
    if guess != csv_opts.sep and len(fields) > 1:
        warnings.warn(f"{path}: sep={csv_opts.sep!r} reads one column named {header[:60]!r}; {guess!r} would "
                      f"split it into {len(fields)} ({', '.join(fields[:4])}{', ...' if len(fields) > 4 else ''}): "
                      f"pass sep={guess!r}, or sep=None to guess", SeparatorWarning, stacklevel=2)


def _read_type(t: pa.DataType) -> pa.DataType:
    """The type a column reads as: dictionary encodings and 32 / 64-bit offsets alike."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(t, t)


def _check_schemas(files: list[str], fmt: str, csv_opts: _CsvOptions,
                   requested: Sequence[str] | None = None) -> list[str]:
    """The view's columns: the first file's (JSON lines: every sampled key of every file).

    Parquet and CSV files must agree on them: with ``requested`` None, every file holds the
    same columns (in any order; parquet: of the same types); else every file holds the
    requested ones (parquet: of the same types).  A CSV file with no text at all holds no
    rows and is left out of the comparison.  A difference is a ViewError naming both
    files and the columns.
    """
    if fmt == "json":
        return _json_plan(files, csv_opts).keys
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


def _type_or_absent(schema: pa.Schema, name: str) -> Any:
    i = schema.get_field_index(name)
    return "absent" if i < 0 else _read_type(schema.field(i).type)


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


def _int_text_to_exact(values: pd.Series, path: str, column: str) -> pd.Series:
    """Integers parsed exactly from text: int64 where they fit, uint64 above 2^63.

    Integral floats written as text (``"260.0"``) are accepted when exactly representable
    (below 2^53); anything else is an error naming the file, column and row.  Nulls give a
    nullable ``Int64`` / ``UInt64`` column.
    """
    import pyarrow.compute as pc

    stripped = values.astype("str").str.strip()
    stripped = stripped.where(~_nan_texts(stripped), None).replace("", None)  # "NaN": null, as an empty field
    arr = pa.array(stripped, type=pa.large_string())
    digits = bool(stripped.dropna().str.fullmatch(_INT_TEXT).all())  # (Arrow's int cast also takes "0x10")
    for target in (pa.int64(), pa.uint64()) if digits else ():
        try:
            ints = pc.cast(arr, target)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    else:
        try:
            floats = pc.cast(arr, pa.float64())
        except pa.ArrowInvalid:
            floats = None
        f = floats.to_numpy(zero_copy_only=False) if floats is not None else None
        ok = f is not None and bool(np.all(np.isnan(f) | ((np.floor(f) == f) & (np.abs(f) < 2**53))))
        if not ok:
            row, text, why = _first_bad_int(values)
            raise ViewError(f"{path}: column {column!r} row {row} (0-based, after the header): {text!r} {why}")
        ints = pc.cast(floats, pa.int64(), safe=False)
    nullable = {pa.int64(): "Int64", pa.uint64(): "UInt64"}[ints.type]
    if ints.null_count:
        return pd.Series(pd.array(ints.to_pandas(types_mapper={ints.type: pd.api.types.pandas_dtype(nullable)}.get)),
                         index=values.index, name=values.name)
    return pd.Series(ints.to_numpy(), index=values.index, name=values.name)


def _first_bad_int(values: pd.Series) -> tuple[Any, str, str]:
    """(row, text, why) of the first value that keeps a column from being 64-bit integers."""
    lowest = highest = None  # rows of a negative value and of one above 2^63 - 1
    for row, text in values.items():
        if text is None or (isinstance(text, float) and np.isnan(text)) or str(text).strip() == "":
            continue
        t = str(text).strip()
        if t.lower() in _NAN_TEXTS:
            continue
        if not re.fullmatch(_INT_TEXT, t):
            x = float(t) if _parses_as_float(t) else float("nan")
            if x.is_integer() and abs(x) < 2**53:
                continue
            return row, str(text), "is not an integer"
        v = int(t)
        if not -(2**63) <= v < 2**64:
            return row, str(text), "is outside the 64-bit range (int64, or uint64 below 2^64)"
        if v < 0 and lowest is None:
            lowest = (row, str(text))
        if v >= 2**63 and highest is None:
            highest = (row, str(text))
    if lowest and highest:
        return highest[0], highest[1], (f"needs uint64, but row {lowest[0]} holds the negative {lowest[1]!r}: "
                                        "no 64-bit integer type holds both")
    return -1, "", "is not an integer"


def _read_csv_file(piece: FilePiece, columns: list[str], csv_opts: _CsvOptions, dtype: dict[str, Any],
                   be: _backend.Backend, nrows: int | None = None) -> FrameLike:
    path = piece.path
    sep = csv_opts.sep or sniff_sep(path, csv_opts)
    names = list(csv_opts.names) if csv_opts.names else None
    if be.is_gpu and nrows is None:
        frame = _read_csv_device(path, sep, names, columns, csv_opts, dtype, be)
        if frame is not None:
            return frame
    frame = _read_csv_text(path, sep, names, csv_opts, nrows)
    if frame is None:  # no text at all: no rows
        frame = pd.DataFrame({c: pd.Series([], dtype="str") for c in columns})
    frame = frame[columns]
    for col in columns:
        frame[col] = _convert_text_column(frame[col], dtype.get(col), path, col)
    return _backend.to_backend(frame, be)


def _read_csv_text(path: str, sep: str, names: list[str] | None, csv_opts: _CsvOptions,
                   nrows: int | None) -> pd.DataFrame | None:
    """A CSV file as text columns (every column, so that a row with more fields than the
    header or ``names`` is an error naming its line, not data dropped); None when empty."""
    import warnings

    header = 0 if csv_opts.header else None
    try:
        with open_binary(path, csv_opts.compression) as fh, warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # "...leads to a loss of data"
            frame = pd.read_csv(fh, sep=sep, header=header, encoding=csv_opts.text_encoding, dtype="str",
                                keep_default_na=False, na_values=[""], nrows=nrows, index_col=False)
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    except pd.errors.EmptyDataError:
        return None
    except pd.errors.ParserWarning:
        raise ViewError(f"{path}: rows have more fields than the header names") from None
    except (ValueError, pd.errors.ParserError, OSError, pa.ArrowInvalid) as exc:
        raise ViewError(f"{path}: {exc}") from None
    if names is None:
        return frame
    extra = frame.iloc[:, len(names):]
    if extra.shape[1]:
        rows = extra.notna().any(axis=1).to_numpy().nonzero()[0]
        row = int(rows[0]) if len(rows) else 0
        raise ViewError(f"{path}: row {row} (0-based{', after the header' if header == 0 else ''}) has "
                        f"{int(frame.iloc[row].notna().to_numpy().nonzero()[0].max()) + 1} fields; "
                        f"names= gives {len(names)}")
    for i in range(frame.shape[1], len(names)):  # short rows throughout: the missing fields are null
        frame[i] = pd.Series([None] * len(frame), dtype="str", index=frame.index)
    frame.columns = list(names)
    return frame


def _read_csv_device(path: str, sep: str, names: list[str] | None, columns: list[str], csv_opts: _CsvOptions,
                     dtype: dict[str, Any], be: _backend.Backend) -> FrameLike | None:
    """One CSV file read by cudf as text and converted on the device; None: use the host reader."""
    if any(dtype.get(c) is None for c in columns) or not _device_readable(path, csv_opts):
        return None  # dtypes still to infer, or compressed / not UTF-8: the host reader decides
    try:
        text = be.xdf.read_csv(path, sep=sep, header=0 if csv_opts.header else None, names=names,
                               usecols=columns, dtype={c: "str" for c in columns},
                               keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    except (ValueError, RuntimeError, OverflowError) as exc:  # libcudf parse errors: the host reader names the row
        log.debug("%s: cudf could not read it (%s); reading on the host", path, exc)
        return None
    return _text_to_dtypes_device(text, columns, dtype, path, be)


def _device_readable(path: str, csv_opts: _CsvOptions) -> bool:
    """Whether cudf reads this text file as the host would: uncompressed UTF-8 (cudf infers
    compression from the suffix alone, and reads UTF-8 only)."""
    return compression_of(path, csv_opts.compression) is None and csv_opts.text_encoding == "utf-8-sig"


def _text_to_dtypes_device(text: FrameLike, columns: list[str], dtype: dict[str, Any], path: str,
                           be: _backend.Backend) -> FrameLike | None:
    """cudf string columns converted to ``dtype`` on the device, each conversion checked
    first; None when a check fails (the host reader then gives the answer or the error)."""
    import pylibcudf as plc

    out = {}
    for col in columns:
        want = dtype[col]
        values = text[col]
        if str(want) in ("str", "string", "object") or want is str:
            if bool(values.str.endswith("\r").any()):
                return None  # a CRLF file whose CR cudf kept in the last field: the host's text
            out[col] = values
            continue
        try:
            np_want = np.dtype(getattr(pd.api.types.pandas_dtype(want), "numpy_dtype", want))
        except TypeError:  # a dtype numpy has no name for: the host reader converts it
            return None
        stripped = values.str.strip()
        if np_want.kind in "iu":
            # the target's own range: libcudf's cast does not check overflow, so an int8 column
            # checked against int64 alone would wrap (the host reader raises)
            target = plc.types.DataType(getattr(plc.types.TypeId, _backend.plc_int_type_id(np_want)))
            checked = be.xdf.Series.from_pylibcudf(
                plc.strings.convert.convert_integers.is_integer(stripped.to_pylibcudf()[0], target))
        elif np_want.kind == "f":
            checked = stripped.str.isfloat()
        else:
            return None
        if not bool(checked.all()):  # nulls are skipped: empty fields are nulls
            log.debug("%s: column %r does not all parse as %s on the device; reading on the host", path, col, np_want)
            return None
        if np_want.kind in "iu" and values.null_count \
                and not isinstance(pd.api.types.pandas_dtype(want), pd.api.extensions.ExtensionDtype):
            return None  # a null for a non-nullable int: the host reader names its row
        if np_want.kind == "f" and not _device_floats_exact(stripped, np_want):
            return None
        out[col] = stripped.astype(np_want)
        if np_want.kind == "f":  # a NaN text is null, as on the host (cudf keeps NaN apart from null)
            out[col] = out[col].nans_to_nulls()
    return be.xdf.DataFrame(out)


#: the most digits an integer text may have and be exact in a float type on every value
_EXACT_INT_DIGITS = {np.dtype("float64"): 15, np.dtype("float32"): 7, np.dtype("float16"): 3}


def _device_floats_exact(stripped: Any, np_want: np.dtype) -> bool:
    """Whether the cudf text column converts to ``np_want`` as the host's rules say, checked
    on the device: no integer text longer than the type holds exactly (the host refuses an
    inexact one, an id is never rounded) and no finite value overflowing a narrower float
    (the host refuses it).  False: let the host reader answer or name the row."""
    unsigned = stripped.str.lstrip("+-")
    whole = unsigned.str.isdecimal() & (unsigned.str.len() > _EXACT_INT_DIGITS.get(np_want, 0))
    if bool(whole.any()):
        return False
    if np_want.itemsize >= 8:
        return True
    wide = stripped.astype("float64")
    narrow = wide.astype(np_want)
    return not bool(((narrow.abs() == np.inf) & (wide.abs() != np.inf)).any())


def _check_int_range(exact: pd.Series, want: Any, path: str, column: str) -> None:
    """Raise, naming the row, when an exact int does not fit ``want`` (numpy would wrap it)."""
    info = np.iinfo(getattr(want, "numpy_dtype", want))
    valid = exact.dropna()
    if not len(valid):
        return
    lo, hi = valid.min(), valid.max()
    if int(lo) < info.min or int(hi) > info.max:
        bad = valid[(valid > info.max) if int(hi) > info.max else (valid < info.min)]
        raise ViewError(f"{path}: column {column!r} row {bad.index[0]}: {int(bad.iloc[0])} does not fit {want}")


_NAN_TEXTS = ("nan", "+nan", "-nan")
_INT_TEXT = r"[+-]?[0-9]+"  #: an integer text: ASCII digits with an optional sign
_BOOL_TEXTS = {"true": True, "false": False}


def _nan_texts(stripped: pd.Series) -> pd.Series:
    """Which (stripped) texts spell a float NaN (``NaN``, ``nan``, ``-nan`` ..., any case)."""
    return stripped.str.lower().isin(_NAN_TEXTS).fillna(False).astype(bool)


def _text_error(path: str, column: str, values: pd.Series, bad: pd.Series, why: str) -> ViewError:
    row = bad.to_numpy().nonzero()[0][0]
    text = values.iloc[row]
    shown = "an empty field" if text is None or text != text or not str(text).strip() else repr(text)
    return ViewError(f"{path}: column {column!r} row {row} (0-based, after the header): {shown} {why}")


def _text_to_floats(values: pd.Series, want: Any, path: str, column: str) -> pd.Series:
    """Floats parsed from text, correctly rounded; NaN texts and empty fields are NaN; a
    text that is no number, or a finite number that overflows ``want``, names its row."""
    import pyarrow.compute as pc

    stripped = values.str.strip()
    text = pa.array(stripped.where(stripped.notna() & (stripped != ""), None), type=pa.large_string())
    try:
        out = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = pd.Series([not _parses_as_float(t) for t in text.to_pylist()])
        raise _text_error(path, column, values, bad, f"is not a number ({want})") from None
    target = np.dtype(getattr(pd.api.types.pandas_dtype(want), "numpy_dtype", want))
    if target != np.float64:
        with np.errstate(over="ignore"):
            narrow = out.astype(target)
        over = pd.Series(np.isinf(narrow) & np.isfinite(out))
        if over.any():
            raise _text_error(path, column, values, over, f"overflows {want}")
        out = narrow
    whole = stripped.str.fullmatch(_INT_TEXT).fillna(False).astype(bool).to_numpy()
    if whole.any():  # an integer text must be held exactly (an id is never rounded)
        inexact = pd.Series([bool(w) and int(t) != int(o) for w, t, o in zip(whole, stripped, out)])
        if inexact.any():
            raise _text_error(path, column, values, inexact, f"is an integer not exactly representable as {want}")
    return pd.Series(out, index=values.index, name=values.name).astype(want)


def _parses_as_float(text: str | None) -> bool:
    import pyarrow.compute as pc

    try:
        pc.cast(pa.array([text], type=pa.large_string()), pa.float64())
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _text_to_bools(values: pd.Series, want: Any, path: str, column: str) -> pd.Series:
    """``true`` / ``false`` (any case) as booleans; empty fields null (an error for ``bool``)."""
    low = values.str.strip().str.lower()
    null = low.isna() | (low == "")
    bad = ~null & ~low.isin(list(_BOOL_TEXTS)).fillna(False).astype(bool)
    if bad.any():
        raise _text_error(path, column, values, bad, f"is not a boolean (true / false) for {want}")
    if null.any() and str(want) == "bool":
        raise _text_error(path, column, values, null, "is empty, which bool cannot hold; pass "
                          f"dtype={{{column!r}: 'boolean'}}")
    out = pd.array([None if n else _BOOL_TEXTS[v] for v, n in zip(low, null)], dtype="boolean")
    return pd.Series(out, index=values.index, name=values.name).astype(want)


def _text_to_ints(values: pd.Series, want: Any, path: str, column: str) -> pd.Series:
    """Exact ints of ``want``; a null for a non-nullable int names its row."""
    exact = _int_text_to_exact(values, path, column)
    dtype = pd.api.types.pandas_dtype(want)
    _check_int_range(exact, dtype, path, column)
    if exact.isna().any() and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
        raise _text_error(path, column, values, exact.isna(), f"is null, which {want} cannot hold; pass "
                          f"dtype={{{column!r}: {str(want).capitalize().replace('Uint', 'UInt')!r}}}")
    try:
        return exact.astype(want)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ViewError(f"{path}: column {column!r} cannot be {want}: {exc}") from None


def _all_int_texts(values: pd.Series) -> bool:
    """Whether every non-empty text of ``values`` is an integer (and one is)."""
    stripped = values.dropna().str.strip()
    stripped = stripped[stripped != ""]
    return bool(len(stripped)) and bool(stripped.str.fullmatch(_INT_TEXT).all())


def _convert_text_column(values: pd.Series, want: Any, path: str, column: str) -> Any:
    """A CSV text column as ``want``, or inferred (see :func:`read_view`): exact ints, else
    floats, else booleans, else strings.  ``NaN`` texts are null in a number column."""
    if want is not None:
        kind = "U" if want in ("str", "string", str) else pd.api.types.pandas_dtype(want).kind
        if kind in "iu":
            return _text_to_ints(values, want, path, column)
        if kind == "f":
            return _text_to_floats(values, want, path, column)
        if kind == "b":
            return _text_to_bools(values, want, path, column)
        if kind == "M" and _all_int_texts(values):  # epoch numbers in the dtype's unit
            return _cast_column(_int_text_to_exact(values, path, column), want, path, column)
        return values.astype("str")
    stripped = values.dropna().str.strip()
    stripped = stripped[stripped != ""]
    if stripped.empty:
        return values.astype("str")
    numbers = stripped[~_nan_texts(stripped)]
    if len(numbers) and numbers.str.fullmatch(_INT_TEXT).all():
        return _int_text_to_exact(values, path, column)
    if stripped.str.lower().isin(list(_BOOL_TEXTS)).all():
        return _text_to_bools(values, "boolean" if len(stripped) < len(values) else "bool", path, column)
    if pd.to_numeric(numbers, errors="coerce").notna().all():
        try:
            return _text_to_floats(values, "float64", path, column)
        except ViewError:  # pandas' parser took a text Arrow's does not: text it stays
            pass
    return values.astype("str")


@dataclass(frozen=True)
class _JsonPlan:
    keys: list[str]  #: every key of the sampled records, in first-seen order
    samples: dict[str, list[tuple[Any, Any]]]  #: each key's sampled values
    first_file: str

    def dtype(self, key: str) -> str:
        """The dtype ``key``'s column reads as (inferred only for columns read without dtype=)."""
        return jsonl.infer_dtype(self.samples[key], self.first_file, key)


def _json_plan(files: Sequence[str], opts: _CsvOptions) -> _JsonPlan:
    """The columns of a JSON-lines view: the keys of the first ``META_SAMPLE_ROWS`` records
    of every file; their dtypes from the values of the first ``META_SAMPLE_ROWS`` records
    in all (and, for a key first seen later, of the file it is first seen in)."""
    values: dict[str, list[tuple[Any, Any]]] = {}
    kept = 0
    for f in files:
        recs = list(jsonl.records(f, lambda f=f: open_binary(f, opts.compression), opts.text_encoding,
                                  META_SAMPLE_ROWS))
        keys = list(dict.fromkeys(k for _, r in recs for k in r))
        sample, n = jsonl.columns_of(recs, keys), len(recs)  # (n counts records without keys too)
        where = (lambda line: line) if len(files) == 1 else (lambda line, f=f: f"line {line} of {f}")
        for k in keys:
            if k not in values and kept:  # first seen here: null in the records before
                values[k] = [(f"the records of the files before {f}", None)]
            if k not in values or kept < META_SAMPLE_ROWS:
                values.setdefault(k, []).extend((where(line), v) for line, v in sample[k])
        if kept < META_SAMPLE_ROWS and n:
            for k in values.keys() - set(keys):  # a key this file never has is null in it
                values[k].append((f"a record of {f}", None))
        kept += n
    return _JsonPlan(list(values), values, files[0])


def _read_json_host(path: str, columns: list[str], opts: _CsvOptions, dtype: dict[str, Any],
                    nrows: int | None = None) -> pd.DataFrame:
    """One JSON-lines file as pandas, every column converted exactly to ``dtype``."""
    recs = list(jsonl.records(path, lambda: open_binary(path, opts.compression), opts.text_encoding, nrows))
    if opts.keys is not None:
        planned = set(opts.keys)
        for line, rec in recs:
            extra = [k for k in rec if k not in planned]
            if extra:
                raise ViewError(f"{path}: line {line} has key {extra[0]!r}, which is not among the view's columns "
                                f"(planned from the first {META_SAMPLE_ROWS} records of each file); pass "
                                f"columns=[...] to read only chosen ones")
    values = jsonl.columns_of(recs, columns)
    frame = pd.DataFrame({c: jsonl.to_column(values[c], dtype.get(c, "str"), path, c) for c in columns},
                         index=pd.RangeIndex(len(recs)))
    return frame


def _read_one(piece: FilePiece, fmt: str, columns: list[str], csv_opts: _CsvOptions,
              dtype: dict[str, Any], backend_name: str) -> FrameLike:
    """Read one partition; every failure names the file."""
    return _read_piece(piece, fmt, columns, csv_opts, dtype, _backend.get_backend(backend_name))


def _read_piece(piece: FilePiece, fmt: str, columns: list[str], csv_opts: _CsvOptions,
                dtype: dict[str, Any], be: _backend.Backend, nrows: int | None = None) -> FrameLike:
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
                frame = normalize_strings(arrow_to_pandas(table, _masked_ints(dtype)))
        elif fmt == "csv":
            frame = _apply_dtypes(_read_csv_file(piece, columns, csv_opts, dtype, be, nrows), dtype, path)
            if piece.pin is not None:
                check_pin(piece.pin)
            return frame
        else:
            # JSON lines are parsed on the host on every backend: cudf's reader gives a JSON
            # string and a number the same text, nested values their raw (not compact) text,
            # and drops keys beyond the columns asked for: not the documented answer
            frame = _backend.to_backend(_read_json_host(path, columns, csv_opts, dtype, nrows), be)
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
    return _apply_dtypes(frame, dtype, path)


def _masked_ints(dtype: dict[str, Any]) -> dict[str, Any]:
    """The columns of ``dtype`` that ask for a pandas nullable int (``Int64``...)."""
    return {c: d for c, d in dtype.items() if str(d) in _NULLABLE_INTS.values()}


def _arrow_list_dtype(t: pa.DataType) -> Any:
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


def arrow_to_pandas(table: pa.Table, nullable: dict[str, Any] | None = None) -> pd.DataFrame:
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


def _apply_dtypes(frame: FrameLike, dtype: dict[str, Any], path: str) -> FrameLike:
    """``frame``'s columns cast to ``dtype``, exactly: a value the target cannot hold (out
    of range, a fraction or NaN for an int, a finite float that overflows, an int that
    float cannot hold exactly, null for a non-nullable dtype, a number other than 0 / 1
    for a bool, a time finer than a coarser datetime unit) is an error naming the file,
    column, row and value, never wrapped.  A text column (parquet strings) converts to a
    number or bool by the CSV text rules (:func:`_convert_text_column`)."""
    for col, want in dtype.items():
        if col in frame.columns and str(frame[col].dtype) != str(want):
            frame[col] = _cast_column(frame[col], want, path, col)
    return frame


def _is_text(dtype: Any) -> bool:
    return isinstance(dtype, pd.StringDtype) or str(dtype) in ("object", "str", "string")


def _cast_column(values: Any, want: Any, path: str, col: str) -> Any:
    """One column as ``want``, exactly, or a ViewError naming the file, column, row and value."""
    try:
        target = pd.api.types.pandas_dtype(want) if want is not str else None
    except TypeError:
        target = None
    kind = getattr(target, "kind", "O")
    if _is_text(values.dtype) and kind in "iufb" and target is not None:
        host = _backend.to_host(values)
        text = host.where(host.isna(), host.astype("str")).astype("str")
        out = _convert_text_column(text, want, path, col)
        return _backend.to_backend(out, _backend.backend_of(values))  # (cudf: the host's rules, moved back)
    _check_cast(values, want, path, col)
    try:
        return values.astype(want)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _first_failing(values, want, path, col, exc) from None


def _first_failing(values: Any, want: Any, path: str, col: str, exc: Exception) -> ViewError:
    """The ViewError naming the first row whose value alone does not cast to ``want``."""
    host = _backend.to_host(values)
    for pos in range(min(len(host), 100_000)):
        try:
            host.iloc[pos:pos + 1].astype(want)
        except (TypeError, ValueError, OverflowError) as one:
            value = host.iloc[pos]
            value = value.item() if isinstance(value, np.generic) else value
            return ViewError(f"{path}: column {col!r} row {host.index[pos]}: {value!r} cannot be {want}: {one}")
    return ViewError(f"{path}: column {col!r} cannot be cast to {want}: {exc}")


def _numpy_kind(dtype: Any) -> np.dtype | None:
    try:
        d = getattr(dtype, "numpy_dtype", dtype)
        return d if isinstance(d, np.dtype) else np.dtype(d)
    except TypeError:
        return None


def _check_cast(values: Any, want: Any, path: str, col: str) -> None:
    """Raise, naming the first row, unless every value of ``values`` fits ``want`` exactly."""
    have = _numpy_kind(values.dtype)
    if want in ("str", "string", str) or str(want) in ("str", "string", "object"):
        return
    try:
        target_dtype = pd.api.types.pandas_dtype(want)
    except TypeError:
        return
    target = _numpy_kind(target_dtype)
    if have is None or target is None:
        return
    if have.kind == "M" and target.kind in "iufb":
        raise ViewError(f"{path}: column {col!r} holds datetimes, which {want} does not: their numbers depend on the "
                        f"unit they are stored in; read it as a datetime64 and convert explicitly")
    if target.kind == "M" and have.kind in "iufM":
        _check_time_cast(values, target, want, path, col)
        return
    if have.kind not in "iufb" or target.kind not in "iufb":
        return
    valid = values.notna()
    if target.kind in "iub" and not isinstance(target_dtype, pd.api.extensions.ExtensionDtype) \
            and not bool(valid.all()):
        _raise_at(values, ~valid, path, col, f"is null, which {want} cannot hold")
    present = values[valid]
    if not len(present):
        return
    if target.kind in "iub" and have.kind == "f":
        fractional = (present - present.round()).abs() > 0
        if bool(fractional.any()):
            _raise_at(present, fractional, path, col, f"is not a whole number ({want})")
    if target.kind == "b" and have.kind in "iuf":
        not_bit = (present != 0) & (present != 1)
        if bool(not_bit.any()):
            _raise_at(present, not_bit, path, col, f"is not 0 or 1, the numbers {want} holds")
    if target.kind in "iu" and have.kind in "iuf":
        _check_int_fits(present, have, np.iinfo(target), want, path, col)
    if target.kind == "f" and have.kind in "iu":
        back = present.astype(target).astype(have)
        inexact = back != present
        if bool(inexact.any()):
            _raise_at(present, inexact, path, col, f"is not exactly representable as {want}")
    if target.kind == "f" and have.kind == "f" and target.itemsize < have.itemsize:
        finite = np.isfinite(_backend.to_host(present).to_numpy(dtype=have))
        with np.errstate(over="ignore"):
            over = ~np.isfinite(_backend.to_host(present).to_numpy(dtype=have).astype(target)) & finite
        if over.any():
            _raise_at(present, pd.Series(over, index=_backend.to_host(present).index), path, col, f"overflows {want}")


def _check_int_fits(present: Any, have: np.dtype, info: Any, want: Any, path: str, col: str) -> None:
    """Raise, naming the row, unless every (whole) number of ``present`` is within ``info``;
    float bounds compared exactly (``2.0**63`` does not fit int64)."""
    if have.kind == "f":  # compared exactly: the bounds round to floats (2**63 - 1 -> 2.0**63)
        flo, fhi = float(info.min), float(info.max)
        bad = ~(((present > flo) if flo < info.min else (present >= flo))
                & ((present < fhi) if fhi > info.max else (present <= fhi)))
    else:
        low, high = present.min(), present.max()
        if int(low) >= info.min and int(high) <= info.max:
            return
        bad = (present < info.min) | (present > info.max)
    if bool(bad.any()):
        _raise_at(present, bad, path, col, f"does not fit {want}")


@dataclass(frozen=True)
class _TimeRange:
    min: int = -(2**63) + 1
    max: int = 2**63 - 1


_TIME_RANGE = _TimeRange()  #: the numbers a datetime64 holds (int64 less NaT's)


def _check_time_cast(values: Any, target: np.dtype, want: Any, path: str, col: str) -> None:
    """Numbers to a datetime count units of the target (``datetime64[s]``: epoch seconds)
    and must be whole; a datetime to a coarser unit must lose nothing."""
    present = values[values.notna()]
    if not len(present):
        return
    have = _numpy_kind(values.dtype)
    if have.kind == "f":
        fractional = (present - present.round()).abs() > 0
        if bool(fractional.any()):
            _raise_at(present, fractional, path, col, f"is not a whole number of {want} units")
    if have.kind in "iuf":  # int64's lowest value is NaT's bit pattern: never a time
        _check_int_fits(present, have, _TIME_RANGE, want, path, col)
    if have.kind == "M" and getattr(values.dtype, "tz", None) is None:
        try:
            lost = present.astype(want).astype(values.dtype) != present
        except (TypeError, ValueError, OverflowError):
            return  # out of the target's range: the cast names the row
        if bool(lost.any()):
            _raise_at(present, lost, path, col, f"is finer than {want} holds (it would be truncated)")


def _raise_at(values: Any, bad: Any, path: str, col: str, why: str) -> None:
    host, mask = _backend.to_host(values), _backend.to_host(bad)
    pos = int(np.asarray(mask.to_numpy(dtype=bool)).nonzero()[0][0])
    value = host.iloc[pos]
    value = value.item() if isinstance(value, np.generic) else value
    raise ViewError(f"{path}: column {col!r} row {host.index[pos]}: {value!r} {why}")


def view_meta(piece: FilePiece, fmt: str, columns: list[str], csv_opts: _CsvOptions, dtype: dict[str, Any],
              be: _backend.Backend) -> FrameLike:
    """The empty frame a view's partitions will look like, without reading a partition:
    parquet from the schema in the footer, CSV / JSON from the first ``META_SAMPLE_ROWS`` rows."""
    if fmt == "parquet":
        empty = parquet_file(piece.path).schema_arrow.empty_table().select(columns)
        meta = (be.xdf.DataFrame.from_arrow(decode_dictionaries(empty)) if be.is_gpu
                else normalize_strings(arrow_to_pandas(empty, _masked_ints(dtype))))
        return _apply_dtypes(meta, dtype, piece.path)
    if fmt == "json":
        sample = pd.DataFrame({c: jsonl.to_column([], dtype.get(c, "str"), piece.path, c) for c in columns})
    else:
        sample = _read_piece(piece, fmt, columns, csv_opts, dtype, _backend.CPU, nrows=META_SAMPLE_ROWS)
    return _backend.to_backend(sample.iloc[:0], be)


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


def _pieces(files: list[str], fmt: str, row_groups_per_partition: int | None,
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


def read_view(
    path_or_glob: str | os.PathLike | Sequence[str | os.PathLike],
    columns: Sequence[str] | None = None,
    format: str | None = None,
    *,
    sep: str | None = None,
    header: bool = True,
    names: Sequence[str] | None = None,
    dtype: dict[str, Any] | None = None,
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
            per core, see :func:`auto_partition_rows`); consecutive row groups are read
            together, a larger row group is split into row ranges.  CSV and JSON lines
            give a partition per file.  Eager reads read each file whole.

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
    csv_opts = _CsvOptions(sep, header, tuple(names) if names is not None else None, encoding, compression)
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
    csv_opts: _CsvOptions
    dtypes: dict[str, Any]  #: every partition's columns converted to these
    meta: FrameLike  #: the empty frame every partition looks like


def _plan_view(path_or_glob: str | os.PathLike | Sequence[str | os.PathLike], columns: Sequence[str] | None,
               format: str | None, csv_opts: _CsvOptions, dtype: dict[str, Any] | None,
               be: _backend.Backend) -> _ViewPlan:
    """The files, format, columns and dtypes of a view and its empty ``_meta`` frame, from
    footers and the first rows only: absent columns, files that disagree on schema, and a
    ``dtype=`` for an absent column are errors here, before any partition is read."""
    pattern = os.fspath(path_or_glob) if isinstance(path_or_glob, (str, os.PathLike)) else str(list(path_or_glob))
    files = expand_paths(path_or_glob)
    fmt = infer_format(files, format)
    plan = _json_plan(files, csv_opts) if fmt == "json" else None
    available = plan.keys if plan is not None else _check_schemas(files, fmt, csv_opts, columns)
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


def _given_dtypes(dtype: dict[str, Any] | None, available: list[str], pattern: str) -> dict[str, Any]:
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


def _read_eager(view: _ViewPlan, be: _backend.Backend) -> FrameLike:
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
    run of row groups, :func:`_pieces`), each read by :func:`_read_one` when computed."""
    pieces = _pieces(view.files, view.fmt, row_groups_per_partition, partition_rows)
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
