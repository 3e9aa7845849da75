"""Every model the demo trains exports and serves: ``fbrapids demo --model M --export DIR``,
then ``fbrapids serve DIR`` on 127.0.0.1, then a scored request (the README's, with the
behaviour sequence DIN reads), for dlrm, wide_deep, deepfm and din; the served scores are
the in-process scorer's over the same export."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fbrapids.errors import RequestError
from fbrapids.serving.scorer import SCORE_ATOL

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3000
MODELS = ("dlrm", "wide_deep", "deepfm", "din")


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


@pytest.mark.parametrize("model", MODELS)
def test_demo_export_serve_score(model, data, tmp_path) -> None:
    from fbrapids.serving import load_scorer

    export = tmp_path / f"export-{model}"
    demo = subprocess.run([sys.executable, "-m", "fbrapids.app.cli", "demo", "--rows", str(ROWS), "--data-dir", str(data),
                           "--batch-size", "256", "--model", model, "--export", str(export)],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert f"export                 {export} (serve it: fbrapids serve {export})" in demo.stdout
    body = readme_body()
    if model == "din":  # the user's last clicked categories, oldest first (a request column of DIN's export)
        with pytest.raises(RequestError, match="missing column 'hist_cat'"):
            load_scorer(export).score(body["request"], body["items"])
        body["request"]["hist_cat"] = [3, 5, 3, 7]
    expected = load_scorer(export).score(body["request"], body["items"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "fbrapids.app.cli", "serve", str(export), "--port", str(port)],
                              env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            except OSError:
                assert server.poll() is None, server.communicate()[1][-3000:]
                assert time.monotonic() < end, "the service did not start"
                time.sleep(0.2)
        status, answer = _post(url + "/score", body)
        assert status == 200, answer
        assert answer["n"] == 2 and all(0.0 < p < 1.0 for p in answer["scores"])
        np.testing.assert_allclose(answer["scores"], expected, atol=SCORE_ATOL, rtol=0)
        if model == "din":  # the sequence is read: another history, other scores
            other = {**body, "request": {**body["request"], "hist_cat": []}}
            status, answer2 = _post(url + "/score", other)
            assert status == 200 and answer2["scores"] != answer["scores"]
    finally:
        server.terminate()
        server.communicate(timeout=60)
