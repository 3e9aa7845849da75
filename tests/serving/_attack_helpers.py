"""Shared by the attack suites: a real guarded uvicorn on 127.0.0.1 (the configuration
``fbrapids serve`` runs), raw-socket clients that can stall or hang up, and /health reads."""

from __future__ import annotations

import json
import socket
import threading
import time

import uvicorn

from fbrapids.serving.guard import ServeLimits
from fbrapids.serving.http import server_config

TOKEN = "attack-suite-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Server:
    """A guarded uvicorn serving ``app`` on a free loopback port, in a daemon thread."""

    def __init__(self, app, limits: ServeLimits) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.limits = limits
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port, limits, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)

    @property
    def addr(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


def http(server: Server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
         host: str | None = None, timeout: float = 60) -> tuple[int, dict, bytes]:
    """One request on a fresh connection: ``(status, headers, body)``; the answer read to its
    Content-Length, or to the close (a refused upload answers before it is all sent)."""
    hdrs = {"Host": host or f"127.0.0.1:{server.port}", **(headers or {})}
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
        hdrs.setdefault("Content-Length", str(len(body)))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    with socket.create_connection(server.addr, timeout=timeout) as s:
        try:
            s.sendall(head.encode("latin-1") + (body or b""))
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_answer(s)


def read_answer(s: socket.socket) -> tuple[int, dict, bytes]:
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                fields = {k.lower(): v for k, v in (ln.split(b": ", 1) for ln in data[:end].split(b"\r\n")[1:])}
                if len(data) - end - 4 >= int(fields.get(b"content-length", b"-1")) >= 0:
                    break
    except ConnectionResetError:
        pass
    if not data.startswith(b"HTTP/1.1 "):
        return 0, {}, data
    end = data.find(b"\r\n\r\n")
    fields = {k.decode().lower(): v.decode() for k, v in (ln.split(b": ", 1) for ln in data[:end].split(b"\r\n")[1:])}
    return int(data.split(b" ", 2)[1]), fields, data[end + 4 :]


def post_json(server: Server, path: str, obj, headers: dict | None = None) -> tuple[int, dict]:
    status, _, body = http(server, "POST", path, json.dumps(obj).encode(), headers)
    return status, json.loads(body) if body else {}


def health(server: Server, headers: dict | None = None) -> dict:
    status, _, body = http(server, "GET", "/health", headers=headers)
    assert status == 200, (status, body[:200])
    return json.loads(body)


def wait_for(predicate, seconds: float = 20.0) -> bool:
    """Poll ``predicate`` until true (the server counts an event it saw on another task)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
