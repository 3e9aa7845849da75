"""The HTTP service under a careless or hostile client, on a real uvicorn on 127.0.0.1:
bodies over the limit refused before parsing, bounded error echoes, batch bounds, bearer
tokens, start-up refusals and CLI usage errors, a hypothesis fuzz of request bodies
(never a 500, never a null score) and a bounded load test (no errors, memory flat)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
uvicorn = pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from fbrapids.app.cli import main as cli_main  # noqa: E402
from fbrapids.errors import ServeConfigError  # noqa: E402
from fbrapids.serving import Scorer  # noqa: E402
from fbrapids.serving.example import request_records, train_example  # noqa: E402
from fbrapids.serving.http import TOKEN_ENV, create_app, resolve_token  # noqa: E402
from fbrapids.serving.tokens import ClientTokens  # noqa: E402

MAX_BODY = 256 << 10
TOKEN = "s3cret-token-0123456789"


def _start(app) -> tuple[str, uvicorn.Server, threading.Thread]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    return f"127.0.0.1:{port}", server, thread


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    model, spec, _, (users, ads, _) = train_example(rows=1500, seed=2)
    return model, spec, users, ads


@pytest.fixture(scope="module")
def services(trained):
    model, spec, _, _ = trained
    scorer = Scorer(model, spec, cache_items=2000, max_items=300, max_requests=4)
    open_addr, s1, t1 = _start(create_app(scorer, max_body_bytes=MAX_BODY))
    auth_addr, s2, t2 = _start(create_app(Scorer(model, spec), token=TOKEN))
    yield {"open": open_addr, "auth": auth_addr, "scorer": scorer}
    for s, t in ((s1, t1), (s2, t2)):
        s.should_exit = True
        t.join(timeout=20)


def request(addr: str, path: str, body: bytes | None = None, headers: dict | None = None,
            chunked: bool = False) -> tuple[int, bytes]:
    host, port = addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if body is None:
            conn.request("GET", path, headers=hdrs)
        elif chunked:
            conn.request("POST", path, body=iter([body[i : i + 8192] for i in range(0, len(body), 8192)]),
                         headers=hdrs, encode_chunked=True)
        else:
            conn.request("POST", path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def post_oversized(addr: str, path: str, body: bytes, chunked: bool) -> tuple[int, bytes]:
    """POST a body the server refuses early, on a raw socket.

    The server answers 413 and closes while the client may still be sending: http.client then
    raises on the send and loses the answer, so this client swallows the broken send and reads
    what the server said (the answer was sent before the close, so it is in the socket).
    """
    host, port = addr.split(":")
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(body)
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n\r\n" % (
        path.encode(), host.encode(), framing)
    if chunked:
        parts = [body[i : i + 8192] for i in range(0, len(body), 8192)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=60) as s:
        try:
            s.sendall(head + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole body was read: the answer is already on its way
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
                head_end = answer.find(b"\r\n\r\n")
                if head_end >= 0:
                    fields = dict(line.split(b": ", 1) for line in answer[:head_end].split(b"\r\n")[1:])
                    if len(answer) - head_end - 4 >= int(fields.get(b"content-length", b"0")):
                        break
        except ConnectionResetError:
            pass
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer.split(b"\r\n\r\n", 1)[-1]


def _body(trained, n: int = 8, seed: int = 0) -> dict:
    _, _, users, ads = trained
    req, items = request_records(users, ads, n, seed=seed)
    return {"request": req, "items": items}


def test_body_over_the_limit_refused_before_parsing(trained, services) -> None:
    big = json.dumps({**_body(trained), "pad": "x" * (2 * MAX_BODY)}).encode()
    for chunked in (False, True):
        status, answer = post_oversized(services["open"], "/score", big, chunked=chunked)
        assert status == 413 and b"max_body_bytes=262144" in answer, (status, answer[:200])
    status, answer = request(services["open"], "/score", json.dumps(_body(trained)).encode(), chunked=True)
    assert status == 200 and len(json.loads(answer)["scores"]) == 8


def test_errors_echo_a_few_hundred_bytes(trained, services) -> None:
    body = _body(trained)
    body["items"][1]["price"] = "y" * 200_000
    status, answer = request(services["open"], "/score", json.dumps(body).encode())
    assert status == 400 and len(answer) < 600 and b"item 1: column 'price' must be a number" in answer
    status, answer = request(services["open"], "/score", json.dumps({"request": "z" * 200_000, "items": []}).encode())
    assert status == 422 and len(answer) < 2000, len(answer)


def test_batch_and_item_bounds(trained, services) -> None:
    one = _body(trained, 3)
    status, answer = request(services["open"], "/score_batch", json.dumps({"requests": [one] * 5}).encode())
    assert status == 413 and b"5 requests in one call, more than max_requests=4" in answer
    status, answer = request(services["open"], "/score_batch", json.dumps({"requests": [one] * 4}).encode())
    assert status == 200 and [len(s) for s in json.loads(answer)["scores"]] == [3] * 4
    many = {**one, "items": one["items"] * 101}
    status, answer = request(services["open"], "/score", json.dumps(many).encode())
    assert status == 413 and b"max_items=300" in answer
    status, answer = request(services["open"], "/health")
    health = json.loads(answer)
    assert health["stats"]["rejected_too_large"] >= 2 and health["limits"]["max_body_bytes"] == MAX_BODY
    assert 0 < health["item_cache"]["bytes"] <= health["item_cache"]["max_bytes"]


def test_bearer_token(trained, services) -> None:
    body = json.dumps(_body(trained)).encode()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        assert request(services["auth"], "/score", body, headers)[0] == 401
        assert request(services["auth"], "/health", None, headers)[0] == 401
    status, answer = request(services["auth"], "/score", body, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and len(json.loads(answer)["scores"]) == 8


def test_serve_freezes_the_start_up_heap(trained) -> None:
    """What ``serve`` does once loaded: the objects alive then leave the collector's full
    passes (a full pass then walks a small fraction of the heap; counted, not timed)."""
    import gc

    from fbrapids.serving.http import freeze_heap

    gc.collect()
    tracked = len(gc.get_objects())
    try:
        frozen = freeze_heap()
        assert frozen >= 0.9 * tracked and len(gc.get_objects()) < 0.1 * tracked
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_lone_surrogate_is_a_400_naming_the_column(trained, services) -> None:
    """JSON's ``"\\ud800"`` decodes to a lone surrogate, which no UTF-8 column can hold: a 400
    naming the record and column (before: a UnicodeEncodeError from pyarrow, a 500)."""
    body = _body(trained)
    body["items"][2]["title"] = "ab\ud800cd"
    body["request"]["query"] = "fine"
    status, answer = request(services["open"], "/score", json.dumps(body).encode())
    assert status == 400 and "item 2: column 'title'" in json.loads(answer)["detail"], answer[:300]
    body["items"][2]["title"] = "ok \u00e9 \U0001f600"  # a real pair is text
    body["request"]["query"] = "q\udfff"
    status, answer = request(services["open"], "/score", json.dumps(body).encode())
    assert status == 400 and "request 0: column 'query'" in json.loads(answer)["detail"], answer[:300]


def test_one_thread_pool_hop_per_scoring_request(trained, services, monkeypatch) -> None:
    """Serving load: a /score request, with or without a token, hands work to the
    thread pool once (the scoring); the token check and the response serialisation run on
    the event loop.  Counted by wrapping FastAPI's thread-pool entry points."""
    import fastapi.dependencies.utils
    import fastapi.routing

    hops: list[str] = []

    def counting(module):
        inner = module.run_in_threadpool

        async def run_in_threadpool(func, *args, **kwargs):
            hops.append(getattr(kwargs.get("function", func), "__name__", repr(func)))
            return await inner(func, *args, **kwargs)

        monkeypatch.setattr(module, "run_in_threadpool", run_in_threadpool)

    counting(fastapi.routing)
    counting(fastapi.dependencies.utils)
    body = json.dumps(_body(trained)).encode()
    for addr, headers in ((services["open"], {}), (services["auth"], {"Authorization": f"Bearer {TOKEN}"})):
        hops.clear()
        status, answer = request(addr, "/score", body, headers)
        assert status == 200 and len(json.loads(answer)["scores"]) == 8
        assert hops == ["score"], hops
    hops.clear()
    batch = json.dumps({"requests": [_body(trained)] * 2}).encode()
    status, answer = request(services["open"], "/score_batch", batch)
    assert status == 200 and [len(s) for s in json.loads(answer)["scores"]] == [8, 8] and hops == ["score_batch"]


def test_public_host_needs_a_token(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert resolve_token("127.0.0.1", None, False) is None
    with pytest.raises(ServeConfigError, match="needs a bearer token"):
        resolve_token("0.0.0.0", None, False)
    assert resolve_token("0.0.0.0", None, True) is None
    assert resolve_token("10.1.2.3", "t" * 16, False) == ClientTokens("t" * 16)
    monkeypatch.setenv(TOKEN_ENV, "from-env-0123456789")
    assert resolve_token("0.0.0.0", None, False) == ClientTokens("from-env-0123456789")
    monkeypatch.delenv(TOKEN_ENV)
    assert cli_main(["serve", str(tmp_path), "--host", "0.0.0.0"]) == 2  # refused before loading anything
    assert "needs a bearer token" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--max-items", "-1"], ["--cache-items", "-5"], ["--max-requests", "0"],
                                  ["--max-body-bytes", "0"], ["--cache-bytes", "-1"], ["--port", "70000"],
                                  ["--max-items", "ten"]])
def test_cli_options_validated(args, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["serve", str(tmp_path), *args])
    assert exc.value.code == 2 and f"argument {args[0]}" in capsys.readouterr().err


# -- fuzz ---------------------------------------------------------------------------------------
_json = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
                     | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)


@st.composite
def bodies(draw, base: dict) -> bytes:
    """A valid body with some values replaced by arbitrary JSON, columns dropped or added,
    ids repeated, or an arbitrary JSON document; sometimes raw bytes."""
    kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(_json)).encode()
    body = json.loads(json.dumps(base))
    records = [body["request"], *body["items"]]
    for _ in range(draw(st.integers(1, 4))):
        rec = draw(st.sampled_from(records))
        col = draw(st.sampled_from(sorted(rec)))
        op = draw(st.sampled_from(["value", "drop", "extra", "number"]))
        if op == "value":
            rec[col] = draw(_json)
        elif op == "drop":
            rec.pop(col, None)
        elif op == "extra":
            rec[draw(st.text(max_size=5))] = draw(_json)
        else:
            rec[col] = draw(st.floats() | st.integers(min_value=-(1 << 66), max_value=1 << 66))
    if draw(st.booleans()):
        body["items"].append(dict(body["items"][0], ad_id=body["items"][1].get("ad_id")))
    return json.dumps(body).encode()  # NaN / Infinity written as such: Python's JSON reads them


def test_fuzz_never_500_never_null(trained, services) -> None:
    base = _body(trained, 3, seed=7)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(bodies(base), st.sampled_from(["/score", "/score_batch"]))
    def check(raw: bytes, path: str) -> None:
        if path == "/score_batch" and raw[:1] == b"{":
            raw = b'{"requests": [' + raw + b"]}"
        status, answer = request(services["open"], path, raw)
        assert status in (200, 400, 413, 422), (status, raw[:300], answer[:300])
        if status == 200:
            scores = json.loads(answer)["scores"]
            flat = scores if path == "/score" else [x for s in scores for x in s]
            assert all(isinstance(x, float) and 0.0 <= x <= 1.0 for x in flat), answer[:300]

    check()


# -- load ---------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
def test_bounded_load_no_errors_memory_flat(trained, services) -> None:
    """8 clients x 3 rounds of 120 requests of 64 items (a catalogue of 1,500 ads, cache
    2,000 items: it fills in the first round); every answer 200 with 64 finite scores, and
    the process's RSS after the third round within 40 MiB of the first round's."""
    _, _, users, ads = trained
    cat = ads.head(1500)
    bodies_ = [json.dumps(dict(zip(("request", "items"), request_records(users, cat, 64, seed=k)))).encode()
               for k in range(120)]
    errors, rss = 0, []

    def post(body: bytes) -> bool:
        status, answer = request(services["open"], "/score", body)
        return status == 200 and len(json.loads(answer)["scores"]) == 64 and \
            bool(np.isfinite(json.loads(answer)["scores"]).all())

    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            errors += sum(not ok for ok in pool.map(post, bodies_))
            rss.append(_rss_bytes())
    assert errors == 0
    assert rss[-1] - rss[0] < 40 << 20, [r >> 20 for r in rss]
