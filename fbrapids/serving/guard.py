"""What stands between the network and the scorer: the bounds of the service, the checks
from a request's headers, the guarded HTTP protocol (connections) and the rate-limited log.
The ASGI gate that admits calls fairly per client is :mod:`fbrapids.serving.gate`.

:func:`head_refusal` answers from the request's headers alone, before a byte of the body is
read:

* a ``Host`` header not in ``allowed_hosts`` (port ignored) is 421: a web page that
  rebinds its own DNS name to 127.0.0.1 cannot reach a loopback server;
* with tokens, a missing or wrong ``Authorization: Bearer`` is 401, on every path
  (``/docs``, ``/redoc`` and ``/openapi.json`` included);
* a POST whose ``Content-Type`` is not ``application/json`` is 415 (a web form or a
  ``text/plain`` fetch from another site cannot drive the service);
* a ``Content-Length`` over ``max_body_bytes`` is 413.

Each of those answers carries ``Connection: close``: the server stops reading, the rest of
the body is never received.  Before those, the request head itself: more than
``max_header_bytes`` of it (counted from the parsed headers, and by the protocol as the
bytes arrive, in one burst or byte by byte) is 431; a folded header line (obsolete line
folding, which the parser would unfold into an accepted ``Authorization``) or a repeated
``Authorization``, ``Host``, ``Content-Length`` or ``Content-Type`` is 400
(``headers_refused``); a ``Host`` is parsed strictly (a name or a bracketed IP literal, an
optional port, nothing else).

:func:`guarded_protocol` is uvicorn's h11 protocol with a request-head deadline (a
connection must send a complete request head within ``header_timeout_s`` of connecting or
of its last answer, else it is closed: ``header_timeouts``) and the connection bounds of
:class:`~fbrapids.serving.connections.ConnectionTable`: unproven connections (none of whose
requests has passed the checks above) capped per address and in all, the oldest idle ones
closed to make room, so a new connection of an authorised client always finds one, and
``/health`` always answers.  :class:`RepeatFilter` lets one log line through per
``interval_s`` per message and counts the ones it held back.

Every refusal is counted in :attr:`ServeLimits.counts`, served by ``/health``.

Example:
    >>> limits = ServeLimits()
    >>> limits.max_body_bytes, limits.header_timeout_s, host_allowed(b"localhost:8000", limits.allowed_hosts)
    (4194304, 10.0, True)
    >>> host_allowed(b"attacker.example:8000", limits.allowed_hosts)
    False
    >>> limits.max_calls, limits.max_queue, limits.work_slots, limits.connection_reserve
    (128, 256, 32, 64)
"""


from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import resource
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fbrapids.errors import ServeConfigError
from fbrapids.serving.connections import ConnectionTable
from fbrapids.serving.tokens import ClientTokens

if TYPE_CHECKING:  # (annotations only: the gate imports this module)
    from fbrapids.serving.gate import Gate

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
GATE_COUNTS = ("unauthorised", "host_refused", "media_type_refused", "too_large", "body_timeouts",
               "incomplete_bodies", "busy_refused", "header_timeouts", "connections_refused", "headers_refused",
               "client_busy", "client_waits", "connections_evicted", "calls_dropped")
_HOST = re.compile(r"\[([0-9a-f:.]+)\](?::[0-9]{1,5})?|([a-z0-9._-]+)(?::[0-9]{1,5})?")
_FOLD = re.compile(rb"\n[ \t]")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_DERIVED = ("connection_reserve", "max_calls", "max_queue", "client_bytes", "max_buffered_bytes")


@dataclass
class ServeLimits:
    """The service's bounds; the defaults are those of ``fbrapids serve``.

    Per client (its token's name, or its address: :mod:`fbrapids.serving.gate`):
    ``client_calls`` calls in flight (and work slots), ``client_queue`` calls waiting for one
    of them (``client_wait_s`` each), ``client_bytes`` of bodies held.  In all, shared fairly
    by clients (:class:`~fbrapids.serving.shares.FairShare`): ``max_calls`` calls in flight,
    ``max_queue`` waiting, ``work_slots`` parsed or scored at once (on the server's worker
    threads), ``max_buffered_bytes`` of bodies.  Connections: ``max_connections`` open, of which
    at most ``max_connections - connection_reserve`` unproven, ``address_connections``
    unproven per address, and unproven ones idle over ``crowded_header_timeout_s`` closed once
    three quarters are open (:mod:`fbrapids.serving.connections`).

    The bounds left None follow the others: ``connection_reserve``, ``max_calls`` and
    ``max_queue`` follow ``max_connections`` (64, 128 and 256 of its default 512: calls in
    flight and waiting hold their connections, so they must leave room for new ones), and
    ``client_bytes`` and ``max_buffered_bytes`` follow ``max_body_bytes`` (16 and 64 MiB at
    least, a body at the limit always fitting a client's share).  Change bounds with
    :meth:`update`, which derives and checks them again.
    """

    max_body_bytes: int = 4 << 20
    body_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 512
    max_header_bytes: int = 16 << 10
    max_buffered_bytes: int | None = None
    client_calls: int = 16
    client_bytes: int | None = None
    client_queue: int = 64
    client_wait_s: float = 30.0
    max_calls: int | None = None
    max_queue: int | None = None
    work_slots: int = 32
    connection_reserve: int | None = None
    address_connections: int = 64
    crowded_header_timeout_s: float = 1.0
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GATE_COUNTS, 0))
    #: the guarded protocol's connections (set by :func:`guarded_protocol`) and the gate's pools
    connections: ConnectionTable | None = field(default=None, repr=False, compare=False)
    shares: Gate | None = field(default=None, repr=False, compare=False)
    _derived: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        self._derived = tuple(k for k in _DERIVED if getattr(self, k) is None)
        self.update()
        self.allowed_hosts = tuple(h.lower().strip("[]") for h in self.allowed_hosts)

    def update(self, **changes: object) -> "ServeLimits":
        """Set ``changes`` (``fbrapids serve`` lowers ``max_connections`` below the process's
        descriptor limit), derive the bounds left None again and check them all; returns self."""
        for k, v in changes.items():
            setattr(self, k, v)
        for name in ("max_body_bytes", "max_connections"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 2:
                raise ServeConfigError(f"{name} must be an integer >= 2, got {getattr(self, name)!r}")
        self._derive()
        for name in ("max_header_bytes", "max_buffered_bytes", "client_calls", "client_bytes", "client_queue",
                     "max_calls", "max_queue", "work_slots", "address_connections"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ServeConfigError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("body_timeout_s", "header_timeout_s", "keep_alive_s", "client_wait_s", "crowded_header_timeout_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ServeConfigError(f"{name} must be a number of seconds > 0, got {v!r}")
        self._check_room()
        return self

    def _derive(self) -> None:
        """The bounds left None, from the others (class docstring)."""
        d = self._derived
        if "connection_reserve" in d:
            self.connection_reserve = min(64, self.max_connections // 8)
        room = self.max_connections - (self.connection_reserve or 0)
        if "max_calls" in d:
            self.max_calls = min(128, max(1, room // 3))
        if "max_queue" in d:
            self.max_queue = min(256, max(1, room - (self.max_calls or 0)))
        if "client_bytes" in d:
            self.client_bytes = max(16 << 20, self.max_body_bytes)
        if "max_buffered_bytes" in d:
            self.max_buffered_bytes = max(64 << 20, 2 * (self.client_bytes or 0))

    def _check_room(self) -> None:
        """Calls in flight and waiting leave room for new connections, and a client's share of
        the body bytes holds a body at the limit (class docstring)."""
        if type(self.connection_reserve) is not int or not 0 <= self.connection_reserve < self.max_connections:
            raise ServeConfigError(f"connection_reserve must be an integer in [0, max_connections="
                                   f"{self.max_connections}), got {self.connection_reserve!r}")
        room = self.max_connections - self.connection_reserve
        calls, queue = int(self.max_calls or 0), int(self.max_queue or 0)
        if calls + queue > room:
            raise ServeConfigError(f"max_calls + max_queue = {calls + queue} must be at most max_connections - "
                                   f"connection_reserve = {room}: calls hold their connections, and a new connection "
                                   "must find room")
        client, total = int(self.client_bytes or 0), int(self.max_buffered_bytes or 0)
        if client < self.max_body_bytes or total < 2 * client:
            raise ServeConfigError(f"client_bytes ({client}) must be at least max_body_bytes ({self.max_body_bytes}), "
                                   f"and max_buffered_bytes ({total}) at least twice client_bytes: a client alone "
                                   "may hold half of the bytes free")

    def as_dict(self) -> dict[str, int | float | None]:
        return {k: getattr(self, k) for k in ("max_body_bytes", "body_timeout_s", "header_timeout_s", "keep_alive_s",
                                               "max_connections", "max_header_bytes", "max_buffered_bytes",
                                               "client_calls", "client_bytes", "client_queue", "client_wait_s",
                                               "max_calls", "max_queue", "work_slots", "connection_reserve",
                                               "address_connections", "crowded_header_timeout_s")}


def host_allowed(host: bytes | None, allowed: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header names one of ``allowed`` (any port; ``"*"`` allows all),
    parsed strictly: a name, or an IP literal in brackets, then an optional ``:port`` and
    nothing else (``[::1]evil.example`` is no loopback name).

    Example:
        >>> host_allowed(b"[::1]:80", ("::1",)), host_allowed(None, ("::1",)), host_allowed(b"x", ("*",))
        (True, False, True)
        >>> host_allowed(b"[::1]evil.example", ("::1",)), host_allowed(b"localhost:80:80", ("localhost",))
        (False, False)
    """
    if "*" in allowed:
        return True
    if not host:
        return False
    m = _HOST.fullmatch(host.decode("latin-1").strip().lower())
    if m is None:
        return False
    name = m.group(1) or m.group(2)
    if m.group(1) is not None:
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return False
    return name in allowed


def _media_type(value: bytes | None) -> str:
    return (value or b"").decode("latin-1").split(";", 1)[0].strip().lower()


def head_refusal(scope: dict, limits: ServeLimits, tokens: ClientTokens | None
                 ) -> tuple[tuple[str, int, str, list[tuple[bytes, bytes]]] | None, str | None]:
    """What refuses a request from its head alone, in this order: a head over
    ``max_header_bytes`` (431), a repeated header (400), a Host not allowed (421), a missing
    or wrong token (401), a POST not of JSON (415), a Content-Length over ``max_body_bytes``
    (413); as ``(count, status, detail, extra headers)``, or None when none does; and the
    name of the token presented (None without per-client tokens).

    Example:
        >>> scope = {"method": "GET", "raw_path": b"/health", "headers": [(b"host", b"localhost:8000")]}
        >>> head_refusal(scope, ServeLimits(), None)
        (None, None)
        >>> head_refusal(scope, ServeLimits(), ClientTokens({"ci": "c" * 16}))[0][:2]
        ('unauthorised', 401)
    """
    lim = limits
    raw = scope.get("headers") or []
    head_bytes = len(scope.get("raw_path") or b"") + sum(len(k) + len(v) + 4 for k, v in raw)
    if head_bytes > lim.max_header_bytes:  # however the head arrived (one burst is no "incomplete event")
        return ("headers_refused", 431, f"request head of {head_bytes} bytes, more than "
                f"max_header_bytes={lim.max_header_bytes}", []), None
    repeated = [k.decode("latin-1") for k in (b"authorization", b"host", b"content-length", b"content-type")
                if sum(1 for name, _ in raw if name == k) > 1]
    if repeated:
        return ("headers_refused", 400, f"header {repeated[0]!r} given more than once", []), None
    headers = dict(raw)
    if not host_allowed(headers.get(b"host"), lim.allowed_hosts):
        return ("host_refused", 421, "Host header not served here (allowed: "
                f"{', '.join(lim.allowed_hosts)}; see --allow-host)", []), None
    name = None
    if tokens is not None:
        ok, name = tokens.identify(headers.get(b"authorization"))
        if not ok:
            return ("unauthorised", 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]), None
    if scope["method"] == "POST" and _media_type(headers.get(b"content-type")) != "application/json":
        return ("media_type_refused", 415, "POST bodies must be sent as Content-Type: application/json", []), name
    length = headers.get(b"content-length")
    if length is not None and (not length.isdigit() or int(length) > lim.max_body_bytes):
        return ("too_large", 413, f"request body of {length.decode('latin-1')[:20]} bytes, more than "
                f"max_body_bytes={lim.max_body_bytes}", []), name
    return None, name


def bound_head(head: bytes, data: bytes, max_header_bytes: int) -> tuple[bytes, bool, tuple[int, str] | None]:
    """A request head bounded as it arrives, in one burst or byte by byte: ``(the head kept
    so far, whether it is still being read, a refusal (status, detail) or None)``.  At most
    ``max_header_bytes``, and no obsolete line folding (a folded ``Authorization`` would be
    unfolded by the parser and accepted).

    Example:
        >>> bound_head(b"", b"GET / HTTP/1.1\\r\\nHost: x\\r\\n", 100)
        (b'GET / HTTP/1.1\\r\\nHost: x\\r\\n', True, None)
        >>> bound_head(b"GET / HTTP/1.1\\r\\n", b"Host: x\\r\\n\\r\\n", 100)
        (b'', False, None)
        >>> bound_head(b"", b"GET / HTTP/1.1\\r\\nA: b\\r\\n c\\r\\n", 100)[2]
        (400, 'folded header lines (obsolete line folding) are not accepted')
    """
    head = head + data
    end = _HEAD_END.search(head)
    part = head if end is None else head[: end.start()]
    if len(part) > max_header_bytes:
        return b"", False, (431, f"request head of more than max_header_bytes={max_header_bytes}")
    if _FOLD.search(part):
        return b"", False, (400, "folded header lines (obsolete line folding) are not accepted")
    return (b"", False, None) if end is not None else (head, True, None)


def guarded_protocol(limits: ServeLimits) -> type:
    """uvicorn's h11 protocol with a request-head deadline and the connection bounds of a
    :class:`~fbrapids.serving.connections.ConnectionTable` (module docstring; the table is
    ``limits.connections``); its refusals counted in ``limits.counts``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    counts = limits.counts
    table = limits.connections = ConnectionTable(limits.max_connections, limits.connection_reserve or 0,
                                                 limits.address_connections, limits.crowded_header_timeout_s, counts)

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head = b""  # the request head received so far (while one is being read)
        _reading_head = True
        peer: tuple = ()

        def data_received(self, data: bytes) -> None:
            if self._reading_head:
                self._head, self._reading_head, refusal = bound_head(self._head, data, limits.max_header_bytes)
                if refusal is not None:
                    return self._refuse_head(*refusal)
            super().data_received(data)

        def _refuse_head(self, status: int, detail: str) -> None:
            counts["headers_refused"] += 1
            body = json.dumps({"detail": detail}).encode()
            reason = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}[status]
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s" % (status, reason, len(body), body))
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.peer = tuple(self.client) if self.client else ("?", id(self))
            if not table.opened(self):
                log.warning("connection refused: all %d connections carry calls (max_connections)", len(table))
                transport.close()
                return
            self._arm()

        def idle(self) -> bool:
            """No request in progress: this connection may be closed to make room."""
            return self.cycle is None or self.cycle.response_complete

        def close(self) -> None:
            try:
                self.conn.send(h11.ConnectionClosed())
            except h11.LocalProtocolError:
                pass
            self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_deadline)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_deadline(self) -> None:
            self._head_timer = None
            if self.idle() and not self.transport.is_closing():  # a request being answered has the gate's deadlines
                counts["header_timeouts"] += 1
                log.warning("closed a connection that sent no complete request within %g s", limits.header_timeout_s)
                self.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._head, self._reading_head = b"", True  # the next request's head is bounded too
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            table.lost(self)
            super().connection_lost(exc)

    return GuardedH11Protocol


def descriptor_room(max_connections: int) -> int:
    """``max_connections`` lowered to leave 64 file descriptors free under the soft limit
    (raised to the hard limit first, where allowed).

    Example:
        >>> 1 <= descriptor_room(512) <= 512
        True
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + 64
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - 64))


class RepeatFilter(logging.Filter):
    """Lets a log line through once per ``interval_s`` per message text; the next one let
    through says how many were held back (a flood of ``Too many open files`` or of refused
    connections becomes one line per interval).

    Example:
        >>> f = RepeatFilter(interval_s=60)
        >>> rec = lambda: logging.LogRecord("x", logging.WARNING, "", 0, "same", None, None)
        >>> [f.filter(rec()) for _ in range(3)], f.held_back
        ([True, False, False], 2)
    """

    def __init__(self, interval_s: float = 10.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[str, tuple[float, int]] = {}
        self.held_back = 0

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            key = f"{record.name}:{record.levelno}:{record.msg}"[:300]
        except Exception:  # noqa: BLE001 - a log record must never raise
            return True
        now = time.monotonic()
        last, skipped = self._last.get(key, (-1e18, 0))
        if now - last < self.interval_s:
            self._last[key] = (last, skipped + 1)
            self.held_back += 1
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = (now, 0)
        if skipped:
            record.msg = f"{record.msg} ({skipped} similar lines held back in the last {self.interval_s:g} s)"
        return True


def install_log_filter(interval_s: float = 10.0) -> RepeatFilter:
    """One :class:`RepeatFilter` on the loggers a flood of clients fills (uvicorn's, asyncio's,
    this module's and the connection table's); returns it."""
    f = RepeatFilter(interval_s)
    for name in ("uvicorn.error", "asyncio", __name__, "fbrapids.serving.connections"):
        lg = logging.getLogger(name)
        if not any(isinstance(x, RepeatFilter) for x in lg.filters):
            lg.addFilter(f)
    return f
