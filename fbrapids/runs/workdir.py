"""One run per work dir, and a preflight of the disk before training.

:func:`lock_work_dir` takes an exclusive ``fcntl.flock`` on ``<dir>/.fbrapids.lock`` for
the life of a run (the kernel drops it when the process dies, however it dies) and records
the holder's PID and host in the file; a second run on the same dir gets a
:class:`~fbrapids.errors.WorkDirLockedError` naming them.  Once the lock is held, ``.tmp-*``
debris of earlier killed runs is removed.  :func:`preflight` checks that directories are
writable and hold free space for what the run will write, before any training.
:func:`temporary_work_dir` is a work dir that is removed on every exit path (SIGTERM
included), and that a later one removes when its run was killed outright, whenever the
kill came (its name and its lock file record its maker's PID from the start).
:func:`torch_cache_in` keeps torch's compiler cache inside a work dir, and
:func:`exit_on_termination` turns SIGTERM / SIGHUP into :class:`Terminated`, which unwinds.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with lock_work_dir(d):
    ...     try:
    ...         with lock_work_dir(d):
    ...             pass
    ...     except WorkDirLockedError as exc:
    ...         print("held by PID", exc.pid == os.getpid())
    held by PID True
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Iterator, Mapping

from fbrapids.errors import PreflightError, WorkDirLockedError
from fbrapids.files.manifest import verification_enabled

log = logging.getLogger(__name__)

LOCK_NAME = ".fbrapids.lock"
#: fbrapids' temporary folders under $TMPDIR (the demo's work dirs, run_pipeline's and a
#: trial's, a launch's of ranks): each :func:`temporary_work_dir` removes those killed runs left
TEMPORARY_PREFIXES = ("fbrapids-demo-", "fbrapids-run-", "fbrapids-ranks-")
_TORCH_CACHE_PREFIX = "torchinductor_"  # torch.optim makes $TMPDIR/torchinductor_<user> (empty) on first use


def _holder(path: Path) -> dict:
    with contextlib.suppress(OSError, ValueError):
        got = json.loads(path.read_text() or "{}")
        return got if isinstance(got, dict) else {}
    return {}


def _holder_record() -> bytes:
    """What a lock file records of the process holding its dir: PID, host and since when."""
    import time

    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode()


@contextlib.contextmanager
def lock_work_dir(directory: str | os.PathLike, clean: bool = True) -> Iterator[Path]:
    """Hold ``directory`` exclusively for this process; remove stale ``.tmp-*`` entries in it.

    Raises :class:`~fbrapids.errors.WorkDirLockedError` (with ``pid`` and ``host``) when
    another run holds it.  A no-op when verification is off (``FBRAPIDS_VERIFY=0``).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if not verification_enabled():
        yield d
        return
    path = d / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = _holder(path)
            raise WorkDirLockedError(
                f"{d} is in use by another run: PID {who.get('pid', '?')} on host {who.get('host', '?')} "
                f"holds {path} (since {who.get('since', '?')}); wait for it to finish or use another work dir",
                pid=who.get("pid"), host=who.get("host")) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_record(), 0)
        except OSError as exc:  # a full disk: name the file
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        if clean:
            clean_stale(d)
        yield d
    finally:
        os.close(fd)  # releases the flock


def abandoned(directory: str | os.PathLike, prefix: str | None = None) -> bool:
    """Whether ``directory`` is a work dir whose run is over on this host: no process holds
    its lock file, and the PID of this host it records no longer runs.

    A dir without a lock file (or with an empty one) is never called abandoned, except a
    temporary one of ``prefix`` (:func:`temporary_work_dir`: ``<prefix><pid>-...``) that
    holds nothing else, whose PID no longer runs: a run killed between making it and
    recording itself in it.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with lock_work_dir(d):
        ...     held = abandoned(d)
        >>> held, abandoned(d)  # after the run: its PID (this one) still runs
        (False, False)
    """
    d = Path(directory)
    path = d / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return _orphan_pid_gone(d, prefix)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a run holds it
        who = _holder(path)
        if not who:  # killed before it recorded itself
            return _orphan_pid_gone(d, prefix)
        pid = who.get("pid")
        if who.get("host") != socket.gethostname() or not isinstance(pid, int):
            return False
        return _pid_gone(pid)
    finally:
        os.close(fd)


def _pid_gone(pid: int) -> bool:
    """Whether no process of this PID runs on this host (another user's live one: it runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _orphan_pid_gone(d: Path, prefix: str | None) -> bool:
    """A temporary work dir of ``prefix`` holding nothing but an empty lock file, whose
    maker's PID (in its name) no longer runs."""
    name = d.name
    if prefix is None or not name.startswith(prefix):
        return False
    pid = name[len(prefix):].split("-", 1)[0]
    if not pid.isdigit() or any(p.name != LOCK_NAME for p in d.iterdir()):
        return False
    return _pid_gone(int(pid))


def clean_stale(directory: str | os.PathLike) -> list[Path]:
    """Remove ``.tmp-*`` files and dirs that killed runs left directly under ``directory``
    (call it only while holding the lock); returns what was removed."""
    gone = sorted(Path(directory).glob(".tmp-*"))
    for p in gone:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    if gone:
        log.info("removed %d stale temporary entries from %s: %s", len(gone), directory,
                 ", ".join(p.name for p in gone))
    return gone


def remove_abandoned_work_dirs(prefix: str, root: str | os.PathLike | None = None) -> list[Path]:
    """Remove the temporary work dirs named ``prefix*`` under ``root`` (default: the
    temporary folder) whose run no longer runs (:func:`abandoned`: a run killed by SIGKILL
    or the out-of-memory killer); returns what was removed.

    Example:
        >>> remove_abandoned_work_dirs("fbrapids-demo-", tempfile.mkdtemp())
        []
    """
    gone = []
    for d in sorted(Path(root or tempfile.gettempdir()).glob(prefix + "*")):
        if d.is_dir() and not d.is_symlink() and abandoned(d, prefix):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    if gone:
        log.warning("removed %d work dir(s) of runs that were killed: %s", len(gone),
                    ", ".join(str(d) for d in gone))
    return gone


class Terminated(SystemExit):
    """SIGTERM / SIGHUP while :func:`exit_on_termination` is active: unwinds like
    ``sys.exit(128 + signal)`` so that ``finally`` blocks run (the default action would end
    the process on the spot); ``signal_name`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


def stop_behind(exc: BaseException) -> BaseException | None:
    """The Ctrl-C (:class:`KeyboardInterrupt`) or :class:`Terminated` that ``exc`` is, or
    that it wraps: a signal lands wherever the main thread is, and some code re-raises what
    it caught as another exception (Python wraps an exception raised while a class is made
    as ``RuntimeError("Error calling __set_name__ ...")``, so a SIGTERM during an import
    arrives as that).  Follows ``__cause__`` and ``__context__``: a failure raised while a
    stop unwound is that stop too.  ``None`` when there is no stop behind ``exc``.

    Example (a stop raised while a class is made; 3.11 wraps it, 3.12 lets it through):
        >>> class StopsWhenNamed:
        ...     def __set_name__(self, owner, name):
        ...         raise Terminated(signal.SIGTERM)
        >>> try:
        ...     class Made:
        ...         held_files = StopsWhenNamed()
        ... except BaseException as arrived:
        ...     print(stop_behind(arrived).signal_name, stop_behind(ValueError("x")))
        SIGTERM None
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (KeyboardInterrupt, Terminated)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def exit_on_termination() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise :class:`Terminated` (exit status 128 + the
    signal) in the main thread, where their action is the default; restored after.

    Example:
        >>> with exit_on_termination():
        ...     try:
        ...         os.kill(os.getpid(), signal.SIGTERM)
        ...     except Terminated as exc:
        ...         print(exc.code, exc.signal_name)
        143 SIGTERM
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: where torch keeps its compiler cache (it makes ``$TMPDIR/torchinductor_<user>`` when unset)
TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@contextlib.contextmanager
def torch_cache_in(work: str | os.PathLike) -> Iterator[None]:
    """torch's compiler cache inside ``work`` for the block, where the user set none
    (``$TORCHINDUCTOR_CACHE_DIR``): importing torch's compiler, as the fused Adam optimizer
    does, makes ``$TMPDIR/torchinductor_<user>`` (empty), which a run killed outright would
    leave behind; inside the work dir it goes with it.  Rank processes started meanwhile
    inherit it.  The variable is restored after, and the folder removed when empty.

    Example:
        >>> import tempfile
        >>> saved = os.environ.pop(TORCH_CACHE_ENV, None)  # as in a new process: none set
        >>> with torch_cache_in(tempfile.mkdtemp()):
        ...     os.environ[TORCH_CACHE_ENV].endswith(".torch-cache")
        True
        >>> TORCH_CACHE_ENV in os.environ
        False
        >>> os.environ.update({TORCH_CACHE_ENV: saved} if saved else {})
    """
    if os.environ.get(TORCH_CACHE_ENV) is not None:
        yield
        return
    cache = Path(work).resolve() / ".torch-cache"
    os.environ[TORCH_CACHE_ENV] = str(cache)
    try:
        yield
    finally:
        if os.environ.get(TORCH_CACHE_ENV) == str(cache):
            del os.environ[TORCH_CACHE_ENV]
        for sub in sorted(cache.rglob("*"), reverse=True) if cache.is_dir() else ():
            with contextlib.suppress(OSError):
                sub.rmdir()  # only empty folders: torch compiled nothing
        with contextlib.suppress(OSError):
            cache.rmdir()


@contextlib.contextmanager
def temporary_work_dir(prefix: str = "fbrapids-run-") -> Iterator[Path]:
    """A new ``<prefix><pid>-*`` folder under the temporary folder, removed when the block
    exits however it exits: an exception, Ctrl-C, and SIGTERM / SIGHUP (while inside, in
    the main thread, they raise :class:`Terminated` where their action is the default),
    with torch's compiler cache kept inside it (:func:`torch_cache_in`).  Its lock file
    records this process at once, so that folders left by killed runs (SIGKILL, whenever it
    came), of ``prefix`` and of :data:`TEMPORARY_PREFIXES`, are removed first
    (:func:`remove_abandoned_work_dirs`).

    Example:
        >>> with temporary_work_dir("fbrapids-doc-") as work:
        ...     work.name.startswith(f"fbrapids-doc-{os.getpid()}-"), work.is_dir()
        (True, True)
        >>> work.exists()
        False
    """
    for kind in dict.fromkeys((prefix, *TEMPORARY_PREFIXES)):  # a killed trial's or launch's too
        remove_abandoned_work_dirs(kind)
    tmp = Path(tempfile.gettempdir())
    torch_before = {p.name for p in tmp.glob(_TORCH_CACHE_PREFIX + "*")}
    with exit_on_termination():
        work = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        try:
            (work / LOCK_NAME).write_bytes(_holder_record())  # abandoned() tells a killed run's from a live one
            with torch_cache_in(work):
                yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)
            for p in tmp.glob(_TORCH_CACHE_PREFIX + "*"):  # torch's cache, made before its place was set
                if p.name not in torch_before:
                    with contextlib.suppress(OSError):
                        p.rmdir()  # only if empty: torch compiled nothing into it
            log.info("removed the temporary work dir %s", work)


def human_bytes(n: float) -> str:
    """``n`` bytes for people: ``1.5 GiB``.

    Example:
        >>> human_bytes(3 << 29)
        '1.5 GiB'
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def preflight(dirs: Mapping[str, str | os.PathLike], need_bytes: Mapping[str, int]) -> dict[str, int]:
    """Check before training that each of ``dirs`` (role -> path) exists or can be made,
    is writable (a probe file is created and removed), and that the file system holds the
    free space of ``need_bytes`` (what -> bytes, all written under ``dirs``).

    Returns the free bytes per role.  Raises :class:`~fbrapids.errors.PreflightError`
    naming the path, with the sizes.

    Example:
        >>> import tempfile
        >>> free = preflight({"work dir": tempfile.mkdtemp()}, {"checkpoint": 1 << 20})
        >>> free["work dir"] > 1 << 20
        True
    """
    free: dict[str, int] = {}
    for role, p in dirs.items():
        p = Path(p)
        try:
            p.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".tmp-preflight-", dir=p)
            try:
                probe_bytes = memoryview(b"\0" * 4096)
                while probe_bytes:  # a short write (a file size limit, a full disk) errors on the next call
                    probe_bytes = probe_bytes[os.write(fd, probe_bytes):]
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(probe)
        except OSError as exc:
            raise PreflightError(f"the {role} {p} is not writable: {exc.strerror or exc}") from exc
        free[role] = shutil.disk_usage(p).free
    need = sum(int(v) for v in need_bytes.values())
    parts = ", ".join(f"{k} {human_bytes(v)}" for k, v in need_bytes.items())
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and need_bytes and limit < max(need_bytes.values()):
        raise PreflightError(f"the file size limit (ulimit -f) is {human_bytes(limit)}; this run writes files of up to "
                             f"about {human_bytes(max(need_bytes.values()))} ({parts}) under {', '.join(map(str, dirs.values()))}")
    for role, p in dirs.items():
        if free[role] < need:
            raise PreflightError(f"the {role} {p} has {human_bytes(free[role])} free; this run needs about "
                                 f"{human_bytes(need)} ({parts})")
    log.info("preflight: %s; needs about %s (%s)", ", ".join(f"{r} {human_bytes(f)} free" for r, f in free.items()),
             human_bytes(need), parts)
    return free
