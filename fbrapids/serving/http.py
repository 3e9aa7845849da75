"""A small HTTP scoring service on FastAPI + uvicorn (the optional extra ``serve``).

Endpoints:

* ``POST /score`` ``{"request": {...}, "items": [{...}, ...]}`` ->
  ``{"scores": [...], "n": N}``, one click probability per item, in order;
* ``POST /score_batch`` ``{"requests": [{"request": ..., "items": [...]}, ...]}`` ->
  ``{"scores": [[...], ...]}``;
* ``GET /health`` -> ``{"status": "ok", "stats": {...}}`` (the scorer's counters).

Run it with ``python -m fbrapids.serving.http EXPORT_DIR --port 8000`` (or :func:`serve`).

Malformed input never crashes the service: a body that is not JSON or not of the shape
above is answered 422 by FastAPI's validation (with its ``detail``); a record with a missing
column or a value of the wrong type is answered 400 with ``{"detail": "item 3: column
'price' must be a number, got 'abc'"}``; more than ``max_items`` items is 413.  Concurrency:
uvicorn serves many connections; scoring endpoints are plain functions run on its thread
pool, and the scorer serialises the model work with a lock.

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

import logging
import os
from typing import Any

try:
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the HTTP service needs FastAPI and uvicorn: pip install 'fbrapids[serve]'") from exc

from fbrapids.serving.scorer import Scorer

log = logging.getLogger(__name__)


class ScoreRequest(BaseModel):
    """One request and its candidate items (JSON objects of raw columns)."""

    request: dict[str, Any]
    items: list[dict[str, Any]]


class BatchScoreRequest(BaseModel):
    requests: list[ScoreRequest]


def create_app(scorer: Scorer) -> FastAPI:
    """The FastAPI application serving ``scorer`` (see the module docstring)."""
    app = FastAPI(title="fbrapids scoring", version="1")

    def run(entries: list[dict[str, Any]]) -> list[list[float]]:
        total = sum(len(e["items"]) for e in entries)
        if total > scorer.max_items:
            raise HTTPException(413, f"{total} candidate items, more than max_items={scorer.max_items}")
        try:
            return [p.astype(float).tolist() for p in scorer.score_batch(entries)]
        except (ValueError, KeyError, TypeError) as exc:  # bad records: the client's fault
            raise HTTPException(400, str(exc.args[0]) if exc.args else repr(exc)) from None

    @app.post("/score")
    def score(body: ScoreRequest) -> dict[str, Any]:
        scores = run([body.model_dump()])[0]
        return {"scores": scores, "n": len(scores)}

    @app.post("/score_batch")
    def score_batch(body: BatchScoreRequest) -> dict[str, Any]:
        return {"scores": run([r.model_dump() for r in body.requests])}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "stats": dict(scorer.stats)}

    return app


def serve(export_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, **scorer_options: Any) -> None:
    """Load an export (:func:`fbrapids.serving.export.export_model`) and serve it until stopped."""
    import uvicorn

    from fbrapids.serving.export import load_scorer

    uvicorn.run(create_app(load_scorer(export_dir, **scorer_options)), host=host, port=port, log_level="info")


def main(argv: list[str] | None = None) -> int:
    """``python -m fbrapids.serving.http EXPORT_DIR [--host H] [--port P] [--cache-items N]``."""
    import argparse

    ap = argparse.ArgumentParser(description="serve an fbrapids export over HTTP")
    ap.add_argument("export_dir")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--cache-items", type=int, default=100_000)
    ap.add_argument("--max-items", type=int, default=100_000)
    args = ap.parse_args(argv)
    serve(args.export_dir, args.host, args.port, cache_items=args.cache_items, max_items=args.max_items)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
