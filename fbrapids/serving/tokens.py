"""The bearer tokens ``fbrapids serve`` accepts, and who a call comes from.

A token file holds either one token (its first line: the format of ``--token-file`` since
the start) or one named token per line, ``NAME TOKEN``::

    # name   token (at least 16 printable characters, no spaces)
    ranker   3n9Jw0...
    batch    Qm2xkA...

With one shared token, clients are told apart by their address; with named tokens, a
client is its token's name, whatever address it comes from: the service's fair shares (its
work slots, queue places and body bytes) and its access log are then per name, so clients
behind one address (a reverse proxy, a NAT, loopback) are not one client, and one token
holder on several addresses is one.  A line of just ``#``, or starting with ``# ``, is a
comment.  Names are letters, digits and ``._-`` (at most 64); a name or a token given twice
is refused, and so is a file mixing the two formats.

Every token is compared with the presented one in constant time, all of them every time.

Example:
    >>> tokens = ClientTokens({"ranker": "r" * 16, "batch": "b" * 16})
    >>> tokens.identify(b"Bearer " + b"b" * 16), tokens.identify(b"Bearer nope"), tokens.per_client
    ((True, 'batch'), (False, None), True)
    >>> ClientTokens("s" * 16).identify(b"Bearer " + b"s" * 16)
    (True, None)
    >>> parse_tokens(["# who  token", "ranker " + "r" * 16, "batch\\t" + "b" * 16], "tokens.txt").names
    ['ranker', 'batch']
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

from fbrapids.errors import ServeConfigError

MIN_TOKEN_CHARS = 16  #: the shortest bearer token accepted
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_TOKEN_FILE_BYTES = 1 << 20


def check_token(token: str) -> str:
    """``token`` if it may guard the service: at least :data:`MIN_TOKEN_CHARS` characters,
    printable ASCII without spaces (it travels in a header); else a
    :class:`~fbrapids.errors.ServeConfigError` (an empty token never means "no token").

    Example:
        >>> check_token("x" * 16) == "x" * 16
        True
        >>> check_token("")
        Traceback (most recent call last):
        ...
        fbrapids.errors.ServeConfigError: a bearer token needs at least 16 characters, got 0 (generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')
    """
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
        n = len(token) if isinstance(token, str) else 0
        raise ServeConfigError(f"a bearer token needs at least {MIN_TOKEN_CHARS} characters, got {n} (generate one "
                               "with: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if not all(33 <= ord(c) < 127 for c in token):
        raise ServeConfigError("a bearer token must be printable ASCII without spaces")
    return token


class ClientTokens:
    """The tokens accepted: one shared token (``tokens`` a string) or one per named client
    (``tokens`` a mapping name -> token); each checked by :func:`check_token`."""

    def __init__(self, tokens: str | Mapping[str, str]) -> None:
        self.per_client = not isinstance(tokens, str)
        named = dict(tokens) if not isinstance(tokens, str) else {"": tokens}
        if not named:
            raise ServeConfigError("no bearer token given")
        for name, token in named.items():
            if self.per_client and not _NAME.fullmatch(name):
                raise ServeConfigError(f"token name {name!r}: use letters, digits and ._- (at most 64)")
            check_token(token)
        if len(set(named.values())) < len(named):
            raise ServeConfigError("the same token is given to two clients: give each client its own")
        self.names = [n for n in named if n]
        self._expected = [(n or None, f"Bearer {t}".encode()) for n, t in named.items()]

    def identify(self, authorization: bytes | None) -> tuple[bool, str | None]:
        """Whether ``authorization`` (the header's value) holds an accepted token, and its
        client's name (None with one shared token).  Every token is compared, in constant time."""
        given = authorization or b""
        found: tuple[bool, str | None] = (False, None)
        for name, expected in self._expected:
            if hmac.compare_digest(given, expected):
                found = (True, name)
        return found

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientTokens) and self._expected == other._expected

    def __hash__(self) -> int:
        return hash(tuple(self._expected))

    def __repr__(self) -> str:  # never the tokens themselves
        return f"ClientTokens({len(self._expected)} token(s){', per client: ' + ', '.join(self.names) if self.names else ''})"


def parse_tokens(lines: Sequence[str], where: str) -> ClientTokens:
    """A token file's lines as :class:`ClientTokens` (module docstring); ``where`` names the
    file in errors, with the line."""
    entries: list[tuple[int, list[str]]] = [(i + 1, ln.split()) for i, ln in enumerate(lines)
                                           if ln.strip() and ln.strip() != "#" and not ln.lstrip().startswith("# ")]
    if not entries:
        raise ServeConfigError(f"{where}: the token file is empty")
    if len(entries[0][1]) == 1:  # the one-token format: its first line
        if len(entries) > 1:
            raise ServeConfigError(f"{where}: line {entries[1][0]}: a file of one token holds only it; write one "
                                   "'NAME TOKEN' per line to give each client its own")
        return ClientTokens(entries[0][1][0])
    named: dict[str, str] = {}
    for line, fields in entries:
        if len(fields) != 2:
            raise ServeConfigError(f"{where}: line {line}: expected 'NAME TOKEN', got {len(fields)} field(s)")
        name, token = fields
        if name in named:
            raise ServeConfigError(f"{where}: line {line}: the name {name!r} is given twice")
        try:
            check_token(token)
        except ServeConfigError as exc:
            raise ServeConfigError(f"{where}: line {line} ({name}): {exc}") from None
        named[name] = token
    try:
        return ClientTokens(named)
    except ServeConfigError as exc:
        raise ServeConfigError(f"{where}: {exc}") from None


def read_secret_lines(path: str | os.PathLike, what: str, limit: int = 4096) -> list[str]:
    """The lines of a secret file (a token file or a signing key), at most ``limit`` bytes
    read; a missing, unreadable, non-regular or empty file is a one-line
    :class:`~fbrapids.errors.ServeConfigError` naming it."""
    p = Path(path)
    try:
        if not p.is_file():
            raise ServeConfigError(f"{p}: the {what} file is missing or not a regular file")
        with open(p, "rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise ServeConfigError(f"{p}: the {what} file holds more than {limit} bytes")
        text = raw.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeConfigError(f"{p}: cannot read the {what} file ({exc.__class__.__name__})") from None
    if not any(ln.strip() for ln in text):
        raise ServeConfigError(f"{p}: the {what} file is empty")
    return text


def read_tokens(path: str | os.PathLike) -> ClientTokens:
    """The tokens of a token file (module docstring)."""
    return parse_tokens(read_secret_lines(path, "token", MAX_TOKEN_FILE_BYTES), str(path))
