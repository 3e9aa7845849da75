"""The README's Python blocks run as written, in order, on small generated data in ./data."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run(tmp_path, monkeypatch, one_torch_thread):
    from fbrapids.datagen import generate

    generate(3000, tmp_path / "data", seed=0)
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 3  # the chain, a model, ops.call
    ns: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {i + 1}", "exec"), ns)
        except Exception as exc:  # noqa: BLE001 - re-raised with the block named
            pytest.fail(f"README python block {i + 1} failed: {type(exc).__name__}: {exc}")
    # the chain trained: steps over every kept row, and a defined, learned AUC on the batches
    assert ns["result"].steps == -(-ns["batches"].stats["rows"] // 2048) > 0
    m = ns["evaluate"](ns["model"], ns["batches"], progress=False)
    assert m["n"] == ns["batches"].stats["rows"] and m["auc"] is not None and m["auc"] > 0.5
    tiers = ns["tiers"].compute()
    want = ((tiers["price"] > 100).astype(int) + (tiers["price"] > 10).astype(int)) * 1000 + tiers["category"]
    assert tiers["tier"].tolist() == want.tolist()
