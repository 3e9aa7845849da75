"""A parquet footer checked in Python before pyarrow reads it, and a file's pin.

pyarrow trusts a file's footer (its thrift ``FileMetaData``): some corrupt footers make its
C++ code throw where no exception may pass, and the process aborts (SIGABRT, exit 134,
no file named).  One flipped bit in a column chunk's ``size_statistics`` does it, on the
first ``metadata.row_group(g).column(c)``.  :func:`check_footer` decodes the footer with a
small thrift compact-protocol reader of its own and checks what pyarrow would otherwise
trust: the magic bytes, the footer length, that every structure decodes within its bytes,
the schema tree, each column chunk's type, path, offsets and sizes against the file, the
level histograms against the schema's levels, and the statistics' value lengths.  A
footer that fails is a :class:`~fbrapids.errors.ViewError` naming the file and what is
wrong, before pyarrow sees it.

:func:`pin_file` records what a file is at planning time (size, ``mtime_ns`` and, for
parquet, the footer's sha256); :func:`check_pin` says, naming the file, when it is no
longer that file (replaced, rewritten, truncated) while a run reads it.

Example:
    >>> import tempfile, pandas as pd
    >>> path = tempfile.mkdtemp() + "/v.parquet"
    >>> pd.DataFrame({"a": [1, 2, 3]}).to_parquet(path)
    >>> check_footer(path).num_rows
    3
    >>> data = bytearray(open(path, "rb").read()); data[-9] ^= 0xFF  # the footer's last byte
    >>> _ = open(path, "wb").write(bytes(data))
    >>> check_footer(path)
    Traceback (most recent call last):
    ...
    fbrapids.errors.ViewError: ... is not a readable parquet file (corrupt footer): ...
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any

from fbrapids.errors import InputChangedError, MissingFileError, ViewError

MAGIC = b"PAR1"
MAX_DEPTH = 64  #: thrift structures nested deeper than this are refused
# physical types: BOOLEAN INT32 INT64 INT96 FLOAT DOUBLE BYTE_ARRAY FIXED_LEN_BYTE_ARRAY
_VALUE_BYTES = {0: 1, 1: 4, 2: 8, 3: 12, 4: 4, 5: 8}
_BYTE_ARRAY, _FIXED = 6, 7


class _Corrupt(Exception):
    """A footer that does not decode or does not hold together (the message says where)."""


class _Reader:
    """Thrift compact protocol, decoded into ``{field id: value}`` dicts (lists as lists)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Corrupt("it ends inside a structure")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise _Corrupt("a varint is longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Corrupt(f"a value of {n} bytes runs past its end")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def value(self, kind: int, depth: int) -> Any:
        if kind in (1, 2):  # bool inside a list: one byte
            return self.byte() == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            return struct.unpack("<d", self.take(8))[0]
        if kind == 8:
            return self.take(self.varint())
        if kind in (9, 10):
            return self.sequence(depth)
        if kind == 11:
            n = self.varint()
            if n > len(self.data) - self.pos:
                raise _Corrupt(f"a map of {n} entries is longer than the footer")
            if not n:
                return {}
            types = self.byte()
            return {self.value(types >> 4, depth + 1): self.value(types & 0xF, depth + 1) for _ in range(n)}
        if kind == 12:
            return self.struct(depth + 1)
        raise _Corrupt(f"unknown thrift type {kind}")

    def sequence(self, depth: int) -> list[Any]:
        head = self.byte()
        n, kind = head >> 4, head & 0xF
        if n == 15:
            n = self.varint()
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise _Corrupt(f"a list of {n} elements is longer than the footer")
        return [self.value(kind, depth + 1) for _ in range(n)]

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > MAX_DEPTH:
            raise _Corrupt(f"structures nest deeper than {MAX_DEPTH}")
        out: dict[int, Any] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            kind, delta = head & 0xF, head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            out[fid] = True if kind == 1 else False if kind == 2 else self.value(kind, depth)


@dataclass(frozen=True)
class Leaf:
    """A column of the schema: its path, physical type, type length and max levels."""

    path: tuple[str, ...]
    type: int
    type_length: int | None
    max_def: int
    max_rep: int


@dataclass(frozen=True)
class Footer:
    """What :func:`check_footer` decoded: rows, row groups, the leaf columns, the footer's
    offset and length in the file, and its sha256."""

    num_rows: int
    row_groups: int
    leaves: tuple[Leaf, ...]
    start: int
    length: int
    digest: str


def _name(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else "?"


def _leaves(schema: list[Any]) -> list[Leaf]:
    """The leaf columns of a flattened schema tree (element 0 is the root)."""
    if not schema or not all(isinstance(e, dict) for e in schema):
        raise _Corrupt("its schema is empty")
    leaves: list[Leaf] = []
    pos = 1

    def walk(count: int, path: tuple[str, ...], d: int, r: int) -> None:
        nonlocal pos
        for _ in range(count):
            if pos >= len(schema):
                raise _Corrupt("its schema tree has fewer elements than its num_children say")
            e = schema[pos]
            pos += 1
            rep = e.get(3, 0)
            if rep not in (0, 1, 2):
                raise _Corrupt(f"schema element {_name(e.get(4))!r} has repetition type {rep}")
            dd, rr = d + (rep != 0), r + (rep == 2)
            children = e.get(5, 0)
            here = (*path, _name(e.get(4)))
            if children:
                if not 0 < children <= len(schema) or len(path) > MAX_DEPTH:
                    raise _Corrupt(f"schema element {here[-1]!r} has {children} children")
                walk(children, here, dd, rr)
            else:
                kind = e.get(1)
                if kind not in range(8):
                    raise _Corrupt(f"column {'.'.join(here)!r} has physical type {kind}")
                leaves.append(Leaf(here, kind, e.get(2), dd, rr))

    root_children = schema[0].get(5, 0)
    if not isinstance(root_children, int) or root_children < 0:
        raise _Corrupt("its schema root has no children count")
    walk(root_children, (), 0, 0)
    if pos != len(schema):
        raise _Corrupt(f"its schema lists {len(schema)} elements but its tree holds {pos}")
    return leaves


def _check_stats(stats: Any, leaf: Leaf, where: str) -> None:
    if not isinstance(stats, dict):
        raise _Corrupt(f"{where}: its statistics do not decode")
    width = _VALUE_BYTES.get(leaf.type) if leaf.type != _FIXED else leaf.type_length
    for fid in (1, 2, 5, 6):  # max, min, max_value, min_value
        v = stats.get(fid)
        if v is None:
            continue
        if not isinstance(v, bytes):
            raise _Corrupt(f"{where}: a statistics value is not binary")
        if width is not None and len(v) != width and leaf.type != _BYTE_ARRAY:
            raise _Corrupt(f"{where}: a statistics value holds {len(v)} bytes, its type {width}")
    for fid in (3, 4):  # null_count, distinct_count
        count = stats.get(fid, 0)
        if not isinstance(count, int) or count < 0:
            raise _Corrupt(f"{where}: a negative or non-integer statistics count")


def _check_chunk(chunk: Any, leaf: Leaf, body_end: int, where: str) -> None:
    if not isinstance(chunk, dict):
        raise _Corrupt(f"{where} does not decode")
    meta = chunk.get(3)
    if not isinstance(meta, dict):
        raise _Corrupt(f"{where} has no column metadata (encrypted or corrupt)")
    if meta.get(1) != leaf.type:
        raise _Corrupt(f"{where} says physical type {meta.get(1)}, its schema {leaf.type}")
    path = tuple(_name(p) for p in meta.get(3) or [])
    if path != leaf.path:
        raise _Corrupt(f"{where} says path {'.'.join(path)!r}")
    for fid, what in ((5, "num_values"), (6, "uncompressed size"), (7, "compressed size")):
        v = meta.get(fid)
        if not isinstance(v, int) or v < 0:
            raise _Corrupt(f"{where} has {what} {v!r}")
    given = [meta.get(9)] + ([meta[11]] if 11 in meta else [])
    if meta[5] == 0:  # an empty chunk (a row group of no rows) may point nowhere
        given = []
    offsets: list[int] = []
    for off in given:
        if not isinstance(off, int) or not len(MAGIC) <= off < body_end:
            raise _Corrupt(f"{where} has a page offset {off!r} outside the file's data (4 to {body_end})")
        offsets.append(off)
    if offsets and min(offsets) + meta[7] > body_end:
        raise _Corrupt(f"{where}'s pages ({meta[7]} bytes from offset {min(offsets)}) run into the footer")
    if not 0 <= meta.get(4, 0) <= 7:
        raise _Corrupt(f"{where} has compression codec {meta.get(4)}")
    if 12 in meta:
        _check_stats(meta[12], leaf, where)
    sizes = meta.get(16)
    if sizes is not None:
        if not isinstance(sizes, dict):
            raise _Corrupt(f"{where}: its size statistics do not decode")
        for fid, level, what in ((2, leaf.max_rep, "repetition"), (3, leaf.max_def, "definition")):
            hist = sizes.get(fid)
            if hist is not None and (not isinstance(hist, list) or (hist and len(hist) != level + 1)
                                     or any(not isinstance(h, int) or h < 0 for h in hist)):
                raise _Corrupt(f"{where}: its {what} level histogram has "
                               f"{len(hist) if isinstance(hist, list) else '?'} entries, its levels need {level + 1}")


def _check_metadata(meta: dict[int, Any], body_end: int) -> tuple[int, int, list[Leaf]]:
    leaves = _leaves(meta.get(2) or [])
    num_rows = meta.get(3)
    if not isinstance(num_rows, int) or num_rows < 0:
        raise _Corrupt(f"it says {num_rows!r} rows")
    groups = meta.get(4) or []
    if not isinstance(groups, list):
        raise _Corrupt("its row groups do not decode")
    total = 0
    for g, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get(3), int) or group[3] < 0:
            raise _Corrupt(f"row group {g} does not decode or has a negative row count")
        total += group[3]
        chunks = group.get(1) or []
        if len(chunks) != len(leaves):
            raise _Corrupt(f"row group {g} has {len(chunks)} column chunks for {len(leaves)} columns")
        for leaf, chunk in zip(leaves, chunks):
            _check_chunk(chunk, leaf, body_end, f"row group {g} column {'.'.join(leaf.path)!r}")
    if total != num_rows:
        raise _Corrupt(f"its row groups hold {total} rows but it says {num_rows}")
    for kv in meta.get(5) or []:
        if not isinstance(kv, dict) or not isinstance(kv.get(1), bytes):
            raise _Corrupt("its key-value metadata does not decode")
    return num_rows, len(groups), leaves


def read_footer_bytes(path: str | os.PathLike, size: int | None = None) -> tuple[bytes, int]:
    """The raw footer of ``path`` and its offset (checks the magic bytes and its length)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size if size is None else size
            if size < 12:
                raise _Corrupt(f"it is {size} bytes, shorter than any parquet file")
            f.seek(size - 8)
            tail = f.read(8)
            if len(tail) != 8 or tail[4:] != MAGIC:
                raise _Corrupt("it does not end with the parquet magic bytes PAR1 (truncated?)")
            length = struct.unpack("<I", tail[:4])[0]
            start = size - 8 - length
            if length < 2 or start < len(MAGIC):
                raise _Corrupt(f"its footer length {length} does not fit in its {size} bytes")
            f.seek(0)
            if f.read(4) != MAGIC:
                raise _Corrupt("it does not start with the parquet magic bytes PAR1")
            f.seek(start)
            raw = f.read(length)
            if len(raw) != length:
                raise _Corrupt("it was truncated while being read")
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    except _Corrupt as exc:
        raise ViewError(f"{path} is not a readable parquet file (corrupt footer): {exc}") from None
    return raw, start


_CHECKED: dict[tuple[str, int], Footer] = {}  # footers already decoded, by digest and offset
_CHECKED_MAX = 4096


def check_footer(path: str | os.PathLike) -> Footer:
    """Decode and check the footer of the parquet file ``path`` (module doc); a
    :class:`~fbrapids.errors.ViewError` naming the file and the fault when it does not hold.
    A footer of the same bytes at the same offset is decoded once per process."""
    raw, start = read_footer_bytes(path)
    digest = hashlib.sha256(raw).hexdigest()
    known = _CHECKED.get((digest, start))
    if known is not None:
        return known
    try:
        reader = _Reader(raw)
        meta = reader.struct()
        if reader.pos != len(raw):
            raise _Corrupt(f"its metadata ends {len(raw) - reader.pos} bytes before its stated length")
        rows, groups, leaves = _check_metadata(meta, start)
    except _Corrupt as exc:
        raise ViewError(f"{path} is not a readable parquet file (corrupt footer): {exc}") from None
    except (TypeError, AttributeError, KeyError, ValueError, RecursionError) as exc:
        # a field of another thrift type than the format's (a flipped type nibble)
        raise ViewError(f"{path} is not a readable parquet file (corrupt footer): a field does not decode as its type "
                        f"({type(exc).__name__})") from None
    footer = Footer(rows, groups, tuple(leaves), start, len(raw), digest)
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[(digest, start)] = footer
    return footer


@dataclass(frozen=True)
class FilePin:
    """A file as planned: its size, ``mtime_ns`` and (parquet) footer sha256."""

    path: str
    size: int
    mtime_ns: int
    footer_sha256: str | None = None


def pin_file(path: str | os.PathLike, parquet: bool = False) -> FilePin:
    """What ``path`` is now (for parquet with its footer checked: :func:`check_footer`).

    Example:
        >>> import tempfile
        >>> p = tempfile.mktemp(); _ = open(p, "w").write("a\\n1\\n")
        >>> pin_file(p).size
        4
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {path}") from None
    digest = check_footer(path).digest if parquet else None
    after = os.stat(path)
    if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        raise InputChangedError(f"{path} changed while it was being planned (size or modification time); "
                                "inputs must not be written while a run reads them")
    return FilePin(os.fspath(path), st.st_size, st.st_mtime_ns, digest)


def check_pin(pin: FilePin) -> None:
    """Raise :class:`~fbrapids.errors.InputChangedError` naming the file when it is no
    longer what :func:`pin_file` recorded (its size, modification time or footer).

    Example:
        >>> import tempfile
        >>> p = tempfile.mktemp(); _ = open(p, "w").write("a\\n1\\n")
        >>> pin = pin_file(p); check_pin(pin)
        >>> _ = open(p, "a").write("2\\n"); check_pin(pin)
        Traceback (most recent call last):
        ...
        fbrapids.errors.InputChangedError: ... changed since the run planned it ...
    """
    try:
        st = os.stat(pin.path)
    except FileNotFoundError:
        raise MissingFileError(f"view file vanished before it could be read: {pin.path}") from None
    what = []
    if st.st_size != pin.size:
        what.append(f"size {pin.size:,} -> {st.st_size:,} bytes")
    if st.st_mtime_ns != pin.mtime_ns:
        what.append("modification time")
    if not what and pin.footer_sha256 is not None:
        raw, _ = read_footer_bytes(pin.path, st.st_size)
        if hashlib.sha256(raw).hexdigest() != pin.footer_sha256:
            what.append("parquet footer")
    if what:
        raise InputChangedError(f"{pin.path} changed since the run planned it ({', '.join(what)}): a file replaced "
                                "or rewritten under a run would mix two versions of the data; rerun on inputs "
                                "that stay as they are for the run's duration")
