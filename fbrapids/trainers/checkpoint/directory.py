"""Crash-safe, self-verifying checkpoint directories.

Every file is written under a temporary name, fsynced, then renamed into place.  A
checkpoint is a directory ``step-XXXXXXXXXX`` built as ``.tmp-step-...``; when its files
are complete a ``MANIFEST.json`` of their crc32 digests is written last (see
:mod:`fbrapids.files.manifest`), the directory is renamed into place, and the ``latest`` file
naming it is swapped in (written to ``latest.tmp``, fsynced, renamed).  A process killed at
any point leaves the previous checkpoint, and the pointer to it, intact.

:func:`newest_verified` walks the checkpoints newest first and returns the first whose
files match their manifest, logging each one it skips and why; :func:`prune` never removes
the newest verified checkpoint.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with checkpoint_dir(root, step=3) as d:
    ...     _ = write_atomic(d / "x.bin", [b"abc"])
    >>> latest_checkpoint(root).name, (latest_checkpoint(root) / "x.bin").read_bytes()
    ('step-0000000003', b'abc')
    >>> newest_verified(root).name
    'step-0000000003'
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Iterator

from fbrapids.errors import ArgumentError, CheckpointError, ManifestError, UnsafeFileError
from fbrapids.files.atomic import deferred_dir_fsyncs, digests_of_writes, fsync_dir, signals_held, write_atomic
from fbrapids.files.manifest import new_hasher, resolve_inside, verification_enabled, verify_manifest, write_manifest

# checkpoints guard against corruption (a torn write, a flipped page), not forgery: crc32 is
# about three times cheaper than sha256 here; exports keep sha256
CHECKPOINT_DIGEST = "crc32"

__all__ = ["LATEST", "fsync_dir", "write_atomic", "step_name", "checkpoint_dir", "commit_checkpoint",
           "latest_checkpoint", "check_pointer_writable", "checkpoints", "read_small_file", "verify_checkpoint",
           "newest_verified", "restore_interrupted", "clean_partial", "prune"]

log = logging.getLogger(__name__)

LATEST = "latest"
_STEP = re.compile(r"^step-(\d{10})$")
_LEFTOVER = re.compile(r"^\.(tmp|old)-(step-\d{10})(?:-[A-Za-z0-9_.-]+)?$")  # -<pid> or another writer's tag


def step_name(step: int) -> str:
    """``step-0000000042`` for step 42."""
    return f"step-{step:010d}"


@contextlib.contextmanager
def checkpoint_dir(root: str | os.PathLike, step: int) -> Iterator[Path]:
    """Yield a temporary directory to fill; on success write its manifest, rename it to
    ``step-N`` and point ``latest`` at it.  On an exception the temporary directory is removed."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    check_pointer_writable(root)
    tmp = root / f".tmp-{step_name(step)}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    check = verification_enabled()
    try:
        # the directory is renamed into place only when complete: its directories are fsynced once, then
        with deferred_dir_fsyncs(tmp):
            # files written atomically inside are hashed as they are written: the manifest reads nothing back
            with (digests_of_writes(tmp, lambda: new_hasher(CHECKPOINT_DIGEST)) if check
                  else contextlib.nullcontext()) as written:
                yield tmp
            if check:
                write_manifest(tmp, algorithm=CHECKPOINT_DIGEST, written=written)
            fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    commit_checkpoint(tmp, root, step, str(os.getpid()))


def commit_checkpoint(tmp: Path, root: Path, step: int, tag: str) -> Path:
    """Rename the complete directory ``tmp`` to ``root/step-N`` (replacing a checkpoint of the
    same step, moved aside as ``.old-step-N-<tag>`` meanwhile), fsync ``root``, then swap the
    ``latest`` pointer to it; returns the checkpoint.  A Ctrl-C or termination signal
    meanwhile is held back until the pointer names it (:func:`~fbrapids.files.atomic.signals_held`)."""
    final = root / step_name(step)
    with signals_held():
        if final.exists():  # re-checkpointing the same step: replace it
            old = root / f".old-{step_name(step)}-{tag}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(root)
        write_atomic(root / LATEST, [final.name.encode()])
    return final


#: a ``latest`` pointer or a checkpoint's ``meta.json`` larger than this is refused unread
SMALL_FILE_BYTES = 16 << 20


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "not a regular file")


def read_small_file(path: str | os.PathLike, what: str, limit: int = SMALL_FILE_BYTES) -> str:
    """The text of ``path``, a regular file of at most ``limit`` bytes (a ``latest`` pointer,
    a checkpoint's ``meta.json``).  A FIFO, directory, device or socket in its place is a
    :class:`~fbrapids.errors.CheckpointError` naming it, checked on the opened file (opened
    without blocking): never a read that hangs.

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); os.mkfifo(f"{d}/latest")
        >>> read_small_file(f"{d}/latest", "checkpoint pointer")
        Traceback (most recent call last):
        ...
        fbrapids.errors.CheckpointError: .../latest is a FIFO, not a regular file: refused as the checkpoint pointer (reading it could block for ever)
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open the {what}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path} is {_kind(st.st_mode)}, not a regular file: refused as the {what} "
                                  "(reading it could block for ever)")
        if st.st_size > limit:
            raise CheckpointError(f"{path}: {st.st_size} bytes, more than a {what} holds ({limit}); refused")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: the {what} is not text") from None


def check_pointer_writable(root: str | os.PathLike) -> None:
    """A :class:`~fbrapids.errors.CheckpointError` naming ``root/latest`` when it is a
    directory: no pointer could be renamed over it, so no checkpoint could be completed.
    (A FIFO, device or link there is replaced by the next pointer written.)"""
    ptr = Path(root) / LATEST
    if ptr.is_dir() and not ptr.is_symlink():
        raise CheckpointError(f"{ptr} is a directory, not a regular file: the checkpoint pointer cannot be written "
                              "there; remove it (the checkpoints are the step-* directories beside it)")


def checkpoints(root: str | os.PathLike) -> list[Path]:
    """The complete checkpoint directories under ``root``, newest (highest step) first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if _STEP.match(p.name) and p.is_dir()), reverse=True)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint the ``latest`` pointer under ``root`` names, or None without a pointer.

    An empty or dangling pointer is a :class:`~fbrapids.errors.CheckpointError` naming it;
    the pointer must name a directory inside ``root`` (an absolute or ``../`` path, or a
    symbolic link leading out, is an :class:`~fbrapids.errors.UnsafeFileError`)."""
    root = Path(root)
    ptr = root / LATEST
    if not (ptr.exists() or ptr.is_symlink()):
        return None
    name = read_small_file(ptr, "checkpoint pointer", 4096).strip()
    if not name:
        raise CheckpointError(f"{ptr} is empty (it should name a step-* directory of {root})")
    path = resolve_inside(root, name, what=f"{ptr}: checkpoint")
    if not path.is_dir():
        raise CheckpointError(f"{ptr} names {name}, which does not exist in {root}")
    return path


def verify_checkpoint(path: str | os.PathLike) -> Path:
    """Check every file of one checkpoint against its manifest (a no-op when verification
    is off); an :class:`~fbrapids.errors.ManifestError` names the bad file.  Whether or not
    verification is on, a FIFO, device or socket inside is a ManifestError naming it (it is
    never opened: reading it could block)."""
    path = Path(path)
    for dirpath, _, filenames in os.walk(path):
        for n in filenames:
            mode = os.lstat(os.path.join(dirpath, n)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # links: the manifest refuses them
                raise ManifestError(f"{os.path.join(dirpath, n)} is {_kind(mode)}, not a regular file: refused "
                                    "(reading it could block for ever)")
    if verification_enabled():
        verify_manifest(path, accept=(CHECKPOINT_DIGEST, "sha256"))
    return path


def newest_verified(root: str | os.PathLike) -> Path | None:
    """The newest checkpoint under ``root`` whose files match its manifest.

    Each newer one that does not verify is logged (WARNING) with the reason; so is an empty
    or dangling ``latest`` pointer (a pointer or a checkpoint leading outside ``root`` is an
    :class:`~fbrapids.errors.UnsafeFileError`).  None when ``root`` holds no checkpoint; a
    :class:`~fbrapids.errors.CheckpointError` listing every reason when it holds some and
    none verifies.
    """
    root = Path(root)
    try:
        latest_checkpoint(root)
    except CheckpointError as exc:
        log.warning("%s; using the newest checkpoint that verifies instead", exc)
    found = checkpoints(root)
    reasons = []
    for path in found:
        resolve_inside(root, path.name, what="checkpoint")
        try:
            verify_checkpoint(path)
        except ManifestError as exc:
            log.warning("checkpoint %s does not verify, falling back to an older one: %s", path.name, exc)
            reasons.append(str(exc))
            continue
        if reasons:
            log.warning("resuming from %s, the newest checkpoint that verifies (%d newer skipped)", path.name,
                        len(reasons))
        return path
    if found:
        raise CheckpointError(f"none of the {len(found)} checkpoints under {root} verifies: " + "; ".join(reasons))
    return None


def _complete(path: Path) -> bool:
    """Whether a leftover copy of a checkpoint carries a manifest its files match."""
    try:
        verify_manifest(path, accept=(CHECKPOINT_DIGEST, "sha256"))
    except ManifestError:
        return False
    return True


def restore_interrupted(root: str | os.PathLike) -> list[Path]:
    """Put back a checkpoint whose same-step re-checkpoint was killed between its two renames.

    Re-checkpointing step N renames ``step-N`` to ``.old-step-N-<tag>``, then the complete
    ``.tmp-step-N-<tag>`` to ``step-N`` (the tag: the writer's PID, or another writer's
    name).  Killed in between, ``step-N`` is missing while both complete copies remain: the
    new one (``.tmp``) is renamed into place when its files match its manifest, else the
    previous one (``.old``) when its do (or, with verification off, the previous one, which
    was complete).  Returns the copies put back (each logged).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    left: dict[str, list[tuple[str, Path]]] = {}
    for p in root.iterdir():
        m = _LEFTOVER.match(p.name)
        if m and p.is_dir() and not p.is_symlink():
            left.setdefault(m.group(2), []).append((m.group(1), p))
    restored = []
    for name, copies in sorted(left.items()):
        if (root / name).exists() or not any(kind == "old" for kind, _ in copies):
            continue  # step-N in place, or no replacement of it was under way: nothing to restore
        check = verification_enabled()
        for kind, p in sorted(copies, key=lambda c: (c[0] != "tmp", -c[1].stat().st_mtime_ns)):
            if _complete(p) if check else kind == "old":
                os.replace(p, root / name)
                fsync_dir(root)
                log.warning("%s was missing (a re-checkpoint of it was killed between its renames): restored "
                            "from the complete copy %s", root / name, p.name)
                restored.append(p)
                break
    return restored


def clean_partial(root: str | os.PathLike) -> list[Path]:
    """Remove temporary directories left by killed writers, after restoring a checkpoint a
    killed same-step re-checkpoint left only as such a copy (:func:`restore_interrupted`);
    returns what was removed."""
    root = Path(root)
    restore_interrupted(root)
    gone = [p for p in root.glob(".tmp-step-*") if p.is_dir()] + [p for p in root.glob(".old-step-*") if p.is_dir()]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    if gone:
        log.info("removed %d partial checkpoint dir(s) left by an earlier run: %s", len(gone),
                 ", ".join(p.name for p in gone))
    return gone


def prune(root: str | os.PathLike, keep: int, verified: Path | None = None) -> list[Path]:
    """Remove complete checkpoints older than the newest ``keep``, never the ``latest`` one
    and never the newest one that verifies (``verified`` when the caller just checked one;
    otherwise the checkpoints are verified newest first until one passes).

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
        raise ArgumentError(f"keep must be >= 1, got {keep}")
    root = Path(root)
    steps = checkpoints(root)
    if len(steps) <= keep:
        return []
    protected = {p.name for p in steps[:keep]}
    with contextlib.suppress(CheckpointError, UnsafeFileError):  # no usable pointer: nothing it names to keep
        ptr = latest_checkpoint(root)
        if ptr is not None:
            protected.add(ptr.name)
    good = verified
    if good is None:
        with contextlib.suppress(CheckpointError):
            good = newest_verified(root)
    if good is not None:
        protected.add(Path(good).name)
    gone = sorted(p for p in steps if p.name not in protected)
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone
