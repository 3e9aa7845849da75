"""The README's demo -> export -> serve -> curl block, run as written (at 3,000 rows, in a
temporary directory, on a free port of 127.0.0.1, with this checkout's fbrapids)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the HTTP service needs the 'serve' extra (fastapi, uvicorn)")

ROOT = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- serve-demo:begin.*?-->\s*```bash\n(.*?)```\s*<!-- serve-demo:end -->", text, re.S)
    assert m, "README.md has no serve-demo block"
    return m.group(1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs bash and curl")
def test_readme_demo_export_serve_curl(tmp_path) -> None:
    block = readme_block()
    assert block.count("curl -s -X POST") == 1 and "--export demo-export" in block
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (block.replace("fbrapids ", f"{sys.executable} -m fbrapids.app.cli ")
              .replace("--rows 200000", f"--rows 3000 --batch-size 256 --data-dir {tmp_path / 'data'} "
                                        f"--work-dir {tmp_path / 'work'}")
              .replace("8000", str(port)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FBRAPIDS_DATA": str(tmp_path / "data-root")}
    run = subprocess.run(["bash", "-c", "set -e; trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["n"] == 2 and all(isinstance(p, float) and 0.0 < p < 1.0 for p in answer["scores"])
    assert (tmp_path / "demo-export" / "MANIFEST.json").is_file() and (tmp_path / "demo-export" / "spec.json").is_file()


def test_export_command_turns_a_demo_checkpoint_into_a_served_model(tmp_path, capsys) -> None:
    import numpy as np

    from fbrapids.app.cli import main as cli_main
    from fbrapids.app.pipeline import DENSE, SPARSE, model_arguments
    from fbrapids.serving import load_scorer
    from fbrapids.trainers.checkpoint.model_state import save_checkpoint
    from fbrapids.trainers.sparse import StoreConfig

    cls, kw = model_arguments("deepfm", len(DENSE), SPARSE, StoreConfig(cache_rows=1 << 10), embedding_dim=8)
    save_checkpoint(cls(**kw), None, tmp_path / "checkpoints", step=3)
    assert cli_main(["export", str(tmp_path / "checkpoints"), str(tmp_path / "exp"), "--model", "deepfm",
                     "--embedding-dim", "8"]) == 0
    assert "serve it: fbrapids serve" in capsys.readouterr().out
    body = json.loads(re.search(r"-d '(\{.*?\})'", readme_block(), re.S).group(1))
    scores = load_scorer(tmp_path / "exp").score(body["request"], body["items"])
    assert scores.shape == (2,) and np.isfinite(scores).all()
    assert cli_main(["export", str(tmp_path / "checkpoints"), str(tmp_path / "exp")]) == 2  # not empty: refused
    assert "is not empty" in capsys.readouterr().err
    assert cli_main(["export", str(tmp_path / "checkpoints"), str(tmp_path / "exp2")]) == 2  # dlrm: the wrong model
    assert "does not hold the demo's dlrm model with embedding_dim=16" in capsys.readouterr().err
