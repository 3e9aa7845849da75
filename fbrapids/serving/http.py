"""A small HTTP scoring service on FastAPI + uvicorn (the optional extra ``serve``).

Endpoints:

* ``POST /score`` ``{"request": {...}, "items": [{...}, ...]}`` ->
  ``{"scores": [...], "n": N}``, one click probability per item, in order;
* ``POST /score_batch`` ``{"requests": [{"request": ..., "items": [...]}, ...]}`` ->
  ``{"scores": [[...], ...]}``, per request: a request that fails has ``null`` scores and
  ``errors[i] = {"status": 400, "detail": ...}`` (the answer is 200 while any request was
  scored; when none was, the first failure is the answer); every bad request is named (the
  first :data:`~fbrapids.serving.scorer.MAX_NAMED_ERRORS` in full) and the good ones scored;
* ``GET /health`` -> ``{"status": "ok", "stats": {...}, "item_cache": {...}, "refused": {...},
  "tables": {...}, "limits": {...}, "connections": {...}, "shares": {...}}``: the scorer's
  counters (rejected calls, replaced NaN values, filled nulls, unseen ids, dropped calls: the
  policy of :mod:`fbrapids.serving.scorer`), the item cache's entries and bytes, the gate's
  refusals, each embedding table's rows (they never grow while serving), the bounds below,
  the connections open and the use of the gate's fair shares.

Run it with ``fbrapids serve EXPORT_DIR`` (or :func:`serve`).

Bounded and defensive (:mod:`fbrapids.serving.guard` for the network side): the ``Host``
header, the bearer token and the ``Content-Type`` are checked from the headers, and a
``Content-Length`` over ``max_body_bytes`` refused, before a byte of the body is read
(421, 401, 415, 413); the body is read with a deadline; a body holding more JSON objects
than ``max_items`` allows is refused while it is parsed (413), so a body of millions of
empty items costs no more than the bound; more than ``max_items`` items or
``max_requests`` requests is 413; a body that is not JSON or not of the shape above is
422; a record with a missing column or a bad value is 400 with ``{"detail": "item 3:
column 'price' must be a number, got 'abc'"}``; a value the model cannot score is 422
naming the record and model input.  An error echoes at most a few hundred characters of
the input.  With a ``token`` (at least :data:`MIN_TOKEN_CHARS` characters; or one per named
client, :mod:`fbrapids.serving.tokens`), every path needs ``Authorization: Bearer <token>``,
the documentation pages included; :func:`serve` refuses a non-loopback host without one
unless ``insecure=True``.

Concurrency: uvicorn serves many connections (idle unauthenticated ones closed to make
room: :mod:`fbrapids.serving.connections`); the gate (:mod:`fbrapids.serving.gate`) admits
each call with a fair share per client of call places, queue places, body bytes and work
slots; parsing, validation and scoring run in a plain endpoint function on its thread pool
(at least ``work_slots`` + :data:`SPARE_THREADS` threads), one hand-off per request, never on
the event loop; the scorer scores each call in slices of ``chunk_items``
(``contended_chunk_items`` while another client uses it) under a lock taken in turns by
client, so a large call delays others by one slice, and drops a call whose client hung up.  :func:`serve` sets the interpreter's thread switch interval to
:data:`SWITCH_INTERVAL_S`: a call's hand-offs between threads (event loop, worker, the
lock) then wait at most that long for another thread's Python work, not 5 ms each.

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

import contextlib
import functools
import gc
import ipaddress
import json
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, AsyncIterator, Callable, Hashable, Unpack

import numpy as np

try:
    import anyio.to_thread
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the HTTP service needs FastAPI and uvicorn: pip install 'fbrapids[serve]'") from exc

from fbrapids.errors import CallCancelledError, ModelInputError, RequestError, RequestTooLargeError, ServeConfigError
from fbrapids.runs.heap import limit_arenas
from fbrapids.serving.gate import ACCESS_LOGGER, Gate
from fbrapids.serving.guard import LOOPBACK_NAMES, ServeLimits, descriptor_room, guarded_protocol, install_log_filter
from fbrapids.serving.scorer import Scorer, ScorerOptions
from fbrapids.serving.spec import show
from fbrapids.serving.tokens import MIN_TOKEN_CHARS, ClientTokens, check_token, read_tokens

if TYPE_CHECKING:  # (annotations only: uvicorn is imported when a server is built)
    import uvicorn

__all__ = ["create_app", "serve", "build_server", "server_config", "resolve_token", "check_token", "MIN_TOKEN_CHARS",
           "ClientTokens", "is_loopback", "allowed_hosts", "freeze_heap", "parse_body", "TOKEN_ENV"]

log = logging.getLogger(__name__)

TOKEN_ENV = "FBRAPIDS_SERVE_TOKEN"
MAX_BODY_BYTES = ServeLimits.max_body_bytes
TURN_BYTES = 64 << 10  #: a body larger than this is parsed in a turn of the scorer's lock
DETAIL_CHARS = 500  #: the longest error detail sent back
SWITCH_INTERVAL_S = 0.0005  #: the thread switch interval serve() sets (Python's default: 5 ms)
#: worker threads beyond the work slots (the thread pool has at least ``work_slots`` + this)
SPARE_THREADS = 8
#: glibc malloc arenas serve() keeps (glibc's default: eight per core), so the RSS plateaus
MALLOC_ARENAS = 2


class ScoreRequest(BaseModel):
    """One request and its candidate items (JSON objects of raw columns): the body of ``/score``
    (documented in the OpenAPI schema; the body is parsed and checked by the endpoint)."""

    request: dict[str, object]
    items: list[dict[str, object]]


def _cut(text: object, limit: int = DETAIL_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else f"{s[: limit - 30]}... ({len(s)} characters in all)"


class BodyError(Exception):
    """A body the endpoint answers with ``status`` (not JSON, not of the expected shape, too many objects)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class _Counted(dict):
    """A JSON object hook that stops the parse once a body holds more objects than a call may."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.n = limit, 0

    def __call__(self, pairs: list[tuple[str, object]]) -> dict[str, object]:
        self.n += 1
        if self.n > self.limit:
            raise BodyError(413, f"more than {self.limit} JSON objects in the body: more items than max_items allows")
        return dict(pairs)


def parse_body(raw: bytes, max_objects: int) -> object:
    """``raw`` parsed as JSON, refused (:class:`BodyError` 413) as soon as it holds more than
    ``max_objects`` objects: a body of millions of empty items costs no more than the bound.
    A body with few ``{`` bytes (the usual case) is parsed at full speed.

    Example:
        >>> parse_body(b'{"a": [{}, {}]}', 3)
        {'a': [{}, {}]}
        >>> parse_body(b'[{}, {}, {}, {}]', 3)
        Traceback (most recent call last):
        ...
        fbrapids.serving.http.BodyError: more than 3 JSON objects in the body: more items than max_items allows
    """
    try:
        if raw.count(b"{") <= max_objects:
            return json.loads(raw)
        return json.loads(raw, object_pairs_hook=_Counted(max_objects))
    except BodyError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BodyError(422, f"body is not JSON: {_cut(exc, 200)}") from None


def _entry(body: object, where: str) -> dict[str, object]:
    if not isinstance(body, dict) or not isinstance(body.get("request"), dict) or \
            not isinstance(body.get("items"), list) or not all(type(it) is dict for it in body["items"]):
        raise BodyError(422, f"{where}: expected an object with 'request' (an object of columns) and 'items' "
                             f"(a list of objects), got {show(body, 100)}")
    return {"request": body["request"], "items": body["items"]}


def _status(exc: RequestError) -> int:
    return 413 if isinstance(exc, RequestTooLargeError) else 422 if isinstance(exc, ModelInputError) else 400


def create_app(scorer: Scorer, token: str | ClientTokens | None = None, max_body_bytes: int | None = None,
               limits: ServeLimits | None = None) -> FastAPI:
    """The FastAPI application serving ``scorer`` (see the module docstring), behind a
    :class:`~fbrapids.serving.gate.Gate` with ``limits`` (``max_body_bytes`` overrides
    theirs).  ``token``: the bearer token every path needs (at least ``MIN_TOKEN_CHARS``
    characters), or :class:`~fbrapids.serving.tokens.ClientTokens` (one per named client),
    or None."""
    limits = limits or ServeLimits()
    if max_body_bytes is not None:
        limits.update(max_body_bytes=int(max_body_bytes))
    tokens = ClientTokens(token) if isinstance(token, str) else token
    max_objects = scorer.max_items + 2 * scorer.max_requests + 2

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # every work slot has a worker thread, and a few are left over (the docs pages)
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, limits.work_slots + SPARE_THREADS)
        yield

    app = FastAPI(title="fbrapids scoring", version="1", lifespan=lifespan)
    app.add_middleware(Gate, limits=limits, token=tokens)
    answer = functools.partial(_answer, scorer, max_objects)
    many = functools.partial(_many_entries, scorer)

    # Plain functions: parsing, validation and scoring run on the thread pool, never on the
    # event loop, in one hand-off per request (they return their own JSONResponse, so FastAPI
    # adds no serialisation hop).
    @app.post("/score", response_class=JSONResponse, openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": ScoreRequest.model_json_schema()}}}})
    def score(request: Request) -> JSONResponse:
        return answer(_one_entry, request.scope["fbrapids.body"], False, request.scope.get("fbrapids.client"),
                      request.scope.get("fbrapids.gone"))

    @app.post("/score_batch", response_class=JSONResponse)
    def score_batch(request: Request) -> JSONResponse:
        """``{"requests": [{"request": ..., "items": [...]}, ...]}``: scores per request; a
        request that fails has ``null`` scores and its error in ``errors`` (200 while any
        request was scored)."""
        return answer(many, request.scope["fbrapids.body"], True, request.scope.get("fbrapids.client"),
                      request.scope.get("fbrapids.gone"))

    @app.get("/health")
    async def health() -> dict[str, object]:  # on the event loop: no worker thread to wait for, reads counters only
        return _health(scorer, limits)

    return app


def _answer(scorer: Scorer, max_objects: int, parse: Callable[[object], list[dict[str, object]]], raw: bytes,
            batch: bool, client: Hashable, gone: threading.Event | None = None) -> JSONResponse:
    """One ``/score`` (``batch`` False) or ``/score_batch`` call, from the raw body to the
    response: parsed (at most ``max_objects`` JSON objects), turned into entries by
    ``parse``, scored for ``client``; a bad body or request is its status and detail.  A call
    whose client has gone (``gone`` set) is dropped before its parse and between slices."""
    try:
        entries = parse(_parse_in_turn(scorer, raw, max_objects, client, gone))
        each: list[np.ndarray | RequestError] = []
        one: list[np.ndarray] = []
        if batch:
            each = scorer.score_each(entries, client, gone=gone)
        else:
            one = scorer.score_batch(entries, client, gone=gone)
    except CallCancelledError as exc:  # nobody reads this answer
        return JSONResponse({"detail": str(exc)}, status_code=499)
    except BodyError as exc:
        return JSONResponse({"detail": _cut(exc.detail)}, status_code=exc.status)
    except RequestError as exc:
        return JSONResponse({"detail": _cut(exc)}, status_code=_status(exc))
    if not batch:
        scores = one[0].astype(float).tolist()
        return JSONResponse({"scores": scores, "n": len(scores)})
    return _batch_response(each)


def _parse_in_turn(scorer: Scorer, raw: bytes, max_objects: int, client: Hashable,
                   gone: threading.Event | None = None) -> object:
    """The JSON of ``raw``; a large body's parse holds the interpreter, so it takes its turn
    among ``client``'s like a slice of scoring."""
    if len(raw) > TURN_BYTES:
        with scorer.turn(client, gone):
            return parse_body(raw, max_objects)
    return parse_body(raw, max_objects)


def _batch_response(results: list[np.ndarray | RequestError]) -> JSONResponse:
    """``/score_batch``'s answer: scores per request (``null`` for a failed one, its status and
    detail in ``errors``); when none was scored, the first failure is the answer."""
    failed = [r for r in results if isinstance(r, RequestError)]
    if failed and len(failed) == len(results):  # nothing scored: the first failure is the answer
        return JSONResponse({"detail": _cut(failed[0])}, status_code=_status(failed[0]))
    out: dict[str, object] = {"scores": [None if isinstance(r, RequestError) else r.astype(float).tolist()
                                      for r in results]}
    if failed:
        out["errors"] = [{"status": _status(r), "detail": _cut(r)} if isinstance(r, RequestError) else None
                         for r in results]
    return JSONResponse(out)


def _one_entry(body: object) -> list[dict[str, object]]:
    """``/score``'s body as the one entry it is."""
    return [_entry(body, "body")]


def _many_entries(scorer: Scorer, body: object) -> list[dict[str, object]]:
    """``/score_batch``'s body as its entries (more than ``scorer.max_requests`` are passed
    on as they are: the scorer refuses and counts them)."""
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise BodyError(422, f"body: expected an object with 'requests' (a list), got {show(body, 100)}")
    if len(body["requests"]) > scorer.max_requests:  # refused (and counted) by the scorer
        return body["requests"]
    return [_entry(r, f"requests[{i}]") for i, r in enumerate(body["requests"])]


def _health(scorer: Scorer, limits: ServeLimits) -> dict[str, object]:
    """``/health``'s answer: the scorer's counters, cache use, refusals, the connections and
    the gate's pools now, table sizes and limits."""
    out: dict[str, object] = {"status": "ok", "stats": dict(scorer.stats), "item_cache": scorer.item_cache_usage(),
           "refused": dict(limits.counts),
           "tables": {k: len(s) for k, s in scorer.model.stores().items()},
           "limits": {"max_items": scorer.max_items, "max_requests": scorer.max_requests,
                      "chunk_items": scorer.chunk_items, "contended_chunk_items": scorer.contended_chunk_items,
                      "cache_items": scorer.cache_items,
                      **scorer.cost.as_dict(), **limits.as_dict()}}
    if limits.connections is not None:
        out["connections"] = limits.connections.as_dict()
    if limits.shares is not None:
        out["shares"] = limits.shares.pools()
    return out


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


def resolve_token(host: str, token: str | None, insecure: bool, token_file: str | os.PathLike | None = None
                  ) -> ClientTokens | None:
    """The bearer tokens to require: those of ``token_file`` (one token, or one per named
    client: :mod:`fbrapids.serving.tokens`), else ``token`` (visible in ``ps`` when given on a
    command line: prefer the file or the environment), else ``$FBRAPIDS_SERVE_TOKEN``; each
    checked by :func:`check_token` (``""`` is refused, never read as "no token").  A
    non-loopback ``host`` without one is refused unless ``insecure``."""
    tokens = None
    if token_file is not None:
        if token is not None:
            raise ServeConfigError("give the token once: --token-file or --token, not both")
        tokens = read_tokens(token_file)
    elif token is None:
        token = os.environ.get(TOKEN_ENV)
    if tokens is None and token is not None:
        tokens = ClientTokens(token)
    if tokens is None and not is_loopback(host) and not insecure:
        raise ServeConfigError(f"serving on {host!r} (not loopback) needs a bearer token: pass --token-file or set "
                               f"${TOKEN_ENV}, or --insecure to serve without one")
    return tokens


def allowed_hosts(host: str, extra: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The ``Host`` header names served: the loopback names, the bind address when it is a
    specific one, and ``extra`` (``"*"``: any).

    Example:
        >>> allowed_hosts("127.0.0.1")
        ('127.0.0.1', 'localhost', '::1')
        >>> allowed_hosts("10.0.0.5", ["ctr.internal"])
        ('127.0.0.1', 'localhost', '::1', '10.0.0.5', 'ctr.internal')
    """
    names = [*LOOPBACK_NAMES]
    if host not in ("0.0.0.0", "::", "") and host not in names:
        names.append(host)
    names += [h for h in extra if h not in names]
    return tuple(names)


def server_config(app: FastAPI, host: str, port: int, limits: ServeLimits, log_level: str = "info") -> uvicorn.Config:
    """The ``uvicorn.Config`` :func:`serve` runs ``app`` with: the guarded h11 protocol
    (request-head deadline, connection bounds), the keep-alive timeout, the request-head size
    bound, the gate's access log (per client; uvicorn's own is off) and a rate-limited log
    (:mod:`fbrapids.serving.guard`)."""
    import uvicorn

    limits.update(max_connections=descriptor_room(limits.max_connections))
    install_log_filter()
    access = logging.getLogger(ACCESS_LOGGER)
    access.setLevel(logging.INFO if log_level.lower() in ("info", "debug", "trace") else logging.WARNING)
    if not access.handlers and not logging.getLogger().handlers:  # nobody would print it (as uvicorn's own)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        access.addHandler(handler)
        access.propagate = False
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=guarded_protocol(limits),
                          timeout_keep_alive=max(1, int(limits.keep_alive_s)), access_log=False,
                          h11_max_incomplete_event_size=limits.max_header_bytes, timeout_graceful_shutdown=5)


def build_server(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
                 insecure: bool = False, max_body_bytes: int | None = None,
                 token_file: str | os.PathLike | None = None, allow_hosts: tuple[str, ...] | list[str] = (),
                 limits: ServeLimits | None = None, signing_key: bytes | None = None, log_level: str = "info",
                 **scorer_options: Unpack[ScorerOptions]) -> uvicorn.Server:
    """The ``uvicorn.Server`` :func:`serve` runs (not started): the export loaded
    (:func:`fbrapids.serving.export.export_model`, manifest verified, and its signature with
    ``signing_key``), served with ``limits`` (:class:`~fbrapids.serving.guard.ServeLimits`;
    ``allow_hosts`` adds ``Host`` names).  Run it with ``.run()`` (tests: in a thread)."""
    import uvicorn

    from fbrapids.serving.export import load_scorer

    tokens = resolve_token(host, token, insecure, token_file)
    limits = limits or ServeLimits()
    limits.allowed_hosts = allowed_hosts(host, list(allow_hosts))
    if max_body_bytes is not None:
        limits.update(max_body_bytes=int(max_body_bytes))
    app = create_app(load_scorer(export_dir, signing_key=signing_key, **scorer_options), token=tokens, limits=limits)
    return uvicorn.Server(server_config(app, host, port, limits, log_level=log_level))


def serve(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          insecure: bool = False, max_body_bytes: int | None = None, token_file: str | os.PathLike | None = None,
          allow_hosts: tuple[str, ...] | list[str] = (), limits: ServeLimits | None = None,
          signing_key: bytes | None = None, **scorer_options: Unpack[ScorerOptions]) -> None:
    """Load an export and serve it until stopped (:func:`build_server`'s server), the start-up
    heap frozen out of full garbage collections first (:func:`freeze_heap`) and glibc's malloc
    arenas capped at :data:`MALLOC_ARENAS` (:func:`~fbrapids.runs.heap.limit_arenas`)."""
    server = build_server(export_dir, host, port, token=token, insecure=insecure, max_body_bytes=max_body_bytes,
                          token_file=token_file, allow_hosts=allow_hosts, limits=limits, signing_key=signing_key,
                          **scorer_options)
    log.info("start-up heap frozen: %d objects out of the collector's full passes", freeze_heap())
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # module docstring: a call's thread hand-offs wait less
    limit_arenas(MALLOC_ARENAS)  # the worker threads share their freed pages (fbrapids.runs.heap)
    server.run()


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
