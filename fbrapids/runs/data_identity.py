"""A cheap fingerprint of a folder of parquet files: which data a run trained on.

A checkpoint records it (:mod:`fbrapids.trainers.run_identity`), so that resuming on other
data (regenerated for another seed or size, or replaced) is refused instead of continuing
silently on another dataset.  Each ``*.parquet`` file under the folder enters by its
relative path, its size and the sha256 of its footer (schema, row counts and every row
group's statistics and offsets): a few KiB read per file, whatever the data's size.  File
modification times do not enter it (a copied folder keeps its fingerprint), nor do hidden
files and folders (a generator's temporary ones).

Example:
    >>> import tempfile, pathlib, pandas as pd
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> pd.DataFrame({"a": [1, 2]}).to_parquet(d / "x.parquet")
    >>> a = data_fingerprint(d)
    >>> pd.DataFrame({"a": [1, 3]}).to_parquet(d / "x.parquet")
    >>> a == data_fingerprint(d), len(a)
    (False, 64)
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Sequence

__all__ = ["footer_digest", "data_fingerprint"]

#: a file without a readable parquet footer enters by this many bytes of its end
_TAIL_BYTES = 1 << 16


def footer_digest(path: str | os.PathLike) -> str:
    """sha256 of a parquet file's footer (the metadata, its length and the magic bytes, as
    :func:`fbrapids.views.parquet_footer.read_footer_bytes` finds it), or of its last 64 KiB
    when it does not end like a parquet file.

    Example:
        >>> import tempfile, pathlib, pandas as pd
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.parquet"; pd.DataFrame({"a": [1]}).to_parquet(p)
        >>> len(footer_digest(p))
        64
    """
    from fbrapids.errors import ViewError
    from fbrapids.views.parquet_footer import MAGIC, read_footer_bytes

    try:
        raw, _ = read_footer_bytes(path)
        return hashlib.sha256(raw + struct.pack("<I", len(raw)) + MAGIC).hexdigest()
    except ViewError:  # not a readable parquet file: its tail stands for it
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(size - min(size, _TAIL_BYTES))
            return hashlib.sha256(f.read()).hexdigest()


def data_fingerprint(folder: str | os.PathLike) -> str:
    """sha256 over every ``*.parquet`` file under ``folder`` (sorted by relative path): its
    path, size and :func:`footer_digest`; a single file may be given too."""
    root = Path(folder)
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*.parquet")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    h = hashlib.sha256()
    for p in files:
        rel = p.name if p == root else p.relative_to(root).as_posix()
        h.update(f"{rel}\0{p.stat().st_size}\0{footer_digest(p)}\0".encode())
    return h.hexdigest()


def files_fingerprint(files: "Sequence[str | os.PathLike]") -> str:
    """sha256 over ``files`` (in the order given): each one's path, size and content digest
    (a parquet file's :func:`footer_digest`; another file's sha256 of its first 64 MiB);
    what a checkpoint of a declared workload records as its data.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.csv"; _ = p.write_text("x\\n1\\n")
        >>> a = files_fingerprint([p]); _ = p.write_text("x\\n2\\n")
        >>> a == files_fingerprint([p])
        False
    """
    h = hashlib.sha256()
    for f in files:
        p = Path(f)
        if p.suffix == ".parquet":
            digest = footer_digest(p)
        else:
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read(1 << 26)).hexdigest()
        h.update(f"{p.resolve()}\0{p.stat().st_size}\0{digest}\0".encode())
    return h.hexdigest()
