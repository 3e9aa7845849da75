"""What stands between the network and the scorer: the ASGI gate, the guarded HTTP
protocol and the rate-limited log.

:class:`Gate` (ASGI middleware) answers from the request's headers alone, before a byte of
the body is read:

* a ``Host`` header not in ``allowed_hosts`` (port ignored) is 421: a web page that
  rebinds its own DNS name to 127.0.0.1 cannot reach a loopback server;
* with a token, a missing or wrong ``Authorization: Bearer`` is 401, on every path
  (``/docs``, ``/redoc`` and ``/openapi.json`` included);
* a POST whose ``Content-Type`` is not ``application/json`` is 415 (a web form or a
  ``text/plain`` fetch from another site cannot drive the service);
* a ``Content-Length`` over ``max_body_bytes`` is 413.

Each of those answers carries ``Connection: close``: the server stops reading, the rest of
the body is never received.  Then the body is read with a deadline (``body_timeout_s``,
408) and a bound (413 as it streams in past ``max_body_bytes``), and all bodies being read
together hold at most ``max_buffered_bytes`` (503 past it).  A client that hangs up before
its body is complete is dropped: the app never sees a partial body.  What was read is
handed to the app in ``scope["fbrapids.body"]``.  Every refusal is counted (:attr:`Gate.counts`,
served by ``/health``).

Per client (the peer's address, in ``scope["fbrapids.client"]``; the scorer takes its slices
in turns by it): at most ``client_calls`` POST calls in flight, and at most ``client_bytes``
of bodies being read or waiting to be scored.  A call past ``client_calls`` waits, its body
not read, until one of its client's calls is answered: at most ``client_queue`` of them
per client and ``client_wait_s`` seconds each (``client_waits`` counts them); past either,
or past ``client_bytes``, 429 with ``Retry-After`` (``client_busy``).  So a client with 64
connections has no more calls queued than one with 16 (a front end multiplexing its users
may need that many), cannot fill the worker threads, and a client that retries at once is
held waiting, not answered in a loop that would cost the server as much as scoring.

Before those, the request head itself: more than ``max_header_bytes`` of it (counted by the
gate from the parsed headers, and by the protocol as the bytes arrive, in one burst or byte
by byte) is 431; a folded header line (obsolete line folding, which the parser would unfold
into an accepted ``Authorization``) or a repeated ``Authorization``, ``Host``,
``Content-Length`` or ``Content-Type`` is 400 (``headers_refused``); a ``Host`` is parsed
strictly (a name or a bracketed IP literal, an optional port, nothing else).

:func:`guarded_protocol` is uvicorn's h11 protocol with two more bounds: a connection must
send a complete request head within ``header_timeout_s`` of connecting or of its last
answer (a stalled client is closed, counted as ``header_timeouts``), and past
``max_connections`` open connections a new one is closed at once (``connections_refused``),
well below the process's file-descriptor limit.  :class:`RepeatFilter` lets one log line
through per ``interval_s`` and counts the ones it held back.

Example:
    >>> limits = ServeLimits()
    >>> limits.max_body_bytes, limits.header_timeout_s, host_allowed(b"localhost:8000", limits.allowed_hosts)
    (4194304, 10.0, True)
    >>> host_allowed(b"attacker.example:8000", limits.allowed_hosts)
    False
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
import resource
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from fbrapids.errors import ServeConfigError

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
GATE_COUNTS = ("unauthorised", "host_refused", "media_type_refused", "too_large", "body_timeouts",
               "incomplete_bodies", "busy_refused", "header_timeouts", "connections_refused", "headers_refused",
               "client_busy", "client_waits")
_HOST = re.compile(r"\[([0-9a-f:.]+)\](?::[0-9]{1,5})?|([a-z0-9._-]+)(?::[0-9]{1,5})?")
_FOLD = re.compile(rb"\n[ \t]")
_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass
class ServeLimits:
    """The service's bounds (module docstring); the defaults are those of ``fbrapids serve``."""

    max_body_bytes: int = 4 << 20
    body_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 512
    max_header_bytes: int = 16 << 10
    max_buffered_bytes: int = 64 << 20
    client_calls: int = 16
    client_bytes: int = 16 << 20
    client_queue: int = 64
    client_wait_s: float = 30.0
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GATE_COUNTS, 0))

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_connections", "max_header_bytes", "max_buffered_bytes", "client_calls",
                     "client_bytes", "client_queue"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ServeConfigError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("body_timeout_s", "header_timeout_s", "keep_alive_s", "client_wait_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ServeConfigError(f"{name} must be a number of seconds > 0, got {v!r}")
        self.allowed_hosts = tuple(h.lower().strip("[]") for h in self.allowed_hosts)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("max_body_bytes", "body_timeout_s", "header_timeout_s", "keep_alive_s",
                                               "max_connections", "max_header_bytes", "max_buffered_bytes",
                                               "client_calls", "client_bytes", "client_queue", "client_wait_s")}


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


class Gate:
    """ASGI middleware: the checks from the headers, then a bounded, timed body read
    (module docstring)."""

    def __init__(self, app: Any, limits: ServeLimits, token: str | None = None) -> None:
        self.app, self.limits = app, limits
        self.expected = None if token is None else f"Bearer {token}".encode()
        self.counts = limits.counts
        self.buffered = 0
        self.calls: dict[str, int] = {}  # per client (peer address): calls past the gate, not yet answered
        self.client_buffered: dict[str, int] = {}  # per client: body bytes held (being read or scored)
        self.waiting: dict[str, int] = {}  # per client: calls waiting for one of its calls to be answered
        self._answered: asyncio.Condition | None = None  # notified when a call is answered (on the event loop)

    async def _answer(self, send: Callable[[dict], Awaitable[None]], status: int, detail: str,
                      extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close"), *extra]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] == "websocket":  # the service has no websocket endpoint: refused before any check
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._head_refusal(scope)
        if refusal is not None:
            counted, status, detail, extra = refusal
            self.counts[counted] += 1
            await self._answer(send, status, detail, extra)
            return
        lim = self.limits
        client = str((scope.get("client") or ("?",))[0])
        scope["fbrapids.client"] = client
        if scope["method"] != "POST":  # /health, the docs: no body, no scoring, never capped per client
            await self._admitted(scope, receive, send, client)
            return
        if self.calls.get(client, 0) >= lim.client_calls and not await self._wait_for_room(client):
            self.counts["client_busy"] += 1  # per client: many connections are no more calls
            await self._answer(send, 429, f"{lim.client_calls} calls of this client are in flight "
                               f"(client_calls) and {lim.client_queue} more wait (client_queue) or waited "
                               f"{lim.client_wait_s:g} s; retry when one is answered", [(b"retry-after", b"1")])
            return
        self.calls[client] = self.calls.get(client, 0) + 1
        try:
            await self._admitted(scope, receive, send, client)
        finally:
            self.calls[client] -= 1
            if not self.calls[client]:
                del self.calls[client]
            if self._answered is not None and self.waiting.get(client):
                async with self._answered:
                    self._answered.notify_all()

    def _head_refusal(self, scope: dict) -> tuple[str, int, str, list[tuple[bytes, bytes]]] | None:
        """What refuses a request from its head alone, in this order: a head over
        ``max_header_bytes`` (431), a repeated header (400), a Host not allowed (421), a missing
        or wrong token (401), a POST not of JSON (415), a Content-Length over ``max_body_bytes``
        (413); as ``(count, status, detail, extra headers)``, or None when none does."""
        lim = self.limits
        raw = scope.get("headers") or []
        head_bytes = len(scope.get("raw_path") or b"") + sum(len(k) + len(v) + 4 for k, v in raw)
        if head_bytes > lim.max_header_bytes:  # however the head arrived (one burst is no "incomplete event")
            return ("headers_refused", 431, f"request head of {head_bytes} bytes, more than "
                    f"max_header_bytes={lim.max_header_bytes}", [])
        repeated = [k.decode("latin-1") for k in (b"authorization", b"host", b"content-length", b"content-type")
                    if sum(1 for name, _ in raw if name == k) > 1]
        if repeated:
            return "headers_refused", 400, f"header {repeated[0]!r} given more than once", []
        headers = dict(raw)
        if not host_allowed(headers.get(b"host"), lim.allowed_hosts):
            return ("host_refused", 421, "Host header not served here (allowed: "
                    f"{', '.join(lim.allowed_hosts)}; see --allow-host)", [])
        if self.expected is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            return "unauthorised", 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]
        if scope["method"] == "POST" and _media_type(headers.get(b"content-type")) != "application/json":
            return "media_type_refused", 415, "POST bodies must be sent as Content-Type: application/json", []
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > lim.max_body_bytes):
            return ("too_large", 413, f"request body of {length.decode('latin-1')[:20]} bytes, more than "
                    f"max_body_bytes={lim.max_body_bytes}", [])
        return None

    async def _wait_for_room(self, client: str) -> bool:
        """Wait (the body unread) until ``client`` has fewer than ``client_calls`` calls in
        flight: False at once past ``client_queue`` waiting calls, or after ``client_wait_s``."""
        lim = self.limits
        if self.waiting.get(client, 0) >= lim.client_queue:
            return False
        if self._answered is None:
            self._answered = asyncio.Condition()
        self.counts["client_waits"] += 1
        self.waiting[client] = self.waiting.get(client, 0) + 1
        try:
            async with self._answered:
                await asyncio.wait_for(self._answered.wait_for(lambda: self.calls.get(client, 0) < lim.client_calls),
                                       lim.client_wait_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self.waiting[client] -= 1
            if not self.waiting[client]:
                del self.waiting[client]

    async def _admitted(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                        send: Callable[[dict], Awaitable[None]], client: str) -> None:
        """The body read (bounded, timed, counted per client) and the call handed to the app."""
        lim, counts = self.limits, self.counts
        chunks: list[bytes] = []
        n = 0
        deadline = time.monotonic() + lim.body_timeout_s
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    counts["body_timeouts"] += 1
                    await self._answer(send, 408, f"request body not received within {lim.body_timeout_s:g} s")
                    return
                if msg["type"] != "http.request":  # the client hung up mid-body: nothing is scored
                    counts["incomplete_bodies"] += 1
                    return
                chunk = msg.get("body", b"")
                n += len(chunk)
                if n > lim.max_body_bytes:
                    counts["too_large"] += 1
                    await self._answer(send, 413, f"request body of more than {lim.max_body_bytes} bytes, more than "
                                       f"max_body_bytes={lim.max_body_bytes}")
                    return
                if self.buffered + len(chunk) > lim.max_buffered_bytes:
                    counts["busy_refused"] += 1
                    await self._answer(send, 503, "too many request bodies being received; retry later",
                                       [(b"retry-after", b"1")])
                    return
                held = self.client_buffered.get(client, 0)
                if held + len(chunk) > lim.client_bytes:
                    counts["client_busy"] += 1
                    await self._answer(send, 429, f"this client's calls in flight hold more than client_bytes="
                                       f"{lim.client_bytes} bytes of bodies; retry when one is answered",
                                       [(b"retry-after", b"1")])
                    return
                self.client_buffered[client] = held + len(chunk)
                self.buffered += len(chunk)
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    break
            scope["fbrapids.body"] = b"".join(chunks)
        finally:
            got = sum(len(c) for c in chunks)
            self.buffered -= got
            if "fbrapids.body" not in scope:  # refused or abandoned: nothing of it is queued
                self._give_back(client, got)
        chunks.clear()
        try:
            await self._call(scope, receive, send)
        finally:  # the client's body bytes count until its call is answered (queued work)
            self._give_back(client, got)

    def _give_back(self, client: str, n: int) -> None:
        left = self.client_buffered.get(client, 0) - n
        if left > 0:
            self.client_buffered[client] = left
        else:
            self.client_buffered.pop(client, None)

    async def _call(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                    send: Callable[[dict], Awaitable[None]]) -> None:
        done = False

        async def replayed() -> dict:
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": scope["fbrapids.body"], "more_body": False}
            return await receive()

        await self.app(scope, replayed, send)


def guarded_protocol(limits: ServeLimits) -> type:
    """uvicorn's h11 protocol with a request-head deadline and a connection cap (module
    docstring); its refusals counted in ``limits.counts``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    counts = limits.counts

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head = b""  # the request head received so far (while one is being read)
        _reading_head = True

        def data_received(self, data: bytes) -> None:
            if self._reading_head and not self._head_ok(data):
                return
            super().data_received(data)

        def _head_ok(self, data: bytes) -> bool:
            """Bound the request head as it arrives, in one burst or byte by byte: at most
            ``max_header_bytes``, and no obsolete line folding (a folded ``Authorization``
            would be unfolded by the parser and accepted): refused with ``Connection: close``."""
            head = self._head + data
            end = _HEAD_END.search(head)
            part = head if end is None else head[: end.start()]
            if len(part) > limits.max_header_bytes:
                return self._refuse_head(431, f"request head of more than max_header_bytes={limits.max_header_bytes}")
            if _FOLD.search(part):
                return self._refuse_head(400, "folded header lines (obsolete line folding) are not accepted")
            self._head, self._reading_head = (b"", False) if end is not None else (head, True)
            return True

        def _refuse_head(self, status: int, detail: str) -> bool:
            counts["headers_refused"] += 1
            body = json.dumps({"detail": detail}).encode()
            reason = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}[status]
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s" % (status, reason, len(body), body))
            self._head, self._reading_head = b"", False
            self.transport.close()
            return False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                counts["connections_refused"] += 1
                log.warning("connection refused: %d open, max_connections=%d", len(self.connections) - 1,
                            limits.max_connections)
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_deadline)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_deadline(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being answered; its body has the gate's deadline
            if not self.transport.is_closing():
                counts["header_timeouts"] += 1
                log.warning("closed a connection that sent no complete request within %g s", limits.header_timeout_s)
                try:
                    self.conn.send(h11.ConnectionClosed())
                except h11.LocalProtocolError:
                    pass
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._head, self._reading_head = b"", True  # the next request's head is bounded too
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
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
    this module's); returns it."""
    f = RepeatFilter(interval_s)
    for name in ("uvicorn.error", "uvicorn.access", "asyncio", __name__):
        lg = logging.getLogger(name)
        if not any(isinstance(x, RepeatFilter) for x in lg.filters):
            lg.addFilter(f)
    return f
