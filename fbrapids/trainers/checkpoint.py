"""Crash-safe checkpoint files and directories.

Every file is written under a temporary name, fsynced, then renamed into place.  A
checkpoint is a directory ``step-XXXXXXXXXX`` built as ``.tmp-step-...`` and renamed when
complete; the ``latest`` file naming the newest complete checkpoint is swapped in last
(written to ``latest.tmp``, fsynced, renamed).  A process killed at any point leaves the
previous checkpoint, and the pointer to it, intact.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with checkpoint_dir(root, step=3) as d:
    ...     _ = write_atomic(d / "x.bin", [b"abc"])
    >>> latest_checkpoint(root).name, (latest_checkpoint(root) / "x.bin").read_bytes()
    ('step-0000000003', b'abc')
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from fbrapids.manifest import resolve_inside

LATEST = "latest"


def fsync_dir(path: Path) -> None:
    """fsync a directory, so that renames inside it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes]) -> Path:
    """Write ``chunks`` to ``path`` via ``path.tmp``: write, flush, fsync, rename, fsync the dir."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def step_name(step: int) -> str:
    return f"step-{step:010d}"


@contextlib.contextmanager
def checkpoint_dir(root: str | os.PathLike, step: int) -> Iterator[Path]:
    """Yield a temporary directory to fill; on success rename it to ``step-N`` and point
    ``latest`` at it.  On an exception the temporary directory is removed."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_name(step)
    tmp = root / f".tmp-{step_name(step)}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(tmp)
    if final.exists():  # re-checkpointing the same step: replace it
        old = root / f".old-{step_name(step)}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(root)
    write_atomic(root / LATEST, [final.name.encode()])


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under ``root`` (from the ``latest`` pointer), or None.

    The pointer must name a directory inside ``root`` (an absolute or ``../`` path, or a
    symbolic link leading out, is an :class:`~fbrapids.errors.UnsafeFileError`)."""
    root = Path(root)
    ptr = root / LATEST
    if not ptr.exists():
        return None
    path = resolve_inside(root, ptr.read_text().strip(), what=f"{ptr}: checkpoint")
    if not path.is_dir():
        raise FileNotFoundError(f"{ptr} names {path.name}, which does not exist")
    return path


def clean_partial(root: str | os.PathLike) -> list[Path]:
    """Remove temporary directories left by killed writers; returns what was removed."""
    root = Path(root)
    gone = [p for p in root.glob(".tmp-step-*") if p.is_dir()]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def prune(root: str | os.PathLike, keep: int) -> list[Path]:
    """Remove complete checkpoints older than the newest ``keep`` (never the ``latest`` one).

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> for s in (1, 2, 3):
        ...     with checkpoint_dir(root, s):
        ...         pass
        >>> [p.name for p in prune(root, keep=1)], latest_checkpoint(root).name
        (['step-0000000001', 'step-0000000002'], 'step-0000000003')
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root = Path(root)
    latest = latest_checkpoint(root)
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    gone = [p for p in steps[:-keep] if latest is None or p.name != latest.name]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone
