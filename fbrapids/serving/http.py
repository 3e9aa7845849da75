"""A small HTTP scoring service on FastAPI + uvicorn (the optional extra ``serve``).

Endpoints:

* ``POST /score`` ``{"request": {...}, "items": [{...}, ...]}`` ->
  ``{"scores": [...], "n": N}``, one click probability per item, in order;
* ``POST /score_batch`` ``{"requests": [{"request": ..., "items": [...]}, ...]}`` ->
  ``{"scores": [[...], ...]}``;
* ``GET /health`` -> ``{"status": "ok", "stats": {...}, "item_cache": {...}, "limits": {...}}``:
  the scorer's counters (rejected calls and replaced NaN values included: the numbers
  policy of :mod:`fbrapids.serving.scorer`), the item cache's entries and bytes, and the
  bounds below.

Run it with ``fbrapids serve EXPORT_DIR`` (or :func:`serve`).

Bounded and defensive: a body over ``max_body_bytes`` is answered 413 before any of it is
parsed (from its ``Content-Length``, or as it streams in); more than ``max_items`` items in
one call or ``max_requests`` requests in one batch is 413; a body that is not JSON or not
of the shape above is 422, and a record with a missing column or a bad value is 400 with
``{"detail": "item 3: column 'price' must be a number, got 'abc'"}``.  An error echoes at
most a few hundred characters of the input.  With a ``token``, every endpoint needs
``Authorization: Bearer <token>`` (401 otherwise); :func:`serve` refuses a non-loopback
host without one unless ``insecure=True``.  Concurrency: uvicorn serves many connections;
scoring endpoints are plain functions run on its thread pool, one hand-off per request (the
token check is a coroutine and an endpoint returns its own ``JSONResponse``, so neither
takes another), and the scorer serialises the model work with a lock.

Example:
    >>> from fbrapids.serving.example import example_spec
    >>> from fbrapids.serving.scorer import Scorer
    >>> from fbrapids.trainers import WideAndDeep, StoreConfig
    >>> spec = example_spec()
    >>> m = WideAndDeep(len(spec.dense), spec.sparse, embedding_dim=4, deep_mlp=[4], store=StoreConfig(cache_rows=64))
    >>> app = create_app(Scorer(m, spec))
    >>> sorted(r.path for r in app.routes if r.path.startswith(("/score", "/health")))
    ['/health', '/score', '/score_batch']
"""

from __future__ import annotations

import gc
import hmac
import ipaddress
import json
import logging
import os
from typing import Any, Awaitable, Callable

try:
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the HTTP service needs FastAPI and uvicorn: pip install 'fbrapids[serve]'") from exc

from fbrapids.errors import RequestError, RequestTooLargeError, ServeConfigError
from fbrapids.serving.scorer import Scorer
from fbrapids.serving.spec import show

log = logging.getLogger(__name__)

TOKEN_ENV = "FBRAPIDS_SERVE_TOKEN"
MAX_BODY_BYTES = 16 << 20
DETAIL_CHARS = 500  #: the longest error detail sent back


class ScoreRequest(BaseModel):
    """One request and its candidate items (JSON objects of raw columns)."""

    request: dict[str, Any]
    items: list[dict[str, Any]]


class BatchScoreRequest(BaseModel):
    requests: list[ScoreRequest]


def _cut(text: Any, limit: int = DETAIL_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else f"{s[: limit - 30]}... ({len(s)} characters in all)"


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 before the app
    (and its JSON parser) sees any of it; the body read is handed to the app whole."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, int(max_bytes)

    async def _reject(self, send: Callable[[dict], Awaitable[None]], n: int | str) -> None:
        body = json.dumps({"detail": f"request body of {n} bytes, more than max_body_bytes={self.max_bytes}"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._reject(send, length.decode("latin-1")[:20])
            return
        chunks, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > self.max_bytes:
                await self._reject(send, f"more than {self.max_bytes}")
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> dict:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)


def create_app(scorer: Scorer, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI application serving ``scorer`` (see the module docstring)."""

    async def authorised(request: Request) -> None:  # async: no thread-pool hop per request
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    app = FastAPI(title="fbrapids scoring", version="1",
                  dependencies=[] if token is None else [Depends(authorised)])
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = [{"loc": [x if isinstance(x, int) else _cut(x, 100) for x in list(e.get("loc", ()))[:8]],
                   "msg": _cut(e.get("msg", ""), 200), "type": str(e.get("type", ""))[:50],
                   "input": show(e.get("input"), 100)} for e in errors[:5]]
        if len(errors) > 5:
            detail.append({"msg": f"... and {len(errors) - 5} more errors"})
        return JSONResponse(status_code=422, content={"detail": detail})

    def run(entries: list[dict[str, Any]]) -> list[list[float]]:
        try:
            return [p.astype(float).tolist() for p in scorer.score_batch(entries)]
        except RequestTooLargeError as exc:
            raise HTTPException(413, _cut(exc)) from None
        except RequestError as exc:  # bad records: the client's fault
            raise HTTPException(400, _cut(exc)) from None

    # The scoring endpoints return their JSONResponse themselves: FastAPI then skips its own
    # response serialisation, a second thread-pool hop per request for a plain function.
    @app.post("/score", response_class=JSONResponse)
    def score(body: ScoreRequest) -> JSONResponse:
        scores = run([{"request": body.request, "items": body.items}])[0]
        return JSONResponse({"scores": scores, "n": len(scores)})

    @app.post("/score_batch", response_class=JSONResponse)
    def score_batch(body: BatchScoreRequest) -> JSONResponse:
        return JSONResponse({"scores": run([{"request": r.request, "items": r.items} for r in body.requests])})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "stats": dict(scorer.stats), "item_cache": scorer.item_cache_usage(),
                "limits": {"max_items": scorer.max_items, "max_requests": scorer.max_requests,
                           "max_body_bytes": max_body_bytes, "cache_items": scorer.cache_items}}

    return app


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds to loopback only.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
        (True, True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, token: str | None, insecure: bool) -> str | None:
    """The bearer token to require: ``token``, else ``$FBRAPIDS_SERVE_TOKEN``; a
    non-loopback ``host`` without one is refused unless ``insecure``."""
    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host) and not insecure:
        raise ServeConfigError(f"serving on {host!r} (not loopback) needs a bearer token: pass --token or set "
                         f"${TOKEN_ENV}, or --insecure to serve without one")
    return token


def serve(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          insecure: bool = False, max_body_bytes: int = MAX_BODY_BYTES, **scorer_options: Any) -> None:
    """Load an export (:func:`fbrapids.serving.export.export_model`, manifest verified),
    freeze the start-up heap out of full garbage collections (:func:`freeze_heap`) and serve
    it until stopped."""
    import uvicorn

    from fbrapids.serving.export import load_scorer

    token = resolve_token(host, token, insecure)
    app = create_app(load_scorer(export_dir, **scorer_options), token=token, max_body_bytes=max_body_bytes)
    log.info("start-up heap frozen: %d objects out of the collector's full passes", freeze_heap())
    uvicorn.run(app, host=host, port=port, log_level="info")


def freeze_heap() -> int:
    """Collect garbage, then move every object alive now (the loaded model, the spec, the
    imported modules) to the collector's permanent generation (:func:`gc.freeze`); returns
    how many objects that is.

    A full collection walks every tracked object: with a loaded process's few hundred
    thousand, one takes 100-250 ms on 2 cores and stalls every request in flight (it set the
    p99 of the 8-client benchmark).  Frozen, it walks only what requests allocated.  Objects
    frozen are never collected as cycles (reference counting still frees them), so call it
    once, after loading, as :func:`serve` does.

    Example:
        >>> import gc
        >>> freeze_heap() >= 1
        True
        >>> gc.unfreeze()
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
