"""The on-disk kernel cache: compiled artefacts keyed by a hash of their source.

Location: ``$FBRAPIDS_KERNEL_CACHE`` if set, else ``~/.cache/fbrapids/kernels``.  Safe with
several processes: an artefact is built under an exclusive file lock into a temporary
file in the cache folder, fsynced, and moved into place with an atomic rename (the folder
fsynced after), so a reader sees either nothing or a complete file, a power loss included.

Each artefact ``KEY.so`` has a digest beside it, ``KEY.so.sha256`` (its sha256 and size),
written the same way.  An entry is used only when its bytes match the digest: an empty or
truncated file, a flipped bit, or an entry without a digest is logged (naming the file)
and rebuilt, never loaded.  :data:`stats` counts hits, builds and rebuilds in this process;
with ``$FBRAPIDS_KERNEL_CACHE_LOG`` set to a file, every lookup of every process also
appends a JSON line there (``{"outcome": "hit" | "build" | "rebuild", "key", "suffix",
"seconds"}``), so a run of many processes (``scripts/gpu_check.py``'s steps) can count them.

Example:
    >>> import os, tempfile
    >>> os.environ["FBRAPIDS_KERNEL_CACHE"] = tempfile.mkdtemp()
    >>> p = cached_artifact("abc", ".txt", lambda tmp: tmp.write_text("built"))
    >>> p.read_text(), cached_artifact("abc", ".txt", lambda tmp: 1 / 0) == p
    ('built', True)
    >>> _ = p.write_text("bui1t")  # damaged in place: rebuilt
    >>> cached_artifact("abc", ".txt", lambda tmp: tmp.write_text("built")).read_text()
    'built'
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from fbrapids.files.atomic import fsync, fsync_path

ENV_VAR = "FBRAPIDS_KERNEL_CACHE"
#: a file every lookup is appended to as a JSON line (unset: none)
ENV_LOG = "FBRAPIDS_KERNEL_CACHE_LOG"
#: the suffix of an artefact's digest file
DIGEST_SUFFIX = ".sha256"

log = logging.getLogger(__name__)

#: this process's cache lookups: ``hits`` (a verified entry used), ``builds`` (a missing
#: entry built), ``rebuilds`` (an entry that did not match its digest, built again), and
#: ``compile_seconds``, the seconds its builds and rebuilds took (summed: builds on
#: several threads at once count each)
stats: dict[str, float] = {"hits": 0, "builds": 0, "rebuilds": 0, "compile_seconds": 0.0}
_stats_lock = threading.Lock()  # builds on several threads (compile_host.BuildAhead) count here


def cache_dir() -> Path:
    """The cache folder in force (created on demand)."""
    d = Path(os.environ.get(ENV_VAR) or Path.home() / ".cache" / "fbrapids" / "kernels").expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


def source_key(*parts: str) -> str:
    """A short content hash of the source text and whatever else shapes the artefact."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _digest_line(path: Path) -> str:
    """``"<sha256> <size>"`` of the file at ``path``."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return f"{h.hexdigest()} {size}"


def _problem(final: Path) -> str | None:
    """Why the cached ``final`` cannot be used (None when it matches its digest)."""
    digest = final.with_name(final.name + DIGEST_SUFFIX)
    try:
        want = digest.read_text().strip()
    except FileNotFoundError:
        return f"it has no digest file {digest.name}"
    except (OSError, UnicodeDecodeError) as exc:
        return f"its digest file {digest} cannot be read ({exc})"
    try:
        got = _digest_line(final)
    except OSError as exc:
        return f"it cannot be read ({exc})"
    if got != want:
        return f"its bytes (sha256 {got[:12]}..., {got.split()[1]} bytes) do not match its digest " \
               f"(sha256 {want[:12]}..., {want.split()[-1]} bytes): damaged"
    return None


def verified(name: str) -> Path | None:
    """The cache entry ``name`` (``KEY.cubin``) when it is there and matches its digest, else
    None; counts nothing and builds nothing.

    Example:
        >>> verified("no-such-entry.cubin") is None
        True
    """
    path = cache_dir() / name
    return path if path.exists() and _problem(path) is None else None


def _install(d: Path, key: str, suffix: str, final: Path, build: Callable[[Path], object]) -> None:
    """Build into a temporary file, fsync it, write its digest (temporary, fsynced, renamed),
    rename the artefact into place and fsync the folder."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=suffix, dir=d)
    os.close(fd)
    tmp = Path(tmp_name)
    digest_tmp = tmp.with_name(tmp.name + DIGEST_SUFFIX)
    try:
        build(tmp)
        fsync_path(tmp)
        with open(digest_tmp, "w") as f:
            f.write(_digest_line(tmp) + "\n")
            f.flush()
            fsync(f.fileno())
        # the digest first: a crash between the renames leaves an entry that does not match it (rebuilt)
        os.replace(digest_tmp, final.with_name(final.name + DIGEST_SUFFIX))
        os.replace(tmp, final)
        fsync_path(d)
    finally:
        for t in (tmp, digest_tmp):
            if t.exists():
                t.unlink()


def invalidate(path: str | os.PathLike, why: str) -> None:
    """Remove a cached artefact that cannot be used (e.g. the loader refused it), so that
    the next :func:`cached_artifact` builds it again; logged naming the file."""
    p = Path(path)
    log.warning("kernel cache entry %s %s; removed, it is rebuilt", p, why)
    p.unlink(missing_ok=True)


def _count(outcome: str, key: str, suffix: str, seconds: float = 0.0) -> None:
    """Count a lookup in :data:`stats` and, when ``$FBRAPIDS_KERNEL_CACHE_LOG`` names a file,
    append it there (one short line, one ``write`` in append mode: whole across processes)."""
    with _stats_lock:
        stats[outcome + "s"] += 1
        stats["compile_seconds"] += seconds
    path = os.environ.get(ENV_LOG)
    if path:
        line = json.dumps({"outcome": outcome, "key": key, "suffix": suffix, "seconds": round(seconds, 3)}) + "\n"
        with open(path, "a") as f:
            f.write(line)


def read_log(path: str | os.PathLike) -> dict[str, float]:
    """The lookups a ``$FBRAPIDS_KERNEL_CACHE_LOG`` file counts: ``hits``, ``builds``,
    ``rebuilds`` and the ``compile_seconds`` the builds took (zeros for a missing file).

    Example:
        >>> read_log("/nonexistent")
        {'hits': 0, 'builds': 0, 'rebuilds': 0, 'compile_seconds': 0.0}
    """
    out = {"hits": 0, "builds": 0, "rebuilds": 0, "compile_seconds": 0.0}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[rec["outcome"] + "s"] += 1
        out["compile_seconds"] = round(out["compile_seconds"] + float(rec.get("seconds", 0.0)), 3)
    return out


def cached_artifact(key: str, suffix: str, build: Callable[[Path], object]) -> Path:
    """The cached file for ``key``, building it with ``build(tmp_path)`` when missing or
    when it does not match its digest (each rebuild logged naming the file)."""
    d = cache_dir()
    final = d / f"{key}{suffix}"
    if final.exists() and _problem(final) is None:
        _count("hit", key, suffix)
        return final
    with open(d / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            problem = _problem(final) if final.exists() else None
            if final.exists() and problem is None:  # another process built it while we waited
                _count("hit", key, suffix)
                return final
            if problem is not None:  # no digest: an entry of an older fbrapids (info), else damaged (warning)
                log.log(logging.INFO if "no digest file" in problem else logging.WARNING,
                        "kernel cache entry %s: %s; rebuilding it", final, problem)
            t0 = time.perf_counter()
            _install(d, key, suffix, final, build)
            _count("build" if problem is None else "rebuild", key, suffix, time.perf_counter() - t0)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return final
