"""Every model the demo trains exports and serves: ``fbrapids demo --model M --export DIR``,
then the export served as ``fbrapids serve DIR`` serves it (the same app and uvicorn config, on
127.0.0.1), then a scored request (the README's, with the behaviour sequence DIN reads), for
dlrm, wide_deep, deepfm, din and dcn (DCN-v2); the served scores are the in-process scorer's over the same
export.

Suite time: the four demos run in one process (the console script's ``main`` called once per
model, as four ``fbrapids demo`` commands would; ~5 s of imports each saved) and the servers in
this one (~5 s of start-up each); ``fbrapids serve`` as its own process is run by
tests/serving/test_serving_readme_demo.py (the README's demo -> export -> serve -> curl block)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from fbrapids.errors import RequestError
from fbrapids.serving.scorer import SCORE_ATOL

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3000
MODELS = ("dlrm", "wide_deep", "deepfm", "din", "dcn")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from fbrapids.datasets.synthetic.generate import generate

    d = tmp_path_factory.mktemp("demo-data")
    generate(ROWS, d)
    return d


def readme_body() -> dict:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- serve-demo:begin.*?-->\s*```bash\n(.*?)```", text, re.S).group(1)
    return json.loads(re.search(r"-d '(\{.*?\})'", block, re.S).group(1))


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "FBRAPIDS_BACKEND": "cpu"}


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


#: the four demo commands in one process: each model's output after a line naming it
DEMOS = """
import sys
from fbrapids.app.cli import main
data, out = sys.argv[1], sys.argv[2]
for model in sys.argv[3:]:
    print(f"=== demo --model {model}", flush=True)
    status = main(["demo", "--rows", "%d", "--data-dir", data, "--batch-size", "256", "--model", model,
                   "--export", f"{out}/export-{model}"])
    if status:
        raise SystemExit(f"demo --model {model}: exit status {status}")
""" % ROWS


@pytest.fixture(scope="module")
def exports(data, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """``(folder, {model: its demo's printed output})``: ``folder/export-M`` holds model M's export."""
    out = tmp_path_factory.mktemp("exports")
    demo = subprocess.run([sys.executable, "-c", DEMOS, str(data), str(out), *MODELS], env=_env(out),
                          capture_output=True, text=True, timeout=900)
    assert demo.returncode == 0, demo.stderr[-3000:]
    printed = dict(part.split("\n", 1) for part in demo.stdout.split("=== demo --model ")[1:])
    assert sorted(printed) == sorted(MODELS), demo.stdout[-3000:]
    return out, printed


@contextmanager
def serving(export: Path) -> Iterator[str]:
    """``export`` served as ``fbrapids serve`` serves it (:func:`fbrapids.serving.http.build_server`,
    what :func:`~fbrapids.serving.http.serve` runs) on a free port of 127.0.0.1, in a thread;
    yields the base URL."""
    from fbrapids.serving.http import build_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = build_server(export, "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, name=f"serve-{export.name}", daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < end, "the service did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.parametrize("model", MODELS)
def test_demo_export_serve_score(model, exports) -> None:
    from fbrapids.serving import load_scorer

    folder, printed = exports
    export = folder / f"export-{model}"
    assert f"export                 {export} (serve it: fbrapids serve {export})" in printed[model]
    assert f"backend cpu, model {model}" in printed[model]
    body, scorer = readme_body(), load_scorer(export)
    if model == "din":  # the user's last clicked categories, oldest first (a request column of DIN's export)
        with pytest.raises(RequestError, match="missing column 'hist_cat'"):
            scorer.score(body["request"], body["items"])
        body["request"]["hist_cat"] = [3, 5, 3, 7]
    expected = scorer.score(body["request"], body["items"])
    with serving(export) as url:
        urllib.request.urlopen(url + "/health", timeout=30).close()
        status, answer = _post(url + "/score", body)
        assert status == 200, answer
        assert answer["n"] == 2 and all(0.0 < p < 1.0 for p in answer["scores"])
        np.testing.assert_allclose(answer["scores"], expected, atol=SCORE_ATOL, rtol=0)
        if model == "din":  # the sequence is read: another history, other scores
            other = {**body, "request": {**body["request"], "hist_cat": []}}
            status, answer2 = _post(url + "/score", other)
            assert status == 200 and answer2["scores"] != answer["scores"]
