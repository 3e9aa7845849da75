"""The demo's data cache (``~/.cache/fbrapids/data``, or ``$FBRAPIDS_DATA``): one folder per
``--rows`` / ``--seed``, bounded in size, oldest first out, and cleared on demand.

Only standard-library imports: the command line checks a ``--data-dir`` here before it
imports pandas (a folder of other data is refused in well under a second).

* :func:`data_root` / :func:`default_data_dir`: where the demo keeps its generated data.
* :func:`check_data_dir`: a folder the demo can never use (it holds other files, and not
  the four parquet files ``fbrapids gen`` writes) refused before any work.
* :func:`prune`: after each use of the default cache, demo folders (those holding the
  ``.fbrapids-demo-data`` marker) are removed, least recently used first, until the cache
  holds at most ``FBRAPIDS_DATA_CACHE_BYTES`` (default 2 GiB); the folder just used and any
  folder another run holds are kept.
* :func:`clear`: ``fbrapids cache --clear``: every demo folder no run holds.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for rows in (300, 400):
    ...     d = root / f"default-{rows}-seed0"; d.mkdir()
    ...     _ = (d / DEMO_MARK).write_text("{}"); _ = (d / "impressions.parquet").write_bytes(b"x" * 1000)
    >>> [p.name for p in prune(root, cap_bytes=1500, keep=root / "default-400-seed0")]
    ['default-300-seed0']
    >>> sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    ['default-400-seed0']
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

from fbrapids.errors import DataDirError, UsageError

log = logging.getLogger(__name__)

DEMO_MARK = ".fbrapids-demo-data"  #: the marker file of a folder the demo generated
FILES = ("impressions", "users", "ads", "basic")  #: the parquet files of a generated data set
CAP_ENV = "FBRAPIDS_DATA_CACHE_BYTES"
DEFAULT_CAP = 2 << 30


def data_root() -> Path:
    """The demo's data cache: ``$FBRAPIDS_DATA``, else ``~/.cache/fbrapids/data``."""
    return Path(os.environ.get("FBRAPIDS_DATA", Path.home() / ".cache" / "fbrapids" / "data"))


def default_data_dir(rows: int, seed: int) -> Path:
    """The cache folder of the data for ``rows`` / ``seed``.

    Example:
        >>> default_data_dir(1000, 0).name
        'default-1000-seed0'
    """
    return data_root() / f"default-{rows}-seed{seed}"


def cache_cap() -> int:
    """The cache's size bound, ``$FBRAPIDS_DATA_CACHE_BYTES`` (bytes; default 2 GiB).

    Example:
        >>> os.environ[CAP_ENV] = "lots"
        >>> cache_cap()
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: environment variable FBRAPIDS_DATA_CACHE_BYTES: 'lots' is not a number of bytes
        >>> del os.environ[CAP_ENV]
    """
    text = os.environ.get(CAP_ENV)
    if text is None:
        return DEFAULT_CAP
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"environment variable {CAP_ENV}: {text!r} is not a number of bytes") from None
    if value < 0:
        raise UsageError(f"environment variable {CAP_ENV}: {value} is negative")
    return value


def check_data_dir(out: Path, rows: int, seed: int) -> None:
    """A :class:`~fbrapids.errors.DataDirError` for a ``--data-dir`` the demo can never use:
    a non-empty folder neither the demo made (no marker) nor ``fbrapids gen`` filled (not
    all four parquet files).  Folders that may hold the asked-for data are left to
    :func:`fbrapids.datasets.synthetic.generate.ensure_dataset` (which reads their metadata).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "notes.txt").write_text("mine")
        >>> check_data_dir(d, 1000, 0)
        Traceback (most recent call last):
        ...
        fbrapids.errors.DataDirError: ... holds 1 entries (notes.txt), which the demo did not make; ...
    """
    if not out.is_dir() or (out / DEMO_MARK).exists():
        return
    entries = sorted(p.name for p in out.iterdir())
    if not entries or all((out / f"{n}.parquet").exists() for n in FILES):
        return
    raise DataDirError(f"{out} holds {len(entries)} entries ({', '.join(entries[:4])}"
                       f"{', ...' if len(entries) > 4 else ''}), which the demo did not make; it only generates "
                       "into an empty folder or one it made, and never overwrites other data: choose an empty "
                       f"--data-dir, or regenerate it yourself with `fbrapids gen --rows {rows} --seed {seed} "
                       f"--out {out}`")


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def demo_folders(root: Path) -> list[Path]:
    """The demo's folders in ``root`` (those holding its marker), least recently used first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / DEMO_MARK).exists()]
    return sorted(found, key=_last_used)


def _last_used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def touch(path: Path) -> None:
    """Mark a demo folder used now (its modification time orders :func:`prune`)."""
    with contextlib.suppress(OSError):
        os.utime(path)


@contextlib.contextmanager
def _unheld(folder: Path) -> Iterator[bool]:
    """Whether no run holds ``folder`` (its lock file, beside it, taken exclusively without
    waiting); held through the block so no run starts using it meanwhile."""
    lock = folder.parent / f".{folder.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _remove(folder: Path) -> bool:
    with _unheld(folder) as free:
        if not free:
            log.info("data cache: %s is in use, kept", folder)
            return False
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            (folder.parent / f".{folder.name}.lock").unlink()
        return not folder.exists()


def prune(root: Path | None = None, cap_bytes: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove demo folders from ``root`` (default :func:`data_root`), least recently used
    first, until the demo folders hold at most ``cap_bytes`` (default :func:`cache_cap`);
    ``keep`` and folders another run holds stay.  Returns the folders removed."""
    root = data_root() if root is None else Path(root)
    cap = cache_cap() if cap_bytes is None else cap_bytes
    folders = demo_folders(root)
    sizes = {f: folder_bytes(f) for f in folders}
    total = sum(sizes.values())
    removed: list[Path] = []
    for f in folders:
        if total <= cap:
            break
        if keep is not None and f.resolve() == Path(keep).resolve():
            continue
        if _remove(f):
            total -= sizes[f]
            removed.append(f)
            log.info("data cache over %d bytes: removed %s (%d bytes, least recently used)", cap, f, sizes[f])
    return removed


def clear(root: Path | None = None) -> tuple[list[Path], int]:
    """``fbrapids cache --clear``: remove every demo folder of ``root`` that no run holds;
    the folders removed and their bytes."""
    root = data_root() if root is None else Path(root)
    removed, freed = [], 0
    for f in demo_folders(root):
        size = folder_bytes(f)
        if _remove(f):
            removed.append(f)
            freed += size
    return removed, freed
