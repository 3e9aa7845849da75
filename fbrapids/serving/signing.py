"""Signed exports: where the HMAC key comes from.

An export's ``MANIFEST.json`` lists the sha256 of every file; that detects corruption,
not tampering (whoever can write the folder can rewrite the manifest too).  Signed with a
key (:func:`fbrapids.serving.export.export_model`'s ``signing_key``), the manifest also
carries ``hmac-sha256`` over its entries, and loading with the key refuses any file or
manifest edit made without it (docs/serving-security.md).

The key is read from a file (``--signing-key-file``) or the environment
(``FBRAPIDS_SIGNING_KEY``), never from a command-line value, which every user of the
machine can read in ``ps``.

Example:
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "key"); _ = open(p, "w").write("k" * 32 + "\\n")
    >>> signing_key(p) == b"k" * 32
    True
"""

from __future__ import annotations

import os
from pathlib import Path

from fbrapids.errors import ServeConfigError
from fbrapids.files.manifest import MIN_KEY_BYTES, open_regular

KEY_ENV = "FBRAPIDS_SIGNING_KEY"
MAX_KEY_BYTES = 4096


def signing_key(path: str | os.PathLike | None = None) -> bytes | None:
    """The key in file ``path`` (its bytes, one trailing newline dropped), else
    ``$FBRAPIDS_SIGNING_KEY`` (UTF-8), else None; shorter than ``MIN_KEY_BYTES`` (16) or
    unreadable is a one-line :class:`~fbrapids.errors.ServeConfigError` naming the source."""
    if path is not None:
        p = Path(path)
        try:
            with open_regular(p) as f:
                key = f.read(MAX_KEY_BYTES + 1)
        except Exception as exc:  # noqa: BLE001 - one line naming the file, whatever the cause
            raise ServeConfigError(f"{p}: cannot read the signing key file ({str(exc)[:200]})") from None
        if len(key) > MAX_KEY_BYTES:
            raise ServeConfigError(f"{p}: a signing key file holds at most {MAX_KEY_BYTES} bytes")
        source = str(p)
        key = key[:-1] if key.endswith(b"\n") else key
        key = key[:-1] if key.endswith(b"\r") else key
    elif os.environ.get(KEY_ENV):
        key, source = os.environ[KEY_ENV].encode(), f"${KEY_ENV}"
    else:
        return None
    if len(key) < MIN_KEY_BYTES:
        raise ServeConfigError(f"{source}: a signing key needs at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    return key
