"""The files of a view: a path, directory, glob or list of them expanded
(:func:`expand_paths`), the compression and format their names say, a file opened as its
decompressed bytes, and :class:`FilePiece`, the part of a file one partition reads.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> for name in ("b.csv.gz", "a.csv", ".hidden.csv", "notes.md"):
    ...     _ = open(os.path.join(d, name), "w").write("")
    >>> files = expand_paths(d)
    >>> [os.path.basename(f) for f in files], infer_format(files, None), compression_of(files[1], None)
    (['a.csv', 'b.csv.gz'], 'csv', 'gzip')
"""

from __future__ import annotations

import glob as _glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

import pyarrow as pa

from fbrapids.errors import ViewError
from fbrapids.views.parquet_footer import FilePin

FORMATS = ("parquet", "csv", "json")
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


def open_binary(path: str, compression: str | None) -> pa.NativeFile | BinaryIO:
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
    known = {k for k in kinds if k is not None}
    if None in kinds or len(known) != 1:
        raise ViewError(f"cannot infer the format of {list(files)[:3]}...; pass format= one of {', '.join(FORMATS)}")
    return known.pop()


@dataclass(frozen=True)
class FilePiece:
    """One partition: a file, for parquet the row groups of it to read, and (for a file
    with fewer row groups than the partitions wanted) the rows of those groups to keep."""

    path: str
    row_groups: tuple[int, ...] | None = None
    row_slice: tuple[int, int] | None = None
    pin: FilePin | None = None  #: the file as planned: a read fails, naming it, when it changed since
