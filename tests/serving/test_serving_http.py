"""The HTTP service on a real uvicorn server on 127.0.0.1: scores equal the training-side
model's, concurrent clients, malformed requests answered 4xx while the service keeps serving."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
uvicorn = pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

from fbrapids.serving import Scorer, export_model, load_scorer  # noqa: E402
from fbrapids.serving.example import request_records, train_example  # noqa: E402
from fbrapids.serving.http import create_app  # noqa: E402
from fbrapids.serving.scorer import SCORE_ATOL  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    torch.set_num_threads(1)
    model, spec, kwargs, (users, ads, frame) = train_example(rows=1500, seed=1)
    for store in model.stores().values():  # the training side reading its tables as served: unseen ids read zeros
        store.read_only = True
    exp = export_model(tmp_path_factory.mktemp("export") / "wd", model, spec, kwargs)
    scorer = load_scorer(exp, max_items=500)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(scorer), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 20 s")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", model, spec, scorer, users, ads
    server.should_exit = True
    thread.join(timeout=20)
    assert not thread.is_alive()


def _post(url: str, body: object, raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_service_scores_equal_training_side(service, training_side) -> None:
    url, model, spec, _, users, ads = service
    req, items = request_records(users, ads, 120, seed=3)
    status, body = _post(url + "/score", {"request": req, "items": items})
    assert status == 200 and body["n"] == 120
    np.testing.assert_allclose(body["scores"], training_side(model, spec, req, items), atol=SCORE_ATOL, rtol=0)
    entries = [{"request": r, "items": it} for r, it in (request_records(users, ads, 30, seed=k) for k in (4, 5))]
    status, body = _post(url + "/score_batch", {"requests": entries})
    assert status == 200 and [len(s) for s in body["scores"]] == [30, 30]
    for e, s in zip(entries, body["scores"]):
        np.testing.assert_allclose(s, training_side(model, spec, e["request"], e["items"]), atol=SCORE_ATOL, rtol=0)


def test_concurrent_clients(service) -> None:
    url, model, spec, scorer, users, ads = service
    jobs = [request_records(users, ads, 40 + 7 * k, seed=50 + k) for k in range(16)]
    expected = [Scorer(model, spec).score(r, it) for r, it in jobs]
    before = scorer.stats["requests"]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda j: _post(url + "/score", {"request": j[0], "items": j[1]}), jobs))
    for (status, body), exp in zip(results, expected):
        assert status == 200
        np.testing.assert_allclose(body["scores"], exp, atol=SCORE_ATOL, rtol=0)
    assert scorer.stats["requests"] - before == 16


def test_malformed_requests_get_4xx_and_service_keeps_serving(service) -> None:
    url, _, _, _, users, ads = service
    req, items = request_records(users, ads, 5, seed=8)
    bad_price = [dict(it) for it in items]
    bad_price[2]["price"] = "abc"
    cases = [
        (None, b"{not json", 422, "JSON"),
        ({"request": req}, None, 422, "items"),
        ({"request": req, "items": [1, 2]}, None, 422, "items"),
        ({"request": req, "items": bad_price}, None, 400, "item 2: column 'price' must be a number, got 'abc'"),
        ({"request": {k: v for k, v in req.items() if k != "age"}, "items": items}, None, 400,
         "request 0: missing column 'age'"),
        ({"request": req, "items": items * 101}, None, 413, "more than max_items=500"),
    ]
    for body, raw, code, text in cases:
        status, answer = _post(url + "/score", body, raw)
        assert status == code, (status, answer)
        assert text in json.dumps(answer), answer
    status, answer = _post(url + "/score", {"request": req, "items": items})
    assert status == 200 and len(answer["scores"]) == 5
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        health = json.loads(r.read())
    assert health["status"] == "ok" and health["stats"]["requests"] > 0
