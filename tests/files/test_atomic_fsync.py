"""``FBRAPIDS_FSYNC``: every durable write goes through ``fbrapids.files.atomic.fsync`` /
``fsync_path``; by default they reach ``os.fsync``, with ``FBRAPIDS_FSYNC=0`` (the suite's
setting, tests/conftest.py) none does, and the files written are the same bytes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fbrapids.files.atomic import fsync_enabled, write_atomic
from fbrapids.files.manifest import write_manifest
from fbrapids.trainers.sparse import StoreConfig, TieredEmbeddingStore


def _write_everything(root: Path) -> dict[str, bytes]:
    """An atomic file, a manifest over it and a store table saved with an SSD tier."""
    root.mkdir()
    write_atomic(root / "a.bin", [b"ab", b"c"])
    write_manifest(root)
    store = TieredEmbeddingStore(StoreConfig(dim=4, cache_rows=8, host_rows=8, ssd_dir=str(root / "ssd"),
                                             device="cpu"))
    store.lookup(np.arange(40, dtype=np.int64), requires_grad=False)
    store.save(root / "saved")
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix != ".lock"}


@pytest.mark.parametrize("setting", [None, "1", "0"])
def test_fsync_switch_counts_the_calls_and_writes_the_same_bytes(setting, tmp_path, monkeypatch):
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    monkeypatch.delenv("FBRAPIDS_FSYNC", raising=False)
    reference = _write_everything(tmp_path / "reference")  # fsync on: the default
    on_calls = len(calls)
    assert on_calls >= 8  # file + folder per atomic write, the manifest, the SSD file and its index
    if setting is not None:
        monkeypatch.setenv("FBRAPIDS_FSYNC", setting)
    calls.clear()
    written = _write_everything(tmp_path / "switched")
    assert fsync_enabled() is (setting != "0")
    assert len(calls) == (0 if setting == "0" else on_calls)
    assert written.keys() == reference.keys()
    same = {k for k in written if written[k] == reference[k]}
    assert {"a.bin", "saved/rows.f32", "saved/index.npz"} <= same
