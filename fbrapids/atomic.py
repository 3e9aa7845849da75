"""Crash-safe file writes: write under a temporary name, flush, fsync, rename, fsync the dir.

A process killed at any point leaves either the previous file or the complete new one,
never a torn one.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(d / "x.bin", [b"ab", b"c"]).read_bytes()
    b'abc'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that renames inside it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes]) -> Path:
    """Write ``chunks`` to ``path`` via ``path.tmp``: write, flush, fsync, rename, fsync the dir.

    Example:
        >>> import tempfile, pathlib
        >>> p = write_atomic(pathlib.Path(tempfile.mkdtemp()) / "a.txt", [b"hello"])
        >>> p.read_text(), p.with_name("a.txt.tmp").exists()
        ('hello', False)
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path
