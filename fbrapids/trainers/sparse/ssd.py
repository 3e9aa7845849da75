"""The SSD tier: every admitted row in one file, ``rows.f32`` (row g at byte
``g * width * 4``), copied in and out through a memory map in C.

A full disk, a file over the process's size limit, or a file truncated by another process
is a :class:`~fbrapids.errors.TierFileError` naming the path, never SIGBUS:

* space is reserved up front with ``posix_fallocate`` whenever the file grows (doubling),
  before the map covers it, so a store into the map cannot fail for lack of space;
  ENOSPC / EFBIG there is the error;
* the file's size is checked against the rows reserved when it is opened and before
  every read and write, and a truncation racing with a copy is caught in C (the copy's
  SIGBUS becomes an error code, :class:`~fbrapids.trainers.sparse.hashmap.RowMap`).

The folder belongs to one process: :class:`SsdTier` holds an exclusive ``fcntl.flock`` on
``<folder>/.lock`` (dropped by the kernel when the process dies, however it dies), taken
before the file is opened, so a second process given the same folder gets an
:class:`~fbrapids.errors.SsdDirLockedError` naming it and its holder, instead of zeroing the
live file.  Separate folders (one per table, one per rank) never conflict.

Rows read back are checked: the file is cut in pages of :attr:`SsdTier.page_rows` rows
(about :data:`PAGE_BYTES` bytes), and the tier keeps one 64-bit checksum per page in memory
(8 bytes per ``PAGE_BYTES`` of file), updated as rows are written (the checksum is a sum of
per-row hashes, so a write updates it from the old and new rows alone).  Every read checks
the pages it touches; bytes written into the file from outside (plausible floats included)
are a :class:`~fbrapids.errors.TierFileError` naming the file and the page, never trained on
or checkpointed.  ``pages_checked`` counts the checks; ``FBRAPIDS_VERIFY=0`` turns them off
(see :func:`fbrapids.files.manifest.verification_enabled`).

Example:
    >>> import tempfile, numpy as np
    >>> f = SsdTier(tempfile.mkdtemp(), width=3)
    >>> f.write(np.array([5]), np.ones((1, 3), np.float32))
    >>> f.read(np.array([5])).tolist()
    [[1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import errno
import fcntl
import gc
import io
import json
import logging
import os
import socket
from pathlib import Path

import numpy as np

from fbrapids.errors import SsdDirLockedError, TierFileError
from fbrapids.files.atomic import fsync, write_atomic
from fbrapids.files.manifest import verification_enabled
from fbrapids.trainers.sparse.hashmap import RowMap, row_hashes
from fbrapids.trainers.sparse.tier import TierStats

log = logging.getLogger(__name__)

#: the SSD file's checksum pages hold about this many bytes (a whole number of rows, at least one)
PAGE_BYTES = 1024
LOCK_NAME = ".lock"


def _lock_folder(directory: Path) -> int:
    """An exclusive flock on ``directory/.lock`` (its fd), recording this PID; a
    :class:`~fbrapids.errors.SsdDirLockedError` naming the folder and the holder when
    another process holds it."""
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for attempt in (0, 1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if attempt == 0:  # a tier of this process that is unreachable but not yet collected
                    gc.collect()
                    continue
                try:
                    who = json.loads(os.pread(fd, 4096, 0) or b"{}")
                except ValueError:
                    who = {}
                holder = ("another store of this process" if who.get("pid") == os.getpid() else
                          f"another process (PID {who.get('pid', '?')} on host {who.get('host', '?')} holds {path})")
                raise SsdDirLockedError(
                    f"the SSD table folder {directory} is in use by {holder}: two stores sharing it would overwrite "
                    "each other's rows; give each process (each rank) and each table its own ssd_dir",
                    str(directory), pid=who.get("pid")) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SsdTier:
    """Rows by global row number in ``directory / "rows.f32"``; a new tier starts empty."""

    def __init__(self, directory: str | os.PathLike, width: int, capacity: int = 1 << 12) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "rows.f32"
        self.width = int(width)
        self.row_bytes = self.width * 4
        self.capacity = 0
        self.map: RowMap | None = None
        self.stats = TierStats()
        self.fd: int | None = None
        self.lock_fd: int | None = _lock_folder(self.dir)  # before the file is opened (and truncated)
        self.page_rows = max(1, PAGE_BYTES // self.row_bytes)
        self.page_sums = np.zeros(0, dtype=np.uint64)
        self.checked = verification_enabled()
        self.pages_checked = 0
        self.written_end = 0  # 1 + the highest row ever written: the rows from there on are zeros
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            self.close()
            raise self._error(f"cannot open the SSD tier file {self.path}: {exc.strerror}", exc.errno) from exc
        self.ensure(capacity)

    def _error(self, message: str, code: int | None = None) -> TierFileError:
        return TierFileError(message, str(self.path), code)

    def _fd(self) -> int:
        if self.fd is None:
            raise self._error(f"the SSD tier file {self.path} is closed")
        return self.fd

    def _map(self) -> RowMap:
        if self.map is None:
            raise self._error(f"the SSD tier file {self.path} is closed")
        return self.map

    def check_size(self) -> None:
        """Raise if the file is shorter than the rows reserved in it (truncated by someone else)."""
        size = os.fstat(self._fd()).st_size
        want = self.capacity * self.row_bytes
        if size < want:
            raise self._error(f"the SSD tier file {self.path} is {size} bytes but holds {self.capacity} reserved "
                              f"rows ({want} bytes): it was truncated by something else; its rows are lost")

    def ensure(self, rows: int) -> None:
        """Reserve space (doubling) so that the file holds at least ``rows`` rows."""
        if rows <= self.capacity:
            return
        cap = max(int(rows), 2 * self.capacity, 1 << 12)
        cap = -(-cap // self.page_rows) * self.page_rows  # whole checksum pages
        self.check_size()
        fd = self._fd()
        try:
            os.posix_fallocate(fd, 0, cap * self.row_bytes)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
                log.debug("posix_fallocate unsupported on %s; growing with ftruncate", self.path)
                os.ftruncate(fd, cap * self.row_bytes)
            else:
                raise self._error(
                    f"cannot grow the SSD tier file {self.path} to {cap} rows ({cap * self.row_bytes} bytes): "
                    f"{exc.strerror} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)}); free space on that disk, "
                    "or give StoreConfig a larger host tier or another ssd_dir", exc.errno) from exc
        if self.map is not None:
            self.map.close()
        self.map = RowMap(fd, cap * self.row_bytes, str(self.path))  # a failure: TierFileError naming the path
        self.capacity = cap
        # the new rows are zeros (fallocate / ftruncate), whose hash is 0
        self.page_sums = np.concatenate([self.page_sums, np.zeros(cap // self.page_rows - len(self.page_sums),
                                                                  dtype=np.uint64)])
        self.check_size()

    def _truncated(self, row: int) -> TierFileError:
        return self._error(f"the SSD tier file {self.path} ends before row {row}: it was truncated by something "
                           "else; its rows are lost")

    def _copy(self, g: np.ndarray, buf: np.ndarray, write: bool = False) -> None:
        rc = self._map().copy(g, self.row_bytes, buf, write=write)
        if rc != 0:
            self._raise_copy(rc, g, write)

    def _raise_copy(self, rc: int, g: np.ndarray, write: bool) -> None:
        if rc > 0:
            raise self._truncated(int(g[rc - 1]))
        raise self._error(f"{'writing' if write else 'reading'} {len(g)} rows "
                          f"{'to' if write else 'of'} the SSD tier file {self.path}: {os.strerror(-rc)}", -rc)

    def _changed(self, p: int, n_bad: int, n_pages: int) -> TierFileError:
        first, last = p * self.page_rows, (p + 1) * self.page_rows - 1
        return self._error(f"the SSD tier file {self.path} was changed from outside this process: page {p} (rows "
                           f"{first}..{last}, bytes {first * self.row_bytes}..{(last + 1) * self.row_bytes - 1}) "
                           f"does not match its checksum ({n_bad} of {n_pages} pages read differ); its "
                           "rows cannot be trusted")

    def _pages_of(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pages holding rows ``g`` (sorted, unique) and all their rows' numbers."""
        pages = g // self.page_rows
        pages = (pages[np.r_[True, pages[1:] != pages[:-1]]] if bool((pages[1:] >= pages[:-1]).all())
                 else np.unique(pages))  # sorted reads (the usual case) need no sort
        rows = (pages[:, None] * self.page_rows + np.arange(self.page_rows, dtype=np.int64)).reshape(-1)
        return pages, rows

    def read(self, g: np.ndarray) -> np.ndarray:
        """Rows ``g`` (int64, ascending for sequential reads) ``[len(g), width]``; the pages
        holding them are checked against their checksums first."""
        g = np.asarray(g, dtype=np.int64)
        out = np.empty((len(g), self.width), dtype=np.float32)
        if len(g) == 0:
            return out
        self.ensure(int(g.max()) + 1)
        self.check_size()
        if not self.checked:
            self._copy(g, out)
            return out
        if len(g) == 1 or bool((g[1:] > g[:-1]).all()):  # the usual read: its pages hashed where they lie
            rc, n_pages, n_bad, first_bad = self._map().read_checked(g, self.page_rows, self.page_sums, out)
            if rc != 0:
                self._raise_copy(rc, g, False)
            self.pages_checked += n_pages
            if n_bad:
                raise self._changed(first_bad, n_bad, n_pages)
            return out
        pages, rows = self._pages_of(g)
        buf = np.empty((len(rows), self.width), dtype=np.float32)
        self._copy(rows, buf)
        sums = row_hashes(buf, rows).reshape(len(pages), self.page_rows).sum(axis=1, dtype=np.uint64)
        bad = np.flatnonzero(sums != self.page_sums[pages])
        self.pages_checked += len(pages)
        if len(bad):
            raise self._changed(int(pages[bad[0]]), len(bad), len(pages))
        if len(rows) == len(g) and bool((rows == g).all()):  # whole pages in order (a sequential read)
            return buf
        return buf[np.searchsorted(rows, g)]

    def write(self, g: np.ndarray, rows: np.ndarray) -> None:
        """Write rows ``[len(g), width]`` at global rows ``g`` (int64)."""
        if len(g) == 0:
            return
        g = np.asarray(g, dtype=np.int64)
        self.ensure(int(g.max()) + 1)
        self.check_size()
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if self.checked:  # each page's checksum moves by the new rows' hashes minus the old ones', as they go in
            rc = self._map().write_checked(g, rows, self.page_rows, self.page_sums, self.written_end)
            if rc != 0:
                self._raise_copy(rc, g, True)
            self.written_end = max(self.written_end, int(g.max()) + 1)
            return
        self._copy(g, rows, write=True)
        self.written_end = max(self.written_end, int(g.max()) + 1)

    # -- as a Tier: its places are global row numbers; it keeps every row written to it ------
    def take(self, where: np.ndarray) -> np.ndarray:
        """Rows ``where`` (global rows), checked: :meth:`read`."""
        return self.read(where)

    def put(self, where: np.ndarray, rows: np.ndarray) -> None:
        """Rows written at global rows ``where``: :meth:`write`."""
        self.write(where, rows)

    def evict(self, where: np.ndarray) -> None:
        """Nothing: the file keeps every row written to it (the rows below the cache and host RAM)."""

    def persist(self) -> None:
        """The rows written so far made durable: :meth:`sync`."""
        self.sync()

    def rows_view(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start .. stop`` (a copy)."""
        return self.read(np.arange(start, stop, dtype=np.int64))

    def sync(self) -> None:
        """Write the mapped rows out and fsync the file."""
        self.check_size()
        rc = self.map.sync() if self.map is not None else 0
        if rc < 0:
            raise self._error(f"writing the SSD tier file {self.path} out: {os.strerror(-rc)}", -rc)
        fsync(self._fd())

    def write_index(self, ids: np.ndarray, meta: dict) -> None:
        """Persist the id -> row mapping (row g holds ``ids[g]``) atomically."""
        buf = io.BytesIO()
        np.savez(buf, ids=ids, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
        write_atomic(self.dir / "index.npz", [buf.getvalue()])  # a full disk: the error names the file

    def close(self) -> None:
        rows, self.map = getattr(self, "map", None), None
        if rows is not None:
            rows.close()
        fd, self.fd = getattr(self, "fd", None), None
        if fd is not None:
            os.close(fd)
        lock, self.lock_fd = getattr(self, "lock_fd", None), None
        if lock is not None:
            os.close(lock)  # releases the folder

    def __del__(self) -> None:
        self.close()

