"""The ASGI gate in front of the scorer: who a call is from, what it may hold, and the
access log.  The bounds are :class:`~fbrapids.serving.guard.ServeLimits`' (see
:mod:`fbrapids.serving.guard` for the checks from the headers and the connections).

A request first passes the checks from its headers alone (``Host``, the token,
``Content-Type``, ``Content-Length``; refused before a byte of the body is read).  Its
*client* is then its token's name when tokens are per client
(:class:`~fbrapids.serving.tokens.ClientTokens`), else its address; its connection counts
as proven (:class:`~fbrapids.serving.connections.ConnectionTable`).  A GET (``/health``, the
docs) goes to the app at once: it has no body and holds nothing.

A POST call then takes, in turn, units of four pools, each a
:class:`~fbrapids.serving.shares.FairShare` (no client may hold more than is left free for
the others, and one that holds nothing gets a unit whenever one is free):

1. a *call place* (``max_calls`` in all, ``client_calls`` per client): held until the call
   is answered.  Without one, the call waits for one, its body unread, in a *queue place*
   (``max_queue`` in all, ``client_queue`` per client) for at most ``client_wait_s``; without
   a queue place, or after the wait, it is answered 429 with ``Retry-After``;
2. its body's bytes as they arrive (``max_buffered_bytes`` in all, ``client_bytes`` per
   client): a body the client's share cannot hold is answered 429 (past ``client_bytes``) or
   503 (past its share of the rest), and the body is read with a deadline
   (``body_timeout_s``, 408) and a bound (``max_body_bytes``, 413);
3. a *work slot* (``work_slots`` in all, ``client_calls`` per client): the call is parsed
   and scored on a worker thread only while it holds one, so a client whose calls wait for
   the scorer cannot hold every thread; a call that gets none within ``client_wait_s`` is
   answered 503.

A call whose client hangs up is dropped where it is: waiting for a call place or a work
slot, while its body is read, and between slices of scoring (the scorer is handed a
``threading.Event`` in ``scope["fbrapids.gone"]``); counted as ``calls_dropped``.

Every request answered is logged through :class:`~fbrapids.serving.access_log.AccessLog`
(logger ``fbrapids.serving.access``), rate-limited per client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Awaitable, Callable, Sequence

from fbrapids.serving.access_log import AccessLog
from fbrapids.serving.connections import GONE
from fbrapids.serving.guard import ServeLimits, head_refusal
from fbrapids.serving.shares import FairShare
from fbrapids.serving.tokens import ClientTokens

ACCESS_LOGGER = "fbrapids.serving.access"
_RETRY = [(b"retry-after", b"1")]

Send = Callable[[dict], Awaitable[None]]
Receive = Callable[[], Awaitable[dict]]
#: the ASGI application behind the gate
App = Callable[[dict, Receive, Send], Awaitable[None]]


class Gate:
    """ASGI middleware: the checks from the headers, then the fair admission of each call
    and a bounded, timed body read (module docstring)."""

    def __init__(self, app: App, limits: ServeLimits, token: str | ClientTokens | None = None) -> None:
        self.app, self.limits = app, limits
        self.tokens = ClientTokens(token) if isinstance(token, str) else token
        self.counts = limits.counts
        self.calls = FairShare("calls", int(limits.max_calls or 0), limits.client_calls)
        self.queue = FairShare("queue", int(limits.max_queue or 0), limits.client_queue)
        # bytes: no floor (a body's first chunk too leaves as much free as the client then holds)
        self.body_bytes = FairShare("body_bytes", int(limits.max_buffered_bytes or 0), int(limits.client_bytes or 0),
                                    floor=0)
        self.slots = FairShare("work_slots", limits.work_slots, limits.client_calls)
        self.access = AccessLog(logging.getLogger(ACCESS_LOGGER))
        limits.shares = self

    def pools(self) -> dict[str, dict[str, int]]:
        """``/health``'s view of the four pools."""
        return {p.name: p.as_dict() for p in (self.calls, self.queue, self.body_bytes, self.slots)}

    def _sync(self) -> None:
        """The per-client bounds as ``limits`` says now (they may be changed while serving)."""
        lim = self.limits
        self.calls.per_client = self.slots.per_client = lim.client_calls
        self.queue.per_client, self.body_bytes.per_client = lim.client_queue, int(lim.client_bytes or 0)

    async def _answer(self, send: Send, status: int, detail: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close"), *extra]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the service has no websocket endpoint: refused before any check
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), [0]

        async def answered(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self._serve(scope, receive, answered)
        finally:
            if status[0]:
                peer = scope.get("client")
                self.access.record(scope.get("fbrapids.client") or (peer[0] if peer else "-"), peer,
                                   scope["method"], scope["path"], status[0], (time.monotonic() - started) * 1e3)

    async def _serve(self, scope: dict, receive: Receive, send: Send) -> None:
        refusal, name = head_refusal(scope, self.limits, self.tokens)
        if refusal is not None:
            counted, status, detail, extra = refusal
            self.counts[counted] += 1
            await self._answer(send, status, detail, extra)
            return
        client = name if name is not None else str((scope.get("client") or ("?",))[0])
        scope["fbrapids.client"] = client
        table = self.limits.connections
        if table is not None:
            table.proven(scope.get("client"), client)
        if scope["method"] != "POST":  # /health, the docs: no body, no scoring, nothing held
            await self.app(scope, receive, send)
            return
        await self._post(scope, receive, send, client)

    async def _post(self, scope: dict, receive: Receive, send: Send, client: str) -> None:
        """A POST call: a call place, its body, a work slot, then the app; dropped wherever
        it is when its client hangs up."""
        self._sync()
        table = self.limits.connections
        gone, cancelled = asyncio.Event(), threading.Event()

        def lost() -> None:
            gone.set()
            cancelled.set()

        handle = table.watch(scope.get("client"), lost) if table is not None else None
        if handle is GONE:
            self.counts["calls_dropped"] += 1
            return
        try:
            if not await self._call_place(send, client, gone):
                return
            try:
                await self._with_body(scope, receive, send, client, gone, cancelled)
            finally:
                self.calls.give(client)
        finally:
            if table is not None:
                table.unwatch(handle)

    async def _call_place(self, send: Send, client: str, gone: asyncio.Event) -> bool:
        """A call place for ``client``: at once, or after a wait in a queue place (module
        docstring); False when the call was answered 429 or its client has gone."""
        lim = self.limits
        if self.calls.take(client):
            return True
        if not self.queue.take(client):
            self.counts["client_busy"] += 1
            await self._answer(send, 429, f"{self.calls.held(client)} calls of this client are in flight and "
                               f"{self.queue.held(client)} more wait: the most its share of the service allows "
                               f"(client_calls={lim.client_calls}, client_queue={lim.client_queue}); retry when one "
                               "is answered", _RETRY)
            return False
        self.counts["client_waits"] += 1
        try:
            placed = await self.calls.wait(client, lim.client_wait_s, gone)
        finally:
            self.queue.give(client)
        if placed:
            return True
        if gone.is_set():
            self.counts["calls_dropped"] += 1
            return False
        self.counts["client_busy"] += 1
        await self._answer(send, 429, f"this call waited {lim.client_wait_s:g} s (client_wait_s) for one of its "
                           f"client's {lim.client_calls} calls in flight to be answered; retry later", _RETRY)
        return False

    async def _with_body(self, scope: dict, receive: Receive, send: Send, client: str, gone: asyncio.Event,
                         cancelled: threading.Event) -> None:
        """The body read (its bytes held until the call is answered), a work slot, the app."""
        got = await self._read_body(scope, receive, send, client)
        if got is None:
            return
        try:
            if not await self.slots.wait(client, self.limits.client_wait_s, gone):
                if gone.is_set():
                    self.counts["calls_dropped"] += 1
                    return
                self.counts["busy_refused"] += 1
                await self._answer(send, 503, f"no work slot was free for this client within {self.limits.client_wait_s:g}"
                                   " s (client_wait_s); retry later", _RETRY)
                return
            try:
                if gone.is_set():
                    self.counts["calls_dropped"] += 1
                    return
                scope["fbrapids.gone"] = cancelled
                await self._call(scope, receive, send)
            finally:
                self.slots.give(client)
        finally:
            self.body_bytes.give(client, got)

    async def _read_body(self, scope: dict, receive: Receive, send: Send, client: str) -> int | None:
        """Read the body into ``scope["fbrapids.body"]`` (bounded, timed, its bytes taken
        from the client's share): the bytes held, or None when the call was answered or its
        client hung up (nothing then held)."""
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
                    n = self._drop(client, n)
                    await self._answer(send, 408, f"request body not received within {lim.body_timeout_s:g} s")
                    return None
                if msg["type"] != "http.request":  # the client hung up mid-body: nothing is scored
                    counts["incomplete_bodies"] += 1
                    return None
                chunk = msg.get("body", b"")
                if n + len(chunk) > lim.max_body_bytes:
                    counts["too_large"] += 1
                    n = self._drop(client, n)
                    await self._answer(send, 413, f"request body of more than {lim.max_body_bytes} bytes, more than "
                                       f"max_body_bytes={lim.max_body_bytes}")
                    return None
                if chunk and not self.body_bytes.take(client, len(chunk)):
                    n = self._drop(client, n)
                    await self._refuse_bytes(send, client, len(chunk))
                    return None
                n += len(chunk)
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    break
            scope["fbrapids.body"] = b"".join(chunks)
            return n
        finally:
            if "fbrapids.body" not in scope:  # refused or abandoned: nothing of it is held
                self._drop(client, n)

    def _drop(self, client: str, n: int) -> int:
        """Give back the ``n`` body bytes ``client`` held (before answering: the bytes are free
        for the others at once); returns 0, what it then holds for this call."""
        if n:
            self.body_bytes.give(client, n)
        return 0

    async def _refuse_bytes(self, send: Send, client: str, more: int) -> None:
        """429 when the body would take ``client`` past ``client_bytes``, else 503 (its share
        of what the other clients leave free)."""
        lim, held = self.limits, self.body_bytes.held(client)
        if held + more > self.body_bytes.per_client:
            self.counts["client_busy"] += 1
            await self._answer(send, 429, f"this client's calls in flight hold more than client_bytes="
                               f"{lim.client_bytes} bytes of bodies; retry when one is answered", _RETRY)
            return
        self.counts["busy_refused"] += 1
        await self._answer(send, 503, f"too many request bodies being received: this client holds {held} bytes, its "
                           f"share of the {self.body_bytes.free} bytes free (max_buffered_bytes="
                           f"{lim.max_buffered_bytes}); retry later", _RETRY)

    async def _call(self, scope: dict, receive: Receive, send: Send) -> None:
        done = False

        async def replayed() -> dict:
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": scope["fbrapids.body"], "more_body": False}
            return await receive()

        await self.app(scope, replayed, send)
