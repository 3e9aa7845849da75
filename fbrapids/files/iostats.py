"""Bytes a process and its child processes actually wrote and read (``/proc/<pid>/io``),
and the bytes a directory tree holds on disk: measured figures, never set ones.

``write_bytes`` is what the kernel counts as sent to the storage layer (at page-dirtying
time, so a file written and deleted before write-back counts too); ``rchar`` / ``wchar``
count every byte passed to read / write calls (files, pipes and sockets alike).  Child
processes (a dask ``LocalCluster``'s workers) are included while they are alive at both
ends of the measurement; one that exits in between is lost (``/proc`` forgets it).  On a
system without ``/proc/self/io`` the counter reports ``available = False`` and zeros.

Example:
    >>> import os, tempfile
    >>> with IOCounter() as io:
    ...     with open(os.path.join(tempfile.mkdtemp(), "x.bin"), "wb") as f:
    ...         _ = f.write(b"\\1" * 1_000_000)
    >>> (io.write_bytes >= 1_000_000 and io.wchar >= 1_000_000) or not io.available
    True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

FIELDS = ("rchar", "wchar", "read_bytes", "write_bytes")


def _read_io(pid: int | str) -> dict[str, int] | None:
    try:
        with open(f"/proc/{pid}/io") as fh:
            pairs = (line.split(":", 1) for line in fh if ":" in line)
            return {k.strip(): int(v) for k, v in pairs if k.strip() in FIELDS}
    except (OSError, ValueError):
        return None


def _descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def snapshot(children: bool = True) -> dict[int, dict[str, int]]:
    """``{pid: counters}`` of this process (and its live descendants)."""
    me = os.getpid()
    pids = [me] + (_descendants(me) if children else [])
    snap = {}
    for pid in pids:
        io = _read_io(pid)
        if io is not None:
            snap[pid] = io
    return snap


@dataclass
class IOCounter:
    """Bytes read / written between ``__enter__`` and ``__exit__`` by this process and
    (``children=True``) its child processes."""

    children: bool = True
    available: bool = False
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0))
    _start: dict[int, dict[str, int]] = field(default_factory=dict, repr=False)

    def __enter__(self) -> "IOCounter":
        self._start = snapshot(self.children)
        self.available = os.getpid() in self._start
        return self

    def __exit__(self, *exc: object) -> None:
        end = snapshot(self.children)
        for pid, io in end.items():
            before = self._start.get(pid, dict.fromkeys(FIELDS, 0))
            for k in FIELDS:
                self.totals[k] += max(0, io[k] - before.get(k, 0))

    @property
    def write_bytes(self) -> int:
        return self.totals["write_bytes"]

    @property
    def read_bytes(self) -> int:
        return self.totals["read_bytes"]

    @property
    def wchar(self) -> int:
        return self.totals["wchar"]

    @property
    def rchar(self) -> int:
        return self.totals["rchar"]


def tree_bytes(root: str | os.PathLike) -> dict[str, int]:
    """Bytes on disk (allocated blocks) under ``root``, per top-level entry.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a").mkdir(); _ = (d / "a" / "f").write_bytes(b"x" * 5000)
        >>> tree_bytes(d)["a"] >= 5000, tree_bytes(d / "missing")
        (True, {})
    """
    root = Path(root)
    if not root.is_dir():
        return {}
    out: dict[str, int] = {}
    for top in sorted(root.iterdir()):
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        out[top.name] = sum(f.stat().st_blocks * 512 for f in files)
    return out
