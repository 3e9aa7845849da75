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

Example:
    >>> import tempfile, numpy as np
    >>> f = SsdTier(tempfile.mkdtemp(), width=3)
    >>> f.write(np.array([5]), np.ones((1, 3), np.float32))
    >>> f.read(np.array([5])).tolist()
    [[1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import numpy as np

from fbrapids.errors import TierFileError
from fbrapids.trainers.sparse.hashmap import RowMap
from fbrapids.trainers.sparse.tiers import TierStats

log = logging.getLogger(__name__)


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
        try:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise self._error(f"cannot open the SSD tier file {self.path}: {exc.strerror}", exc.errno) from exc
        self.ensure(capacity)

    def _error(self, message: str, code: int | None = None) -> TierFileError:
        return TierFileError(message, str(self.path), code)

    def _fd(self) -> int:
        if self.fd is None:
            raise self._error(f"the SSD tier file {self.path} is closed")
        return self.fd

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
                    f"{exc.strerror} (errno {errno.errorcode.get(exc.errno, exc.errno)}); free space on that disk, "
                    "or give StoreConfig a larger host tier or another ssd_dir", exc.errno) from exc
        if self.map is not None:
            self.map.close()
        try:
            self.map = RowMap(fd, cap * self.row_bytes)
        except OSError as exc:
            raise self._error(f"cannot map the SSD tier file {self.path} ({cap * self.row_bytes} bytes): "
                              f"{exc.strerror}", exc.errno) from exc
        self.capacity = cap
        self.check_size()

    def _truncated(self, row: int) -> TierFileError:
        return self._error(f"the SSD tier file {self.path} ends before row {row}: it was truncated by something "
                           "else; its rows are lost")

    def read(self, g: np.ndarray) -> np.ndarray:
        """Rows ``g`` (int64, ascending for sequential reads) ``[len(g), width]``."""
        out = np.empty((len(g), self.width), dtype=np.float32)
        if len(g) == 0:
            return out
        self.ensure(int(g.max()) + 1)
        self.check_size()
        rc = self.map.copy(g, self.row_bytes, out)
        if rc > 0:
            raise self._truncated(int(g[rc - 1]))
        if rc < 0:
            raise self._error(f"reading {len(g)} rows of the SSD tier file {self.path}: {os.strerror(-rc)}", -rc)
        return out

    def write(self, g: np.ndarray, rows: np.ndarray) -> None:
        """Write rows ``[len(g), width]`` at global rows ``g`` (int64)."""
        if len(g) == 0:
            return
        self.ensure(int(g.max()) + 1)
        self.check_size()
        rc = self.map.copy(g, self.row_bytes, np.ascontiguousarray(rows, dtype=np.float32), write=True)
        if rc > 0:
            raise self._truncated(int(g[rc - 1]))
        if rc < 0:
            raise self._error(f"writing {len(g)} rows to the SSD tier file {self.path}: {os.strerror(-rc)}", -rc)

    def rows_view(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start .. stop`` (a copy)."""
        return self.read(np.arange(start, stop, dtype=np.int64))

    def sync(self) -> None:
        """Write the mapped rows out and fsync the file."""
        self.check_size()
        rc = self.map.sync() if self.map is not None else 0
        if rc < 0:
            raise self._error(f"writing the SSD tier file {self.path} out: {os.strerror(-rc)}", -rc)
        os.fsync(self._fd())

    def write_index(self, ids: np.ndarray, meta: dict) -> None:
        """Persist the id -> row mapping (row g holds ``ids[g]``) atomically."""
        tmp = self.dir / "index.npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, ids=ids, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / "index.npz")

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
            self.map = None
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

