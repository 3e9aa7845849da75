"""A server that one client cannot starve, attacked on a real guarded uvicorn on
127.0.0.1 with a small model and short attacks from several source addresses (127.0.0.0/8):
idle sockets, many addresses of large calls, stalled bodies, clients that hang up; tokens
per client; the fair shares themselves; the access log per client.  The attacks' timings are
``benchmarks/inference.py --attack``'s."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading

import pytest

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

from fbrapids.errors import ServeConfigError  # noqa: E402
from fbrapids.serving import Scorer  # noqa: E402
from fbrapids.serving.example import example_catalogue, example_spec, request_records  # noqa: E402
from fbrapids.serving.guard import ServeLimits  # noqa: E402
from fbrapids.serving.http import create_app  # noqa: E402
from fbrapids.serving.shares import FairShare  # noqa: E402
from fbrapids.serving.tokens import ClientTokens, parse_tokens, read_tokens  # noqa: E402

from _attack_helpers import Server, http, read_answer, wait_for  # noqa: E402

SHARED = "shared-token-0123456789"
NAMED = {"ranker": "ranker-token-0123456789", "batch": "batch-token-0123456789"}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def catalogue(model_and_kwargs):
    users, ads = example_catalogue(50, 400, seed=3)
    return users, ads


def _server(model_and_kwargs, token, **limits) -> tuple[Server, Scorer]:
    model, _ = model_and_kwargs
    lim = ServeLimits(**{"header_timeout_s": 2.0, "body_timeout_s": 2.0, **limits})
    scorer = Scorer(model, example_spec(), chunk_items=64, max_items=2000)
    return Server(create_app(scorer, token=token, limits=lim), lim), scorer


def _body(catalogue, n: int, seed: int = 0) -> bytes:
    req, items = request_records(*catalogue, n, seed=seed)
    return json.dumps({"request": req, "items": items}).encode()


def _post(server: Server, raw: bytes, token: str, source: str | None = None) -> int:
    head = (f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nAuthorization: Bearer {token}\r\n\r\n").encode()
    with socket.create_connection(server.addr, timeout=60, source_address=(source, 0) if source else None) as s:
        s.sendall(head + raw)
        return read_answer(s)[0]


# -- the rules ---------------------------------------------------------------------------------
def test_fair_share_rules() -> None:
    """A client leaves as much free as it holds; one that holds nothing gets a unit while one
    is free; freed units go to the waiting client holding least (ties: the one waiting
    longest); a per-client cap; a waiter whose client hung up leaves the queue."""
    pool = FairShare("slots", total=10, per_client=3)
    taken = {c: sum(pool.take(c) for _ in range(4)) for c in "abcdg"}
    assert taken == {"a": 3, "b": 3, "c": 2, "d": 1, "g": 1} and pool.free == 0  # c: 2 <= 2 left free

    async def waits() -> tuple[list[str], bool]:
        order: list[str] = []

        async def one(client: str) -> None:
            if await pool.wait(client, timeout=0.2):
                order.append(client)

        tasks = [asyncio.ensure_future(one(c)) for c in "acde"]
        gone = asyncio.Event()
        quitter = asyncio.ensure_future(pool.wait("f", timeout=5.0, gone=gone))
        await asyncio.sleep(0)
        gone.set()  # its client hung up: it leaves the queue
        quit_early = await quitter
        for c in ("b", "b", "b", "g", "e", "a"):  # e (holds 0) first, then d (holds 1) once 3 are free, then a
            pool.give(c)
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)  # c (holds 2) never gets its third: it would leave less free than it holds
        return order, quit_early

    assert asyncio.run(waits()) == (["e", "d", "a"], False)
    assert pool.waiting() == 0 and pool.held("c") == 2


def test_token_files_one_shared_or_one_per_client(tmp_path) -> None:
    one = tmp_path / "one"
    one.write_text(SHARED + "\n")  # the format since the start: its first line
    assert read_tokens(one) == ClientTokens(SHARED) and not read_tokens(one).per_client
    named = tmp_path / "named"
    named.write_text("# name token\n" + "".join(f"{n}  {t}\n" for n, t in NAMED.items()))
    tokens = read_tokens(named)
    assert tokens.names == ["ranker", "batch"] and tokens.identify(f"Bearer {NAMED['batch']}".encode()) == (True, "batch")
    assert "token" not in repr(tokens).replace("token(s)", "")  # never the tokens themselves
    for lines, message in ((["ranker " + "r" * 16, "ranker " + "s" * 16], "line 2: the name 'ranker' is given twice"),
                           ([SHARED, "batch " + "b" * 16], "line 2: a file of one token holds only it"),
                           (["ranker " + "r" * 16, "batch " + "r" * 16], "the same token is given to two clients"),
                           (["ranker short"], "line 1 (ranker): a bearer token needs at least 16"),
                           (["a b c"], "line 1: expected 'NAME TOKEN', got 3 field(s)")):
        with pytest.raises(ServeConfigError, match=re.escape(f"tokens.txt: {message}")):
            parse_tokens(lines, "tokens.txt")


# -- the attacks -------------------------------------------------------------------------------
def test_idle_sockets_from_many_addresses_leave_room(model_and_kwargs, catalogue) -> None:
    """60 idle unauthenticated sockets from three addresses against 40 connections (16
    unproven per address): the oldest are closed as new ones come, and an authorised client
    and /health are answered every time while they are held."""
    server, _ = _server(model_and_kwargs, SHARED, max_connections=40, address_connections=16)
    try:
        idle = [socket.create_connection(server.addr, timeout=30, source_address=(f"127.0.0.{2 + k % 3}", 0))
                for k in range(60)]
        counts = server.limits.counts
        assert wait_for(lambda: counts["connections_evicted"] >= 60 - (40 - server.limits.connection_reserve))
        statuses = [_post(server, _body(catalogue, 8, k), SHARED) for k in range(4)]
        health = [http(server, "GET", "/health", headers=bearer(SHARED)) for _ in range(4)]
        assert statuses == [200] * 4 and [h[0] for h in health] == [200] * 4
        conns = json.loads(health[-1][2])["connections"]
        assert conns["unproven"] <= 40 - server.limits.connection_reserve and counts["connections_refused"] == 0
        for s in idle:
            s.close()
    finally:
        server.stop()


def test_addresses_share_slots_and_hung_up_calls_are_dropped(model_and_kwargs, catalogue) -> None:
    """Three addresses x 4 connections of 600-item calls, the scorer held meanwhile: each
    address holds at most what the fair shares allow (no more work slots than it leaves
    free), the victim's call gets a slot and is answered; the attackers then hang up, and
    their calls are dropped without a slice scored."""
    server, scorer = _server(model_and_kwargs, SHARED, max_connections=64, work_slots=8, client_calls=4)
    gate = server.limits.shares
    raw, statuses = _body(catalogue, 600, seed=9), []
    socks = []
    try:
        with scorer.turn("the test"):  # nothing is scored until the attackers have sent their calls
            for k in range(12):
                s = socket.create_connection(server.addr, timeout=30, source_address=(f"127.0.0.{2 + k % 3}", 0))
                s.sendall((f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(raw)}\r\nAuthorization: Bearer {SHARED}\r\n\r\n").encode() + raw)
                socks.append(s)
            assert wait_for(lambda: gate.slots.used + gate.slots.waiting() == 12)
            held = [gate.slots.held(f"127.0.0.{a}") for a in (2, 3, 4)]
            assert sum(held) == gate.slots.used and max(held) <= 4 and gate.slots.waiting() > 0
            assert gate.slots.free >= 2  # each leaves at least as much free as it holds
            victim = threading.Thread(target=lambda: statuses.append(_post(server, _body(catalogue, 8), SHARED)))
            victim.start()
            assert wait_for(lambda: gate.slots.held("127.0.0.1") == 1)  # a slot at once: it held none
            slices = scorer.stats["slices"]
            for s in socks:  # the attackers hang up
                s.close()
            assert wait_for(lambda: scorer.stats["dropped_calls"] + server.limits.counts["calls_dropped"] >= 12)
        victim.join(timeout=60)
        assert statuses == [200] and scorer.stats["slices"] == slices + 1  # the victim's one slice, no other
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_stalled_bodies_of_five_addresses_leave_room_for_a_small_call(model_and_kwargs, catalogue) -> None:
    """Five addresses each stall two bodies at the 256 KiB limit (2.5 MiB asked of a 1 MiB
    pool): each address holds no more than it leaves free, the rest are refused 503 at once,
    and the victim's call is answered while they stall."""
    server, _ = _server(model_and_kwargs, SHARED, max_body_bytes=256 << 10, client_bytes=256 << 10,
                        max_buffered_bytes=1 << 20, body_timeout_s=3.0)
    head = (f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {256 << 10}\r\nAuthorization: Bearer {SHARED}\r\n\r\n").encode()
    socks = []
    try:
        for k in range(10):
            s = socket.create_connection(server.addr, timeout=30, source_address=(f"127.0.0.{2 + k % 5}", 0))
            try:
                s.sendall(head + b" " * ((256 << 10) - 1))
            except OSError:  # refused mid-body
                pass
            socks.append(s)
        counts, pool = server.limits.counts, server.limits.shares.body_bytes
        # 1 MiB holds at most three of the ten bodies (each client one: client_bytes; each leaves
        # as much free as it holds): seven are refused as they come
        assert wait_for(lambda: counts["busy_refused"] + counts["client_busy"] >= 7)
        assert pool.used <= pool.total and max(pool.held(f"127.0.0.{2 + k}") for k in range(5)) < 256 << 10
        assert _post(server, _body(catalogue, 8), SHARED) == 200
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_a_client_is_its_token_name_and_the_access_log_is_per_client(model_and_kwargs, catalogue, caplog) -> None:
    """Named tokens: one token from two addresses is one client (client_calls=1,
    client_queue=1: its third call is refused), another token from the same address is
    another client; the access log holds back one client's lines, not the other's."""
    server, scorer = _server(model_and_kwargs, ClientTokens(NAMED), client_calls=1, client_queue=1)
    gate = server.limits.shares
    gate.access.burst, gate.access.per_s = 2.0, 0.001
    caplog.set_level(logging.INFO, logger="fbrapids.serving.access")
    out: dict[str, list[int]] = {"ranker": [], "batch": []}
    raw = _body(catalogue, 8)

    def call(name: str, source: str) -> None:
        out[name].append(_post(server, raw, NAMED[name], source))

    try:
        with scorer.turn("the test"):
            threads = [threading.Thread(target=call, args=("ranker", a)) for a in ("127.0.0.2", "127.0.0.3")]
            for t in threads:
                t.start()
            assert wait_for(lambda: gate.calls.held("ranker") == 1 and gate.queue.held("ranker") == 1)
            call("ranker", "127.0.0.3")  # a third call of the same client: refused at once
            threads.append(threading.Thread(target=call, args=("batch", "127.0.0.2")))
            threads[-1].start()
            assert wait_for(lambda: gate.calls.held("batch") == 1)  # another client on the same address: admitted
        for t in threads:
            t.join(timeout=60)
        assert sorted(out["ranker"]) == [200, 200, 429] and out["batch"] == [200]
        for _ in range(3):
            call("batch", "127.0.0.2")
        # a line is logged once its answer is sent: the client may read it first
        assert wait_for(lambda: gate.access.held_back("batch") == 2 and gate.access.held_back("ranker") == 1)
        lines = [r.getMessage() for r in caplog.records if r.name == "fbrapids.serving.access"]
        ranker = [ln for ln in lines if ln.startswith("ranker ")]
        batch = [ln for ln in lines if ln.startswith("batch ")]
        assert len(ranker) == 2 and len(batch) == 2 and '"POST /score" 429' in "".join(ranker)
        call("batch", "127.0.0.2")  # still held back: counted
        assert wait_for(lambda: gate.access.held_back("batch") == 3)
    finally:
        server.stop()
