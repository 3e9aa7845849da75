"""Crash-safe file writes: write under a temporary name, flush, fsync, rename, fsync the dir.

A process killed at any point leaves either the previous file or the complete new one,
never a torn one.

Inside :func:`digests_of_writes`, every file :func:`write_atomic` puts under the given root
is also hashed from the bytes as they are written, so that a manifest of the directory
(:func:`fbrapids.files.manifest.write_manifest`) need not read the files back.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(d / "x.bin", [b"ab", b"c"]).read_bytes()
    b'abc'
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol


class Hasher(Protocol):
    """An incremental hasher: hashlib's (``hashlib.sha256()``), or the manifest's crc32."""

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


@dataclass
class WrittenFile:
    """One file written inside :func:`digests_of_writes`: its size and modification time
    right after the rename, and the digest of the bytes written."""

    bytes: int
    mtime_ns: int
    digest: str


@dataclass
class WriteDigests:
    """The digests of the files written under ``root``, by POSIX path relative to it."""

    root: Path
    new_hasher: Callable[[], Hasher]
    files: dict[str, WrittenFile] = field(default_factory=dict)

    def current(self, rel: str) -> str | None:
        """The recorded digest of ``rel`` if the file on disk is still the one written
        (same size and modification time), else None (the caller hashes it from disk)."""
        got = self.files.get(rel)
        if got is None:
            return None
        try:
            st = (self.root / rel).stat()
        except OSError:
            return None
        return got.digest if (st.st_size, st.st_mtime_ns) == (got.bytes, got.mtime_ns) else None


#: chunks at least this large are hashed on a background thread while the next is written
_BACKGROUND_HASH_BYTES = 1 << 18
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _hash_pool() -> ThreadPoolExecutor:
    """One background thread for hashing chunks (zlib and hashlib release the GIL on large buffers)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fbrapids-hash")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when it needs one."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)

_RECORDING: contextvars.ContextVar[WriteDigests | None] = contextvars.ContextVar("fbrapids_write_digests",
                                                                                 default=None)


@contextlib.contextmanager
def digests_of_writes(root: str | os.PathLike, new_hasher: Callable[[], Hasher]) -> Iterator[WriteDigests]:
    """While active (in this thread / context), :func:`write_atomic` hashes every file it
    writes under ``root`` with a fresh ``new_hasher()`` (``update(bytes)``, ``hexdigest()``).

    Example:
        >>> import hashlib, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> with digests_of_writes(d, hashlib.sha256) as written:
        ...     _ = write_atomic(d / "a.bin", [b"ab", b"c"])
        >>> written.current("a.bin")[:12], written.current("b.bin")
        ('ba7816bf8f01', None)
    """
    rec = WriteDigests(Path(root).resolve(), new_hasher)
    token = _RECORDING.set(rec)
    try:
        yield rec
    finally:
        _RECORDING.reset(token)


def fsync_enabled() -> bool:
    """Whether :func:`fsync` reaches the disk: yes unless ``FBRAPIDS_FSYNC=0``.

    ``FBRAPIDS_FSYNC=0`` is for test suites and throwaway runs on a slow disk (each fsync costs
    a few milliseconds; a small run's checkpoint writes hundreds).  Writes stay atomic (a
    temporary name, then a rename), so a killed *process* still leaves the old file or the new
    one; only a power loss or kernel crash can then lose the last writes.

    Example:
        >>> import os
        >>> os.environ.get("FBRAPIDS_FSYNC", "1") != "0" or not fsync_enabled()
        True
    """
    return os.environ.get("FBRAPIDS_FSYNC", "1").strip() != "0"


def fsync(fd: int) -> None:
    """``os.fsync(fd)``, unless ``FBRAPIDS_FSYNC=0`` (:func:`fsync_enabled`).  Every durable
    write of fbrapids goes through here.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     fsync(f.fileno())
    """
    if fsync_enabled():
        os.fsync(fd)


def fsync_path(path: str | os.PathLike) -> None:
    """:func:`fsync` a file or a directory by path (a directory: its renames become durable)."""
    if not fsync_enabled():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_DEFERRED: contextvars.ContextVar[tuple[Path, set[Path]] | None] = contextvars.ContextVar("fbrapids_deferred_dirs",
                                                                                         default=None)


@contextlib.contextmanager
def deferred_dir_fsyncs(root: str | os.PathLike) -> Iterator[None]:
    """Inside the block, :func:`fsync_dir` of a directory under ``root`` (``root`` included)
    is done once per directory when the block ends, deepest first, instead of after every
    file renamed into it: for a directory that is itself renamed into place only when
    complete (a checkpoint being written), whose files need only be durable before that
    rename.  Each file is still fsynced as it is written.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> with deferred_dir_fsyncs(d):
        ...     _ = write_atomic(d / "a" / "x", [b"1"]) if (d / "a").mkdir() is None else None
        ...     _ = write_atomic(d / "a" / "y", [b"2"])
        >>> sorted(p.name for p in (d / "a").iterdir())
        ['x', 'y']
    """
    root = Path(root).resolve()
    token = _DEFERRED.set((root, set()))
    try:
        yield
        pending = _DEFERRED.get()
    finally:
        _DEFERRED.reset(token)
    for d in sorted(pending[1] if pending else (), key=lambda p: len(p.parts), reverse=True):
        fsync_path(d)


#: the signals :func:`signals_held` holds back: Ctrl-C, and the termination signals a run exits on
HELD_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """While inside (in the main thread): Ctrl-C, SIGTERM and SIGHUP are held back and
    delivered as the block ends, to their handlers as they were.  For steps that must
    happen together: a checkpoint renamed into place and the pointer naming it
    (:func:`~fbrapids.trainers.checkpoint.directory.commit_checkpoint`), where a
    ``KeyboardInterrupt`` between the two left a whole checkpoint nothing pointed to.
    Off the main thread (where no signal arrives) it does nothing.

    Example:
        >>> seen = []
        >>> before = signal.signal(signal.SIGINT, lambda signum, frame: seen.append("Ctrl-C handled"))
        >>> with signals_held():
        ...     os.kill(os.getpid(), signal.SIGINT)
        ...     seen.append("block done")
        >>> _ = signal.signal(signal.SIGINT, before); seen
        ['block done', 'Ctrl-C handled']
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = {}
    for sig in HELD_SIGNALS:
        if signal.getsignal(sig) is not None:  # (None: a handler not set from Python, which could not be put back)
            previous[sig] = signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(got):
            signal.raise_signal(sig)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that renames inside it are durable (:func:`fsync_path`); inside
    :func:`deferred_dir_fsyncs` for a directory under its root, once at the block's end."""
    deferred = _DEFERRED.get()
    if deferred is not None:
        full = Path(path).resolve()
        if full.is_relative_to(deferred[0]):
            deferred[1].add(full)
            return
    fsync_path(path)


def _recorder_for(path: Path) -> tuple[WriteDigests, str] | None:
    rec = _RECORDING.get()
    if rec is None:
        return None
    full = path.resolve()
    return (rec, full.relative_to(rec.root).as_posix()) if full.is_relative_to(rec.root) else None


#: errno values of a full disk or a file over the size limit
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_space_error(exc: OSError, path: str | os.PathLike, written: int, needed: int | None) -> OSError:
    """``exc`` (a full disk, a quota, the file size limit) as an ``OSError`` of the same
    errno naming ``path`` and the bytes: ``needed`` for the file (None: unknown, at least
    ``written``), how many were written, and how many the file system has free.

    Example:
        >>> import errno, tempfile
        >>> e = no_space_error(OSError(errno.ENOSPC, "No space left on device"), tempfile.gettempdir() + "/x", 4096, 10_000)
        >>> e.errno == errno.ENOSPC, e.filename.endswith("/x"), e.strerror.startswith("No space left on device writing 10,000 bytes (4,096 written;")
        (True, True, True)
    """
    import shutil

    try:
        free = f"{shutil.disk_usage(Path(path).parent).free:,} bytes free there"
    except OSError:
        free = "the free space unknown"
    want = f"{needed:,} bytes" if needed is not None else f"more than {written:,} bytes"
    what = exc.strerror or os.strerror(exc.errno or errno.ENOSPC)
    return OSError(exc.errno, f"{what} writing {want} ({written:,} written; {free})", str(path))


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes], size: int | None = None) -> Path:
    """Write ``chunks`` to ``path`` via ``path.tmp``: write, flush, fsync, rename, fsync the dir.

    A full disk (or quota, or file size limit) is an ``OSError`` naming ``path.tmp`` and the
    bytes the file needs (``size``, else the chunks' total when they are a list or tuple),
    written and free (:func:`no_space_error`).

    Example:
        >>> import tempfile, pathlib
        >>> p = write_atomic(pathlib.Path(tempfile.mkdtemp()) / "a.txt", [b"hello"])
        >>> p.read_text(), p.with_name("a.txt.tmp").exists()
        ('hello', False)
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    recording = _recorder_for(path)
    hasher = recording[0].new_hasher() if recording else None
    pending: Future | None = None
    if size is None and isinstance(chunks, (list, tuple)):
        size = sum(len(c) for c in chunks)
    written = 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
                if hasher is not None:
                    if pending is not None:
                        pending.result()  # chunks are hashed in order
                        pending = None
                    # an immutable chunk is hashed while the next one is made and written (a bytearray or
                    # memoryview could be refilled by the producer meanwhile: hashed here instead)
                    if isinstance(chunk, bytes) and len(chunk) >= _BACKGROUND_HASH_BYTES:
                        pending = _hash_pool().submit(hasher.update, chunk)
                    else:
                        hasher.update(chunk)
            if pending is not None:
                pending.result()
            f.flush()
            fsync(f.fileno())
    except BaseException as exc:
        if pending is not None:
            pending.cancel()  # a hash still running finishes into a hasher nobody reads
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in NO_SPACE and exc.filename is None:
            raise no_space_error(exc, tmp, written, size) from None
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)
    if recording and hasher is not None:  # (a hasher is made exactly when recording)
        rec, rel = recording
        st = path.stat()
        rec.files[rel] = WrittenFile(st.st_size, st.st_mtime_ns, hasher.hexdigest())
    return path
