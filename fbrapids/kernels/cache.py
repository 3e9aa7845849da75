"""The on-disk kernel cache: compiled artefacts keyed by a hash of their source.

Location: ``$FBRAPIDS_KERNEL_CACHE`` if set, else ``~/.cache/fbrapids/kernels``.  Safe with
several processes: an artefact is built under an exclusive file lock into a temporary
file in the cache folder and moved into place with an atomic rename, so a reader sees
either nothing or a complete file.

Example:
    >>> import os, tempfile
    >>> os.environ["FBRAPIDS_KERNEL_CACHE"] = tempfile.mkdtemp()
    >>> p = cached_artifact("abc", ".txt", lambda tmp: tmp.write_text("built"))
    >>> p.read_text(), cached_artifact("abc", ".txt", lambda tmp: 1 / 0) == p
    ('built', True)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

ENV_VAR = "FBRAPIDS_KERNEL_CACHE"


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


def cached_artifact(key: str, suffix: str, build: Callable[[Path], object]) -> Path:
    """The cached file for ``key``, building it with ``build(tmp_path)`` when missing."""
    d = cache_dir()
    final = d / f"{key}{suffix}"
    if final.exists():
        return final
    with open(d / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if final.exists():  # another process built it while we waited
                return final
            fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=suffix, dir=d)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                build(tmp)
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    tmp.unlink()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return final
