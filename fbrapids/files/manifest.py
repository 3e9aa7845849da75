"""Digest manifests of directories (exports, checkpoints): write one, verify one; and
:func:`resolve_inside`, which refuses a path read from such a directory that leaves it.

A manifest is a JSON file at the root of the directory it describes (``MANIFEST.json`` by
default) listing every regular file under the root (except itself) by POSIX path relative
to the root, with its size and digest.  The digest is sha256 by default (exports: a served
model's files); checkpoints, guarded against corruption rather than forgery, use crc32, about
three times cheaper.  :func:`verify_manifest` re-hashes the files with the manifest's own
algorithm, among those the caller accepts,
and raises :class:`~fbrapids.errors.ManifestError` naming the first file that is missing,
changed, or not listed; a symbolic link anywhere under the root is refused too (it could
point outside).  Hashing streams files in 1 MiB chunks, so memory stays flat.

``FBRAPIDS_VERIFY=0`` in the environment turns the verification of checkpoints (and the
work-dir lock, and the trainer's non-finite checks) off: only
``benchmarks/pipeline.py --verify-overhead`` sets it, to measure what they cost; see
:func:`verification_enabled`.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.bin").write_bytes(b"abc")
    >>> sorted(write_manifest(d)["files"])
    ['a.bin']
    >>> verify_manifest(d)
    ['a.bin']
    >>> _ = (d / "a.bin").write_bytes(b"abd")
    >>> verify_manifest(d)
    Traceback (most recent call last):
    ...
    fbrapids.errors.ManifestError: ...a.bin: sha256 ba7816bf8f01... in the manifest, a52d159f262b... on disk
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import stat
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Mapping

from fbrapids.errors import ArgumentError, ManifestError, UnsafeFileError
from fbrapids.files.atomic import Hasher, WriteDigests, write_atomic

MANIFEST = "MANIFEST.json"
ALGORITHM = "sha256"
ALGORITHMS = ("sha256", "crc32")
VERIFY_ENV = "FBRAPIDS_VERIFY"
_CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 64 << 20  #: a manifest larger than this is refused before it is read
SIGNATURE = "hmac-sha256"  #: the manifest field holding its HMAC (a signed export)
MIN_KEY_BYTES = 16  #: the shortest signing key accepted


def verification_enabled() -> bool:
    """False only when ``FBRAPIDS_VERIFY=0`` (set by the benchmark to measure the cost).

    Example:
        >>> verification_enabled()
        True
    """
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def open_regular(path: str | os.PathLike) -> io.BufferedReader:
    """``path`` opened for reading in binary, refused (:class:`~fbrapids.errors.UnsafeFileError`
    naming it) unless it is a regular file: a FIFO, a device or a socket is never read (the
    open itself does not block: ``O_NONBLOCK``, checked on the descriptor opened).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); fifo = os.path.join(d, "f"); os.mkfifo(fifo)
        >>> open_regular(fifo)
        Traceback (most recent call last):
        ...
        fbrapids.errors.UnsafeFileError: .../f: not a regular file (a FIFO, device or socket is never read)
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnsafeFileError(f"{path}: cannot be opened ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path}: not a regular file (a FIFO, device or socket is never read)")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bounded(path: str | os.PathLike, limit: int) -> bytes:
    """A regular file's bytes (:func:`open_regular`), refused unless it holds at most ``limit``."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise UnsafeFileError(f"{path}: {size} bytes, more than the {limit} this file may hold")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFileError(f"{path}: more than the {limit} bytes this file may hold")
    return data


def _chunks(path: str | os.PathLike) -> Iterator[bytes]:
    """``path``'s bytes in 1 MiB chunks (memory stays flat whatever the file's size)."""
    with open_regular(path) as f:
        yield from iter(lambda: f.read(_CHUNK), b"")


class _Crc32:
    """zlib's crc32 behind hashlib's ``update`` / ``hexdigest`` (8 hex digits)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def new_hasher(algorithm: str) -> Hasher:
    """A fresh incremental hasher (``update(bytes)``, ``hexdigest()``) for one of :data:`ALGORITHMS`.

    Example:
        >>> h = new_hasher("crc32"); h.update(b"ab"); h.update(b"c"); h.hexdigest()
        '352441c2'
    """
    if algorithm not in ALGORITHMS:
        raise ArgumentError(f"digest algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return hashlib.sha256() if algorithm == "sha256" else _Crc32()


def file_digest(path: str | os.PathLike, algorithm: str) -> str:
    """``path``'s digest under ``algorithm`` (one of :data:`ALGORITHMS`), read in 1 MiB chunks.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
        >>> file_digest(p, "sha256")[:12], file_digest(p, "crc32")
        ('ba7816bf8f01', '352441c2')
    """
    h = new_hasher(algorithm)
    for chunk in _chunks(path):
        h.update(chunk)
    return h.hexdigest()


def _hash_threads(files: int) -> int:
    """Threads that hash a directory's files side by side: up to 4, at most one per core and per file."""
    return max(1, min(4, os.cpu_count() or 1, files))


def _files(root: Path, name: str) -> list[str]:
    """Every regular file under ``root`` (relative POSIX paths, sorted), the manifest excepted;
    a symbolic link, a FIFO, a device or a socket is an error."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in [*dirnames, *filenames]:
            p = Path(dirpath) / n
            if p.is_symlink():
                raise ManifestError(f"{p}: a symbolic link inside {root} (refused: it may point outside)")
        for n in filenames:
            p = Path(dirpath) / n
            if not stat.S_ISREG(p.lstat().st_mode):
                raise ManifestError(f"{p}: not a regular file (a FIFO, device or socket inside {root} is refused)")
        for n in filenames:
            rel = (Path(dirpath) / n).relative_to(root).as_posix()
            if rel != name:
                out.append(rel)
    return sorted(out)


def _signature(content: Mapping[str, object], key: bytes) -> str:
    """HMAC-SHA256 of a manifest's algorithm and file entries (canonical JSON) under ``key``."""
    body = json.dumps({"algorithm": content["algorithm"], "files": content["files"]}, sort_keys=True,
                      separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def check_key(key: bytes, source: str = "signing key") -> bytes:
    """``key`` if it may sign a manifest (bytes, at least :data:`MIN_KEY_BYTES` long).

    Example:
        >>> check_key(b"k" * 16) == b"k" * 16
        True
    """
    if not isinstance(key, (bytes, bytearray)) or len(key) < MIN_KEY_BYTES:
        raise ArgumentError(f"{source}: a signing key needs at least {MIN_KEY_BYTES} bytes")
    return bytes(key)


def write_manifest(root: str | os.PathLike, name: str = MANIFEST, algorithm: str = ALGORITHM,
                   written: WriteDigests | None = None, key: bytes | None = None) -> dict[str, Any]:
    """Hash every file under ``root`` with ``algorithm`` and write the manifest ``root/name``
    (atomically: a temporary file, fsynced, renamed); returns its content.

    ``written``: digests taken while the files were written (:func:`fbrapids.files.atomic.digests_of_writes`
    with this algorithm); a file it holds, unchanged since (same size and modification
    time), is not read again.
    """
    root = Path(root)
    rels = _files(root, name)
    known = {rel: written.current(rel) for rel in rels} if written is not None else {}
    todo = [rel for rel in rels if known.get(rel) is None]
    with ThreadPoolExecutor(max_workers=_hash_threads(len(todo))) as pool:  # side by side, as in verify
        known.update(zip(todo, pool.map(lambda rel: file_digest(root / rel, algorithm), todo)))
    content = {"algorithm": algorithm,
               "files": {rel: {"bytes": (root / rel).stat().st_size, algorithm: known[rel]} for rel in rels}}
    if key is not None:  # a signed manifest: only a holder of the key can write one that verifies
        content[SIGNATURE] = _signature(content, check_key(key))
    # written as every other file of a checkpoint is: a full disk is an error naming the file and
    # the bytes it needed (a bare "[Errno 28] No space left on device" before)
    write_atomic(root / name, [json.dumps(content, indent=1, sort_keys=True).encode()])
    return content


def read_manifest(root: str | os.PathLike, name: str = MANIFEST,
                  accept: tuple[str, ...] = (ALGORITHM,)) -> dict[str, Any]:
    """The manifest of ``root``; :class:`~fbrapids.errors.ManifestError` if it is absent,
    malformed, or made with an algorithm not in ``accept``."""
    path = Path(root) / name
    if not path.is_file():
        raise ManifestError(f"{path}: no manifest")
    try:
        content = json.loads(read_bounded(path, MAX_MANIFEST_BYTES))
        files = content["files"]
        algorithm = content.get("algorithm")
        if algorithm not in accept or not isinstance(files, dict):
            raise ValueError(f"algorithm {algorithm!r}")
        for rel, entry in files.items():
            if not isinstance(entry, dict) or not isinstance(entry.get(algorithm), str):
                raise ValueError(f"entry {rel!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: not a {' or '.join(accept)} manifest ({exc})") from None
    return content


def verify_manifest(root: str | os.PathLike, name: str = MANIFEST, accept: tuple[str, ...] = (ALGORITHM,),
                    key: bytes | None = None) -> list[str]:
    """Check every file under ``root`` against its manifest (made with one of the ``accept``
    algorithms); returns the files checked (:func:`checked_manifest` returns the manifest
    itself, for :func:`read_verified`)."""
    return sorted(checked_manifest(root, name, accept, key)["files"])


def read_verified(root: str | os.PathLike, relative: str, manifest: Mapping[str, Any], limit: int) -> bytes:
    """The bytes of ``root / relative``, read once and checked against ``manifest`` (from
    :func:`checked_manifest`) before they are returned: what is parsed is what was verified,
    however the file is swapped on disk after the manifest was checked (a
    :class:`~fbrapids.errors.ManifestError` naming the file).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); _ = (d / "a.json").write_text("{}")
        >>> _ = write_manifest(d)
        >>> m = checked_manifest(d); (d / "a.json").write_text("[]")
        2
        >>> read_verified(d, "a.json", m, 100)
        Traceback (most recent call last):
        ...
        fbrapids.errors.ManifestError: .../a.json: changed since its manifest was checked (sha256 44136fa355b3... in the manifest, 4f53cda18c2b... read); refused
    """
    entry = manifest["files"].get(relative)
    path = Path(root) / relative
    if entry is None:
        raise ManifestError(f"{path}: not in the manifest")
    data = read_bounded(path, limit)
    hasher = new_hasher(manifest["algorithm"])
    hasher.update(data)
    got, want = hasher.hexdigest(), entry[manifest["algorithm"]]
    if not hmac.compare_digest(got, want):
        raise ManifestError(f"{path}: changed since its manifest was checked ({manifest['algorithm']} {want[:12]}... "
                            f"in the manifest, {got[:12]}... read); refused")
    return data


def checked_manifest(root: str | os.PathLike, name: str = MANIFEST, accept: tuple[str, ...] = (ALGORITHM,),
                     key: bytes | None = None) -> dict[str, Any]:
    """The manifest of ``root`` once every file under ``root`` was checked against it (made
    with one of the ``accept`` algorithms).

    ``key``: the manifest must be signed with it (:func:`write_manifest`'s ``key``), checked
    before any other file is opened; an unsigned or otherwise signed manifest is refused.

    Raises :class:`~fbrapids.errors.ManifestError` naming the file for a missing manifest, a
    bad signature, a listed file missing or changed (size or digest), a file on disk the
    manifest does not list, a symbolic link, or a file that is not a regular one (a FIFO).
    """
    root = Path(root)
    manifest = read_manifest(root, name, accept)
    listed, algorithm = manifest["files"], manifest["algorithm"]
    if key is not None:
        got = manifest.get(SIGNATURE)
        if not isinstance(got, str):
            raise ManifestError(f"{root / name}: not signed, and a signing key was given (export it with the key)")
        if not hmac.compare_digest(got, _signature(manifest, check_key(key))):
            raise ManifestError(f"{root / name}: signature does not match the signing key (edited since it was "
                                "signed, or signed with another key)")
    on_disk = _files(root, name)
    extra = sorted(set(on_disk) - set(listed))
    if extra:
        raise ManifestError(f"{root / extra[0]}: not in the manifest {root / name}")
    on_disk_set = set(on_disk)
    for rel in sorted(listed):  # cheap checks first: containment, presence, size
        path = root / rel
        if not path.resolve().is_relative_to(root.resolve()):
            raise ManifestError(f"{root / name}: entry {rel!r} is outside {root}")
        if rel not in on_disk_set:
            raise ManifestError(f"{path}: listed in the manifest {root / name} but missing")
        want = listed[rel]
        if not stat.S_ISREG(path.lstat().st_mode):
            raise ManifestError(f"{path}: not a regular file")
        if "bytes" in want and path.stat().st_size != want["bytes"]:
            raise ManifestError(f"{path}: {want['bytes']} bytes in the manifest, {path.stat().st_size} on disk")
    # then the digests, files hashed side by side (reads and zlib / hashlib release the GIL);
    # the first mismatch in sorted order is the one named, whatever finishes first
    rels = sorted(listed)
    with ThreadPoolExecutor(max_workers=_hash_threads(len(rels))) as pool:
        digests = list(pool.map(lambda rel: file_digest(root / rel, algorithm), rels))
    for rel, got in zip(rels, digests):
        want = listed[rel]
        if got != want[algorithm]:
            raise ManifestError(f"{root / rel}: {algorithm} {want[algorithm][:12]}... in the manifest, "
                                f"{got[:12]}... on disk")
    return manifest


def resolve_inside(root: str | os.PathLike, relative: str | os.PathLike, what: str = "path") -> Path:
    """``root / relative`` resolved (symbolic links followed), refused with
    :class:`~fbrapids.errors.UnsafeFileError` unless it lies inside ``root``: for paths read
    from a file of an export or a checkpoint (a ``latest`` pointer, a table directory).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> resolve_inside(d, "step-1").name
        'step-1'
        >>> resolve_inside(d, "../etc", what="latest pointer")
        Traceback (most recent call last):
        ...
        fbrapids.errors.UnsafeFileError: latest pointer '../etc' leaves ...
    """
    base = Path(root).resolve()
    rel = os.fspath(relative)
    if not rel or "\x00" in rel:
        raise UnsafeFileError(f"{what} {rel!r} in {base} is empty or holds a NUL byte")
    target = (base / rel).resolve()
    if target == base or not target.is_relative_to(base):
        raise UnsafeFileError(f"{what} {rel!r} leaves {base} (resolves to {target}); refused")
    return target
