"""CSV files of a view: the options they are read with (:class:`CsvOptions`, also JSON
lines'), the separator guessed when none is given (:func:`sniff_sep`), the header line, and
one file read (:func:`read_csv_file`): on the host as text by pandas, converted by
:mod:`fbrapids.views.text_columns`; on the GPU by cudf, converted on the device after the
device checks, the host reader answering whatever they refuse.

Example:
    >>> import tempfile
    >>> from fbrapids.frames.backend import CPU
    >>> p = tempfile.mkdtemp() + "/v.csv"
    >>> _ = open(p, "w").write("id;q\\n18446744073709551615;a b\\n")
    >>> opts = CsvOptions(sep=None, header=True, names=None)
    >>> sep = sniff_sep(p, opts)
    >>> sep, csv_header(p, sep, opts)
    (';', ['id', 'q'])
    >>> read_csv_file(FilePiece(p), ["id"], opts, {}, CPU)["id"].dtype
    dtype('uint64')
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from fbrapids.errors import MissingFileError, SeparatorWarning, ViewError
from fbrapids.frames import backend as _backend
from fbrapids.frames.backend import EagerFrame
from fbrapids.views.dtype_spec import DtypeSpec
from fbrapids.views.paths import FilePiece, compression_of, data_suffix, open_binary
from fbrapids.views.text_columns import convert_text_column, text_to_dtypes_device

if TYPE_CHECKING:
    import cudf

log = logging.getLogger(__name__)

META_SAMPLE_ROWS = 10_000  #: CSV / JSON rows read to infer the dtypes of a view


@dataclass(frozen=True)
class CsvOptions:
    """How a view's text files are read: CSV's separator, header line and names; the
    encoding and compression of CSV and JSON-lines files alike."""

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


def _first_lines(path: str, opts: CsvOptions, n: int = 1) -> tuple[str, bool]:
    """The first ``n`` lines of a text file, and whether they are all of it."""
    try:
        with open_binary(path, opts.compression) as raw:
            with io.TextIOWrapper(raw, encoding=opts.text_encoding, errors="replace", newline="") as fh:
                lines = [fh.readline() for _ in range(n)]
                return "".join(lines), not fh.readline()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ViewError(f"{path}: cannot read it as {compression_of(path, opts.compression) or 'uncompressed'} "
                        f"text: {exc}") from None


def _first_line(path: str, opts: CsvOptions) -> str:
    return _first_lines(path, opts)[0]


SEP_CANDIDATES = (",", "\t", ";", "|")  #: the separators ``sep=None`` chooses from
_SNIFF_LINES = 20


def sniff_sep(path: str, opts: CsvOptions) -> str:
    """The separator of a CSV file read with ``sep=None``: tab for a ``.tsv`` file; else the
    first of ``SEP_CANDIDATES`` that splits each of the first lines (quotes respected)
    into the same number of fields, the most fields winning; ``","`` when none does.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/a.tsv", "w").write("id,x\\tq\\n1,2\\tz\\n")
        >>> _ = open(f"{d}/b.csv", "w").write('a;"b;c";d\\n1;2;3\\n')
        >>> sniff_sep(f"{d}/a.tsv", CsvOptions(None, True, None)), sniff_sep(f"{d}/b.csv", CsvOptions(None, True, None))
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


def csv_header(path: str, sep: str, opts: CsvOptions) -> list[str] | None:
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


def warn_one_column(path: str, csv_opts: CsvOptions, header: str) -> None:
    """A :class:`~fbrapids.errors.SeparatorWarning` when the given ``sep`` leaves the
    header one column that the guessed separator splits into several."""
    guess = sniff_sep(path, dataclasses.replace(csv_opts, sep=None))
    fields = next(csv.reader([header], delimiter=guess), [])
    if guess != csv_opts.sep and len(fields) > 1:
        warnings.warn(f"{path}: sep={csv_opts.sep!r} reads one column named {header[:60]!r}; {guess!r} would "
                      f"split it into {len(fields)} ({', '.join(fields[:4])}{', ...' if len(fields) > 4 else ''}): "
                      f"pass sep={guess!r}, or sep=None to guess", SeparatorWarning, stacklevel=2)


def read_csv_file(piece: FilePiece, columns: list[str], csv_opts: CsvOptions, dtype: dict[str, DtypeSpec],
                  be: _backend.Backend, nrows: int | None = None) -> EagerFrame:
    """One CSV file (``nrows``: only its first rows, on the host) as ``columns`` of ``dtype``
    (inferred where it names none); on the GPU backend read by cudf where it can be."""
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
        frame[col] = convert_text_column(frame[col], dtype.get(col), path, col)
    return _backend.to_backend(frame, be)


def _read_csv_text(path: str, sep: str, names: list[str] | None, csv_opts: CsvOptions,
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


def _read_csv_device(path: str, sep: str, names: list[str] | None, columns: list[str], csv_opts: CsvOptions,
                     dtype: dict[str, DtypeSpec], be: _backend.Backend) -> cudf.DataFrame | None:
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
    return text_to_dtypes_device(text, columns, dtype, path, be)


def _device_readable(path: str, csv_opts: CsvOptions) -> bool:
    """Whether cudf reads this text file as the host would: uncompressed UTF-8 (cudf infers
    compression from the suffix alone, and reads UTF-8 only)."""
    return compression_of(path, csv_opts.compression) is None and csv_opts.text_encoding == "utf-8-sig"
